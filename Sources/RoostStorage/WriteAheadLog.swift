import RoostPlatform
import RoostTelemetry
import Synchronization

/// The write-ahead log: one shared log for every shard (docs/decisions/0002),
/// group commit on a dedicated I/O thread, snapshots and checkpoints.
///
/// Durability protocol (docs/storage.md): appenders frame records into a
/// buffer under a lock and get LSNs in one total order; the I/O thread writes
/// the buffer with pwrite, then fdatasyncs (always) and only then calls the
/// completions. Under everysec and never a loop may write its round's
/// records itself when only writes are due (`writeHeld`, decision 0095).
/// After any write or sync error the log is failed: every pending and later
/// append fails, nothing is synced again, and a restart recovers from what
/// is on disk.
package final class WriteAheadLog: Sendable {
    /// Called once per `append(_:completion:)`, in LSN order, on the I/O
    /// thread, with the batch's last LSN or the failure (a `barrier` a
    /// loop's own write satisfied, or a failure of that write, completes on
    /// that loop: `writeHeld`). Must not block, and must not call `sync`,
    /// `checkpoint` or `close` (they wait for that thread: deadlock).
    /// `append` is fine. The request path uses no
    /// completions: it appends with `append(_:)` and watches
    /// `acknowledgedLSN` (see `wakeWhenAcknowledged`).
    package typealias Completion = @Sendable (Result<LogSequenceNumber, StorageError>) -> Void

    /// Where the I/O thread's time goes (cumulative since open).
    package struct IOStatistics: Sendable, Equatable {
        /// Plans performed (a group's write and/or sync).
        package var plans: UInt64 = 0
        /// fdatasyncs of the open segment (the group-commit syncs) and their total time.
        package var syncs: UInt64 = 0
        package var syncNanoseconds: UInt64 = 0
        /// Time the I/O thread waited for work between plans.
        package var waitNanoseconds: UInt64 = 0
        /// Loop wake-ups sent because records they wait for became acknowledged.
        package var loopWakeups: UInt64 = 0
        /// Plans an appender performed on its own thread (`writeHeld`),
        /// counted in `plans` too.
        package var writesOnAppender: UInt64 = 0
        /// Appends accepted (one per shard turn or tool call, each of one or more records).
        package var appends: UInt64 = 0
        /// Bytes written to segments (records with their framing).
        package var bytesWritten: UInt64 = 0
        /// Each group-commit fdatasync's duration, in nanoseconds.
        package var syncLatency = Histogram(.latencyNanoseconds)
        /// Records each group-commit fdatasync made durable.
        package var recordsPerSync = Histogram(.recordsPerSync)
    }

    struct Shared {
        var machine: GroupCommit<Completion?>
        /// How many times the I/O thread went to sleep, waiting for a signal
        /// or its deadline (tests: `waitForIOThreadToSleep`).
        var ioThreadSleeps: UInt64 = 0
        var statistics = IOStatistics()
        var rejectedSinceLog = 0
        var lastErrorLogNanoseconds: UInt64 = 0
    }

    struct Catalog {
        /// First LSNs of the segment files on disk, ascending; the last is the open one.
        var segments: [LogSequenceNumber]
        var newest: Checkpoint?
        var newestSlot: Int?
        var older: Checkpoint?
        var highestSequence: UInt64
        var checkpointRunning = false
    }

    package let layout: StorageLayout
    package let policy: FsyncPolicy
    package let options: StorageOptions
    let shared: ConditionLock<Shared>
    let catalog: Mutex<Catalog>
    let segment: Mutex<OpenSegment>
    let thread = Mutex<PlatformThread?>(nil)
    /// The last LSN acknowledged under the policy (`GroupCommit.acknowledgedLSN`),
    /// published by the I/O thread after each plan; read without the lock.
    let acknowledged: Atomic<UInt64>
    /// True once the log has failed (published with `acknowledged`).
    let failed = Atomic<Bool>(false)
    /// Loops to wake once `acknowledged` reaches the LSN each waits for: one
    /// wake-up per loop per group commit, however many answers it holds.
    let wakeRequests = Mutex<[(executor: LoopExecutor, through: UInt64)]>([])
    /// Loop wake-ups sent (`IOStatistics.loopWakeups`), counted without the lock.
    let loopWakeups = Atomic<UInt64>(0)
    /// Zero-fills the next segment ahead of need, or nil when segments are
    /// only preallocated (`StorageOptions.zeroFillSegments`).
    let preparer: SegmentPreparer?

    /// Recovers `directory` (creating it when missing) and opens the log for appending.
    /// Throws `.damaged` when the data cannot be recovered exactly (docs/recovery.md).
    package static func open(
        directory: String, policy: FsyncPolicy, options: StorageOptions = StorageOptions()
    ) throws(StorageError) -> (WriteAheadLog, RecoveredState) {
        try options.validate()
        let fileSystem = options.fileSystem
        let layout = StorageLayout(directory: directory, fileSystem: fileSystem)
        do {
            try fileSystem.createDirectory(directory)
            try fileSystem.createDirectory(layout.walDirectory)
            try fileSystem.createDirectory(layout.snapshotDirectory)
            // Make the directory entries themselves durable (ALICE, Redis #3487).
            try fileSystem.syncDirectory(directory)
            try fileSystem.syncDirectory(StorageLayout.parent(of: directory))
        } catch { throw .io(error) }
        let (input, retained) = try layout.readRecoveryInput(options: options, forStartUp: true)
        let plan: RecoveryPlan
        switch decideRecovery(input) {
        case .recover(let decided): plan = decided
        case .refuse(let damage): throw .damaged(damage)
        }
        for note in plan.notes { options.logger.info("wal.recovery") { $0.field("wal.recovery", note) } }
        let open = try repairAndOpenSegment(plan: plan, input: input, layout: layout, options: options)
        var segments = input.segments.compactMap { scan -> LogSequenceNumber? in
            if case .valid(let first) = scan.header { return first }
            return nil
        }
        if segments.last != open.firstLSN { segments.append(open.firstLSN) }
        let sequences = input.checkpoints.compactMap { read -> UInt64? in
            if case .valid(let checkpoint) = read { return checkpoint.sequence }
            return nil
        }
        let catalog = Catalog(
            segments: segments, newest: plan.checkpoint, newestSlot: plan.checkpointSlot,
            older: plan.olderCheckpoint, highestSequence: sequences.max() ?? 0)
        let snapshot = try plan.checkpoint.map { checkpoint throws(StorageError) in
            try SnapshotReader(fileSystem: fileSystem, path: layout.snapshotPath(checkpoint.snapshotLSN))
        }
        let log = WriteAheadLog(
            layout: layout, policy: policy, options: options, nextLSN: plan.nextLSN, open: open, catalog: catalog)
        log.removeUnreferencedSnapshots(keepTemporary: false)
        let state = RecoveredState(
            snapshot: snapshot, plan: plan, layout: layout, options: options, retained: retained)
        return (log, state)
    }

    init(
        layout: StorageLayout, policy: FsyncPolicy, options: StorageOptions, nextLSN: LogSequenceNumber,
        open: OpenSegment, catalog: Catalog
    ) {
        self.layout = layout
        self.policy = policy
        self.options = options
        let machine = GroupCommit<Completion?>(
            policy: policy, nextLSN: nextLSN, segmentOffset: open.offset, segmentBytesMax: options.segmentBytesMax,
            payloadBytesMax: options.recordPayloadBytesMax,
            syncIntervalNanoseconds: UInt64(options.syncIntervalMilliseconds) * 1_000_000,
            markIntervalNanoseconds: UInt64(options.logEndIntervalMilliseconds) * 1_000_000,
            markedAtNanoseconds: options.clock.monotonicNanoseconds())
        self.shared = ConditionLock(Shared(machine: machine))
        self.acknowledged = Atomic(nextLSN.rawValue - 1)
        self.catalog = Mutex(catalog)
        self.segment = Mutex(open)
        self.preparer = options.zeroFillsSegments ? SegmentPreparer(layout: layout, options: options) : nil
        let started = startThread(name: "roost-wal-io") { [self] in self.runIOThread() }
        thread.withLock { $0 = started }
    }

    /// Appends `payloads` (opaque bytes, one record each) and returns their
    /// LSNs, consecutive and after every earlier append from any thread.
    /// `completion` runs later on the I/O thread: after the covering fdatasync
    /// (always) or the write (everysec, never). Throws at once, without calling
    /// `completion`, when the log is failed or closed or a payload is too large.
    @discardableResult
    package func append(
        _ payloads: [[UInt8]], completion: @escaping Completion
    ) throws(StorageError) -> ClosedRange<LogSequenceNumber> {
        let result = shared.withLockSignalling { state in
            let result = state.machine.append(payloads, waiter: completion)
            if case .failure(.logFailed(let cause)) = result { noteRejected(&state, cause: cause) }
            if case .success = result { state.statistics.appends += 1 }
            return result
        }
        return try result.get()
    }

    /// Appends `payloads` with no completion and returns their LSNs: the
    /// caller waits for `acknowledgedLSN` to reach the last one (the request
    /// path: values, not closures, cross threads). Throws at once when the
    /// log is failed or closed or a payload is too large.
    @discardableResult
    package func append(_ payloads: [[UInt8]]) throws(StorageError) -> ClosedRange<LogSequenceNumber> {
        try append(payloads, wakingIOThread: true)
    }

    /// Appends `payloads` as `append(_:)` does, without waking the I/O
    /// thread: the caller calls `writeHeld()` before it waits for them (a
    /// loop, once at the end of its round, for every shard turn of it).
    /// Until then they are written only if something else wakes the I/O
    /// thread.
    @discardableResult
    package func appendHeld(_ payloads: [[UInt8]]) throws(StorageError) -> ClosedRange<LogSequenceNumber> {
        try append(payloads, wakingIOThread: false)
    }

    private func append(
        _ payloads: [[UInt8]], wakingIOThread: Bool
    ) throws(StorageError) -> ClosedRange<LogSequenceNumber> {
        // A local function, not a closure value: passed straight to the lock, it
        // allocates no context.
        func framed(_ state: inout Shared) -> Result<ClosedRange<LogSequenceNumber>, StorageError> {
            let result = state.machine.append(payloads)
            if case .failure(.logFailed(let cause)) = result { noteRejected(&state, cause: cause) }
            if case .success = result { state.statistics.appends += 1 }
            return result
        }
        let result = wakingIOThread ? shared.withLockSignalling(framed) : shared.withLock(framed)
        return try result.get()
    }

    /// Writes the records appended and not yet taken by a plan: on the
    /// calling thread when `GroupCommit.nextWriteOnAppender` allows it (the
    /// policy acknowledges on the write, and nothing but writes is due),
    /// then publishes the acknowledged LSN and wakes the loops waiting for
    /// it, as the I/O thread does after a plan; otherwise wakes the I/O
    /// thread for them. Returns true when it wrote here (decision 0095: a
    /// pwrite into the page cache costs the loop less than the hand-off —
    /// a futex wake, the I/O thread's sleep and wake, and a loop wake-up
    /// — cost the server). Completions that fall due (a `barrier` or a
    /// failure) run on the calling thread.
    @discardableResult
    package func writeHeld() -> Bool {
        // The plan is moved out of `taken`, not copied: the report hands its
        // buffers back for reuse (`GroupCommit.reclaim`), which a second
        // reference would make copies of (two allocations a group).
        var taken: GroupCommit<Completion?>.Plan?
        let (deadlineBefore, handOff) = shared.withLock { state -> (UInt64?, Bool) in
            let deadline = state.machine.wakeDeadline()
            taken = state.machine.nextWriteOnAppender(nowNanoseconds: options.clock.monotonicNanoseconds())
            return (deadline, taken == nil && state.machine.hasWorkNow)
        }
        guard var plan = taken.take() else {
            if handOff { shared.withLockSignalling { _ in } }
            return false
        }
        var syncNanoseconds: UInt64 = 0
        let outcome = perform(plan, syncNanoseconds: &syncNanoseconds)
        precondition(syncNanoseconds == 0, "an appender's plan synced")
        let (completions, wakeIOThread) = shared.withLock { state in
            state.statistics.writesOnAppender += 1
            let completions = report(&plan, outcome, syncNanoseconds: 0, in: &state)
            return (completions, state.machine.needsIOThread(deadlineBefore: deadlineBefore))
        }
        if wakeIOThread { shared.withLockSignalling { _ in } }
        loopWakeups.add(UInt64(wakeLoops()), ordering: .relaxed)
        for (completion, result) in completions { completion?(result) }
        return true
    }

    /// The last LSN acknowledged under the policy: an append whose last LSN
    /// is at or below it may be answered. Lock-free.
    package var acknowledgedLSN: LogSequenceNumber { LogSequenceNumber(acknowledged.load(ordering: .acquiring)) }

    /// The start LSN of the newest checkpointed snapshot (nil: none yet):
    /// recovery replays the log from it.
    package var checkpointSnapshotLSN: LogSequenceNumber? { catalog.withLock { $0.newest?.snapshotLSN } }

    /// True once a write or fdatasync failed (lock-free).
    package var hasFailed: Bool { failed.load(ordering: .acquiring) }

    /// The LSN of the last record appended so far: a read waits for it to be
    /// acknowledged, so that it never shows a write that could still be lost.
    package var appendedLSN: LogSequenceNumber {
        shared.withLock { LogSequenceNumber($0.machine.nextLSN.rawValue - 1) }
    }

    /// Wakes `executor` once `acknowledgedLSN >= lsn` or the log has failed
    /// (at once when that is already so). A loop asks again each round it
    /// still waits; of two requests for the same loop (its own, and one made
    /// for it by the loop that ran its commands) the earlier LSN is kept, so
    /// no wake-up comes late.
    package func wakeWhenAcknowledged(_ lsn: LogSequenceNumber, _ executor: LoopExecutor) {
        wakeRequests.withLock { requests in
            if let at = requests.firstIndex(where: { $0.executor === executor }) {
                requests[at].through = min(requests[at].through, lsn.rawValue)
            } else {
                requests.append((executor, lsn.rawValue))
            }
        }
        // The I/O thread publishes before it looks at the requests: re-check.
        if hasFailed || acknowledged.load(ordering: .acquiring) >= lsn.rawValue { wakeLoops() }
    }

    /// Wakes every loop whose awaited LSN is acknowledged (all of them once
    /// the log failed) and forgets their requests. Returns how many woke.
    /// The due executors are gathered under the lock into a buffer on the
    /// stack, `wakeBatchMax` at a time, and woken outside it: no heap
    /// allocation per wake-up (one comes per group commit, and more or fewer
    /// of them per request depending on timing; issue 25's allocation budget).
    @discardableResult
    func wakeLoops() -> Int {
        let through = acknowledged.load(ordering: .acquiring)
        let everyone = hasFailed
        return withUnsafeTemporaryAllocation(of: LoopExecutor.self, capacity: Self.wakeBatchMax) { batch in
            var woken = 0
            while true {
                let gathered = wakeRequests.withLock { requests -> Int in
                    var count = 0
                    requests.removeAll { request in
                        guard count < batch.count, everyone || request.through <= through else { return false }
                        batch.initializeElement(at: count, to: request.executor)
                        count += 1
                        return true
                    }
                    return count
                }
                for index in 0..<gathered { batch.moveElement(from: index).wake() }
                woken += gathered
                // A full batch may have left due requests behind; a partial one left none.
                if gathered < batch.count { return woken }
            }
        }
    }

    /// Executors woken per gathering in `wakeLoops`: 64 references, 512
    /// bytes, within what `withUnsafeTemporaryAllocation` keeps on the stack.
    static let wakeBatchMax = 64

    /// Calls `completion` once every record appended before the call is as
    /// durable as an append under the policy, without forcing a sync: on the
    /// calling thread when that is already so, else on the I/O thread. Throws
    /// at once, without calling `completion`, when the log has failed.
    package func barrier(completion: @escaping Completion) throws(StorageError) {
        let result = shared.withLockSignalling { state in state.machine.barrier(waiter: completion) }
        if case .satisfied(let lsn) = try result.get() { completion(.success(lsn)) }
    }

    /// The LSN the next appended record will get. A fuzzy snapshot reads it
    /// before its first slice (see `beginSnapshot`).
    package var nextLSN: LogSequenceNumber { shared.withLock { $0.machine.nextLSN } }

    /// Records appended and fdatasyncs performed since open: records per
    /// fdatasync is group commit's figure of merit.
    package var groupCommitCounts: (records: UInt64, syncs: UInt64) {
        shared.withLock { ($0.machine.recordsAppended, $0.machine.syncsPerformed) }
    }

    /// Where the I/O thread's time went since open (mean fdatasync latency,
    /// time spent waiting for work).
    package var ioStatistics: IOStatistics {
        var statistics = shared.withLock { $0.statistics }
        statistics.loopWakeups = loopWakeups.load(ordering: .relaxed)
        return statistics
    }

    /// Wakes the I/O thread and blocks until it has looked at the log's state
    /// and gone to sleep again, or until `timeout` passed; returns whether it
    /// did. For tests: afterwards the thread has no plan in flight and no
    /// wake-up pending (a wake-up sent earlier, say by an appender's write, is
    /// used up by the look this one forces), so an append that does not wake
    /// it stays the caller's to write, and a write that must wake it is
    /// checked against a thread known to sleep. The thread announces each
    /// sleep on the lock's condition.
    package func waitForIOThreadToSleep(timeout: Duration) -> Bool {
        let sleepsBefore = shared.withLockSignalling { $0.ioThreadSleeps }
        return waitUntil(timeout: timeout) { $0.ioThreadSleeps > sleepsBefore }
    }

    /// Blocks until `count` group-commit fdatasyncs were performed since
    /// open, or until `timeout` passed; returns whether they were. For
    /// tests: every report of a plan wakes the waiters.
    package func waitForSyncs(_ count: UInt64, timeout: Duration) -> Bool {
        waitUntil(timeout: timeout) { $0.machine.syncsPerformed >= count }
    }

    private func waitUntil(timeout: Duration, _ condition: (Shared) -> Bool) -> Bool {
        let deadline = monotonicNanoseconds() &+ UInt64(max(0, timeout.wholeNanoseconds))
        return shared.waitFor { state -> (result: Bool?, deadline: UInt64?) in
            if condition(state) { return (true, nil) }
            return monotonicNanoseconds() >= deadline ? (false, nil) : (nil, deadline)
        }
    }

    /// The failure that stopped the log, or nil while it accepts writes.
    package var failure: StorageError? { shared.withLock { $0.machine.failure } }

    /// Blocks until every record appended before the call is durable, whatever
    /// the policy, and returns the LSN covered. Not for the request path.
    @discardableResult
    package func sync() throws(StorageError) -> LogSequenceNumber {
        let done = ConditionLock<Result<LogSequenceNumber, StorageError>?>(nil)
        let registered = shared.withLockSignalling { state in
            state.machine.requestSync(waiter: { result in done.withLockSignalling { $0 = result } })
        }
        _ = try registered.get()
        return try done.waitFor { value in (value, nil) }.get()
    }

    /// Flushes and syncs what is pending, stops the I/O thread and closes the
    /// segment. Later appends throw `.closed`. Idempotent.
    package func close() {
        shared.withLockSignalling { $0.machine.close() }
        let running = thread.withLock { current -> PlatformThread? in
            defer { current = nil }
            return current
        }
        running?.join()
        preparer?.stop()
        // A clean close records the exact end (nothing is written after it),
        // unless the log failed: then nothing is synced again.
        let synced = shared.withLock { $0.machine.failure == nil ? $0.machine.syncedLSN : nil }
        segment.withLock { open in
            if let synced, open.file != nil {
                do throws(SystemCallError) {
                    try open.markEnd(synced, cleanShutdown: true)
                } catch {
                    options.logger.warning("wal.warning") { line in
                        line.field("wal.warning", "log-end")
                        line.field("wal.detail", "\(error)")
                    }
                }
            }
            open.close()
        }
    }

    deinit {
        close()
    }

    /// `deadline` of the injected clock, as an instant of CLOCK_MONOTONIC
    /// (what the I/O thread's timed wait takes): as far ahead of the real
    /// now as the deadline is of the clock's now. With the system clock it
    /// is the deadline itself; a manual clock that stands makes the thread
    /// wake and look again after that long, or at `clockMoved()`.
    static func realDeadline(of deadline: UInt64, clockNow: UInt64) -> UInt64 {
        monotonicNanoseconds() &+ (deadline > clockNow ? deadline - clockNow : 0)
    }

    /// Wakes the I/O thread to look at the time again (tests: after moving
    /// the manual clock of `StorageOptions.clock`, so that a sync or a
    /// log-end mark due at the new time happens at once).
    package func clockMoved() {
        shared.withLockSignalling { _ in }
    }

    /// The I/O thread: take a plan, perform it without the lock, report,
    /// publish the acknowledged LSN, wake the loops waiting for it (once each
    /// per group), and call the completions of tool appends, in LSN order.
    func runIOThread() {
        while true {
            let waitStart = monotonicNanoseconds()
            let next: GroupCommit<Completion?>.Plan? = shared.waitFor(announcingWaits: true) { state in
                if state.machine.isDrained { return (.some(nil), nil) }
                let now = options.clock.monotonicNanoseconds()
                if let plan = state.machine.nextIO(nowNanoseconds: now) { return (plan, nil) }
                // Counted under the lock the wait releases: whoever takes the
                // lock and reads a higher count knows the thread looked and sleeps.
                state.ioThreadSleeps &+= 1
                return (nil, state.machine.wakeDeadline().map { Self.realDeadline(of: $0, clockNow: now) })
            }
            guard var plan = next else { return }
            let waited = monotonicNanoseconds() &- waitStart
            var syncNanoseconds: UInt64 = 0
            let outcome = perform(plan, syncNanoseconds: &syncNanoseconds)
            let completions = shared.withLockSignalling { state in
                state.statistics.waitNanoseconds += waited
                return report(&plan, outcome, syncNanoseconds: syncNanoseconds, in: &state)
            }
            loopWakeups.add(UInt64(wakeLoops()), ordering: .relaxed)
            for (completion, result) in completions { completion?(result) }
        }
    }

    /// Records a performed plan in the machine and the statistics, under the
    /// lock, and publishes the acknowledged LSN (and the failure): the
    /// report of the I/O thread and of an appender that wrote (`writeHeld`).
    /// Returns the completions now due.
    private func report(
        _ plan: inout GroupCommit<Completion?>.Plan, _ outcome: Result<Void, SystemCallError>,
        syncNanoseconds: UInt64, in state: inout Shared
    ) -> [GroupCommit<Completion?>.Completion] {
        state.statistics.plans += 1
        if syncNanoseconds > 0 {
            state.statistics.syncs += 1
            state.statistics.syncNanoseconds += syncNanoseconds
            state.statistics.syncLatency.observe(syncNanoseconds)
        }
        let completions: [GroupCommit<Completion?>.Completion]
        switch outcome {
        case .success:
            for case .write(let bytes, _) in plan.steps { state.statistics.bytesWritten += UInt64(bytes.count) }
            let syncedBefore = state.machine.syncedLSN
            completions = state.machine.ioSucceeded(plan, nowNanoseconds: options.clock.monotonicNanoseconds())
            state.machine.reclaim(&plan)
            if syncNanoseconds > 0 {
                state.statistics.recordsPerSync.observe(state.machine.syncedLSN.rawValue - syncedBefore.rawValue)
            }
        case .failure(let error):
            logFailure(&state, cause: error)
            completions = state.machine.ioFailed(.io(error))
            failed.store(true, ordering: .releasing)
        }
        acknowledged.store(state.machine.acknowledgedLSN.rawValue, ordering: .releasing)
        return completions
    }

    /// Performs `plan` on the open segment; adds the time of its group-commit
    /// fdatasync to `syncNanoseconds`.
    func perform(_ plan: GroupCommit<Completion?>.Plan, syncNanoseconds: inout UInt64) -> Result<
        Void, SystemCallError
    > {
        segment.withLock { open in
            do throws(SystemCallError) {
                for step in plan.steps {
                    switch step {
                    case .roll(let firstLSN):
                        try open.roll(to: firstLSN, layout: layout, options: options, prepared: preparer?.take())
                        catalog.withLock { $0.segments.append(firstLSN) }
                    case .write(let bytes, let offset):
                        try open.write(bytes, at: offset)
                        // Half full: have the next segment zero-filled by the time it is needed.
                        if !open.nextRequested && open.offset >= options.segmentBytesMax / 2 {
                            open.nextRequested = true
                            preparer?.request()
                        }
                    case .sync:
                        let start = monotonicNanoseconds()
                        defer { syncNanoseconds += monotonicNanoseconds() &- start }
                        try open.syncData()
                    case .markEnd(let lsn):
                        try open.markEnd(lsn, cleanShutdown: false)
                    }
                }
                return .success(())
            } catch {
                return .failure(error)
            }
        }
    }

    func logFailure(_ state: inout Shared, cause: SystemCallError) {
        state.lastErrorLogNanoseconds = options.clock.monotonicNanoseconds()
        options.logger.error("wal.error") { line in
            line.field("wal.error", cause.call)
            line.field("wal.errno", Int(cause.errno))
            line.field("wal.file", cause.subject)
            line.field("wal.state", "failed")
            line.field("wal.detail", "\(cause)")
        }
    }

    func noteRejected(_ state: inout Shared, cause: SystemCallError) {
        state.rejectedSinceLog += 1
        let now = options.clock.monotonicNanoseconds()
        let interval = UInt64(options.errorLogIntervalMilliseconds) * 1_000_000
        guard now >= state.lastErrorLogNanoseconds &+ interval else { return }
        let rejected = state.rejectedSinceLog
        options.logger.error("wal.error") { line in
            line.field("wal.error", cause.call)
            line.field("wal.errno", Int(cause.errno))
            line.field("wal.state", "failed")
            line.field("wal.rejected", rejected)
        }
        state.rejectedSinceLog = 0
        state.lastErrorLogNanoseconds = now
    }
}

