import Testing

@testable import RoostModel

/// Interned tag sets (issue 12): devices with the same tags share one blob.
@Suite("Interned tag sets")
struct TagSetTests {
    static let now = Timestamp(millisecondsSinceEpoch: 1_800_000_000_000)

    static func register(_ index: inout AppIndex, _ n: Int, tags: [TagKey: TagValue]) throws -> DeviceID {
        var request = RegisterRequest(token: apnsToken(UInt64(n)))
        request.tags = .merge(tags)
        return try index.register(request, at: now).get().device.id
    }

    @Test("one blob per distinct set, counted; the last device leaving a set frees it; patches move counts")
    func sharedAndCounted() throws {
        var index = AppIndex(appID: AppID(1), mode: .live)
        var pro: [DeviceID] = []
        for n in 1...100 { pro.append(try Self.register(&index, n, tags: ["plan": .string("pro")])) }
        var free: [DeviceID] = []
        for n in 101...150 { free.append(try Self.register(&index, n, tags: ["plan": .string("free")])) }
        _ = try Self.register(&index, 151, tags: [:])
        #expect(index.store.tagSetSlots.count == 2)
        let uses = (0..<index.store.tagSets.count).map { index.store.tagSets[$0].uses }.filter { $0 > 0 }.sorted()
        #expect(uses == [50, 100])
        #expect(index.invariantViolations().isEmpty)
        for id in free { _ = index.deleteDevice(id) }
        #expect(index.store.tagSetSlots.count == 1, "the free set's last device is gone")
        _ = index.patchDevice(pro[0], tags: .merge(["plan": .string("trial")]), optedIn: nil, at: Self.now)
        _ = index.patchDevice(pro[1], tags: .merge(["plan": .string("trial")]), optedIn: nil, at: Self.now)
        #expect(index.store.tagSetSlots.count == 2)
        #expect(index.device(pro[0])?.tags == index.device(pro[1])?.tags)
        #expect(index.device(pro[2])?.tags["plan"] == .string("pro"))
        #expect(index.invariantViolations().isEmpty)
        // Replay rebuilds the same sharing.
        var replayed = AppIndex(appID: AppID(1), mode: .live)
        try replayed.apply(index.snapshotMutations())
        #expect(replayed.store.tagSetSlots.count == 2)
        #expect(replayed.snapshotMutations() == index.snapshotMutations())
        #expect(replayed.invariantViolations().isEmpty)
    }
}
