import Glibc
import Synchronization

/// What a loop thread runs at the end of every round, after the executor's
/// jobs: the engine's per-loop work (commands gathered in the round, answers
/// whose records became durable). Called on the loop thread only.
package protocol LoopRoundHandler: AnyObject, Sendable {
    /// Runs one round's work; must not block.
    func endOfRound()

    /// How long the loop thread may wait for events before a timer of the
    /// handler is due (zero: due now), by the handler's own clock; nil when
    /// it has none. Asked after each round; the round the loop runs when the
    /// time is up fires the timer (in `endOfRound`).
    func timeUntilNextDeadline() -> Duration?
}

extension LoopRoundHandler {
    /// No timers.
    package func timeUntilNextDeadline() -> Duration? { nil }
}

/// A serial executor whose jobs run on one loop thread, in rounds: the thread
/// (an HTTP event loop, or an engine thread in tools and tests) waits on
/// `wakeup`, then calls `runRound()`. An actor whose `unownedExecutor` is this
/// executor runs on that thread, so code already on the loop reaches it with
/// `assumeIsolated` and no thread switch (as SwiftNIO's event loops do).
package final class LoopExecutor: SerialExecutor, Sendable {

    /// Which loop this is, 0..<loop count.
    package let index: Int
    /// Signalled by anyone who hands this loop work; the loop polls it.
    package let wakeup: EventFD
    private struct WeakHandler {
        weak var handler: (any LoopRoundHandler)?
    }

    private let jobs = Mutex<[UnownedJob]>([])
    /// Weak: the handler (the engine's loop) holds this executor.
    private let handler = Mutex(WeakHandler())
    /// The `pthread_t` of the thread that runs this executor, 0 while none does.
    private let owner = Atomic<UInt>(0)

    package init(index: Int) throws(SystemCallError) {
        precondition(index >= 0, "loop index \(index) < 0")
        self.index = index
        wakeup = try EventFD()
    }

    deinit {
        wakeup.descriptor.close()
    }

    /// Makes the calling thread the one that runs this executor, first thing
    /// on the loop thread. One thread at a time: the engine's own threads
    /// hand the executor to an HTTP server's loop and take it back after.
    package func adoptCurrentThread() {
        let (exchanged, _) = owner.compareExchange(
            expected: 0, desired: UInt(pthread_self()), ordering: .acquiringAndReleasing)
        precondition(exchanged, "loop \(index) adopted while another thread runs it")
    }

    /// Gives the executor up, last thing on the loop thread; work queued
    /// meanwhile waits (its eventfd stays readable) for the next thread.
    package func releaseThread() {
        preconditionOnLoop("releaseThread")
        owner.store(0, ordering: .releasing)
        wakeup.signal()
    }

    /// True when the caller runs on this executor's thread.
    package var isCurrent: Bool {
        owner.load(ordering: .acquiring) == UInt(pthread_self())
    }

    /// Crashes unless the caller runs on this loop's thread (NIO's `preconditionInEventLoop`).
    package func preconditionOnLoop(_ what: @autoclosure () -> String = "") {
        precondition(isCurrent, "not on loop \(index)'s thread: \(what())")
    }

    /// Sets what runs at the end of each round. Set once, before the loop starts.
    package func setRoundHandler(_ roundHandler: any LoopRoundHandler) {
        handler.withLock { current in
            precondition(current.handler == nil, "loop \(index) already has a round handler")
            current.handler = roundHandler
        }
    }

    /// Wakes the loop for a round (any thread).
    package func wake() {
        wakeup.signal()
    }

    // MARK: - SerialExecutor

    package func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        let wasEmpty = jobs.withLock { queued in
            queued.append(unowned)
            return queued.count == 1
        }
        if wasEmpty { wakeup.signal() }
    }

    package func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    package func checkIsolated() {
        preconditionOnLoop("checkIsolated")
    }

    package func isIsolatingCurrentContext() -> Bool? {
        isCurrent
    }

    // MARK: - Rounds (loop thread)

    /// Runs the jobs queued so far, then the round handler. Loop thread only.
    package func runRound() {
        preconditionOnLoop("runRound")
        let taken = jobs.withLock { queued -> [UnownedJob] in
            var taken: [UnownedJob] = []
            swap(&taken, &queued)
            return taken
        }
        for job in taken { job.runSynchronously(on: asUnownedSerialExecutor()) }
        if let roundHandler = handler.withLock({ $0.handler }) { roundHandler.endOfRound() }
    }

    /// How long the loop thread may wait before its round handler's next
    /// timer (`LoopRoundHandler.timeUntilNextDeadline`), in whole
    /// milliseconds rounded up, for `poll`/`epoll_wait`: -1 without a timer.
    /// Loop thread only.
    package func timerWaitMilliseconds() -> Int32 {
        preconditionOnLoop("timerWaitMilliseconds")
        guard let roundHandler = handler.withLock({ $0.handler }),
            let remaining = roundHandler.timeUntilNextDeadline()
        else { return -1 }
        return Self.wholeMillisecondsRoundedUp(remaining)
    }

    /// `duration` in milliseconds, rounded up (a wait never ends before its
    /// time), at least 0.
    package static func wholeMillisecondsRoundedUp(_ duration: Duration) -> Int32 {
        guard duration > .zero else { return 0 }
        let nanoseconds = duration.wholeNanoseconds
        return Int32(clamping: nanoseconds / 1_000_000 + (nanoseconds % 1_000_000 > 0 ? 1 : 0))
    }
}

/// Threads that run loop executors when no HTTP server does (tools, tests,
/// benchmarks of the engine alone): each waits on its executor's eventfd and
/// runs a round per wake-up, until `stop`.
package final class LoopExecutorThreads: Sendable {
    private final class StopFlag: Sendable {
        let raised = Atomic<Bool>(false)
    }

    private let executors: [LoopExecutor]
    private let stopping = StopFlag()
    private let threads: Mutex<[PlatformThread]>

    /// Starts one thread per executor; they run until `stop`.
    package init(_ executors: [LoopExecutor], name: String) throws(SystemCallError) {
        self.executors = executors
        var started: [PlatformThread] = []
        for executor in executors {
            let stopping = self.stopping
            let thread = try PlatformThread.spawn(name: "\(name)-\(executor.index)") { [stopping] in
                executor.adoptCurrentThread()
                var poll = pollfd(fd: executor.wakeup.descriptor.rawValue, events: Int16(POLLIN), revents: 0)
                while !stopping.raised.load(ordering: .acquiring) {
                    // `stop` wakes it; no periodic wake-up, only the handler's timers.
                    _ = Glibc.poll(&poll, 1, executor.timerWaitMilliseconds())
                    executor.wakeup.drain()
                    executor.runRound()
                }
                executor.runRound()
                executor.releaseThread()
            }
            started.append(thread)
        }
        threads = Mutex(started)
    }

    /// Stops and joins the threads (each runs one last round). Idempotent.
    package func stop() {
        stopping.raised.store(true, ordering: .releasing)
        for executor in executors { executor.wake() }
        let joining = threads.withLock { current -> [PlatformThread] in
            defer { current = [] }
            return current
        }
        // The last owner may let go on one of these threads (inside a round):
        // that one cannot join itself, so it is detached and ends on its own.
        for thread in joining {
            if thread.isCurrent { thread.detach() } else { thread.join() }
        }
    }

    deinit {
        stop()
    }
}
