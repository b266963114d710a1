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
    package let growth = LogGrowthTrigger()

    package init(wal: WriteAheadLog) {
        self.wal = wal
    }

    package func append(_ records: [[UInt8]]) -> LogSequenceNumber? {
        precondition(!records.isEmpty, "an append of no records")
        do {
            let lsns = try wal.append(records)
            var bytes = 0
            for record in records { bytes += record.count }
            growth.appended(bytes)
            return lsns.upperBound
        } catch {
            // Failed or closed log: nothing of this append is acknowledged.
            return nil
        }
    }

    package var appendedThrough: LogSequenceNumber { wal.appendedLSN }
    package var acknowledgedThrough: LogSequenceNumber { wal.acknowledgedLSN }
    package var acceptsWrites: Bool { !wal.hasFailed }

    package func wakeWhenAcknowledged(_ lsn: LogSequenceNumber, _ executor: LoopExecutor) {
        wal.wakeWhenAcknowledged(lsn, executor)
    }
}
