import RoostPlatform
import RoostStorage
import Synchronization

/// The engine's records go to the write-ahead log: one append per shard per
/// round, acknowledged by the log's I/O thread after the covering fdatasync
/// (`always`) or the write (`everysec`, `never`), which then wakes each
/// waiting loop once.
package final class WALMutationLog: MutationLog {
    package let wal: WriteAheadLog
    /// Record bytes appended since the last snapshot began (its trigger).
    private let bytesSinceSnapshot = Atomic<Int>(0)

    package init(wal: WriteAheadLog) {
        self.wal = wal
    }

    package func append(_ records: [[UInt8]]) -> LogSequenceNumber? {
        precondition(!records.isEmpty, "an append of no records")
        do {
            let lsns = try wal.append(records)
            bytesSinceSnapshot.add(records.reduce(0) { $0 + $1.count }, ordering: .relaxed)
            return lsns.upperBound
        } catch {
            // Failed or closed log: nothing of this append is acknowledged.
            return nil
        }
    }

    package func append(_ records: [[UInt8]], completion: @escaping @Sendable (_ durable: Bool) -> Void) {
        if records.isEmpty {
            // A barrier. Once the log has failed (or closed) nothing pending
            // will become durable any more, so reads are served from memory
            // (ARCHITECTURE: stop acknowledging writes, keep serving reads).
            do {
                try wal.barrier { _ in completion(true) }
            } catch {
                completion(true)
            }
            return
        }
        do {
            try wal.append(records) { result in completion(result.isSuccess) }
            bytesSinceSnapshot.add(records.reduce(0) { $0 + $1.count }, ordering: .relaxed)
        } catch {
            completion(false)
        }
    }

    package var appendedThrough: LogSequenceNumber { wal.appendedLSN }
    package var acknowledgedThrough: LogSequenceNumber { wal.acknowledgedLSN }
    package var acceptsWrites: Bool { !wal.hasFailed }

    package func wakeWhenAcknowledged(_ lsn: LogSequenceNumber, _ executor: LoopExecutor) {
        wal.wakeWhenAcknowledged(lsn, executor)
    }

    /// Bytes of records appended since `resetSnapshotTrigger` was last called.
    package var bytesAppendedSinceSnapshot: Int { bytesSinceSnapshot.load(ordering: .relaxed) }

    package func resetSnapshotTrigger() {
        bytesSinceSnapshot.store(0, ordering: .relaxed)
    }
}

extension Result {
    fileprivate var isSuccess: Bool {
        if case .success = self { return true }
        return false
    }
}
