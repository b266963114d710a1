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

    package func snapshotPath(_ startLSN: LogSequenceNumber) -> String {
        fileSystem.join(snapshotDirectory, SnapshotFormat.fileName(startLSN: startLSN))
    }

    /// Returns the segment file names, sorted (so by first LSN).
    package func segmentNames() throws(StorageError) -> [String] {
        do {
            return try fileSystem.list(walDirectory).filter { SegmentFormat.firstLSN(fileName: $0) != nil }.sorted()
        } catch { throw .io(error) }
    }

    /// Reads and scans one segment.
    package func scanSegment(
        _ fileName: String, options: StorageOptions, record: (LogRecord) -> Void = { _ in }
    ) throws(StorageError) -> SegmentScan {
        let path = segmentPath(fileName)
        let bytes: [UInt8]
        do {
            bytes = try fileSystem.readWhole(path, limitBytes: options.segmentReadBytesMax) ?? []
        } catch { throw .io(error) }
        return SegmentFormat.scan(
            bytes: bytes, path: path, fileName: fileName, payloadBytesMax: options.recordPayloadBytesMax,
            record: record)
    }

    /// Reads everything recovery decides on: both checkpoint slots, the
    /// snapshots they name (whole-file CRC), and every segment. O(data).
    package func readRecoveryInput(options: StorageOptions) throws(StorageError) -> RecoveryInput {
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
        let snapshotNames: Set<String>
        do { snapshotNames = Set(try fileSystem.list(snapshotDirectory)) } catch { throw .io(error) }
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
        var segments: [SegmentScan] = []
        for name in try segmentNames() {
            segments.append(try scanSegment(name, options: options))
        }
        return RecoveryInput(checkpoints: checkpoints, snapshots: snapshots, segments: segments)
    }
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

    init(
        snapshot: SnapshotReader?, plan: RecoveryPlan, layout: StorageLayout, options: StorageOptions
    ) {
        self.snapshot = snapshot
        self.replayFrom = plan.replayFrom
        self.nextLSN = plan.nextLSN
        self.notes = plan.notes
        self.layout = layout
        self.replaySegments = plan.replay
        self.options = options
    }

    /// Calls `body` for every log record from `replayFrom` on, in order,
    /// re-reading the segments one at a time (O(one segment) memory).
    package func replay(_ body: (LogRecord) -> Void) throws(StorageError) {
        var expected = replayFrom
        for (fileName, lastLSN) in replaySegments {
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
