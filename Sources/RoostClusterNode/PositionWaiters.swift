import RoostPlatform
import RoostStorage
import Synchronization

/// Reads waiting for this node to apply a position (`Roost-Min-Position`,
/// spec §13.3): resumed by the replication thread when it publishes an
/// applied LSN that reaches theirs, or, once their time is up, by the same
/// thread's timer (`expire`, every pass of its loop: at most a tick, 10 ms,
/// late). No task and no sleep per waiting read.
final class PositionWaiters: Sendable {
    /// Reads that may wait at once; more are answered at once (not reached).
    static let waitersMax = 4_096

    private struct Waiter {
        var lsn: LogSequenceNumber
        /// When its time is up, in `clock`'s nanoseconds.
        var deadline: UInt64
        var continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var waiters: [UInt64: Waiter] = [:]
        var nextID: UInt64 = 0
        /// No waiter's time is up before this (`UInt64.max`: none waits).
        var earliestDeadline = UInt64.max
    }

    private let state = Mutex(State())
    private let clock: any MonotonicClock

    init(clock: any MonotonicClock = SystemMonotonicClock()) {
        self.clock = clock
    }

    /// Waits until `reached` is called with `lsn` or more, or `timeout`
    /// passed (`expire`); `applied` is read again once the waiter is
    /// registered (a publish between the caller's check and the
    /// registration is not missed).
    func wait(for lsn: LogSequenceNumber, timeout: Duration, applied: @Sendable () -> LogSequenceNumber) async
        -> Bool
    {
        let deadline = clock.monotonicNanoseconds() &+ UInt64(max(0, timeout.wholeNanoseconds))
        return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let id = state.withLock { state -> UInt64? in
                guard state.waiters.count < Self.waitersMax else { return nil }
                state.nextID += 1
                state.waiters[state.nextID] = Waiter(lsn: lsn, deadline: deadline, continuation: continuation)
                state.earliestDeadline = min(state.earliestDeadline, deadline)
                return state.nextID
            }
            guard let id else {
                continuation.resume(returning: applied() >= lsn)
                return
            }
            if applied() >= lsn { resume(id, with: true) }
        }
    }

    /// Reads waiting now (tests).
    var count: Int { state.withLock { $0.waiters.count } }

    /// The node applied through `lsn`: resumes every waiter it satisfies.
    func reached(_ lsn: LogSequenceNumber) {
        resumeAll(with: true) { $0.lsn <= lsn }
    }

    /// The replication thread's timer: answers every waiter whose time is
    /// up (not reached). O(1) while none is due.
    func expire() {
        let now = clock.monotonicNanoseconds()
        guard state.withLock({ $0.earliestDeadline <= now }) else { return }
        resumeAll(with: false) { $0.deadline <= now }
    }

    /// Resumes with `value` the waiters `isDue` picks; finds the earliest
    /// deadline of the rest again.
    private func resumeAll(with value: Bool, _ isDue: (Waiter) -> Bool) {
        let due = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
            guard !state.waiters.isEmpty else { return [] }
            let dueIDs = state.waiters.filter { isDue($0.value) }.map(\.key)
            guard !dueIDs.isEmpty else { return [] }
            let due = dueIDs.compactMap { state.waiters.removeValue(forKey: $0)?.continuation }
            state.earliestDeadline = state.waiters.values.lazy.map(\.deadline).min() ?? .max
            return due
        }
        for continuation in due { continuation.resume(returning: value) }
    }

    private func resume(_ id: UInt64, with value: Bool) {
        let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
        waiter?.continuation.resume(returning: value)
    }
}
