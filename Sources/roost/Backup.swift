import Glibc
import RoostAPI
import RoostEngine
import RoostModel
import RoostPlatform
import RoostStorage
import RoostTelemetry
import Synchronization

/// `roost backup DIR OUT`: a consistent copy of a data directory, taken while
/// a server may be writing to it (docs/decisions/0014-ops-cli-backup.md).
///
/// Why a plain copy is consistent: a snapshot is immutable once its
/// checkpoint names it, segments are append-only, and a record is in the
/// segment file (the page cache every process reads) before it is
/// acknowledged. So the copy takes the newest checkpoint, its snapshot and
/// every segment from the one holding the snapshot's start LSN on, listed
/// after the command started, and holds each open from then on (a later
/// checkpoint may unlink them; the bytes stay). The copy of the last segment
/// can end in a write in flight; recovery on the copy (the storage module's
/// own) cuts it at the last whole record, exactly as after a crash. What is
/// left is the state after one LSN, at or after every write acknowledged
/// before the command started. The copy is then verified as
/// `roost wal verify` does, and `backup.manifest` (sizes, CRC-32C, LSNs) is
/// written last: a backup without it did not finish.
enum Backup {
    /// What a finished backup holds, and what recovery on the copy noted.
    struct Summary {
        var manifest: BackupManifest
        var notes: [String]
    }

    /// The files of one consistent state of the source, open.
    struct Pinned {
        /// The newest valid checkpoint slot: its number, bytes and value; nil
        /// when none is valid (the state is then the log from LSN 1).
        var checkpoint: (slot: Int, bytes: [UInt8], value: Checkpoint)?
        var snapshot: SourceFile?
        /// From the segment holding `replayFrom` to the last, in LSN order.
        var segments: [(name: String, file: SourceFile)]
        /// The `log-end` file as read before the checkpoint and the segments
        /// (nil in a directory an older release wrote): everything it names
        /// was durable before the segments were opened, so the copy must
        /// reach it, and recovery on the copy checks that it does.
        var logEnd: [UInt8]?

        var replayFrom: LogSequenceNumber { checkpoint?.value.snapshotLSN ?? .first }
    }

    /// Why an attempt at pinning must be made again.
    struct Vanished: Error {
        var reason: String
    }

    /// Copies `source` into `output` (missing or empty) and returns what the
    /// backup holds. Never writes to `source`. Throws, naming the file, when
    /// the source is damaged or the copy does not verify; `output` is then
    /// incomplete (no manifest).
    static func run(source: String, output: String) throws -> Summary {
        let layout = StorageLayout(directory: source, fileSystem: PosixFileSystem())
        guard DurableFile.exists(layout.walDirectory) else {
            throw BackupError("\(source) is not a roost data directory: \(layout.walDirectory) is missing")
        }
        let lock = try EmptyDirectory.claim(output)
        defer { withExtendedLifetime(lock) {} }
        do {
            return try copyVerified(layout, into: output)
        } catch {
            throw BackupError(
                "\(error); \(output) is incomplete (it has no \(BackupManifest.fileName)): remove it before "
                    + "backing up into it again")
        }
    }

    /// Pins, copies, cuts and verifies, then writes the manifest (`run`'s steps).
    static func copyVerified(_ layout: StorageLayout, into output: String) throws -> Summary {
        let source = layout.directory
        var pinned: Pinned?
        var lastReason = ""
        for _ in 0..<BackupLimits.pinAttemptsMax {
            do {
                pinned = try pin(layout)
                break
            } catch let vanished as Vanished {
                lastReason = vanished.reason
            }
        }
        guard let pinned else {
            throw BackupError(
                "no consistent set of files in \(source) after \(BackupLimits.pinAttemptsMax) attempts: "
                    + "\(lastReason); run `roost wal verify \(source)`")
        }
        let adminKey = try DurableFile.readIfExists(
            path: source + "/admin.key", limitBytes: BackupLimits.adminKeyBytesMax)
        try copy(pinned, adminKey: adminKey, into: output)
        let repaired = try repair(output, pinned: pinned)
        let report = try DurableEngine.verify(directory: output)
        guard report.verdict == .ok else {
            throw BackupError("the copy in \(output) does not verify: " + report.lines.joined(separator: "; "))
        }
        let manifest = BackupManifest(
            roostVersion: RoostVersion.current, createdAt: wallClockNow().rfc3339,
            snapshotLSN: pinned.checkpoint?.value.snapshotLSN, endLSN: repaired.nextLSN.rawValue - 1,
            files: try digests(of: output))
        try DurableFile.replace(path: output + "/" + BackupManifest.fileName, with: manifest.encoded())
        return Summary(manifest: manifest, notes: repaired.lines)
    }

