/// A checkpoint: which snapshot recovery starts from. Two slot files,
/// `checkpoint.0` and `checkpoint.1`, are written alternately in place and
/// fdatasynced; the valid one with the higher sequence wins, so a torn slot
/// write falls back to the other (as LMDB's two meta pages).
package struct Checkpoint: Sendable, Equatable {
    /// Increases by one per checkpoint written.
    package var sequence: UInt64
    /// The snapshot's start LSN; the snapshot file is named after it.
    package var snapshotLSN: LogSequenceNumber
    /// The snapshot file's size, checked before use.
    package var snapshotBytes: UInt64
    /// The snapshot's trailer CRC, checked before use.
    package var snapshotChecksum: UInt32

    package init(sequence: UInt64, snapshotLSN: LogSequenceNumber, snapshotBytes: UInt64, snapshotChecksum: UInt32) {
        self.sequence = sequence
        self.snapshotLSN = snapshotLSN
        self.snapshotBytes = snapshotBytes
        self.snapshotChecksum = snapshotChecksum
    }
}

/// The byte layout of a checkpoint slot (48 bytes, docs/storage.md).
package enum CheckpointFormat {
    package static let magic: [UInt8] = Array("ROOSTCKP".utf8)
    package static let version: UInt32 = 1
    package static let slotBytes = 48
    package static let slotNames = ["checkpoint.0", "checkpoint.1"]

    /// Returns the 48 bytes of a slot.
    package static func encode(_ checkpoint: Checkpoint) -> [UInt8] {
        var bytes = magic
        Bytes.append(version, to: &bytes)
        Bytes.append(UInt32(0), to: &bytes)
        Bytes.append(checkpoint.sequence, to: &bytes)
        Bytes.append(checkpoint.snapshotLSN.rawValue, to: &bytes)
        Bytes.append(checkpoint.snapshotBytes, to: &bytes)
        Bytes.append(checkpoint.snapshotChecksum, to: &bytes)
        Bytes.append(CRC32C.checksum(bytes), to: &bytes)
        precondition(bytes.count == slotBytes, "checkpoint slot is \(bytes.count) bytes")
        return bytes
    }

    /// Returns what a slot file holds: nil contents mean the file is missing.
    package static func decode(_ bytes: [UInt8]?, path: String) -> CheckpointRead {
        guard let bytes else { return .missing }
        func damaged(_ offset: Int, _ reason: String) -> CheckpointRead {
            .damaged(Damage(file: path, offset: offset, reason: reason))
        }
        if bytes.count != slotBytes {
            return damaged(min(bytes.count, slotBytes), "checkpoint slot is \(bytes.count) bytes, not \(slotBytes)")
        }
        if Array(bytes[0..<8]) != magic { return damaged(0, "bad checkpoint magic") }
        if Bytes.read(UInt32.self, bytes, at: 44) != CRC32C.checksum(bytes[0..<44]) {
            return damaged(44, "checkpoint CRC mismatch")
        }
        let version = Bytes.read(UInt32.self, bytes, at: 8)
        if version != self.version { return damaged(8, "unsupported checkpoint version \(version)") }
        if Bytes.read(UInt32.self, bytes, at: 12) != 0 { return damaged(12, "nonzero reserved bytes in checkpoint") }
        let lsn = Bytes.read(UInt64.self, bytes, at: 24)
        if lsn == 0 { return damaged(24, "checkpoint snapshot LSN 0") }
        return .valid(
            Checkpoint(
                sequence: Bytes.read(UInt64.self, bytes, at: 16), snapshotLSN: LogSequenceNumber(lsn),
                snapshotBytes: Bytes.read(UInt64.self, bytes, at: 32),
                snapshotChecksum: Bytes.read(UInt32.self, bytes, at: 40)))
    }
}

/// What one checkpoint slot file holds.
package enum CheckpointRead: Sendable, Equatable {
    case missing
    case damaged(Damage)
    case valid(Checkpoint)
}
