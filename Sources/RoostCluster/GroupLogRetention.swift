import RoostStorage

/// How far a leader deletes the group log (spec §13.6, `--log-retain-bytes`).
package enum GroupLogRetention {
    /// The LSN through which a leader deletes the group log: what every live
    /// member checkpointed; while the group log holds more than
    /// `retainBytes`, what the furthest live member checkpointed (a member
    /// behind it re-seeds from that member's snapshot, which holds every
    /// record through that LSN). Nil: nothing to delete.
    package static func purgeThrough(
        checkpoints: [LogSequenceNumber], groupLogBytes: Int, retainBytes: Int
    ) -> LogSequenceNumber? {
        guard let lowest = checkpoints.min(), let highest = checkpoints.max() else { return nil }
        let through = groupLogBytes > retainBytes ? highest : lowest
        return through.rawValue > 0 ? through : nil
    }
}
