import RoostTesting
import Testing

@testable import RoostModel

/// Index images (decision 0056): a frozen store's arrays written as they are,
/// loaded back with their tables, free lists and counts derived and checked.
@Suite("Index images")
struct StoreImageTests {
    /// The image parts of `index` as the snapshot thread writes them (from a
    /// frozen view), and the history records that follow them.
    static func image(of index: inout AppIndex) -> (parts: [[UInt8]], history: [Mutation]) {
        let pin = SnapshotPin()
        var encoder = index.freezeForSnapshot(pin: pin).imageEncoder()
        var parts: [[UInt8]] = []
        while let part = encoder.nextPart(prefix: []) { parts.append(part) }
        let history = encoder.devicesWithHistory.flatMap { encoder.historyMutations($0) }
        index.endSnapshotSharing()
        return (parts, history)
    }

    /// Loads `parts` into a loader; throws what the loader throws.
    static func load(_ parts: [[UInt8]], appID: AppID = testApp, mode: AppMode = .live) throws -> LoadedIndexImage {
        var loader = StoreImageLoader(appID: appID, mode: mode)
        for part in parts { try part.withUnsafeBytes { try loader.add($0) } }
        return try loader.finish()
    }

    /// An index like `source` restored from its image: settings and
    /// credentials first (as a snapshot's header), then the image, then the history.
    static func restore(_ source: inout AppIndex) throws -> AppIndex {
        let (parts, history) = image(of: &source)
        var restored = AppIndex(appID: source.appID, mode: source.mode)
        try restored.apply(source.snapshotSettingsAndCredentials())
        let adopted = restored.adoptLoadedStore(try load(parts, appID: source.appID, mode: source.mode))
        #expect(adopted)
        try restored.apply(history)
        return restored
    }

    @Test("a random workload's index restores from its image exactly, and then behaves as its source", arguments: 1...6)
    func roundTrip(seed: UInt64) throws {
        var workload = RandomWorkload(seed: seed &* 104_729)
        for _ in 0..<1_500 { try workload.step() }
        let restored = try Self.restore(&workload.harness.index)
        let source = workload.harness.index
        #expect(restored.snapshotMutations() == source.snapshotMutations(), "seed \(seed)")
        #expect(restored.stats() == source.stats())
        #expect(restored.invariantViolations() == [], "seed \(seed)")
        #expect(restored.memoryEstimate().blobs == source.memoryEstimate().blobs, "free cells kept")
        // Free lists, tables and reference counts were derived: the same operations must give the same answers.
        var twin = workload
        twin.harness.index = restored
        let logged = workload.harness.log.count
        for _ in 0..<1_000 {
            try workload.step()
            try twin.step()
        }
        #expect(twin.harness.log[logged...] == workload.harness.log[logged...], "seed \(seed)")
        #expect(twin.harness.index.stats() == workload.harness.index.stats())
        #expect(twin.harness.index.invariantViolations() == [], "seed \(seed)")
        try twin.harness.verify()
    }

    @Test("an empty index, and one whose devices were all deleted, restore from their images")
    func emptyImages() throws {
        var empty = AppIndex(appID: testApp, mode: .test)
        #expect(try Self.restore(&empty).snapshotMutations() == empty.snapshotMutations())
        var harness = Harness()
        for seed in 0..<50 {
            var request = RegisterRequest(token: fcmToken(UInt64(seed)))
            request.externalID = .set(person("p\(seed % 7)"))
            _ = try harness.mustRegister(request)
        }
        var ids: [DeviceID] = []
        harness.index.forEachDevice { ids.append($0.id) }
        for id in ids { harness.record(harness.index.deleteDevice(id).mutations) }
        let restored = try Self.restore(&harness.index)
        #expect(restored.stats() == harness.index.stats())
        #expect(restored.invariantViolations() == [])
        #expect(restored.nextDeviceSequence == harness.index.nextDeviceSequence)
    }

