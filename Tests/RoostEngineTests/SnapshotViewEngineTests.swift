import Glibc
import RoostModel
import RoostStorage
import RoostTesting
import Synchronization
import Testing

@testable import RoostEngine

/// Snapshots encoded from frozen views on the snapshot thread (decision 0054).
@Suite("Snapshots from frozen views")
struct SnapshotViewEngineTests {
    @Test(
        "a snapshot taken while writers change the index restores exactly, from views and past the pinned limit",
        arguments: [0, Limits.snapshotPinnedBytesMax])
    func snapshotWhileWriting(pinnedBytesMax: Int) async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = DurableEngineTests.options(fileSystem)
        let (engine, _) = try DurableEngine.open(directory: "/data", policy: .never, shardCount: 2, options: options)
        for seed in 0..<3_000 { _ = try await register(engine.registry, try apnsToken(seed), person: "p\(seed % 700)") }
        let registry = engine.registry
        let writing = Task {
            var round = 0
            while !Task.isCancelled && round < 20_000 {
                // Re-registrations that move devices between people, and new devices.
                let seed = (round &* 7_919) % 4_000
                _ = try await register(registry, try apnsToken(seed), person: "q\(round % 300)")
                round += 1
            }
            return round
        }
        let summary = try await engine.snapshot(pinnedBytesMax: pinnedBytesMax)
        writing.cancel()
        let rounds = try await writing.value
        #expect(summary != nil)
        #expect(rounds > 0)
        let figures = engine.snapshotFigures
        if pinnedBytesMax == Limits.snapshotPinnedBytesMax { #expect(figures.pinLimitStops == 0) }
        #expect((figures.lastPinnedBytesMax ?? -1) >= 0)
        let before = await DurableEngineTests.state(engine)
        engine.close()
        let (reopened, report) = try DurableEngine.open(
            directory: "/data", policy: .never, shardCount: 2, options: options)
        #expect(report.snapshotRecords > 0)
        #expect(await DurableEngineTests.state(reopened) == before, "pinned limit \(pinnedBytesMax)")
        for shard in reopened.registry.shardSet.shards {
            for key in await shard.keys() {
                #expect(await shard.read(key) { $0.invariantViolations() } == [])
            }
        }
        reopened.close()
    }

    @Test("a snapshot file write that fails while an index view is being encoded fails the snapshot, not the process")
    func failedWriteDuringView() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = DurableEngineTests.options(fileSystem)
        let (engine, _) = try DurableEngine.open(directory: "/data", policy: .never, shardCount: 1, options: options)
        // Enough random tokens that zstd writes the file while the view is encoded, not only at the end.
        for seed in 0..<30_000 { _ = try await register(engine.registry, try apnsToken(seed)) }
        // The first write is the header (before any view); the second is compressed records.
        fileSystem.inject(.init(operation: .write, nth: 2, errno: ENOSPC, pathContains: "snap", sticky: true))
        await #expect(throws: StorageError.self) { _ = try await engine.snapshot() }
        #expect(engine.snapshotFigures.failed == 1)
        fileSystem.clearFaults()
        #expect(try await register(engine.registry, try apnsToken(30_001)) != nil, "writers go on")
        #expect(try await engine.snapshot() != nil, "the next snapshot succeeds")
        engine.close()
    }

    /// A source over an index of `devices` APNs devices (no people), with its pin.
    static func source(devices: Int, pinnedBytesMax: Int) throws -> (IndexSnapshotSource, SnapshotPin) {
        var index = AppIndex(appID: AppID(1), mode: .live)
        for seed in 0..<devices {
            _ = index.register(RegisterRequest(token: try apnsToken(seed)), at: now)
        }
        let pin = SnapshotPin()
        let source = IndexSnapshotSource(
            key: liveKey, view: index.freezeForSnapshot(pin: pin), pin: pin, pinnedBytesMax: pinnedBytesMax)
        return (source, pin)
    }

    @Test("a source whose pin is past its limit drops its view and stops where it was, having produced nothing")
    func sourceStopsAtPinLimit() throws {
        let (made, pin) = try Self.source(devices: 10, pinnedBytesMax: 100)
        var source = made
        pin.add(bytes: 101)
        #expect(source.nextBatch() == nil)
        #expect(source.stoppedAtPinLimit)
        #expect(!source.holdsView)
        #expect(source.position == .people(fromSlot: 0))
        #expect(source.recordCount == 0)
    }

    @Test("a source under its limit yields its index's image, which replays to the same devices; then it is done")
    func sourceDrains() throws {
        var index = AppIndex(appID: AppID(1), mode: .live)
        for seed in 0..<600 {
            var request = RegisterRequest(token: try apnsToken(seed))
            request.externalID = .set(try ExternalID("p\(seed % 50)"))
            _ = index.register(request, at: now)
        }
        let pin = SnapshotPin()
        var source = IndexSnapshotSource(
            key: liveKey, view: index.freezeForSnapshot(pin: pin), pin: pin, pinnedBytesMax: Int.max)
        var table = IndexTable()
        var records = 0
        while let batch = source.nextBatch() {
            #expect(batch.count <= IndexSnapshotSource.imagePartsPerBatch)
            for record in batch { try table.replay(try EngineRecord.decode(record)) }
            records += batch.count
        }
        #expect(records > 0 && records == source.recordCount)
        #expect(source.position == .done)
        #expect(!source.holdsView)
        #expect(!source.stoppedAtPinLimit)
        #expect(table.unfinishedImages.isEmpty)
        let restored = try #require(table.indexes[liveKey])
        #expect(restored.stats() == index.stats())
        #expect(
            restored.snapshotDevices(afterSequence: 0, limit: 1_000).mutations
                == index.snapshotDevices(afterSequence: 0, limit: 1_000).mutations)
        #expect(restored.invariantViolations() == [])
    }

    @Test(
        "a source that passes its limit inside the image ends it with the abandoned part; replay drops the parts before"
    )
    func sourceAbandonsImage() throws {
        let (made, pin) = try Self.source(devices: 5_000, pinnedBytesMax: 100)
        var source = made
        var table = IndexTable()
        let first = source.nextBatch() ?? []
        #expect(!first.isEmpty)
        pin.add(bytes: 101)
        let last = source.nextBatch() ?? []
        #expect(last == [StoreImageEncoder.abandonedPart(prefix: EngineRecord.imagePrefix(liveKey))])
        let after = source.nextBatch()
        #expect(after == nil)
        #expect(source.stoppedAtPinLimit)
        #expect(source.position == .people(fromSlot: 0))
        for record in first + last { try table.replay(try EngineRecord.decode(record)) }
        #expect(table.unfinishedImages.isEmpty)
        #expect(table.indexes[liveKey].map { $0.stats().devices } ?? 0 == 0)
    }
}
