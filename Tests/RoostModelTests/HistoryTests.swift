import RoostCrypto
import RoostModel
import RoostTesting
import Testing

/// Spec §9 device history in the model: which change makes which event, the
/// ring of 100, coalescing, replay and snapshots, removal (docs/model.md §8).
@Suite("Device history (model)")
struct HistoryTests {
    static func kinds(_ events: [HistoryEvent]?) -> [HistoryEventKind] { (events ?? []).map(\.kind) }

    @Test("the fingerprint digest (libcrypto SHA-256) matches the FIPS 180-4 vectors")
    func sha256Vectors() {
        func hex(_ bytes: [UInt8]) -> String { bytes.map { String($0, radix: 16).leftPadded(2) }.joined() }
        #expect(hex(Crypto.sha256([])) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(
            hex(Crypto.sha256(Array("abc".utf8))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        let twoBlocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
        #expect(
            hex(Crypto.sha256(Array(twoBlocks.utf8)))
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        #expect(
            hex(Crypto.sha256([UInt8](repeating: 0x61, count: 1_000)))
                == "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3")
    }

    @Test("a token fingerprint is the first 16 hex digits of SHA-256 of the token as shown, never the token")
    func fingerprint() throws {
        let token = apnsToken(1)
        let digest = Crypto.sha256(token.text.utf8)
        let expected = digest.prefix(8).map { String($0, radix: 16).leftPadded(2) }.joined()
        #expect(TokenFingerprint(token).rendered == expected)
        #expect(TokenFingerprint(token).rendered.count == 16)
        #expect(!token.text.contains(TokenFingerprint(token).rendered))
        #expect(TokenFingerprint(apnsToken(2)) != TokenFingerprint(token))
        // An FCM token's text is its characters.
        let fcm = try #require(try? PushToken(parsing: TestTokens.fcm(3), platform: .android))
        let fcmDigest = Crypto.sha256(fcm.text.utf8)
        #expect(
            TokenFingerprint(fcm).rendered == fcmDigest.prefix(8).map { String($0, radix: 16).leftPadded(2) }.joined())
    }

    @Test("a device that never changed shows one created event and costs no history record or memory")
    func neverChanged() throws {
        var harness = Harness()
        let outcome = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("ada")) })
        #expect(!outcome.mutations.contains { if case .deviceHistory = $0 { true } else { false } })
        let history = try #require(harness.index.history(outcome.device.id))
        #expect(
            history == [
                HistoryEvent(
                    at: outcome.device.createdAt, kind: .created, externalID: person("ada"),
                    tokenFingerprint: TokenFingerprint(apnsToken(1)))
            ])
        #expect(harness.index.memoryEstimate().history == 0)
        try harness.verify()
    }

    @Test("each change makes its events: registered, token_replaced, moved, unbound, tags_changed, opted_out/in")
    func changesMakeEvents() throws {
        var harness = Harness()
        let install = installation("i-1")
        let first = try harness.mustRegister(request(apnsToken(1)) { $0.installationID = install })
        let id = first.device.id
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("ada")) })
        _ = try harness.mustRegister(request(apnsToken(2)) { $0.installationID = install })
        _ = try harness.mustRegister(request(apnsToken(2)) { $0.externalID = .set(person("bob")) })
        _ = try harness.mustRegister(request(apnsToken(2)) { $0.externalID = .clear })
        harness.advance()
        let patched = try #require(
            harness.index.patchDevice(id, tags: .merge(["plan": .string("pro")]), optedIn: false, at: harness.now)
                .value)
        harness.record(patched.mutations)
        harness.advance()
        harness.record(
            try #require(harness.index.patchDevice(id, tags: .keep, optedIn: true, at: harness.now).value).mutations)
        let history = try #require(harness.index.history(id))
        #expect(
            Self.kinds(history) == [
                .optedIn, .optedOut, .tagsChanged, .unbound, .registered, .moved, .registered, .tokenReplaced,
                .moved, .registered, .created,
            ])
        let moved = history[8]
        #expect(moved.externalID == person("ada") && moved.previousExternalID == nil)
        let movedToBob = history[5]
        #expect(movedToBob.externalID == person("bob") && movedToBob.previousExternalID == person("ada"))
        let unbound = history[3]
        #expect(unbound.externalID == nil && unbound.previousExternalID == person("bob"))
        #expect(history[7].tokenFingerprint == TokenFingerprint(apnsToken(2)))
        #expect(history.last?.tokenFingerprint == TokenFingerprint(apnsToken(1)))
        #expect(history.last?.at == first.device.createdAt)
        #expect(history.allSatisfy { $0.reason == nil })
        #expect(zip(history, history.dropFirst()).allSatisfy { $0.at >= $1.at }, "newest first")
        try harness.verify()
    }

    @Test("invalidated carries the invalidation's reason; a registration revalidates")
    func invalidation() throws {
        var harness = Harness()
        let device = try harness.mustRegister(request(fcmToken(1))).device
        harness.advance()
        let feedback = harness.index.invalidate(
            token: fcmToken(1), reason: try InvalidationReason("Unregistered"), reportedAt: nil, at: harness.now)
        harness.record(feedback.mutations)
        harness.advance()
        let dead = try #require(
            harness.index.invalidateDevice(device.id, reason: try InvalidationReason("Inactive"), at: harness.now)
                .value)
        #expect(dead.mutations.isEmpty, "already invalidated: nothing changes, no event")
        _ = try harness.mustRegister(request(fcmToken(1)))
        let history = try #require(harness.index.history(device.id))
        #expect(Self.kinds(history) == [.revalidated, .registered, .invalidated, .created])
        #expect(history[2].reason == (try InvalidationReason("Unregistered")))
        #expect(history[2].tokenFingerprint == TokenFingerprint(fcmToken(1)))
        harness.advance()
        let inactive = try #require(
            harness.index.invalidateDevice(device.id, reason: try InvalidationReason("Inactive"), at: harness.now)
                .value)
        harness.record(inactive.mutations)
        #expect(harness.index.history(device.id)?.first?.reason == (try InvalidationReason("Inactive")))
        try harness.verify()
    }

    @Test("a device that loses its token to another installation shows invalidated Reassigned without a fingerprint")
    func reassigned() throws {
        var harness = Harness()
        let holder = try harness.mustRegister(request(apnsToken(1)) { $0.installationID = installation("a") }).device
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.installationID = installation("b") })
        let history = try #require(harness.index.history(holder.id))
        #expect(Self.kinds(history) == [.invalidated, .created])
        #expect(history[0].reason == .reassigned)
        #expect(history[0].tokenFingerprint == nil)
        #expect(history[1].tokenFingerprint == TokenFingerprint(apnsToken(1)))
        try harness.verify()
    }

    @Test("consecutive re-registrations of the same token coalesce into the newest registered event")
    func coalescing() throws {
        var harness = Harness()
        let device = try harness.mustRegister(request(apnsToken(1))).device
        for _ in 0..<250 { _ = try harness.mustRegister(request(apnsToken(1))) }
        var history = try #require(harness.index.history(device.id))
        #expect(Self.kinds(history) == [.registered, .created])
        #expect(history[0].at == harness.now)
        #expect(history[0].tokenFingerprint == TokenFingerprint(apnsToken(1)))
        #expect(
            !harness.log.contains { if case .deviceHistory = $0 { true } else { false } },
            "re-registrations with nothing new store and log nothing: registered is synthesized from last_seen_at")
        #expect(harness.index.memoryEstimate().history == 0)
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.tags = .merge(["a": .bool(true)]) })
        _ = try harness.mustRegister(request(apnsToken(1)))
        history = try #require(harness.index.history(device.id))
        #expect(
            Self.kinds(history) == [.registered, .tagsChanged, .registered, .created],
            "the tags registration's own registered event coalesced with the one before")
        for _ in 0..<5 { _ = try harness.mustRegister(request(apnsToken(1))) }
        history = try #require(harness.index.history(device.id))
        #expect(
            Self.kinds(history) == [.registered, .tagsChanged, .registered, .created],
            "stored registered events coalesce too")
        #expect(history[0].at == harness.now)
        try harness.verify()
    }

    @Test(
        "tags_changed follows the tags' bytes: an unchanged merge adds none, a set of the same size in the cell the old one freed adds one"
    )
    func tagsChangedByBytes() throws {
        var harness = Harness()
        let device = try harness.mustRegister(request(apnsToken(1)) { $0.tags = .merge(["a": .string("x")]) }).device
        // The same set again: nothing changed.
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.tags = .merge(["a": .string("x")]) })
        #expect(Self.kinds(harness.index.history(device.id)) == [.registered, .created])
        // The only holder of {a: x} moves to {a: y}: the old set's blob is freed
        // and the new one, of the same size, is stored in the freed cell.
        // (Newest first; the earlier `registered` coalesces with this one's.)
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.tags = .merge(["a": .string("y")]) })
        #expect(Self.kinds(harness.index.history(device.id)) == [.tagsChanged, .registered, .created])
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.tags = .clear })
        #expect(
            Self.kinds(harness.index.history(device.id))
                == [.tagsChanged, .registered, .tagsChanged, .registered, .created])
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.tags = .clear })
        #expect(
            Self.kinds(harness.index.history(device.id))
                == [.registered, .tagsChanged, .registered, .tagsChanged, .registered, .created],
            "clearing no tags changes nothing")
        try harness.verify()
    }

    @Test("101 and more events keep the newest 100; the log and a snapshot rebuild the same ring")
    func ringOfOneHundred() throws {
        var harness = Harness()
        let device = try harness.mustRegister(request(apnsToken(1))).device
        for step in 0..<130 {
            harness.advance()
            let change = try #require(
                harness.index.patchDevice(device.id, tags: .keep, optedIn: step % 2 == 1, at: harness.now).value)
            harness.record(change.mutations)
        }
        let history = try #require(harness.index.history(device.id))
        #expect(history.count == Limits.historyEventsPerDeviceMax)
        #expect(history.first?.at == harness.now)
        #expect(!history.contains { $0.kind == .created }, "the oldest events are dropped")
        #expect(history.first?.kind == .optedIn)
        try harness.verify()
        var restored = AppIndex(appID: testApp, mode: .live)
        for mutation in harness.index.snapshotMutations() {
            try restored.apply(MutationCodec.decode(MutationCodec.encode(mutation)))
        }
        #expect(restored.history(device.id) == history)
        #expect(restored.invariantViolations() == [])
    }

    @Test("deleting a device or erasing its person removes its history; the store keeps nothing of it")
    func removal() throws {
        var harness = Harness()
        let kept = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("ada")) }).device
        let erased = try harness.mustRegister(request(apnsToken(2)) { $0.externalID = .set(person("ada")) }).device
        let deleted = try harness.mustRegister(request(apnsToken(3))).device
        for token in [1, 2, 3] as [UInt64] {
            _ = try harness.mustRegister(request(apnsToken(token)) { $0.tags = .merge(["t": .number(1)]) })
        }
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("bob")) })
        harness.record(harness.index.deleteDevice(deleted.id).mutations)
        harness.record(try #require(harness.index.erasePerson(person("ada")).value).mutations)
        #expect(harness.index.history(deleted.id) == nil)
        #expect(harness.index.history(erased.id) == nil)
        #expect(
            Self.kinds(harness.index.history(kept.id)) == [.moved, .registered, .tagsChanged, .registered, .created])
        #expect(harness.index.invariantViolations() == [])
        harness.record(harness.index.deleteDevice(kept.id).mutations)
        #expect(harness.index.history(kept.id) == nil)
        #expect(harness.index.invariantViolations() == [], "no ring of an absent device, no string left interned")
        try harness.verify()
    }

    @Test("replaying a history record is idempotent; one for a device not held is ignored; another app's throws")
    func replayRules() throws {
        var harness = Harness()
        let device = try harness.mustRegister(request(apnsToken(1))).device
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.optedIn = false })
        var twice = AppIndex(appID: testApp, mode: .live)
        for mutation in harness.log {
            try twice.apply(mutation)
            try twice.apply(mutation)
        }
        #expect(twice.history(device.id) == harness.index.history(device.id))
        let absent = DeviceID(appID: testApp, mode: .live, platform: .ios, sequence: 99)
        let event = HistoryEvent(at: harness.now, kind: .registered, externalID: nil, tokenFingerprint: nil)
        try twice.apply(.deviceHistory(absent, firstOrdinal: 1, events: [event]))
        #expect(twice.history(absent) == nil)
        #expect(twice.invariantViolations() == [])
        let foreign = DeviceID(appID: AppID(99), mode: .live, platform: .ios, sequence: 1)
        #expect(throws: MutationApplyError.foreignDevice(foreign)) {
            try twice.apply(.deviceHistory(foreign, firstOrdinal: 1, events: [event]))
        }
    }

    @Test("the codec round-trips history records and rejects bad counts, kinds, ordinals and reasons")
    func codec() throws {
        let id = DeviceID(appID: testApp, mode: .live, platform: .android, sequence: 3)
        let long = try ExternalID(String(repeating: "😀", count: Limits.externalIDCharactersMax))
        let event = HistoryEvent(
            at: Timestamp(millisecondsSinceEpoch: Timestamp.millisecondsMax), kind: .moved, externalID: long,
            previousExternalID: long, tokenFingerprint: TokenFingerprint(rawValue: .max),
            reason: try InvalidationReason(String(repeating: "R", count: Limits.invalidationReasonBytesMax)))
        let full = Mutation.deviceHistory(
            id, firstOrdinal: 7, events: Array(repeating: event, count: Limits.historyEventsPerRecordMax))
        let bytes = MutationCodec.encode(full)
        #expect(bytes.count <= Limits.mutationBytesMax)
        #expect(try MutationCodec.decode(bytes) == full)
        let small = MutationCodec.encode(
            .deviceHistory(
                id, firstOrdinal: 1,
                events: [
                    HistoryEvent(
                        at: Timestamp(millisecondsSinceEpoch: 5), kind: .created, externalID: nil, tokenFingerprint: nil
                    )
                ]))
        // version, kind, id (4 + 1 + 1 + 8), ordinal (8), count (1), then the event: at (8), kind (1).
        let countOffset = 2 + 14 + 8
        var zeroCount = small
        zeroCount[countOffset] = 0
        var tooMany = small
        tooMany[countOffset] = UInt8(Limits.historyEventsPerRecordMax + 1)
        var badKind = small
        badKind[countOffset + 1 + 8] = 0
        var zeroOrdinal = small
        for offset in 16..<24 { zeroOrdinal[offset] = 0 }
        for bad in [zeroCount, tooMany, badKind, zeroOrdinal, Array(small.dropLast()), small + [0]] {
            #expect(throws: ByteDecodingError.self) { try MutationCodec.decode(bad) }
        }
        for cut in 0..<small.count {
            #expect(throws: ByteDecodingError.self) { try MutationCodec.decode(Array(small[..<cut])) }
        }
    }
}

extension String {
    fileprivate func leftPadded(_ width: Int) -> String {
        String(repeating: "0", count: max(0, width - count)) + self
    }
}