extension WriteAheadLog {
    /// Cuts a torn tail and removes never-written segments as `plan` says,
    /// then opens the segment to append to, or creates one: for a new log,
    /// when the last segment is an older release's (version 1), or when it
    /// was created with another `segmentBytesMax`. Creates the log-end file
    /// when missing (before any segment of this release exists) and records
    /// the recovered end in it, once the last segment is synced.
    package static func repairAndOpenSegment(
        plan: RecoveryPlan, input: RecoveryInput, layout: StorageLayout, options: StorageOptions
    ) throws(StorageError) -> OpenSegment {
        let fileSystem = layout.fileSystem
        do {
            // Files being created by an earlier run are never part of the log.
            let walNames = try fileSystem.list(layout.walDirectory)
            for name in [SegmentPreparer.fileName, SegmentFormat.temporaryName] where walNames.contains(name) {
                try fileSystem.remove(fileSystem.join(layout.walDirectory, name))
            }
            if try fileSystem.list(layout.directory).contains(LogEndFormat.temporaryName) {
                try fileSystem.remove(fileSystem.join(layout.directory, LogEndFormat.temporaryName))
            }
            for path in plan.removeSegments { try fileSystem.remove(path) }
            if !plan.removeSegments.isEmpty { try fileSystem.syncDirectory(layout.walDirectory) }
            if let cut = plan.cutTail {
                // Zero the torn bytes (not just truncate) so that the space stays
                // preallocated and a later scan sees a clean end; sync before any append.
                let file = try fileSystem.open(cut.path, create: false)
                defer { file.close() }
                var offset = cut.offset
                let zeros = [UInt8](repeating: 0, count: 1 << 20)
                while offset < cut.fileBytes {
                    let count = min(zeros.count, cut.fileBytes - offset)
                    try file.write(zeros[0..<count], at: offset)
                    offset += count
                }
                try file.syncData()
                options.logger.info("wal.recovery") { line in
                    line.field("wal.recovery", "tail-zeroed")
                    line.field("wal.segment", cut.path)
                    line.field("wal.offset", cut.offset)
                }
            }
            let recoveredEnd = LogSequenceNumber(plan.nextLSN.rawValue - 1)
            // The records read back may sit only in the page cache (a crash
            // under everysec or never): make them durable before the log-end
            // file says so. Only the last segment can hold unsynced bytes.
            var last: (any StorageFile)?
            if let appendTo = plan.appendTo {
                let file = try fileSystem.open(layout.segmentPath(appendTo.fileName), create: false)
                try file.syncData()
                last = file
            }
            let logEnd = try LogEndFile.openOrCreate(
                read: input.logEnd, layout: layout,
                initial: LogEnd(sequence: 1, endLSN: recoveredEnd, openSegment: 0, cleanShutdown: false))
            if let appendTo = plan.appendTo, let file = last {
                guard let first = SegmentFormat.firstLSN(fileName: appendTo.fileName) else {
                    preconditionFailure("append segment \(appendTo.fileName) has no LSN in its name")
                }
                let scan = input.segments.last { $0.fileName == appendTo.fileName }
                if scan?.version == SegmentFormat.version && scan?.declaredBytes == options.segmentBytesMax {
                    var open = OpenSegment(file: file, firstLSN: first, offset: appendTo.offset, logEnd: logEnd)
                    try open.markEnd(recoveredEnd, cleanShutdown: false)
                    return open
                }
                // An older release's segment, or another size: it stays as it
                // is (sealed, synced above) and the log goes on in a new one.
                file.close()
                options.logger.info("wal.recovery") { line in
                    line.field("wal.recovery", "new-segment")
                    line.field("wal.segment", appendTo.fileName)
                    line.field("wal.version", Int(scan?.version ?? 0))
                    line.field("wal.bytes", Int(scan?.declaredBytes ?? scan?.fileBytes ?? 0))
                }
            }
            // Zero-filled now, before the first append (later ones are
            // prepared in the background).
            let prepared = fileSystem.join(layout.walDirectory, SegmentPreparer.fileName)
            var open = OpenSegment(
                file: nil, firstLSN: plan.nextLSN, offset: SegmentFormat.headerBytes, logEnd: logEnd)
            let zeroFilled =
                options.zeroFillsSegments
                ? try SegmentPreparer.prepare(path: prepared, fileSystem: fileSystem, bytes: options.segmentBytesMax)
                : nil
            try open.roll(to: plan.nextLSN, layout: layout, options: options, prepared: zeroFilled)
            return open
        } catch {
            throw .io(error)
        }
    }

