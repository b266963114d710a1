import Glibc
import RoostPlatform
import RoostTesting
import Synchronization
import Testing

@testable import RoostStorage

/// Forwards to a fault-injecting file system and counts whole-file reads per path.
final class ReadCountingFileSystem: StorageFileSystem {
    let inner: FaultInjectingFileSystem
    let wholeReads = Mutex<[String: Int]>([:])

    init(_ inner: FaultInjectingFileSystem) { self.inner = inner }

    func reads(_ path: String) -> Int { wholeReads.withLock { $0[path] ?? 0 } }

    func open(_ path: String, create: Bool) throws(SystemCallError) -> any StorageFile {
        try inner.open(path, create: create)
    }
    func readWhole(_ path: String, limitBytes: Int) throws(SystemCallError) -> [UInt8]? {
        wholeReads.withLock { $0[path, default: 0] += 1 }
        return try inner.readWhole(path, limitBytes: limitBytes)
    }
    func list(_ directory: String) throws(SystemCallError) -> [String] { try inner.list(directory) }
    func createDirectory(_ directory: String) throws(SystemCallError) { try inner.createDirectory(directory) }
    func rename(_ source: String, to destination: String) throws(SystemCallError) {
        try inner.rename(source, to: destination)
    }
    func remove(_ path: String) throws(SystemCallError) { try inner.remove(path) }
    func syncDirectory(_ directory: String) throws(SystemCallError) { try inner.syncDirectory(directory) }
}

@Suite("Recovery reads (what start-up reads, and how often)")
struct RecoveryReadTests {
    /// Writes LSN 1...20 (one byte each, several segments), a snapshot at LSN
    /// 21 (the first checkpoint keeps the log from LSN 1), then LSN 21...25.
    static func populate(_ options: StorageOptions) async throws {
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        try await SnapshotTests.fill(log, 20)
        let summary = try SnapshotTests.snapshot(log, [[7], [8]])
        #expect(summary.startLSN == 21)
        try await SnapshotTests.fill(log, 5, from: 20)
        log.close()
    }

    /// Flips a byte in the first record's payload of the segment starting at LSN 1.
    static func damageFirstSegment(_ fileSystem: FaultInjectingFileSystem) throws -> (path: String, offset: Int) {
        let path = segmentPath(1)
        var bytes = try #require(fileSystem.contents(path))
        bytes[SegmentFormat.headerBytes + SegmentFormat.recordHeaderBytes] ^= 0xFF
        fileSystem.overwrite(path, with: bytes)
        return (path, SegmentFormat.headerBytes)
    }

    @Test("start-up reads each segment it replays once, and only the header of a segment wholly below the snapshot")
    func readsOnce() async throws {
        let faults = FaultInjectingFileSystem()
        let fileSystem = ReadCountingFileSystem(faults)
        let options = testOptions(fileSystem, segmentBytesMax: 256, payloadBytesMax: 64)
        try await Self.populate(options)
        let segments = try faults.list(dataDirectory + "/wal")
        #expect(segments.count >= 3)
        fileSystem.wholeReads.withLock { $0 = [:] }
        let read = try reopenAndRead(options)
        #expect(read.snapshot == [[7], [8]])
        #expect(read.log.map(\.lsn.rawValue) == Array(21...25))
        #expect(read.log.map(\.payload) == (20..<25).map { [UInt8($0)] })
        #expect(fileSystem.reads(segmentPath(1)) == 0, "wholly below the snapshot: header only")
        let replayed = segments.filter { (SegmentFormat.firstLSN(fileName: $0)?.rawValue ?? 0) >= 21 }
        for name in replayed {
            #expect(fileSystem.reads(dataDirectory + "/wal/" + name) == 1, "\(name)")
        }
    }

    @Test("damage in a segment wholly below the newest valid snapshot: start-up is not affected, verify reports it")
    func damagedOldSegment() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 256, payloadBytesMax: 64)
        try await Self.populate(options)
        let damage = try Self.damageFirstSegment(fileSystem)
        let read = try reopenAndRead(options)
        #expect(read.snapshot == [[7], [8]])
        #expect(read.log.map(\.lsn.rawValue) == Array(21...25))
        let report = try WALTool.verify(directory: dataDirectory, options: options)
        #expect(report.exitCode == 1)
        #expect(report.damages.contains { $0.file == damage.path && $0.offset == damage.offset })
    }

    @Test("a damaged newest snapshot makes start-up read the older segments: clean, they are replayed from LSN 1")
    func fallbackReadsOldSegments() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 256, payloadBytesMax: 64)
        try await Self.populate(options)
        let snapshot = dataDirectory + "/snapshots/" + SnapshotFormat.fileName(startLSN: 21)
        var bytes = try #require(fileSystem.contents(snapshot))
        bytes[bytes.count / 2] ^= 0x01
        fileSystem.overwrite(snapshot, with: bytes)
        let read = try reopenAndRead(options)
        #expect(read.snapshot.isEmpty)
        #expect(read.log.map(\.lsn.rawValue) == Array(1...25))
        #expect(read.log.map(\.payload) == (0..<25).map { [UInt8($0)] })
    }

    @Test("a damaged newest snapshot and a damaged old segment: start-up refuses (the fallback needs that segment)")
    func fallbackWithDamagedOldSegment() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 256, payloadBytesMax: 64)
        try await Self.populate(options)
        let snapshot = dataDirectory + "/snapshots/" + SnapshotFormat.fileName(startLSN: 21)
        var bytes = try #require(fileSystem.contents(snapshot))
        bytes[bytes.count / 2] ^= 0x01
        fileSystem.overwrite(snapshot, with: bytes)
        _ = try Self.damageFirstSegment(fileSystem)
        #expect(throws: StorageError.self) { _ = try reopenAndRead(options) }
        #expect(try WALTool.verify(directory: dataDirectory, options: options).exitCode == 2)
    }

    @Test("a damaged header in a segment wholly below the snapshot is still refused (its header is read)")
    func damagedOldHeader() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 256, payloadBytesMax: 64)
        try await Self.populate(options)
        let path = segmentPath(1)
        var bytes = try #require(fileSystem.contents(path))
        bytes[0] ^= 0xFF
        fileSystem.overwrite(path, with: bytes)
        let error = #expect(throws: StorageError.self) { _ = try reopenAndRead(options) }
        guard case .damaged(let damage) = error else {
            Issue.record("expected damage, got \(String(describing: error))")
            return
        }
        #expect(damage.file == path)
        #expect(try WALTool.verify(directory: dataDirectory, options: options).exitCode == 2)
    }

    @Test("start-up and verify see the same decision on every single-byte damage of the first segment")
    func sameDecisionAsFullRead() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 256, payloadBytesMax: 64)
        try await Self.populate(options)
        let path = segmentPath(1)
        let original = try #require(fileSystem.contents(path))
        let layout = StorageLayout(directory: dataDirectory, fileSystem: fileSystem)
        for offset in 0..<original.count {
            var bytes = original
            bytes[offset] ^= 0x5A
            fileSystem.overwrite(path, with: bytes)
            let full = decideRecovery(try layout.readRecoveryInput(options: options))
            let startUp = decideRecovery(try layout.readRecoveryInput(options: options, forStartUp: true).input)
            #expect(full == startUp, "offset \(offset)")
        }
    }
}
