import Glibc
import RoostPlatform

/// The paths of one storage directory (docs/storage.md, "Files").
package struct StorageLayout: Sendable {
    package let directory: String
    package let fileSystem: any StorageFileSystem

    package init(directory: String, fileSystem: any StorageFileSystem) {
        self.directory = directory
        self.fileSystem = fileSystem
    }

    /// Returns the directory that holds `path` ("." for a bare name).
    package static func parent(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "." }
        return slash == trimmed.startIndex ? "/" : String(trimmed[..<slash])
    }

    package var walDirectory: String { fileSystem.join(directory, SegmentFormat.directoryName) }
    package var snapshotDirectory: String { fileSystem.join(directory, SnapshotFormat.directoryName) }

    package func checkpointPath(slot: Int) -> String {
        fileSystem.join(directory, CheckpointFormat.slotNames[slot])
    }

    package func segmentPath(_ fileName: String) -> String { fileSystem.join(walDirectory, fileName) }

    /// The `log-end` file: the durable end of the log, known outside its tail.
    package var logEndPath: String { fileSystem.join(directory, LogEndFormat.fileName) }

    package func snapshotPath(_ startLSN: LogSequenceNumber) -> String {
        fileSystem.join(snapshotDirectory, SnapshotFormat.fileName(startLSN: startLSN))
    }

    /// Returns the segment file names, sorted (so by first LSN); none when
    /// `wal/` is missing, as start-up sees it (it creates the directory
    /// before reading), so that `roost wal verify` decides as start-up does.
    package func segmentNames() throws(StorageError) -> [String] {
        try namesIfPresent(walDirectory).filter { SegmentFormat.firstLSN(fileName: $0) != nil }.sorted()
    }

    /// Returns the names in `snapshots/`; none when it is missing, as
    /// start-up sees it (it creates the directory before reading): every
    /// checkpoint's snapshot is then missing, and recovery falls back to the
    /// log from LSN 1 or refuses.
    package func snapshotDirectoryNames() throws(StorageError) -> [String] {
        try namesIfPresent(snapshotDirectory)
    }

    /// Returns the names in `directory`, or none when it does not exist.
    private func namesIfPresent(_ directory: String) throws(StorageError) -> [String] {
        do {
            return try fileSystem.list(directory)
        } catch {
            if error.errno == ENOENT { return [] }
            throw .io(error)
        }
    }

    /// Reads and scans one segment.
    package func scanSegment(
        _ fileName: String, options: StorageOptions, record: (LogRecord) -> Void = { _ in }
    ) throws(StorageError) -> SegmentScan {
        var buffer: [UInt8] = []
        return try scanSegment(fileName, options: options, buffer: &buffer, reportsRecords: true, record: record)
    }

    /// Reads one segment into the reused `buffer` and scans it; records are
    /// handed to `record` (copied out) only when `reportsRecords`.
    func scanSegment(
        _ fileName: String, options: StorageOptions, buffer: inout [UInt8], reportsRecords: Bool = false,
        record: (LogRecord) -> Void = { _ in }
    ) throws(StorageError) -> SegmentScan {
        let path = segmentPath(fileName)
        do {
            if !(try fileSystem.readWhole(path, limitBytes: options.segmentReadBytesMax, into: &buffer)) {
                buffer.removeAll(keepingCapacity: true)
            }
        } catch { throw .io(error) }
        return SegmentFormat.scan(
            bytes: buffer, path: path, fileName: fileName, payloadBytesMax: options.recordPayloadBytesMax,
            reportsRecords: reportsRecords, record)
    }

    /// Reads only the header of one segment; when it is not valid, reads and
    /// scans the whole segment (so the header state is exactly `scan`'s).
    func scanSegmentHeader(
        _ fileName: String, options: StorageOptions, buffer: inout [UInt8]
    ) throws(StorageError) -> SegmentScan {
        let path = segmentPath(fileName)
        let fileBytes: Int
        do {
            let file = try fileSystem.open(path, create: false)
            defer { file.close() }
            fileBytes = try file.size()
            try file.read(at: 0, count: SegmentFormat.headerBytes, into: &buffer)
        } catch { throw .io(error) }
        let header = SegmentFormat.decodeHeader(bytes: buffer, path: path)
        guard case .valid(let first) = header, SegmentFormat.firstLSN(fileName: fileName) == first else {
            return try scanSegment(fileName, options: options, buffer: &buffer)
        }
        let declared = SegmentFormat.declaredBytes(header: buffer)
        var scan = SegmentScan(
            path: path, fileName: fileName, fileBytes: fileBytes, header: header, recordCount: 0,
            endOffset: SegmentFormat.headerBytes, end: .clean, recordsSkipped: true)
        scan.version = Bytes.read(UInt32.self, buffer, at: 8)
        scan.declaredBytes = declared
        scan.sizeDamage = SegmentFormat.sizeDamage(path: path, fileBytes: fileBytes, declaredBytes: declared)
        return scan
    }

    /// Reads everything recovery decides on: both checkpoint slots, the
    /// snapshots they name (whole-file CRC), and every segment. O(data).
    /// `roost wal verify` uses this: every segment is read whole.
    package func readRecoveryInput(options: StorageOptions) throws(StorageError) -> RecoveryInput {
        try readRecoveryInput(options: options, forStartUp: false).input
    }

    /// What start-up reads (docs/recovery.md, "Order"): as `readRecoveryInput`,
    /// except that a segment wholly below the newest usable snapshot's start
    /// LSN (the next segment's first LSN is at most that LSN, and the next
    /// segment's header is valid) has only its header read: recovery starts at
    /// that snapshot or refuses, and never reads those records. Segments at or
    /// after the start keep their checked bytes (up to `retainedBytesMax` in
    /// all) for replay, so that replay need not read them again.
    package func readRecoveryInput(
        options: StorageOptions, forStartUp: Bool
    ) throws(StorageError) -> (input: RecoveryInput, retained: [String: RetainedSegment]) {
        var checkpoints: [CheckpointRead] = []
        for slot in CheckpointFormat.slotNames.indices {
            let path = checkpointPath(slot: slot)
            do {
                checkpoints.append(
                    CheckpointFormat.decode(try fileSystem.readWhole(path, limitBytes: 4096), path: path))
            } catch {
                if error.errno == EFBIG {
                    checkpoints.append(.damaged(Damage(file: path, offset: 4096, reason: "checkpoint slot too large")))
                } else {
                    throw .io(error)
                }
            }
        }
        let logEnd: LogEndRead
        do {
            logEnd = LogEndFormat.decode(try fileSystem.readWhole(logEndPath, limitBytes: 1 << 16), path: logEndPath)
        } catch {
            guard error.errno == EFBIG else { throw .io(error) }
            logEnd = .damaged(Damage(file: logEndPath, offset: 1 << 16, reason: "log-end file too large"))
        }
        let snapshotNames = Set(try snapshotDirectoryNames())
        var snapshots: [LogSequenceNumber: SnapshotCheck] = [:]
        for case .valid(let checkpoint) in checkpoints {
            let path = snapshotPath(checkpoint.snapshotLSN)
            guard snapshotNames.contains(SnapshotFormat.fileName(startLSN: checkpoint.snapshotLSN)) else {
                snapshots[checkpoint.snapshotLSN] = .missing(path: path)
                continue
            }
            do {
                snapshots[checkpoint.snapshotLSN] = .valid(
                    try SnapshotReader.verify(fileSystem: fileSystem, path: path))
            } catch {
                guard case .damaged(let damage) = error else { throw error }
                snapshots[checkpoint.snapshotLSN] = .damaged(damage)
            }
        }
        // The start recovery will take if the log allows it: the newest valid
        // checkpoint whose snapshot is usable (decideRecovery's first choice;
        // when the log fails from there it refuses rather than go older).
        var startLSN: LogSequenceNumber?
        if forStartUp {
            var valid: [Checkpoint] = []
            for case .valid(let checkpoint) in checkpoints { valid.append(checkpoint) }
            startLSN =
                valid.sorted { $0.sequence > $1.sequence }
                .first { snapshotProblem($0, snapshots[$0.snapshotLSN]) == nil }?.snapshotLSN
        }
        let names = try segmentNames()
        var segments: [SegmentScan] = []
        segments.reserveCapacity(names.count)
        var retained: [String: RetainedSegment] = [:]
        var retainedBytes = 0
        var buffer: [UInt8] = []
        var next: SegmentScan?
        // Newest first, so that each segment's successor is known when deciding.
        for name in names.reversed() {
            let scan: SegmentScan
            if let startLSN, let next, case .valid(let nextFirst) = next.header, nextFirst <= startLSN {
                scan = try scanSegmentHeader(name, options: options, buffer: &buffer)
            } else {
                scan = try scanSegment(name, options: options, buffer: &buffer)
                if forStartUp, scan.recordCount > 0, let last = scan.lastLSN, last >= (startLSN ?? .first),
                    retainedBytes + scan.endOffset <= Self.retainedBytesMax
                {
                    retained[name] = RetainedSegment(
                        bytes: Array(buffer[0..<scan.endOffset]), recordCount: scan.recordCount)
                    retainedBytes += scan.endOffset
                }
            }
            segments.append(scan)
            next = scan
        }
        segments.reverse()
        return (
            RecoveryInput(checkpoints: checkpoints, snapshots: snapshots, segments: segments, logEnd: logEnd), retained
        )
    }

    /// The most segment bytes start-up keeps for replay; segments beyond it are read again.
    static let retainedBytesMax = 1 << 30
}

