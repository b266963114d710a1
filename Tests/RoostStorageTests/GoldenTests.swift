import Glibc
import RoostPlatform
import RoostTesting
import Testing

@testable import RoostStorage

/// The example bytes of docs/storage.md live in Tests/RoostStorageTests/Golden
/// as hex dumps; these tests decode them to the documented values, so the
/// document and the code cannot drift apart. Set ROOST_WRITE_GOLDEN=1 to
/// regenerate them (then update the document).
@Suite("Golden examples from docs/storage.md")
struct GoldenTests {
    static let directory: String = {
        let file = #filePath
        return String(file[..<file.lastIndex(of: "/")!]) + "/Golden"
    }()

    static func hexDump(_ bytes: [UInt8]) -> String {
        stride(from: 0, to: bytes.count, by: 16).map { start in
            let offset = String(start, radix: 16)
            let row = bytes[start..<min(start + 16, bytes.count)].map { WALTool.hex($0) }
            let left = row.prefix(8).joined(separator: " ")
            let right = row.dropFirst(8).joined(separator: " ")
            return String(repeating: "0", count: 8 - offset.count) + offset + "  " + left
                + (right.isEmpty ? "" : "  " + right)
        }.joined(separator: "\n") + "\n"
    }

    static func parseHex(_ text: String) -> [UInt8] {
        var bytes: [UInt8] = []
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            for token in line.split(separator: " ").dropFirst() {
                guard token.count == 2, let byte = UInt8(token, radix: 16) else { break }
                bytes.append(byte)
            }
        }
        return bytes
    }

    static func load(_ name: String) throws -> [UInt8] {
        let bytes = try #require(try PosixFileSystem().readWhole(directory + "/" + name, limitBytes: 1 << 20))
        return parseHex(String(decoding: bytes, as: UTF8.self))
    }

    static func exampleSegment() -> [UInt8] {
        var bytes = SegmentFormat.encodeHeader(firstLSN: 1, segmentBytes: 120)
        SegmentFormat.appendRecord(kind: .mutation, lsn: 1, payload: Array("hello".utf8), to: &bytes)
        SegmentFormat.appendRecord(kind: .mutation, lsn: 2, payload: Array(0..<16), to: &bytes)
        bytes.append(contentsOf: repeatElement(0, count: 16))
        return bytes
    }

    /// The same segment as an older release wrote it (version 1, no size in the header).
    static func exampleVersion1Segment() -> [UInt8] {
        var bytes = exampleSegment()
        bytes.replaceSubrange(0..<32, with: SegmentFormat.encodeVersion1Header(firstLSN: 1))
        return bytes
    }

    static func exampleLogEndSlot() -> [UInt8] {
        LogEndFormat.encode(LogEnd(sequence: 7, endLSN: 4711, openSegment: 4097, cleanShutdown: true))
    }

    static func exampleCheckpoint() -> [UInt8] {
        CheckpointFormat.encode(
            Checkpoint(sequence: 3, snapshotLSN: 42, snapshotBytes: 137, snapshotChecksum: 0x1234_5678))
    }

    static func exampleSnapshot() throws -> [UInt8] {
        let fileSystem = FaultInjectingFileSystem()
        try fileSystem.createDirectory("/s")
        let writer = try SnapshotWriter(
            fileSystem: fileSystem, directory: "/s", startLSN: 42, counts: SnapshotCounts(records: 2, groups: 1))
        try writer.append(Array("alpha".utf8))
        try writer.append(Array("beta".utf8))
        let summary = try writer.finish()
        return try #require(fileSystem.contents(summary.path))
    }

    @Test("regenerate golden files when ROOST_WRITE_GOLDEN=1", .enabled(if: getenv("ROOST_WRITE_GOLDEN") != nil))
    func regenerate() throws {
        let files = [
            ("segment.hex", Self.exampleSegment()), ("segment-v1.hex", Self.exampleVersion1Segment()),
            ("log-end-slot.hex", Self.exampleLogEndSlot()), ("checkpoint.hex", Self.exampleCheckpoint()),
            ("snapshot.hex", try Self.exampleSnapshot()),
        ]
        for (name, bytes) in files {
            let fd = open(Self.directory + "/" + name, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            try DurableFile.writeAll(fd: fd, bytes: Array(Self.hexDump(bytes).utf8), subject: name)
            close(fd)
        }
    }

    @Test("the example segment decodes to header LSN 1 and records 'hello' and 00…0f, then zero space")
    func segment() throws {
        let bytes = try Self.load("segment.hex")
        #expect(bytes == Self.exampleSegment())
        var records: [LogRecord] = []
        let scan = SegmentFormat.scan(
            bytes: bytes, path: "segment.hex", fileName: "00000000000000000001.seg", payloadBytesMax: 64
        ) { records.append($0) }
        #expect(scan.header == .valid(firstLSN: 1))
        #expect(scan.end == .clean)
        #expect(scan.endOffset == 32 + 32 + 40)
        #expect(
            records == [
                LogRecord(lsn: 1, kind: .mutation, payload: Array("hello".utf8)),
                LogRecord(lsn: 2, kind: .mutation, payload: Array(0..<16)),
            ])
        #expect(scan.version == 2)
        #expect(scan.declaredBytes == 120)
        #expect(scan.sizeDamage == nil)
        #expect(Bytes.read(UInt32.self, bytes, at: 48) == 0x45DD_B3CE)
        #expect(Bytes.read(UInt32.self, bytes, at: 80) == 0x6B58_77FB)
    }

    @Test("an older release's segment (version 1, header CRC 6cc91ce5) still decodes to the same records")
    func version1Segment() throws {
        let bytes = try Self.load("segment-v1.hex")
        #expect(bytes == Self.exampleVersion1Segment())
        var records: [LogRecord] = []
        let scan = SegmentFormat.scan(
            bytes: bytes, path: "segment-v1.hex", fileName: "00000000000000000001.seg", payloadBytesMax: 64
        ) { records.append($0) }
        #expect(scan.header == .valid(firstLSN: 1))
        #expect(scan.version == 1)
        #expect(scan.declaredBytes == nil)
        #expect(scan.sizeDamage == nil)
        #expect(scan.end == .clean)
        #expect(records.map(\.payload) == [Array("hello".utf8), Array(0..<16)])
        #expect(Bytes.read(UInt32.self, bytes, at: 24) == 0x6CC9_1CE5)
    }

    @Test("the example log-end slot decodes to sequence 7, end LSN 4711, open segment 4097, clean shutdown")
    func logEndSlot() throws {
        let slot = try Self.load("log-end-slot.hex")
        #expect(slot == Self.exampleLogEndSlot())
        var file = [UInt8](repeating: 0, count: LogEndFormat.fileBytes)
        file.replaceSubrange(4096..<(4096 + slot.count), with: slot)
        #expect(
            LogEndFormat.decode(file, path: "log-end")
                == .valid(
                    LogEnd(sequence: 7, endLSN: 4711, openSegment: 4097, cleanShutdown: true), path: "log-end",
                    tornSlot: nil))
    }

    @Test("the example checkpoint slot decodes to sequence 3, snapshot LSN 42, 137 bytes, checksum 12345678")
    func checkpoint() throws {
        let bytes = try Self.load("checkpoint.hex")
        #expect(
            CheckpointFormat.decode(bytes, path: "checkpoint.hex")
                == .valid(Checkpoint(sequence: 3, snapshotLSN: 42, snapshotBytes: 137, snapshotChecksum: 0x1234_5678)))
    }

    @Test("the example snapshot decodes to start LSN 42, counts 2 and 1, records 'alpha' and 'beta'")
    func snapshot() throws {
        let bytes = try Self.load("snapshot.hex")
        let fileSystem = FaultInjectingFileSystem()
        fileSystem.overwrite("/golden.snap", with: bytes)
        let reader = try SnapshotReader(fileSystem: fileSystem, path: "/golden.snap")
        #expect(reader.startLSN == 42)
        #expect(reader.counts == SnapshotCounts(records: 2, groups: 1))
        #expect(try reader.next() == Array("alpha".utf8))
        #expect(try reader.next() == Array("beta".utf8))
        #expect(try reader.next() == nil)
    }
}
