import RoostStorage

/// `backup.manifest`: what `roost backup` wrote and `roost restore` checks
/// (docs/operations.md, "Backups"). Text, one field per line, the last line
/// the CRC-32C of every byte before it:
///
/// ```
/// roost-backup 1
/// roost-version 0.9.0
/// created-at 2026-09-21T14:13:20.000Z
/// snapshot-lsn 4000                      (0: no snapshot, the log from LSN 1)
/// end-lsn 5123                           (the last record in the backup)
/// file checkpoint.1 48 1a2b3c4d          (relative path, bytes, CRC-32C in hex)
/// file snapshots/00000000000000004000.snap 123456 deadbeef
/// file wal/00000000000000003000.seg 67108864 01234567
/// file admin.key 33 89abcdef
/// crc 0badf00d
/// ```
///
/// Written last, by temp file, fsync and rename: a backup without it is
/// incomplete, and restore refuses it.
struct BackupManifest: Equatable {
    static let fileName = "backup.manifest"
    static let formatVersion = 1

    var roostVersion: String
    var createdAt: String
    /// The start LSN of the snapshot in the backup, or nil when there is none.
    var snapshotLSN: LogSequenceNumber?
    /// The LSN of the last record in the backup: the backup holds the state
    /// after it (0 for an empty log).
    var endLSN: UInt64
    /// Relative path → digest, for every file of the backup but the manifest.
    var files: [String: FileDigest]

    /// Returns the manifest's bytes.
    func encoded() -> [UInt8] {
        var text = "roost-backup \(Self.formatVersion)\n"
        text += "roost-version \(roostVersion)\n"
        text += "created-at \(createdAt)\n"
        text += "snapshot-lsn \(snapshotLSN?.rawValue ?? 0)\n"
        text += "end-lsn \(endLSN)\n"
        for (path, digest) in files.sorted(by: { $0.key < $1.key }) {
            text += "file \(path) \(digest.bytes) \(Self.hex(digest.checksum))\n"
        }
        var bytes = Array(text.utf8)
        bytes += Array("crc \(Self.hex(CRC32C.checksum(bytes)))\n".utf8)
        return bytes
    }

    /// Parses a manifest; throws naming `path` and the line at fault.
    static func decode(_ bytes: [UInt8], path: String) throws -> BackupManifest {
        func bad(_ reason: String) -> BackupError {
            BackupError("\(path) is not a complete roost backup manifest: \(reason)")
        }
        guard let crcLineStart = bytes.dropLast().lastIndex(of: UInt8(ascii: "\n")).map({ $0 + 1 }),
            bytes.last == UInt8(ascii: "\n")
        else { throw bad("no crc line") }
        let crcLine = String(decoding: bytes[crcLineStart..<(bytes.count - 1)], as: UTF8.self)
        guard crcLine == "crc \(hex(CRC32C.checksum(bytes[..<crcLineStart])))" else {
            throw bad("its crc line does not match its contents (changed or cut)")
        }
        let lines = String(decoding: bytes[..<crcLineStart], as: UTF8.self).split(separator: "\n")
        guard lines.first == "roost-backup \(formatVersion)" else {
            throw bad("it does not start with 'roost-backup \(formatVersion)'")
        }
        var manifest = BackupManifest(roostVersion: "", createdAt: "", snapshotLSN: nil, endLSN: 0, files: [:])
        var seen: Set<String> = []
        for line in lines.dropFirst() {
            let fields = line.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
            guard let key = fields.first else { throw bad("an empty line") }
            if key != "file" {
                guard fields.count == 2, seen.insert(key).inserted else { throw bad("line '\(line)'") }
            }
            switch key {
            case "roost-version": manifest.roostVersion = fields[1]
            case "created-at": manifest.createdAt = fields[1]
            case "snapshot-lsn":
                guard let value = UInt64(fields[1]) else { throw bad("line '\(line)'") }
                manifest.snapshotLSN = value == 0 ? nil : LogSequenceNumber(value)
            case "end-lsn":
                guard let value = UInt64(fields[1]) else { throw bad("line '\(line)'") }
                manifest.endLSN = value
            case "file":
                guard fields.count == 4, isBackupPath(fields[1]), let size = Int(fields[2]), size >= 0,
                    fields[3].utf8.count == 8, let checksum = UInt32(fields[3], radix: 16),
                    manifest.files[fields[1]] == nil
                else { throw bad("line '\(line)'") }
                manifest.files[fields[1]] = FileDigest(bytes: size, checksum: checksum)
            default:
                throw bad("unknown line '\(line)'")
            }
        }
        guard seen == ["roost-version", "created-at", "snapshot-lsn", "end-lsn"] else {
            throw bad("a field is missing")
        }
        return manifest
    }

    /// The files a backup holds beside `wal/` and `snapshots/`: the
    /// checkpoint slots, `admin.key` and `log-end`.
    static let rootFileNames = CheckpointFormat.slotNames + ["admin.key", LogEndFormat.fileName]

    /// Returns whether `path` is a name a backup holds: a checkpoint slot,
    /// `admin.key`, `log-end`, a segment under `wal/` or a snapshot under `snapshots/`
    /// (never anything with `..` or an absolute path).
    static func isBackupPath(_ path: String) -> Bool {
        if rootFileNames.contains(path) { return true }
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return false }
        let name = String(parts[1])
        switch parts[0] {
        case Substring(SegmentFormat.directoryName): return SegmentFormat.firstLSN(fileName: name) != nil
        case Substring(SnapshotFormat.directoryName):
            guard let lsn = UInt64(name.dropLast(SnapshotFormat.fileExtension.utf8.count)) else { return false }
            return name == SnapshotFormat.fileName(startLSN: LogSequenceNumber(lsn))
        default: return false
        }
    }

    /// Returns `value` as 8 lower-case hex digits.
    static func hex(_ value: UInt32) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 8 - digits.count) + digits
    }
}
