import RoostModel
import RoostStorage
import RoostTesting
import Testing

@testable import RoostEngine

/// Snapshots that hold index images (decision 0056), through the engine's
/// open: old-format snapshots still load, damaged files are refused or
/// recovered exactly, and images cut short are refused.
@Suite("Index image snapshots")
struct ImageSnapshotEngineTests {
    /// An engine on `fileSystem` with 2,000 devices over 300 people in two shards.
    /// (`registrations` beyond 2,000 re-register those devices, moving them between people.)
    static func populated(
        _ fileSystem: FaultInjectingFileSystem, segmentBytes: Int? = nil, registrations: Int = 2_000
    ) async throws -> DurableEngine {
        let (engine, _) = try DurableEngine.open(
            directory: "/data", policy: .never, shardCount: 2, options: options(fileSystem, segmentBytes: segmentBytes))
        for round in 0..<registrations {
            _ = try await register(engine.registry, try apnsToken(round % 2_000), person: "p\(round % 300)")
        }
        return engine
    }

    static func options(_ fileSystem: FaultInjectingFileSystem, segmentBytes: Int?) -> StorageOptions {
        var options = DurableEngineTests.options(fileSystem)
        if let segmentBytes { options.segmentBytesMax = segmentBytes }
        return options
    }

    /// Reopens `/data`.
    static func reopen(
        _ fileSystem: FaultInjectingFileSystem, segmentBytes: Int? = nil
    ) throws -> (DurableEngine, DurableEngine.RecoveryReport) {
        try DurableEngine.open(
            directory: "/data", policy: .never, shardCount: 2, options: options(fileSystem, segmentBytes: segmentBytes))
    }

    static func invariantViolations(_ engine: DurableEngine) async -> [String] {
        var problems: [String] = []
        for shard in engine.registry.shardSet.shards {
            for key in await shard.keys() { problems += await shard.read(key) { $0.invariantViolations() } ?? [] }
        }
        return problems
    }

    @Test("a snapshot of mutation records, as builds before index images wrote it, still loads; the next one is images")
    func mutationRecordSnapshotsStillLoad() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let engine = try await Self.populated(fileSystem)
        // The pre-0056 form, record for record: per index its size hint, settings and credentials,
        // change feed, people and devices in slices, sequence floor.
        let writer = try engine.log.wal.beginSnapshot(counts: SnapshotCounts(records: 2_300, groups: 2))
        for shard in engine.registry.shardSet.shards {
            for key in await shard.keys() {
                let size = await shard.read(key) { (devices: $0.count, people: $0.stats().people) }!
                try writer.append(
                    EngineRecord.indexSize(key, devices: UInt64(size.devices), people: UInt64(size.people)).encoded())
                for record in await shard.snapshotHeader(key) { try writer.append(record) }
                for slice in await shard.snapshotChangeFeed(key) {
                    try writer.append(EngineRecord.mutation(key, .changeFeed(slice)).encoded())
                }
                var personSlot: UInt32? = 0
                while let from = personSlot {
                    let slice = await shard.snapshotPeople(key, fromSlot: from)
                    for record in slice.records { try writer.append(record) }
                    personSlot = slice.next
                }
                var after: UInt64? = 0
                while let from = after {
                    let slice = await shard.snapshotDevices(key, afterSequence: from)
                    for record in slice.records { try writer.append(record) }
                    after = slice.next
                }
                for record in await shard.snapshotSequenceFloor(key) { try writer.append(record) }
            }
        }
        try engine.log.wal.checkpoint(try writer.finish())
        let before = await DurableEngineTests.state(engine)
        engine.close()