    /// Opens the newest valid checkpoint's snapshot and the segments from the
    /// one holding its LSN on. Throws `Vanished` when a checkpoint written
    /// meanwhile removed one of them.
    static func pin(_ layout: StorageLayout) throws -> Pinned {
        let logEnd = try DurableFile.readIfExists(path: layout.logEndPath, limitBytes: LogEndFormat.fileBytes)
        var newest: (slot: Int, bytes: [UInt8], value: Checkpoint)?
        for slot in CheckpointFormat.slotNames.indices {
            let path = layout.checkpointPath(slot: slot)
            // A slot torn by a checkpoint being written right now reads as
            // damaged (and an oversized file is damage too): the other decides.
            guard let bytes = try readSlot(path) else { continue }
            guard case .valid(let checkpoint) = CheckpointFormat.decode(bytes, path: path) else { continue }
            if let current = newest, current.value.sequence >= checkpoint.sequence { continue }
            newest = (slot, bytes, checkpoint)
        }
        var snapshot: SourceFile?
        if let newest {
            let path = layout.snapshotPath(newest.value.snapshotLSN)
            guard let file = try SourceFile.open(path) else {
                throw Vanished(reason: "\(path), named by checkpoint \(newest.value.sequence), is missing")
            }
            snapshot = file
        }
        var pinned = Pinned(checkpoint: newest, snapshot: snapshot, segments: [], logEnd: logEnd)
        let names = try layout.segmentNames()
        guard !names.isEmpty else { throw BackupError("\(layout.walDirectory) holds no segment") }
        let firstLSNs = names.compactMap { SegmentFormat.firstLSN(fileName: $0) }
        guard let start = firstLSNs.lastIndex(where: { $0 <= pinned.replayFrom }) else {
            throw Vanished(
                reason: "no segment holds LSN \(pinned.replayFrom); the oldest starts at \(firstLSNs[0])")
        }
        for name in names[start...] {
            guard let file = try SourceFile.open(layout.segmentPath(name)) else {
                throw Vanished(reason: "\(layout.segmentPath(name)) was removed")
            }
            pinned.segments.append((name, file))
        }
        return pinned
    }

    /// Returns a checkpoint slot's bytes; nil when it is missing or too large to be one.
    static func readSlot(_ path: String) throws -> [UInt8]? {
        do {
            return try DurableFile.readIfExists(path: path, limitBytes: BackupLimits.checkpointSlotBytesMax)
        } catch {
            if error.errno == EFBIG { return nil }
            throw error
        }
    }

    /// Writes the pinned files (and `admin.key`) into `output`, each fsynced,
    /// then fsyncs the directories.
    static func copy(_ pinned: Pinned, adminKey: [UInt8]?, into output: String) throws {
        let layout = StorageLayout(directory: output, fileSystem: PosixFileSystem())
        try DurableFile.createDirectory(path: layout.walDirectory)
        try DurableFile.createDirectory(path: layout.snapshotDirectory)
        if let checkpoint = pinned.checkpoint, let snapshot = pinned.snapshot {
            _ = try FileCopy.copy(snapshot, to: layout.snapshotPath(checkpoint.value.snapshotLSN))
            try DurableFile.replace(path: layout.checkpointPath(slot: checkpoint.slot), with: checkpoint.bytes)
        }
        for segment in pinned.segments {
            _ = try FileCopy.copy(segment.file, to: layout.segmentPath(segment.name))
        }
        if let adminKey { try DurableFile.replace(path: output + "/admin.key", with: adminKey) }
        if let logEnd = pinned.logEnd { try DurableFile.replace(path: layout.logEndPath, with: logEnd) }
        try FileCopy.syncDirectory(layout.walDirectory)
        try FileCopy.syncDirectory(layout.snapshotDirectory)
        try FileCopy.syncDirectory(output)
    }

