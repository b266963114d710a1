import RoostStorage
import Synchronization

/// The engine's records go to the write-ahead log: one append per shard turn,
/// completed by the log's I/O thread after the covering fdatasync (`always`)
/// or the write (`everysec`, `never`).
package final class WALMutationLog: MutationLog {
    package let wal: WriteAheadLog
    /// Record bytes appended since the last snapshot began (its trigger).
    private let bytesSinceSnapshot = Atomic<Int>(0)

    package init(wal: WriteAheadLog) {
        self.wal = wal
    }

    package func append(_ records: [[UInt8]], completion: @escaping @Sendable (_ durable: Bool) -> Void) {
        if records.isEmpty {
            // A read. Once the log has failed (or closed) nothing pending will
            // become durable any more, so reads are served from what is in
            // memory (ARCHITECTURE: stop acknowledging writes, keep serving
            // reads); docs/storage.md says what such a read may show.
            do {
                try wal.barrier { _ in completion(true) }
            } catch {
                completion(true)
            }
            return
        }
        do {
            let bytes = records.reduce(0) { $0 + $1.count }
            try wal.append(records) { result in completion(result.isSuccess) }
            bytesSinceSnapshot.add(bytes, ordering: .relaxed)
        } catch {
            // Failed or closed log: nothing of this append is acknowledged.
            completion(false)
        }
    }

    package var acceptsWrites: Bool { wal.failure == nil }

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
