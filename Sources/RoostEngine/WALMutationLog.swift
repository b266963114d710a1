import RoostPlatform
import RoostStorage
import Synchronization

/// The engine's records go to the write-ahead log: one append per shard per
/// round, acknowledged after the covering fdatasync (`always`, by the log's
/// I/O thread) or the write (`everysec`, `never`: by the loop itself at the
/// end of its round when the I/O thread is idle, `writeHeld`); whoever
/// wrote then wakes each waiting loop once.
package final class WALMutationLog: MutationLog {
    package let wal: WriteAheadLog
    /// Record bytes appended since the last snapshot began (its trigger).
    package let growth = LogGrowthTrigger()

    package init(wal: WriteAheadLog) {
        self.wal = wal
    }

    package func append(_ records: [[UInt8]]) -> LogSequenceNumber? {
        append(records, held: false)
    }

    package func appendHeld(_ records: [[UInt8]]) -> LogSequenceNumber? {
        append(records, held: true)
    }

    package func writeHeld() {
        wal.writeHeld()
    }

    private func append(_ records: [[UInt8]], held: Bool) -> LogSequenceNumber? {
        precondition(!records.isEmpty, "an append of no records")
        do {
            let lsns = held ? try wal.appendHeld(records) : try wal.append(records)
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
