import RoostCluster
import RoostStorage

/// The machine's `verifyLocalLog` (spec §13.2): where this node's own log,
/// after its checkpoint, stops holding what the group log's batches hold.
enum LocalLogComparison {
    /// Returns the first LSN after `checkpoint` (through `localEnd`) where
    /// the log in `directory` differs from `batches` (consecutive, in LSN
    /// order), or nil when it holds them as far as it reaches.
    static func firstDifference(
        directory: String, after checkpoint: LogSequenceNumber, through localEnd: LogSequenceNumber,
        batches: [ReplicationBatch]
    ) throws(StorageError) -> LogSequenceNumber? {
        guard let first = batches.first, let last = batches.last else { return nil }
        let low = max(checkpoint.rawValue + 1, first.firstLSN.rawValue)
        let high = min(localEnd.rawValue, last.lastLSN.rawValue)
        guard low <= high else { return nil }
        let local = try LogRead.records(
            in: LogSequenceNumber(low)...LogSequenceNumber(high), directory: directory)
        for batch in batches {
            for (offset, payload) in batch.records.enumerated() {
                let lsn = batch.firstLSN.rawValue + UInt64(offset)
                guard lsn >= low, lsn <= high else { continue }
                let index = Int(lsn - low)
                guard index < local.count, local[index].lsn.rawValue == lsn, local[index].payload == payload else {
                    return LogSequenceNumber(lsn)
                }
            }
        }
        return nil
    }
}