    /// Removes snapshot files that no checkpoint refers to (and, at open,
    /// temporary files of snapshots that never finished). Errors are logged.
    func removeUnreferencedSnapshots(keepTemporary: Bool) {
        let keep = catalog.withLock { catalog in
            Set(
                [catalog.newest, catalog.older].compactMap { $0 }.map {
                    SnapshotFormat.fileName(startLSN: $0.snapshotLSN)
                })
        }
        let fileSystem = layout.fileSystem
        do {
            var removed = false
            for name in try fileSystem.list(layout.snapshotDirectory) where !keep.contains(name) {
                if name.hasSuffix(".tmp") && keepTemporary { continue }
                try fileSystem.remove(fileSystem.join(layout.snapshotDirectory, name))
                removed = true
            }
            if removed { try fileSystem.syncDirectory(layout.snapshotDirectory) }
        } catch {
            options.logger.warning("wal.warning") { line in
                line.field("wal.warning", "snapshot-cleanup")
                line.field("wal.detail", "\(error)")
            }
        }
    }
}

/// The segment being appended to, and the log-end file. Only the I/O
/// thread uses it while the log is open (through the `segment` mutex).
package struct OpenSegment {
    package var file: (any StorageFile)?
    var firstLSN: LogSequenceNumber
    var offset: Int
    var dirty = false
    /// The next segment has been asked of the preparer.
    var nextRequested = false
    /// Where the durable end is recorded (nil once closed).
    var logEnd: LogEndFile?

    init(file: (any StorageFile)?, firstLSN: LogSequenceNumber, offset: Int, logEnd: LogEndFile?) {
        self.file = file
        self.firstLSN = firstLSN
        self.offset = offset
        self.logEnd = logEnd
    }

    mutating func write(_ bytes: [UInt8], at offset: Int) throws(SystemCallError) {
        guard let file else { preconditionFailure("write without an open segment") }
        try file.write(bytes[...], at: offset)
        self.offset = offset + bytes.count
        dirty = true
    }

    mutating func syncData() throws(SystemCallError) {
        guard let file else { preconditionFailure("sync without an open segment") }
        try file.syncData()
        dirty = false
    }

    /// Records in the log-end file that every record through `lsn` is
    /// durable and that this segment exists (never less than recorded before:
    /// a roll may have recorded more).
    mutating func markEnd(_ lsn: LogSequenceNumber, cleanShutdown: Bool) throws(SystemCallError) {
        guard var logEnd else { preconditionFailure("log-end mark without the log-end file") }
        defer { self.logEnd = logEnd }
        try logEnd.write(
            endLSN: max(lsn, logEnd.last.endLSN), openSegment: firstLSN, cleanShutdown: cleanShutdown)
    }

    /// Seals the open segment (fdatasync if written, so that only the last
    /// segment can ever have a torn tail), creates the next one whole before
    /// its name exists (so that a segment file is never shorter than its
    /// header says), then records in the log-end file that it exists, before
    /// any record goes into it. From a `prepared` file (all zeros, synced,
    /// named `prepared.tmp`): header, fdatasync, rename to the segment name,
    /// fsync of `wal/`. Otherwise the same through `segment.tmp`: create,
    /// header, preallocation, fdatasync, rename, fsync of `wal/`.
    mutating func roll(
        to firstLSN: LogSequenceNumber, layout: StorageLayout, options: StorageOptions, prepared: (any StorageFile)?
    ) throws(SystemCallError) {
        if dirty { try syncData() }
        file?.close()
        file = nil
        let fileSystem = layout.fileSystem
        let path = layout.segmentPath(SegmentFormat.fileName(firstLSN: firstLSN))
        let header = SegmentFormat.encodeHeader(firstLSN: firstLSN, segmentBytes: options.segmentBytesMax)
        let created: any StorageFile
        if let prepared {
            created = prepared
        } else {
            created = try fileSystem.open(
                fileSystem.join(layout.walDirectory, SegmentFormat.temporaryName), create: true)
        }
        do {
            if prepared == nil {
                try created.truncate(size: 0)
                try created.preallocate(size: options.segmentBytesMax)
            }
            try created.write(header[...], at: 0)
            try created.syncData()
            created.close()
        } catch {
            created.close()
            throw error
        }
        try fileSystem.rename(created.path, to: path)
        try fileSystem.syncDirectory(layout.walDirectory)
        file = try fileSystem.open(path, create: false)
        nextRequested = false
        self.firstLSN = firstLSN
        self.offset = SegmentFormat.headerBytes
        dirty = false
        try markEnd(LogSequenceNumber(firstLSN.rawValue - 1), cleanShutdown: false)
    }

    mutating func close() {
        file?.close()
        file = nil
        logEnd?.close()
        logEnd = nil
    }
}