    @Test("an image with a part missing, repeated, out of order, after its end, or cut short is refused")
    func brokenSequences() throws {
        var workload = RandomWorkload(seed: 5)
        for _ in 0..<3_000 { try workload.step() }
        let (parts, _) = Self.image(of: &workload.harness.index)
        #expect(parts.count >= 5)
        for missing in 0..<parts.count {
            var broken = parts
            broken.remove(at: missing)
            #expect(throws: StoreImageError.self, "part \(missing) missing") { try Self.load(broken) }
        }
        for repeated in 0..<parts.count {
            var broken = parts
            broken.insert(parts[repeated], at: repeated)
            #expect(throws: StoreImageError.self, "part \(repeated) twice") { try Self.load(broken) }
        }
        #expect(throws: StoreImageError.self) { try Self.load(parts.reversed()) }
        #expect(throws: StoreImageError.self) { try Self.load(parts + [parts[parts.count - 1]]) }
        for cut in [1, parts[1].count / 2, parts[1].count - 1] {
            var broken = parts
            broken[1].removeLast(cut)
            #expect(throws: StoreImageError.self, "part 1 short by \(cut)") { try Self.load(broken) }
        }
    }

    @Test("damaged bytes in an image are refused or load a store; loading never traps")
    func damagedBytes() throws {
        var workload = RandomWorkload(seed: 11)
        for _ in 0..<1_200 { try workload.step() }
        let (parts, _) = Self.image(of: &workload.harness.index)
        var random = SplitMix64(seed: 77)
        var refused = 0
        let trials = 3_000
        for _ in 0..<trials {
            var broken = parts
            let part = Int(random.next() % UInt64(parts.count))
            let offset = Int(random.next() % UInt64(parts[part].count))
            broken[part][offset] ^= UInt8(1 + random.next() % 255)
            do {
                _ = try Self.load(broken)
            } catch {
                refused += 1
            }
        }
        // Most bytes are field contents (timestamps, token bytes) that no check can tell from others:
        // the snapshot file's CRC refuses those. Structure (counts, slots, references) is checked here.
        #expect(refused > trials / 10, "\(refused) of \(trials) refused")
    }

    @Test("a loaded image replaces only an index that holds no devices or people")
    func adoptsOnlyEmpty() throws {
        var harness = Harness()
        _ = try harness.mustRegister(RegisterRequest(token: apnsToken(1)))
        let (parts, _) = Self.image(of: &harness.index)
        let loaded = try Self.load(parts)
        var occupied = harness.index
        let adoptedByOccupied = occupied.adoptLoadedStore(loaded)
        #expect(!adoptedByOccupied)
        #expect(occupied.snapshotMutations() == harness.index.snapshotMutations())
        var otherMode = AppIndex(appID: testApp, mode: .test)
        let adoptedByOtherMode = otherMode.adoptLoadedStore(loaded)
        #expect(!adoptedByOtherMode)
    }

    @Test("chunks the encoder has written are let go of: a writer touching them afterwards copies nothing")
    func writtenChunksAreReleased() throws {
        var harness = Harness()
        for seed in 0..<2_500 { _ = try harness.mustRegister(RegisterRequest(token: apnsToken(UInt64(seed)))) }
        do {
            // Control: a write before the encoder passes the device copies its record's chunk.
            let control = SnapshotPin()
            var early = harness.index.freezeForSnapshot(pin: control).imageEncoder()
            _ = early.nextPart(prefix: [])  // the header only
            harness.advance()
            _ = harness.index.register(RegisterRequest(token: apnsToken(1)), at: harness.now)
            #expect(control.pinnedBytes > 0)
            harness.index.endSnapshotSharing()
        }

        let pin = SnapshotPin()
        var encoder = harness.index.freezeForSnapshot(pin: pin).imageEncoder()
        var sections: [UInt8] = []
        while sections.last.map({ $0 <= 2 }) ?? true, let part = encoder.nextPart(prefix: []) {
            sections.append(part[0])
        }
        #expect(sections.first == 1 && sections.dropFirst().dropLast().allSatisfy { $0 == 2 } && sections.count >= 4)
        harness.advance()
        for seed in [0, 2_000, 2_499] {
            _ = harness.index.register(RegisterRequest(token: apnsToken(UInt64(seed))), at: harness.now)
        }
        #expect(pin.pinnedBytes == 0, "records written in place once encoded")
        while encoder.nextPart(prefix: []) != nil {}
        harness.index.endSnapshotSharing()
        #expect(harness.index.invariantViolations() == [])
    }
}
