import Testing

@testable import RoostModel

/// `AppIndex.applyEncodedDeviceUpsert` (replay's fast path) against the general
/// path (`MutationCodec.decode` then `apply`): same answer, same state.
@Suite("Replay fast path")
struct FastReplayTests {
    /// Applies `mutations` through the fast path where it takes them (the general
    /// path otherwise) and through the general path only; both must agree.
    /// Returns how many device and person upserts the fast path took and how many there were.
    @discardableResult
    static func replayBothWays(
        _ mutations: [Mutation], mode: AppMode = .live, sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> (fast: Int, upserts: Int, index: AppIndex) {
        var fast = AppIndex(appID: testApp, mode: mode)
        var general = AppIndex(appID: testApp, mode: mode)
        var taken = 0
        var upserts = 0
        for mutation in mutations {
            let bytes = MutationCodec.encode(mutation)
            switch mutation {
            case .deviceUpsert, .personUpsert: upserts += 1
            default: break
            }
            if bytes.withUnsafeBytes({ fast.applyEncodedUpsert($0) }) {
                taken += 1
                switch mutation {
                case .deviceUpsert, .personUpsert: break
                default: Issue.record("fast path took \(mutation)", sourceLocation: sourceLocation)
                }
            } else {
                try fast.apply(MutationCodec.decode(bytes))
            }
            try general.apply(MutationCodec.decode(bytes))
        }
        #expect(fast.snapshotMutations() == general.snapshotMutations(), sourceLocation: sourceLocation)
        #expect(fast.stats() == general.stats(), sourceLocation: sourceLocation)
        #expect(fast.invariantViolations() == [], sourceLocation: sourceLocation)
        #expect(Self.layout(fast) == Self.layout(general), sourceLocation: sourceLocation)
        return (taken, upserts, fast)
    }

    /// What the index holds beyond its snapshot: blob cells and hash table sizes
    /// (array capacities are left out: malloc may round them differently).
    static func layout(_ index: AppIndex) -> [Int] {
        let memory = index.memoryEstimate()
        return [memory.blobs, memory.hashTables, memory.deviceRecords - index.store.freeDeviceSlots.capacity * 4]
    }

    @Test("random workloads' logs replay to the same index through the fast path", arguments: [1, 2, 3, 4, 5])
    func randomLogs(seed: UInt64) throws {
        var workload = RandomWorkload(seed: seed &* 7919)
        for _ in 0..<800 { try workload.step() }
        let result = try Self.replayBothWays(workload.harness.log)
        #expect(result.index.snapshotMutations() == workload.harness.index.snapshotMutations())
        // Random tag keys are ASCII and values canonical: every device upsert is taken.
        #expect(result.fast == result.upserts)
        #expect(result.upserts > 300)
    }

    @Test("a snapshot (people in slot order, then devices) replays through the fast path to its source")
    func snapshotOrder() throws {
        var workload = RandomWorkload(seed: 99)
        for _ in 0..<1_000 { try workload.step() }
        let source = workload.harness.index
        var mutations = source.snapshotSettingsAndCredentials()
        var slot: UInt32 = 0
        while true {
            let slice = source.snapshotPeople(fromSlot: slot, limit: 5)
            mutations += slice.mutations
            guard let next = slice.next else { break }
            slot = next
        }
        mutations += source.snapshotDevices(afterSequence: 0, limit: Int.max / 2).mutations
        mutations.append(.deviceSequenceFloor(source.nextDeviceSequence))
        let result = try Self.replayBothWays(mutations)
        #expect(result.index.snapshotMutations() == source.snapshotMutations())
        #expect(result.fast == result.upserts)
    }

    @Test("people guessed from the previous device, the next slot or the last insert; wrong guesses cost nothing")
    func personGuesses() throws {
        var mutations: [Mutation] = []
        let clock = Timestamp(millisecondsSinceEpoch: 1_789_912_931_000)
        func device(_ sequence: UInt64, _ name: String?) -> Mutation {
            var device = Device(
                id: DeviceID(appID: testApp, mode: .live, platform: .ios, sequence: sequence),
                environment: .production, token: apnsToken(sequence), createdAt: clock)
            if let name {
                device.externalID = person(name)
                device.boundAt = clock
            }
            return .deviceUpsert(device)
        }
        // People first in slot order, then their devices in that order (the snapshot's shape).
        for n in 0..<50 { mutations.append(.personUpsert(Person(externalID: person("user_\(n)"), createdAt: clock))) }
        for n in 0..<50 { mutations.append(device(UInt64(n + 1), "user_\(n)")) }
        // Two devices of one person, a person created by their device, and one not guessed.
        mutations += [device(51, "user_7"), device(52, "user_7"), device(53, "new ✓"), device(54, "user_3")]
        // Erase a person, reuse the slot under another name: the stale guess must not match.
        mutations += [.personErase(person("user_3")), device(55, "another"), device(56, "user_3"), device(57, nil)]
        mutations += [
            device(5, "user_49"), device(6, nil),
            .deviceTombstone(DeviceID(appID: testApp, mode: .live, platform: .ios, sequence: 7)),
        ]
        let result = try Self.replayBothWays(mutations)
        #expect(result.fast == result.upserts)
        #expect(result.index.stats().people == 52)
    }

    @Test("devices upserted again (kept tokens, short and long; id-order guesses, right and wrong) replay the same")
    func upsertsAgain() throws {
        let clock = Timestamp(millisecondsSinceEpoch: 1_789_912_931_000)
        func device(_ sequence: UInt64, token: UInt64, seen: Int64 = 0) -> Mutation {
            let platform: Platform = sequence % 3 == 0 ? .android : .ios
            var device = Device(
                id: DeviceID(appID: testApp, mode: .live, platform: platform, sequence: sequence),
                environment: .production, token: platform == .ios ? apnsToken(token) : fcmToken(token),
                createdAt: clock)
            device.lastSeenAt = Timestamp(millisecondsSinceEpoch: clock.millisecondsSinceEpoch + seen)
            device.externalID = person("user_\(sequence % 40)")
            device.boundAt = clock
            if sequence % 4 == 0 { device.tags = try! Tags(["plan": .string("pro")]) }
            return .deviceUpsert(device)
        }
        var mutations = (1...120).map { device($0, token: $0) }
        mutations += (1...120).map { device($0, token: $0, seen: 5) }  // same tokens, in id order
        mutations += stride(from: 120, to: 0, by: -7).map { device(UInt64($0), token: UInt64($0), seen: 9) }
        mutations += (1...30).map { device($0, token: 1_000 + $0) }  // new tokens
        mutations += (31...60).map { device($0, token: $0 + 1) }  // each takes the next device's token
        mutations.append(.deviceTombstone(DeviceID(appID: testApp, mode: .live, platform: .ios, sequence: 62)))
        mutations.append(device(62, token: 62))
        let result = try Self.replayBothWays(mutations)
        #expect(result.fast == result.upserts)
        #expect(result.index.count == 120)
    }

    @Test("what the fast path leaves to the general path: non-canonical tags, foreign devices, platform changes")
    func declined() throws {
        var index = AppIndex(appID: testApp, mode: .live)
        var device = Device(
            id: DeviceID(appID: testApp, mode: .live, platform: .android, sequence: 3), environment: .production,
            token: fcmToken(1), createdAt: Timestamp(millisecondsSinceEpoch: 10))
        device.tags = try Tags(["ünïcode": .string("x")])
        device.externalID = person("Zoë")
        device.boundAt = device.createdAt
        let unicodeTags = MutationCodec.encode(.deviceUpsert(device))
        #expect(!unicodeTags.withUnsafeBytes { index.applyEncodedDeviceUpsert($0) })
        #expect(index.count == 0)
        device.tags = try Tags(["plan": .string("pro")])
        let accepted = MutationCodec.encode(.deviceUpsert(device))
        #expect(accepted.withUnsafeBytes { index.applyEncodedDeviceUpsert($0) })
        #expect(index.device(device.id) == device)
        var foreign = device
        foreign.id = DeviceID(appID: AppID(8), mode: .live, platform: .android, sequence: 4)
        #expect(!MutationCodec.encode(.deviceUpsert(foreign)).withUnsafeBytes { index.applyEncodedDeviceUpsert($0) })
        var otherPlatform = device
        otherPlatform.id = DeviceID(appID: testApp, mode: .live, platform: .ios, sequence: 3)
        otherPlatform.token = apnsToken(2)
        let before = index.snapshotMutations()
        #expect(
            !MutationCodec.encode(.deviceUpsert(otherPlatform)).withUnsafeBytes { index.applyEncodedDeviceUpsert($0) })
        #expect(
            !MutationCodec.encode(.personUpsert(Person(externalID: person("x"), createdAt: device.createdAt)))
                .withUnsafeBytes { index.applyEncodedDeviceUpsert($0) })
        #expect(index.snapshotMutations() == before)
    }

    @Test(
        "damaged device and person records: the fast path takes one only when the general path applies it the same way")
    func damagedRecords() throws {
        var workload = RandomWorkload(seed: 4242)
        for _ in 0..<300 { try workload.step() }
        let log = workload.harness.log
        var random = SplitMix64(seed: 77)
        var base = AppIndex(appID: testApp, mode: .live)
        var takenDamaged = 0
        var declined = 0
        for mutation in log {
            let original = MutationCodec.encode(mutation)
            let isUpsert =
                switch mutation {
                case .deviceUpsert, .personUpsert: true
                default: false
                }
            if isUpsert {
                for _ in 0..<6 {
                    var bytes = original
                    switch random.next() % 3 {
                    case 0: bytes[Int(random.next() % UInt64(bytes.count))] ^= UInt8(1 << (random.next() % 8))
                    case 1: bytes[Int(random.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: random.next())
                    default: bytes.removeLast(1 + Int(random.next() % UInt64(bytes.count)))
                    }
                    var fast = base
                    let taken = bytes.withUnsafeBytes { fast.applyEncodedUpsert($0) }
                    if taken {
                        takenDamaged += 1
                        var general = base
                        let decoded = try MutationCodec.decode(bytes)
                        try general.apply(decoded)
                        #expect(fast.snapshotMutations() == general.snapshotMutations())
                        #expect(Self.layout(fast) == Self.layout(general))
                        #expect(fast.invariantViolations() == general.invariantViolations())
                    } else {
                        declined += 1
                        #expect(fast.snapshotMutations() == base.snapshotMutations())
                        #expect(Self.layout(fast) == Self.layout(base))
                    }
                }
            }
            try base.apply(MutationCodec.decode(original))
        }
        #expect(declined > 100)
        #expect(takenDamaged > 10, "some damage (a timestamp, a flag) still makes a valid device")
    }
}
