import Glibc
import RoostModel
import RoostPlatform
import RoostStorage
import RoostTesting
import Synchronization
import Testing

@testable import RoostEngine

/// A log whose acknowledged LSN the test moves by hand, and that can fail or
/// refuse appends: the engine's release rules, step by step.
final class ManualLog: MutationLog {
    struct State {
        var appended: UInt64 = 0
        /// Appended records that change a device (a registration appends one
        /// among others): a test that waits for several registrations to be
        /// appended counts these, not records.
        var deviceChanges = 0
        var acknowledged: UInt64 = 0
        var failed = false
        var refusing = false
        var wakeRequests: [(LoopExecutor, UInt64)] = []
    }

    let state = Mutex(State())

    func append(_ records: [[UInt8]]) -> LogSequenceNumber? {
        state.withLock { state in
            if state.failed || state.refusing { return nil }
            state.appended += UInt64(records.count)
            state.deviceChanges += records.count { EngineRecord.deviceChange(inEncoded: $0) != nil }
            return LogSequenceNumber(state.appended)
        }
    }

    var appendedThrough: LogSequenceNumber { LogSequenceNumber(state.withLock { $0.appended }) }
    var acknowledgedThrough: LogSequenceNumber { LogSequenceNumber(state.withLock { $0.acknowledged }) }
    var acceptsWrites: Bool { !state.withLock { $0.failed } }

    func wakeWhenAcknowledged(_ lsn: LogSequenceNumber, _ executor: LoopExecutor) {
        state.withLock { $0.wakeRequests.append((executor, lsn.rawValue)) }
    }

    /// Acknowledges everything appended so far and wakes the loops that asked.
    func acknowledgeAll() { publish { $0.acknowledged = $0.appended } }

    /// Fails the log and wakes every loop that asked.
    func fail() { publish { $0.failed = true } }

    private func publish(_ change: (inout State) -> Void) {
        let due = state.withLock { state -> [LoopExecutor] in
            change(&state)
            defer { state.wakeRequests = [] }
            return state.wakeRequests.map(\.0)
        }
        for executor in due { executor.wake() }
    }
}

/// Records which thread did what, and the outcomes a loop received.
final class ProbeReceiver: OutcomeReceiver, Sendable {
    let received = Mutex<[(ticket: UInt64, outcome: Acknowledged, thread: pthread_t)]>([])

    func receive(_ outcomes: inout [(ticket: UInt64, outcome: Acknowledged)]) {
        let thread = pthread_self()
        received.withLock { list in
            for (ticket, outcome) in outcomes { list.append((ticket, outcome, thread)) }
        }
        outcomes.removeAll()
    }

    var count: Int { received.withLock { $0.count } }
}

/// An actor that runs on a loop's executor: lets a test act on that loop's thread.
actor OnLoop {
    nonisolated let executor: LoopExecutor
    init(_ executor: LoopExecutor) { self.executor = executor }
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    /// Submits `work` on this loop (as a request would) and returns this thread.
    func submit(_ loop: ShardLoop, _ work: ShardWork, ticket: UInt64) -> pthread_t {
        loop.submit(work, ticket: ticket)
        return pthread_self()
    }

    private func step() {}

    /// Returns once a whole round of this loop, begun after the call, has
    /// ended: whatever was submitted or posted to the loop before the call
    /// has been through a round's end (`ShardLoop.endOfRound`). A round runs
    /// the jobs queued when it began, then its end; the second step is
    /// queued after the first ran, so it waits for that round's end.
    nonisolated func roundEnded() async {
        await step()
        await step()
    }
}

/// Waits for `condition`, up to two seconds.
func soon(_ condition: () -> Bool) async -> Bool {
    await ConditionWait.until(within: .seconds(2)) { () async -> Bool in condition() }
}

let threadProbe = CustomWork { _ in (Int(bitPattern: UInt(pthread_self())), []) }

func register(_ token: PushToken) -> ShardWork {
    .index(liveKey, settings: .defaults, .register(RegisterRequest(token: token), at: now))
}

@Suite("The spine: loops run shards, values cross threads")
struct SpineTests {
    @Test("a command submitted on its shard's own loop runs and is answered on that thread, no hop")
    func sameLoopNoHop() async throws {
        let set = ShardSet(shardCount: 1, loopCount: 1, log: VolatileLog())
        let receiver = ProbeReceiver()
        set.loops[0].setReceiver(receiver)
        let probe = OnLoop(set.loops[0].executor)
        let submitter = await probe.submit(
            set.loops[0], .index(liveKey, settings: .defaults, .custom(threadProbe)), ticket: 7)
        #expect(await soon { receiver.count == 1 })
        let got = try #require(receiver.received.withLock { $0.first })
        #expect(got.ticket == 7)
        guard case .custom(let value)? = got.outcome, let executedOn = value as? Int else {
            Issue.record("outcome \(String(describing: got.outcome))")
            return
        }
        #expect(pthread_equal(got.thread, submitter) != 0, "received on another thread than submitted")
        #expect(executedOn == Int(bitPattern: UInt(submitter)), "executed on another thread than submitted")
    }

