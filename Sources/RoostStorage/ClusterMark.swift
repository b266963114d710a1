/// The one kind of log record that is not the engine's: a cluster's epoch
/// record (spec §13.1: "a leader opens its epoch with an epoch record in the
/// group log"). It takes an LSN on every node, in the group log and in each
/// node's own log, and changes no state: recovery and a follower pass over
/// it. Its bytes start with `magic`, which no engine record does (an engine
/// record starts with its format version, 1). The cluster writes and reads
/// the rest (`ReplicationBatch.epochRecord`).
package enum ClusterMark {
    /// "REPO".
    package static let magic: [UInt8] = [0x52, 0x45, 0x50, 0x4F]

    /// Whether `payload` is a cluster mark.
    package static func isMark(_ payload: UnsafeRawBufferPointer) -> Bool {
        payload.count >= magic.count && payload[0] == magic[0] && payload[1] == magic[1] && payload[2] == magic[2]
            && payload[3] == magic[3]
    }
}
