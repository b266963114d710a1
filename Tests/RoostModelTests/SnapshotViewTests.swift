import RoostTesting
import Testing

@testable import RoostModel

/// The frozen copy-on-write views a snapshot is encoded from (decision 0054).
@Suite("Snapshot views")
struct SnapshotViewTests {
    /// Every upsert a view (or an index) yields, people then devices, in small slices.
    static func slices(
        people: (UInt32) -> (mutations: [Mutation], next: UInt32?),
        devices: (UInt64) -> (mutations: [Mutation], next: UInt64?)
    ) -> [Mutation] {
        var result: [Mutation] = []
        var slot: UInt32? = 0
        while let from = slot {
            let slice = people(from)
            result += slice.mutations
            slot = slice.next
        }
        var after: UInt64? = 0
        while let from = after {
            let slice = devices(from)
            result += slice.mutations
            after = slice.next
        }
        return result
    }

    @Test("a frozen view keeps showing the index as it was while writers change every part of it", arguments: [3, 17])
    func frozenViewIsStable(seed: UInt64) throws {
        var workload = RandomWorkload(seed: seed)
        for _ in 0..<400 { try workload.step() }
        let before = workload.harness.index
        let expected = Self.slices(
            people: { before.snapshotPeople(fromSlot: $0, limit: 5) },
            devices: { before.snapshotDevices(afterSequence: $0, limit: 5) })
        let pin = SnapshotPin()
        let view = workload.harness.index.freezeForSnapshot(pin: pin)
        for _ in 0..<800 { try workload.step() }
        let seen = Self.slices(
            people: { view.snapshotPeople(fromSlot: $0, limit: 5) },
            devices: { view.snapshotDevices(afterSequence: $0, limit: 5) })
        #expect(seen == expected, "seed \(seed)")
        #expect(pin.pinnedBytes > 0, "writes during the view copied no chunk, seed \(seed)")
        workload.harness.index.endSnapshotSharing()
        for _ in 0..<200 { try workload.step() }
        #expect(workload.harness.index.invariantViolations() == [], "seed \(seed)")
        try workload.harness.verify()
    }

    @Test("a chunked array copies a shared chunk once, whole, counts it, and leaves the frozen copy as it was")
    func chunkedArraySharing() {
        var array = ChunkedArray<UInt64>(chunkBytes: 64)  // 8 elements a chunk
        for value in 0..<40 { array.append(UInt64(value)) }
        let pin = SnapshotPin()
        array.shareChunks(pin: pin)
        let frozen = array.frozenCopy()
        array[11] = 1_000  // chunk 1 (chunk 0 grew by doubling: its capacity is its own)
        let oneChunk = pin.pinnedBytes
        #expect(oneChunk >= 64, "a whole chunk's capacity (8 elements, or what malloc rounded it to)")
        array[12] = 1_001  // same chunk: no second copy
        #expect(pin.pinnedBytes == oneChunk)
        array[17] = 2_000
        #expect(pin.pinnedBytes == 2 * oneChunk)
        array.append(40)  // the last chunk, 40 ≥ 5 × 8: a new one, shared with nobody
        #expect(pin.pinnedBytes == 2 * oneChunk)
        #expect(Array(frozen) == (0..<40).map { UInt64($0) })
        #expect(array[11] == 1_000 && array[12] == 1_001 && array[17] == 2_000 && array[40] == 40)
        array.endSharing()
        array[30] = 3_000
        #expect(pin.pinnedBytes == 2 * oneChunk, "writes after endSharing are not counted")
        #expect(frozen[30] == 30)
    }

    @Test("inserts and truncation of a chunked array match an array's, across chunk edges")
    func chunkedArrayEdits() {
        var random = SeededRandom(seed: 0xC4A2)
        var chunked = ChunkedArray<UInt32>(chunkBytes: 32)  // 8 elements a chunk
        var model: [UInt32] = []
        for step in 0..<2_000 {
            let value = UInt32(truncatingIfNeeded: random.next())
            switch random.next() % 4 {
            case 0, 1:
                chunked.append(value)
                model.append(value)
            case 2:
                let position = Int(random.next() % UInt64(model.count + 1))
                chunked.insert(value, at: position)
                model.insert(value, at: position)
            default:
                let removed = Int(random.next() % UInt64(min(model.count, 20) + 1))
                chunked.removeLast(removed)
                model.removeLast(removed)
            }
            #expect(Array(chunked) == model, "step \(step)")
        }
    }

    @Test("a frozen blob store reads the old bytes of a cell that writers freed and reused")
    func frozenBlobs() {
        var blobs = BlobStore()
        let first = blobs.store(Array("alpha-alpha".utf8))
        let second = blobs.store(Array("beta".utf8))
        let pin = SnapshotPin()
        blobs.shareChunks(pin: pin)
        let frozen = blobs.frozenCopy()
        blobs.release(first)
        let reused = blobs.store(Array("gamma-gamma".utf8))
        #expect(reused.cell == first.cell, "the freed cell is reused")
        #expect(frozen.string(first) == "alpha-alpha")
        #expect(frozen.string(second) == "beta")
        #expect(blobs.string(reused) == "gamma-gamma")
        #expect(pin.pinnedBytes > 0)
    }
}