    @Test("a command for another loop's shard runs on that loop; its outcome comes back to the submitting loop")
    func crossLoop() async throws {
        let set = ShardSet(shardCount: 2, loopCount: 2, log: VolatileLog())
        let receivers = [ProbeReceiver(), ProbeReceiver()]
        for (loop, receiver) in zip(set.loops, receivers) { loop.setReceiver(receiver) }
        // The app's shard and the loop that does not run it.
        let owner = set.loopNumber(forShard: set.shardNumber(for: liveKey.app))
        let other = 1 - owner
        let probes = set.loops.map { OnLoop($0.executor) }
        let ownerThread = try #require(
            await set.perform(.index(liveKey, settings: .defaults, .custom(threadProbe))))
        let submitter = await probes[other].submit(
            set.loops[other], .index(liveKey, settings: .defaults, .custom(threadProbe)), ticket: 3)
        #expect(await soon { receivers[other].count == 1 })
        #expect(receivers[owner].count == 0)
        let got = try #require(receivers[other].received.withLock { $0.first })
        #expect(pthread_equal(got.thread, submitter) != 0)
        guard case .custom(let executed)? = got.outcome, case .custom(let expected) = ownerThread else {
            Issue.record("outcomes \(String(describing: got.outcome)) \(ownerThread)")
            return
        }
        #expect(executed as? Int == expected as? Int, "not executed on the owning loop")
        #expect(executed as? Int != Int(bitPattern: UInt(submitter)))
    }

    @Test("an outcome is released only once the log acknowledges its records; a read waits for earlier writes")
    func waitsForAcknowledgement() async throws {
        let log = ManualLog()
        let set = ShardSet(shardCount: 1, loopCount: 1, log: log)
        let receiver = ProbeReceiver()
        set.loops[0].setReceiver(receiver)
        let probe = OnLoop(set.loops[0].executor)
        _ = await probe.submit(set.loops[0], register(try apnsToken(1)), ticket: 1)
        _ = await probe.submit(
            set.loops[0],
            .index(liveKey, settings: .defaults, .custom(CustomWork { index in (index.stats().devices, []) })),
            ticket: 2)
        await probe.roundEnded()  // both ran, and the round that held them ended
        #expect(receiver.count == 0, "released before the log acknowledged")
        #expect(log.state.withLock { $0.appended } >= 1)
        log.acknowledgeAll()
        #expect(await soon { receiver.count == 2 })
        let outcomes = receiver.received.withLock { $0 }
        guard case .registered? = outcomes.first(where: { $0.ticket == 1 })?.outcome else {
            Issue.record("registration: \(outcomes)")
            return
        }
    }

    @Test("a cross-loop outcome not yet acknowledged reaches its loop once the log acknowledges it, no wake-up lost")
    func crossLoopWaitsForTheLog() async throws {
        let log = ManualLog()
        let set = ShardSet(shardCount: 2, loopCount: 2, log: log)
        let receivers = [ProbeReceiver(), ProbeReceiver()]
        for (loop, receiver) in zip(set.loops, receivers) { loop.setReceiver(receiver) }
        let owner = set.loopNumber(forShard: set.shardNumber(for: liveKey.app))
        let other = 1 - owner
        let probe = OnLoop(set.loops[other].executor)
        for number in 0..<3 {
            _ = await probe.submit(set.loops[other], register(try apnsToken(10 + number)), ticket: UInt64(number))
        }
        // The owner appended all three and posted their outcomes back; then
        // the submitting loop took them in a round and held them. Counted by
        // device changes: a registration here appends two records, so three
        // records appended meant two registrations, and the third, appended
        // after `acknowledgeAll`, was never acknowledged (2 runs in 10 failed).
        #expect(await soon { log.state.withLock { $0.deviceChanges } >= 3 })
        await OnLoop(set.loops[owner].executor).roundEnded()
        await probe.roundEnded()
        #expect(receivers[other].count == 0, "released before the log acknowledged")
        #expect(log.state.withLock { $0.appended } >= 3)
        log.acknowledgeAll()
        #expect(await soon { receivers[other].count == 3 })
    }

    @Test("when the log fails, waiting writes answer nil (503), and so do waiting reads that could show them")
    func failedLog() async throws {
        let log = ManualLog()
        let set = ShardSet(shardCount: 1, loopCount: 1, log: log)
        let receiver = ProbeReceiver()
        set.loops[0].setReceiver(receiver)
        let probe = OnLoop(set.loops[0].executor)
        let token = try apnsToken(2)
        _ = await probe.submit(set.loops[0], register(token), ticket: 1)
        await probe.roundEnded()  // the write ran in a round of its own
        _ = await probe.submit(
            set.loops[0],
            .index(liveKey, settings: .defaults, .custom(CustomWork { index in (index.stats().devices, []) })),
            ticket: 2)
        await probe.roundEnded()
        #expect(receiver.count == 0)
        log.fail()
        #expect(await soon { receiver.count == 2 })
        let outcomes = receiver.received.withLock { $0 }
        let write = try #require(outcomes.first { $0.ticket == 1 })
        let read = try #require(outcomes.first { $0.ticket == 2 })
        #expect(write.outcome == nil)
        // The read ran after the write on the same index: it would show a
        // write answered 503 (spec §2: not applied).
        #expect(read.outcome == nil, "read: \(String(describing: read.outcome))")
    }

    @Test("a log that refuses an append answers that batch's writes nil at once, and nothing waits")
    func refusedAppend() async throws {
        let log = ManualLog()
        log.state.withLock { $0.refusing = true }
        let set = ShardSet(shardCount: 1, loopCount: 1, log: log)
        let outcome = await set.perform(register(try apnsToken(3)))
        #expect(outcome == nil)
    }
}