    /// What recovery on the copy found.
    struct Repaired {
        var nextLSN: LogSequenceNumber
        var lines: [String]
    }

    /// Runs the storage module's recovery on the copy: it cuts a write that
    /// was in flight in the last segment (a torn tail), as after a crash.
    /// When the last segment looks damaged with a valid record after the
    /// damage, the copy caught a page written after the reader passed the
    /// one before it: that segment is copied again (at most
    /// `BackupLimits.tailCopiesMax` times; damage that stays is real).
    static func repair(_ output: String, pinned: Pinned) throws -> Repaired {
        let layout = StorageLayout(directory: output, fileSystem: PosixFileSystem())
        guard let last = pinned.segments.last else { preconditionFailure("pinned no segment") }
        let lastPath = layout.segmentPath(last.name)
        for copy in 1...BackupLimits.tailCopiesMax {
            let lines = Logger(output: .memory)
            var options = StorageOptions()
            options.zeroFillSegments = false
            options.logger = lines
            do {
                let (wal, recovered) = try WriteAheadLog.open(directory: output, policy: .always, options: options)
                let nextLSN = recovered.nextLSN
                let replayFrom = recovered.replayFrom
                wal.close()
                guard replayFrom == pinned.replayFrom else {
                    throw BackupError(
                        "recovery on the copy in \(output) would start at LSN \(replayFrom), not at the snapshot's "
                            + "LSN \(pinned.replayFrom): " + lines.lines.joined(separator: "; "))
                }
                return Repaired(nextLSN: nextLSN, lines: lines.lines)
            } catch StorageError.damaged(let damage) where damage.file == lastPath && copy < BackupLimits.tailCopiesMax
            {
                usleep(BackupLimits.tailCopyPauseMicroseconds)
                try FileCopy.removeIfPresent(lastPath)
                _ = try FileCopy.copy(last.file, to: lastPath)
                try FileCopy.syncDirectory(layout.walDirectory)
            } catch let error as StorageError {
                throw BackupError("the copy in \(output) cannot be recovered: \(error)")
            }
        }
        preconditionFailure("the last copy either returns or throws")
    }

    /// Returns the digest of every file of the backup in `output`, by
    /// relative path (the manifest's list).
    static func digests(of output: String) throws -> [String: FileDigest] {
        var files: [String: FileDigest] = [:]
        for directory in [SegmentFormat.directoryName, SnapshotFormat.directoryName] {
            for name in try FileCopy.list(output + "/" + directory) ?? [] {
                let path = directory + "/" + name
                guard BackupManifest.isBackupPath(path) else {
                    throw BackupError("unexpected file \(output)/\(path) in the copy")
                }
                files[path] = try FileCopy.digest(output + "/" + path)
            }
        }
        for name in BackupManifest.rootFileNames where DurableFile.exists(output + "/" + name) {
            files[name] = try FileCopy.digest(output + "/" + name)
        }
        return files
    }

    /// Returns the wall-clock time now (the manifest's `created-at`).
    static func wallClockNow() -> Timestamp {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Timestamp(millisecondsSinceEpoch: Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000)
    }
}

/// `roost restore BACKUP DIR`: checks a backup whole, then puts it into an
/// empty directory so that an interrupted restore never starts as a smaller
/// state (docs/operations.md, "Restore").
enum Restore {
    /// The staging directory inside DIR; its pieces are renamed into place.
    /// While it exists, `roost serve` refuses DIR (`unfinishedMessage`).
    static let stagingName = "restore.partial"

    /// The names a restore puts into DIR: the staging directory and what is
    /// renamed out of it.
    static let restoredNames: Set<String> = Set(
        [stagingName, SegmentFormat.directoryName, SnapshotFormat.directoryName] + BackupManifest.rootFileNames)

