import Glibc
import RoostModel
import RoostStorage
import RoostTelemetry
import RoostTesting
import Testing

@testable import RoostEngine

/// `roost wal verify` and start-up decide alike (issue 24, L-6): verify
/// replays what start-up replays (`DurableEngine.verify`), so a snapshot
/// whose checksums hold but whose index image does not load is refused by
/// both, and a directory start-up recovers (its `snapshots/` missing, the
/// log from LSN 1 still there) is accepted by both. Real files, and the
/// built `roost` binary for the command's exit status.
@Suite("wal verify agrees with start-up", .serialized)
struct VerifyAgreesWithStartUpTests {
    /// Storage options on the real file system, quiet.
    static var options: StorageOptions {
        var options = StorageOptions()
        options.logger = Logger(output: .memory)
        return options
    }

    /// Opens an engine on `directory`, registers 40 devices and takes a snapshot; returns it open.
    static func populated(_ directory: String) async throws -> DurableEngine {
        let (engine, _) = try DurableEngine.open(directory: directory, policy: .never, shardCount: 2, options: options)
        for number in 0..<40 {
            _ = try await register(engine.registry, try apnsToken(number), person: "p\(number % 7)")
        }
        _ = try #require(try await engine.snapshot())
        return engine
    }

    /// Runs `roost wal verify directory`; returns its exit status and output.
    static func walVerify(_ directory: String) -> (code: Int32, output: String) {
        let out = directory + ".verify.out"
        let status = system("'\(RoostProcess.builtProduct("roost"))' wal verify '\(directory)' > '\(out)' 2>&1")
        let text = (try? PosixFileSystem().readWhole(out, limitBytes: 1 << 20)).map {
            String(decoding: $0, as: UTF8.self)
        }
        unlink(out)
        return ((status >> 8) & 0xFF, text ?? "")
    }

    /// The records of the newest snapshot in `directory`, in order.
    static func newestSnapshotRecords(_ directory: String) throws -> [[UInt8]] {
        let names = try PosixFileSystem().list(directory + "/snapshots").filter {
            $0.hasSuffix(SnapshotFormat.fileExtension)
        }
        let name = try #require(names.max())
        let reader = try SnapshotReader(fileSystem: PosixFileSystem(), path: directory + "/snapshots/" + name)
        var records: [[UInt8]] = []
        while let record = try reader.next() { records.append(record) }
        return records
    }

    /// Whether `record` is an index image part.
    static func isImagePart(_ record: [UInt8]) -> Bool {
        record.withUnsafeBytes { EngineRecord.framedImagePart(in: $0) != nil }
    }

    @Test(
        "a CRC-valid snapshot whose index image is a part short, or has a part twice: start-up refuses and so does wal verify (exit 2)",
        arguments: ["end part dropped", "first part twice"])
    func inconsistentImageIsRefusedByBoth(damage: String) async throws {
        let root = try TemporaryDirectory.make(prefix: "roost-verify")
        defer { TemporaryDirectory.remove(root) }
        let directory = root + "/data"
        let engine = try await Self.populated(directory)
        var records = try Self.newestSnapshotRecords(directory)
        let parts = records.indices.filter { Self.isImagePart(records[$0]) }
        try #require(parts.count >= 2, "the snapshot holds index images of more than one part")
        switch damage {
        case "end part dropped": records.remove(at: try #require(parts.last))
        default: records.insert(records[parts[0]], at: parts[0] + 1)
        }
        // Written through the log's own snapshot writer: every checksum and
        // the checkpoint are right, only the image inside is wrong.
        _ = try await register(engine.registry, try apnsToken(999), person: "p1")
        let writer = try engine.log.wal.beginSnapshot(
            counts: SnapshotCounts(records: UInt64(records.count), groups: 2))
        for record in records { try writer.append(record) }
        try engine.log.wal.checkpoint(try writer.finish())
        engine.close()

        #expect(throws: (any Error).self, "\(damage): start-up") {
            let (opened, _) = try DurableEngine.open(
                directory: directory, policy: .never, shardCount: 2, options: Self.options)
            opened.close()
        }
        let report = try DurableEngine.verify(directory: directory, options: Self.options)
        #expect(report.verdict == .unrecoverable, "\(damage): \(report.lines)")
        #expect(report.lines.last?.hasPrefix("recovery would refuse to start:") == true, "\(report.lines)")
        let command = Self.walVerify(directory)
        #expect(command.code == 2, "\(damage): \(command.output)")
        #expect(command.output.contains("recovery would refuse to start"), "\(command.output)")
    }

    @Test("snapshots/ removed while the log still starts at LSN 1: start-up replays the log, and wal verify accepts")
    func missingSnapshotDirectoryIsAcceptedByBoth() async throws {
        let root = try TemporaryDirectory.make(prefix: "roost-verify")
        defer { TemporaryDirectory.remove(root) }
        let directory = root + "/data"
        let engine = try await Self.populated(directory)
        let expected = await DurableEngineTests.state(engine)
        engine.close()
        #expect(system("rm -r '\(directory)/snapshots'") == 0)

        let report = try DurableEngine.verify(directory: directory, options: Self.options)
        #expect(report.verdict == .recoverable, "\(report.lines)")
        #expect(report.lines.contains { $0.hasPrefix("recovery would start from an empty state") }, "\(report.lines)")
        let command = Self.walVerify(directory)
        #expect(command.code == 1, "\(command.output)")
        var info = stat()
        #expect(lstat(directory + "/snapshots", &info) != 0, "verify changed the directory")

        let (opened, _) = try DurableEngine.open(
            directory: directory, policy: .never, shardCount: 2, options: Self.options)
        #expect(await DurableEngineTests.state(opened) == expected)
        opened.close()
    }

    @Test("catalog records that leave a key without its app: start-up refuses and so does wal verify (exit 2)")
    func incompleteCatalogIsRefusedByBoth() async throws {
        let root = try TemporaryDirectory.make(prefix: "roost-verify")
        defer { TemporaryDirectory.remove(root) }
        let directory = root + "/data"
        let engine = try await Self.populated(directory)
        // A key of an app the log never created: what a lost catalog record leaves (past the rules, as damage).
        let orphan = KeyRecord(
            id: "key_00000000000000aa", appID: AppID(77), kind: .secret, mode: .live, capabilities: [],
            label: "", createdAtMilliseconds: 1, rateLimitPerSecond: nil,
            digest: try #require(KeyDigest(bytes: [UInt8](repeating: 0xAB, count: 32))))
        _ = try engine.catalog.importRecords([.key(orphan)])
        _ = try engine.log.wal.sync()
        engine.close()

        #expect(throws: CatalogRecoveryError.self, "start-up") {
            let (opened, _) = try DurableEngine.open(
                directory: directory, policy: .never, shardCount: 2, options: Self.options)
            opened.close()
        }
        let report = try DurableEngine.verify(directory: directory, options: Self.options)
        #expect(report.verdict == .unrecoverable, "\(report.lines)")
        #expect(report.lines.last?.contains("which the log never created") == true, "\(report.lines)")
        let command = Self.walVerify(directory)
        #expect(command.code == 2, "\(command.output)")
    }
}