/// A segment's bytes up to the end of its last whole record, as start-up
/// checked them, kept for replay.
package struct RetainedSegment {
    var bytes: [UInt8]
    var recordCount: Int
}

/// What recovery hands the engine: the snapshot to load (or none: start
/// empty), then the log records after it, in LSN order.
package final class RecoveredState {
    /// The snapshot to load first, or nil to start from an empty state.
    package let snapshot: SnapshotReader?
    /// The first LSN `replay` yields (the snapshot's start LSN, or 1).
    package let replayFrom: LogSequenceNumber
    /// The LSN the next append gets.
    package let nextLSN: LogSequenceNumber
    /// What recovery did (torn tail cut, fallback to an older snapshot, …), one line each.
    package let notes: [String]
    let layout: StorageLayout
    let replaySegments: [(fileName: String, lastLSN: LogSequenceNumber)]
    let options: StorageOptions
    /// Segment bytes start-up already read and checked, by file name.
    var retained: [String: RetainedSegment]

    package init(
        snapshot: SnapshotReader?, plan: RecoveryPlan, layout: StorageLayout, options: StorageOptions,
        retained: [String: RetainedSegment] = [:]
    ) {
        self.retained = retained.filter { name, _ in plan.replay.contains { $0.fileName == name } }
        self.snapshot = snapshot
        self.replayFrom = plan.replayFrom
        self.nextLSN = plan.nextLSN
        self.notes = plan.notes
        self.layout = layout
        self.replaySegments = plan.replay
        self.options = options
    }

    /// Calls `body` for every log record from `replayFrom` on, in order: from
    /// the bytes start-up kept, else re-reading the segment (one at a time).
    /// Kept bytes are released as they are replayed.
    package func replay(_ body: (LogRecord) -> Void) throws(StorageError) {
        var expected = replayFrom
        for (fileName, lastLSN) in replaySegments {
            if let kept = retained.removeValue(forKey: fileName) {
                SegmentFormat.forEachCheckedRecord(in: kept.bytes, recordCount: kept.recordCount) { record in
                    guard record.lsn >= expected, record.lsn <= lastLSN else { return }
                    expected = record.lsn.advanced(by: 1)
                    body(record)
                }
                continue
            }
            let scan = try layout.scanSegment(fileName, options: options) { record in
                guard record.lsn >= expected, record.lsn <= lastLSN else { return }
                expected = record.lsn.advanced(by: 1)
                body(record)
            }
            guard let scanned = scan.lastLSN, scanned >= lastLSN else {
                throw .damaged(
                    Damage(file: scan.path, offset: scan.endOffset, reason: "segment changed during recovery"))
            }
        }
    }
}