    /// The one line `roost serve` refuses `directory` with while it holds
    /// `restore.partial`: a restore into it did not finish (it was killed, or
    /// failed), so it holds a part of a backup or nothing, never a state to
    /// serve.
    static func unfinishedMessage(directory: String) -> String {
        "\(directory)/\(stagingName) is left by a `roost restore` that did not finish, so \(directory) holds "
            + "at most a part of a backup: run `roost restore BACKUP \(directory)` again to finish it (it starts "
            + "over), or empty \(directory) to discard it"
    }

    /// Verifies `backup` (manifest, every file's size and CRC-32C, `roost wal
    /// verify`, the LSNs the manifest records), then copies it into
    /// `directory` (missing, empty, or left by a restore that did not
    /// finish; not in use) and returns its manifest.
    static func run(backup: String, directory: String) throws -> BackupManifest {
        let manifest = try verify(backup)
        let lock = try EmptyDirectory.claim(directory, discardingUnfinishedRestore: true)
        let staging = directory + "/" + stagingName
        do {
            try stage(manifest, from: backup, into: staging)
            try commit(manifest, staging: staging, directory: directory)
        } catch {
            throw BackupError(
                "\(error); \(directory) is incomplete: run this restore again (it starts over), or empty \(directory)")
        }
        withExtendedLifetime(lock) {}
        return manifest
    }

    /// Removes what an unfinished restore left in `directory` (`entries`, a
    /// subset of `restoredNames` holding `stagingName`): the checkpoint slots
    /// first (they are the commit), the staging directory last, so that
    /// `roost serve` keeps refusing the directory until it is empty.
    static func discardUnfinished(_ directory: String, entries: [String]) throws {
        precondition(entries.contains(stagingName), "no \(stagingName) among \(entries)")
        precondition(entries.allSatisfy(restoredNames.contains), "\(entries) holds a name no restore writes")
        let slots = entries.filter(CheckpointFormat.slotNames.contains)
        let others = entries.filter { $0 != stagingName && !CheckpointFormat.slotNames.contains($0) }
        for name in slots + others { try FileCopy.removeTree(directory + "/" + name) }
        try FileCopy.syncDirectory(directory)
        try FileCopy.removeTree(directory + "/" + stagingName)
        try FileCopy.syncDirectory(directory)
    }

    /// Returns the manifest of `backup` once everything in it checks out;
    /// changes nothing. O(backup size): every byte is read twice (CRC, then
    /// `roost wal verify`).
    static func verify(_ backup: String) throws -> BackupManifest {
        let manifestPath = backup + "/" + BackupManifest.fileName
        guard let bytes = try DurableFile.readIfExists(path: manifestPath, limitBytes: BackupLimits.manifestBytesMax)
        else {
            throw BackupError(
                "\(manifestPath) is missing: \(backup) is not a backup made by `roost backup`, or one that did not finish"
            )
        }
        let manifest = try BackupManifest.decode(bytes, path: manifestPath)
        var present: Set<String> = []
        for directory in [SegmentFormat.directoryName, SnapshotFormat.directoryName] {
            for name in try FileCopy.list(backup + "/" + directory) ?? [] { present.insert(directory + "/" + name) }
        }
        for name in BackupManifest.rootFileNames where DurableFile.exists(backup + "/" + name) {
            present.insert(name)
        }
        let expected = Set(manifest.files.keys)
        if let missing = expected.subtracting(present).sorted().first {
            throw BackupError("\(backup)/\(missing) is missing (the manifest lists it)")
        }
        if let extra = present.subtracting(expected).sorted().first {
            throw BackupError("\(backup)/\(extra) is not in the manifest: this is not what `roost backup` wrote")
        }
        for (path, digest) in manifest.files.sorted(by: { $0.key < $1.key }) {
            let actual = try FileCopy.digest(backup + "/" + path)
            guard actual == digest else {
                throw BackupError(
                    "\(backup)/\(path) is damaged: \(actual.bytes) bytes with CRC-32C "
                        + "\(BackupManifest.hex(actual.checksum)), the manifest says \(digest.bytes) bytes with "
                        + BackupManifest.hex(digest.checksum))
            }
        }
        let report = try DurableEngine.verify(directory: backup)
        guard report.verdict == .ok else {
            throw BackupError("\(backup) does not verify: " + report.lines.joined(separator: "; "))
        }
        let input = try StorageLayout(directory: backup, fileSystem: PosixFileSystem()).readRecoveryInput(
            options: StorageOptions())
        guard case .recover(let plan) = decideRecovery(input),
            plan.checkpoint?.snapshotLSN == manifest.snapshotLSN, plan.nextLSN.rawValue - 1 == manifest.endLSN
        else {
            throw BackupError(
                "\(backup) does not hold what its manifest says (snapshot LSN "
                    + "\(manifest.snapshotLSN?.rawValue ?? 0), log through LSN \(manifest.endLSN))")
        }
        return manifest
    }

