import RoostPlatform

/// Damage found in a file of the data directory: which file, where, and what.
/// Its description tells the operator what to run next.
package struct Damage: Error, Sendable, Equatable, CustomStringConvertible {
    /// The path of the damaged file.
    package var file: String
    /// The byte offset in `file` where the damage was found.
    package var offset: Int
    /// What is wrong, in words, e.g. "record CRC mismatch".
    package var reason: String

    package init(file: String, offset: Int, reason: String) {
        self.file = file
        self.offset = offset
        self.reason = reason
    }

    package var description: String {
        "\(file) at offset \(offset): \(reason); run `roost wal verify` on the data directory for a full report"
    }
}

/// Why a storage operation failed.
package enum StorageError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A system call failed (open, write, fdatasync, rename, …).
    case io(SystemCallError)
    /// The log is in the failed state since an earlier write or sync failed;
    /// nothing more is written until a restart recovers from disk. Carries the first cause.
    case logFailed(SystemCallError)
    /// A file on disk is damaged in a way recovery must not repair alone.
    case damaged(Damage)
    /// The log was closed.
    case closed
    /// A payload is larger than `StorageOptions.recordPayloadBytesMax`.
    case recordTooLarge(bytes: Int, limit: Int)
    /// A snapshot or checkpoint was used out of order (e.g. a checkpoint for a
    /// snapshot older than the current one).
    case invalidUse(String)

    package var description: String {
        switch self {
        case .io(let error): "I/O error: \(error)"
        case .logFailed(let error): "write-ahead log failed earlier and accepts no writes until restart: \(error)"
        case .damaged(let damage): "damaged data: \(damage)"
        case .closed: "write-ahead log is closed"
        case .recordTooLarge(let bytes, let limit): "record of \(bytes) bytes is over the limit of \(limit) bytes"
        case .invalidUse(let reason): "invalid use: \(reason)"
        }
    }
}
