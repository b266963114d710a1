import RoostPlatform
import RoostStorage
import Synchronization

/// The log of a cluster leader (spec §13.2): every append goes to this
/// node's own log (`local`, which gives the LSNs), and the same records, in
/// LSN order, into an outbox the replicator takes as the next group-log
/// batch. A record is acknowledged only once the group log committed it
/// (`commit(through:)`, after etcd's answer) **and** the local log
/// acknowledged it under `--fsync`: `acknowledgedThrough` is the smaller of
/// the two, so every answer, device write or catalog change, waits for both.
///
/// Threads: shards and the catalog append from the loops; the replicator's
/// thread takes the outbox and reports commits. Values cross, no callbacks:
/// a waiting loop is woken (`LoopExecutor.wake`) and looks again.
package final class LeaderLog: MutationLog {
    /// The records waiting for the replicator, and the loops to wake on a commit.
    private struct Outbox {
        var records: [ReplicatedRecord] = []
        var bytes = 0
        var wakeRequests: [(executor: LoopExecutor, through: UInt64)] = []
        /// Set when this node may no longer append (deposed, spec §13.5):
        /// nothing after `committed` will be acknowledged.
        var closed = false
    }

    /// Outbox bytes beyond which appends are refused (503): the group log
    /// has stopped taking batches and memory must not grow without bound.
    /// 64 MiB: about 30 s of the peak write rate of docs/performance.md.
    package static let outboxBytesMax = 64 << 20

    package let local: any MutationLog
    private let outbox = Mutex(Outbox())
    /// The last LSN the group log committed (0: none).
    private let committed: Atomic<UInt64>

    /// A leader's log over `local`, whose records through `committedThrough`
    /// the group log already holds (the end of the group log when this node
    /// took the lead).
    package init(local: any MutationLog, committedThrough: LogSequenceNumber) {
        precondition(
            committedThrough <= local.appendedThrough,
            "the group log holds \(committedThrough), past this node's log at \(local.appendedThrough)")
        self.local = local
        self.committed = Atomic(committedThrough.rawValue)
    }

    package func append(_ records: [[UInt8]]) -> LogSequenceNumber? {
        precondition(!records.isEmpty, "an append of no records")
        return outbox.withLock { outbox -> LogSequenceNumber? in
            // Under the outbox's lock, so that the outbox is in LSN order.
            guard !outbox.closed, outbox.bytes < Self.outboxBytesMax, let last = local.append(records) else {
                return nil
            }
            var lsn = last.rawValue - UInt64(records.count) + 1
            for payload in records {
                outbox.records.append(ReplicatedRecord(lsn: LogSequenceNumber(lsn), payload: payload))
                outbox.bytes += payload.count
                lsn += 1
            }
            return last
        }
    }

    package var appendedThrough: LogSequenceNumber { local.appendedThrough }

    package var acknowledgedThrough: LogSequenceNumber {
        min(local.acknowledgedThrough, committedThrough)
    }

    /// The last LSN the group log committed.
    package var committedThrough: LogSequenceNumber { LogSequenceNumber(committed.load(ordering: .acquiring)) }

    package var acceptsWrites: Bool {
        local.acceptsWrites && !outbox.withLock { $0.closed }
    }

    package func wakeWhenAcknowledged(_ lsn: LogSequenceNumber, _ executor: LoopExecutor) {
        // The local log wakes it once its part is done; a commit wakes it for the other.
        local.wakeWhenAcknowledged(lsn, executor)
        let due = outbox.withLock { outbox -> Bool in
            if outbox.closed || committed.load(ordering: .acquiring) >= lsn.rawValue { return true }
            if let at = outbox.wakeRequests.firstIndex(where: { $0.executor === executor }) {
                outbox.wakeRequests[at].through = min(outbox.wakeRequests[at].through, lsn.rawValue)
            } else {
                outbox.wakeRequests.append((executor, lsn.rawValue))
            }
            return false
        }
        if due { executor.wake() }
    }

    // MARK: - The replicator's side

    /// Takes the records appended since the last call, in LSN order, at
    /// most `bytesMax` of payload (at least one record when any waits): the
    /// next group-log batch. Empty when nothing waits.
    package func takeBatch(bytesMax: Int) -> [ReplicatedRecord] {
        precondition(bytesMax > 0, "a batch of at most \(bytesMax) bytes")
        return outbox.withLock { outbox in
            var taken = 0
            var bytes = 0
            while taken < outbox.records.count {
                let size = outbox.records[taken].payload.count
                if taken > 0 && bytes + size > bytesMax { break }
                bytes += size
                taken += 1
            }
            let batch = Array(outbox.records[..<taken])
            outbox.records.removeFirst(taken)
            outbox.bytes -= bytes
            return batch
        }
    }

    /// Records that the group log committed every record through `lsn`, and
    /// wakes the loops whose answers that releases (with the local log's
    /// acknowledgement they may still wait for; they look again).
    package func commit(through lsn: LogSequenceNumber) {
        precondition(lsn <= local.appendedThrough, "committed \(lsn) was never appended here")
        let previous = committed.load(ordering: .acquiring)
        precondition(lsn.rawValue >= previous, "the committed LSN went back from \(previous) to \(lsn)")
        committed.store(lsn.rawValue, ordering: .releasing)
        wake { $0.through <= lsn.rawValue }
    }

    /// Stops taking appends for good (deposed, spec §13.5): nothing appended
    /// and not committed is ever acknowledged; waiting loops are woken (a
    /// write that was not committed is answered 503 as the log refuses it).
    package func close() {
        outbox.withLock { $0.closed = true }
        wake { _ in true }
    }

    private func wake(where isDue: ((executor: LoopExecutor, through: UInt64)) -> Bool) {
        let due = outbox.withLock { outbox -> [LoopExecutor] in
            var due: [LoopExecutor] = []
            outbox.wakeRequests.removeAll { request in
                guard isDue(request) else { return false }
                due.append(request.executor)
                return true
            }
            return due
        }
        for executor in due { executor.wake() }
    }
}