    /// Copies every file of the manifest into `staging`, checking each copy's
    /// digest against the manifest, and fsyncs files and directories.
    static func stage(_ manifest: BackupManifest, from backup: String, into staging: String) throws {
        try DurableFile.createDirectory(path: staging)
        try DurableFile.createDirectory(path: staging + "/" + SegmentFormat.directoryName)
        try DurableFile.createDirectory(path: staging + "/" + SnapshotFormat.directoryName)
        for (path, digest) in manifest.files.sorted(by: { $0.key < $1.key }) {
            guard let source = try SourceFile.open(backup + "/" + path) else {
                throw BackupError("\(backup)/\(path) disappeared during the restore")
            }
            guard try FileCopy.copy(source, to: staging + "/" + path) == digest else {
                throw BackupError("\(backup)/\(path) changed during the restore")
            }
        }
        try FileCopy.syncDirectory(staging + "/" + SegmentFormat.directoryName)
        try FileCopy.syncDirectory(staging + "/" + SnapshotFormat.directoryName)
        try FileCopy.syncDirectory(staging)
    }

    /// Renames the staged pieces into `directory`, the checkpoint last, each
    /// rename made durable before the next: `wal/` alone, or with
    /// `snapshots/` and `admin.key`, either is the whole state (a log from
    /// LSN 1) or refuses to start (a log that starts after LSN 1 with no
    /// checkpoint); the checkpoint's rename is the commit.
    static func commit(_ manifest: BackupManifest, staging: String, directory: String) throws {
        var order = [SegmentFormat.directoryName, SnapshotFormat.directoryName]
        if manifest.files["admin.key"] != nil { order.append("admin.key") }
        if manifest.files[LogEndFormat.fileName] != nil { order.append(LogEndFormat.fileName) }
        order += CheckpointFormat.slotNames.filter { manifest.files[$0] != nil }
        for name in order {
            try DurableFile.rename(staging + "/" + name, to: directory + "/" + name)
        }
        if rmdir(staging) != 0 { throw SystemCallError(call: "rmdir", subject: staging, errno: errno) }
        try FileCopy.syncDirectory(directory)
    }
}

/// The output directory of a backup or restore: created when missing,
/// locked as `roost serve` locks a data directory (so that no server starts
/// on it meanwhile, and no second backup writes into it), and empty.
enum EmptyDirectory {
    /// Returns the lock on `path` once it is an empty directory (its lock
    /// file aside); throws when it is not empty or in use. With
    /// `discardingUnfinishedRestore`, a directory that holds `restore.partial`
    /// and nothing but what a restore writes is emptied first: it was empty
    /// when that restore claimed it, and no server can have run on it since
    /// (`roost serve` refuses it).
    static func claim(_ path: String, discardingUnfinishedRestore: Bool = false) throws -> DirectoryLock {
        try DurableFile.createDirectory(path: path)
        try FileCopy.syncDirectory(StorageLayout.parent(of: path))
        let lock = try DirectoryLock(directory: path)
        var entries = (try FileCopy.list(path) ?? []).filter { $0 != DirectoryLock.fileName }
        if discardingUnfinishedRestore && entries.contains(Restore.stagingName)
            && entries.allSatisfy(Restore.restoredNames.contains)
        {
            try Restore.discardUnfinished(path, entries: entries)
            entries = []
        }
        guard entries.isEmpty else {
            throw BackupError(
                "\(path) is not empty (it holds \(entries.prefix(3).joined(separator: ", "))"
                    + (entries.count > 3 ? ", …" : "") + "); choose a missing or empty directory")
        }
        return lock
    }
}