        let (reopened, report) = try Self.reopen(fileSystem)
        #expect(report.snapshotRecords > 2_300, "one record per person and device: the old form")
        #expect(await DurableEngineTests.state(reopened) == before)
        #expect(await Self.invariantViolations(reopened) == [])
        _ = try await register(reopened.registry, try apnsToken(9_999), person: "p1")
        let expected = await DurableEngineTests.state(reopened)
        let summary = try #require(try await reopened.snapshot())
        #expect(summary.recordCount < 100, "images: a few parts per index, not a record per device")
        reopened.close()
        let (again, _) = try Self.reopen(fileSystem)
        #expect(await DurableEngineTests.state(again) == expected)
        #expect(await Self.invariantViolations(again) == [])
        again.close()
    }

    /// Start-up on a damaged snapshot either refuses or (the log still
    /// holding every record, from LSN 1) recovers exactly `expected`: never
    /// other state. With `mustRefuse` (the log no longer starts at LSN 1) only a refusal will do.
    static func expectRefusedOrExact(
        _ fileSystem: FaultInjectingFileSystem, _ expected: [IndexKey: [Mutation]], mustRefuse: Bool,
        segmentBytes: Int, _ what: String
    ) async throws {
        let opened: DurableEngine
        do {
            (opened, _) = try Self.reopen(fileSystem, segmentBytes: segmentBytes)
        } catch {
            return
        }
        #expect(!mustRefuse, "\(what): started")
        #expect(await DurableEngineTests.state(opened) == expected, "\(what): started with other state")
        opened.close()
    }

    @Test(
        "a flipped bit or a cut anywhere in an image snapshot is refused, or recovered exactly from a whole log",
        arguments: [1_048_632, 2 << 20])
    func flippedBits(segmentBytes: Int) async throws {
        let fileSystem = FaultInjectingFileSystem()
        let mustRefuse = segmentBytes < 2 << 20
        let engine = try await Self.populated(
            fileSystem, segmentBytes: segmentBytes, registrations: mustRefuse ? 12_000 : 2_000)
        _ = try #require(try await engine.snapshot())
        if mustRefuse {
            // A second snapshot lets the first segments go: the log no longer starts at LSN 1 and cannot stand in.
            _ = try await register(engine.registry, try apnsToken(7_777), person: "p1")
            _ = try #require(try await engine.snapshot())
            #expect(try !fileSystem.list("/data/wal").contains("00000000000000000001.seg"))
        }
        let expected = await DurableEngineTests.state(engine)
        engine.close()
        let path = try #require(
            try fileSystem.list("/data/snapshots").filter { $0.hasSuffix(SnapshotFormat.fileExtension) }.max()
                .map { "/data/snapshots/" + $0 })
        if mustRefuse {
            // Nor the older snapshot the other checkpoint slot names (else recovery starts from it, exactly).
            for name in try fileSystem.list("/data/snapshots") where "/data/snapshots/" + name != path {
                try fileSystem.remove("/data/snapshots/" + name)
            }
        }
        let original = try #require(fileSystem.contents(path))
        var random = SeededRandom(seed: 2026)
        // Every byte of the header and trailer, and 100 random bits of the body.
        var positions = Array(0..<SnapshotFormat.headerBytes)
        positions += Array((original.count - SnapshotFormat.trailerBytes)..<original.count)
        let bodyBytes = UInt64(original.count - SnapshotFormat.headerBytes - SnapshotFormat.trailerBytes)
        for _ in 0..<100 { positions.append(SnapshotFormat.headerBytes + Int(random.next() % bodyBytes)) }
        for position in positions {
            var damaged = original
            damaged[position] ^= UInt8(1 << (random.next() % 8))
            fileSystem.overwrite(path, with: damaged)
            try await Self.expectRefusedOrExact(
                fileSystem, expected, mustRefuse: mustRefuse, segmentBytes: segmentBytes,
                "bit flipped at byte \(position)")
        }
        // Torn: the file cut anywhere.
        for length in [0, 10, SnapshotFormat.headerBytes, original.count / 2, original.count - 1] {
            fileSystem.overwrite(path, with: Array(original.prefix(length)))
            try await Self.expectRefusedOrExact(
                fileSystem, expected, mustRefuse: mustRefuse, segmentBytes: segmentBytes, "cut to \(length) bytes")
        }
        fileSystem.overwrite(path, with: original)
        let (restored, _) = try Self.reopen(fileSystem, segmentBytes: segmentBytes)
        #expect(await DurableEngineTests.state(restored) == expected)
        restored.close()
    }

    @Test("an index image part in the log, or an image with no end part, stops recovery")
    func misplacedParts() throws {
        var table = IndexTable()
        let header: [UInt8] = [1]
        #expect(throws: ReplayError.self) { try table.replay(.indexImage(liveKey, header), lsn: 7) }
        var index = AppIndex(appID: liveKey.app, mode: liveKey.mode)
        var view = index.freezeForSnapshot(pin: SnapshotPin()).imageEncoder()
        let first = view.nextPart(prefix: []) ?? []
        try table.replay(.indexImage(liveKey, first))
        #expect(table.unfinishedImages == [liveKey])
    }
}
