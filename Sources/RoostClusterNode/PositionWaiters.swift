import RoostStorage
import Synchronization

/// Reads waiting for this node to apply a position (`Roost-Min-Position`,
/// spec §13.3): resumed by the replication thread when it publishes an
/// applied LSN that reaches theirs, or by their own timeout.
final class PositionWaiters: Sendable {
    /// Reads that may wait at once; more are answered at once (not reached).
    static let waitersMax = 4_096

    private struct Waiter {
        var lsn: LogSequenceNumber
        var continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var waiters: [UInt64: Waiter] = [:]
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())

    /// Waits until `reached` is called with `lsn` or more, or `timeout`
    /// passed; `applied` is read again once the waiter is registered (a
    /// publish between the caller's check and the registration is not missed).
    func wait(for lsn: LogSequenceNumber, timeout: Duration, applied: @Sendable () -> LogSequenceNumber) async
        -> Bool
    {
        let id = state.withLock { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
        let timer = Task {
            try? await Task.sleep(for: timeout)
            self.resume(id, with: false)
        }
        let reached = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let registered = state.withLock { state -> Bool in
                guard state.waiters.count < Self.waitersMax else { return false }
                state.waiters[id] = Waiter(lsn: lsn, continuation: continuation)
                return true
            }
            if !registered {
                continuation.resume(returning: applied() >= lsn)
            } else if applied() >= lsn {
                resume(id, with: true)
            }
        }
        timer.cancel()
        return reached
    }

    /// The node applied through `lsn`: resumes every waiter it satisfies.
    func reached(_ lsn: LogSequenceNumber) {
        let due = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
            guard !state.waiters.isEmpty else { return [] }
            var due: [CheckedContinuation<Bool, Never>] = []
            for (id, waiter) in state.waiters where waiter.lsn <= lsn {
                due.append(waiter.continuation)
                state.waiters[id] = nil
            }
            return due
        }
        for continuation in due { continuation.resume(returning: true) }
    }

    private func resume(_ id: UInt64, with value: Bool) {
        let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
        waiter?.continuation.resume(returning: value)
    }
}
