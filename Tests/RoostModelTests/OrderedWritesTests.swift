import Testing

@testable import RoostModel

/// Spec §7's last two bullets in the model: `client_sequence` (ordered
/// registration) and device versions with `If-Match`. The HTTP side is in
/// RoostAPITests/OrderedWritesAPITests.swift; docs/api.md maps sentences to tests.
@Suite("Ordered writes: client_sequence and versions (model)")
struct OrderedWritesTests {
    // MARK: client_sequence

    @Test("a registration with client_sequence at or below the stored one is stale_registration and changes nothing")
    func staleByToken() throws {
        var harness = Harness()
        let first = try harness.mustRegister(request(apnsToken(1)) { $0.clientSequence = 5 })
        #expect(first.device.clientSequence == 5)
        for stale: UInt64 in [0, 4, 5] {
            let result = harness.register(
                request(apnsToken(1)) {
                    $0.clientSequence = stale; $0.tags = .clear
                })
            #expect(result.rejection == .staleRegistration(stored: 5))
        }
        let newer = try harness.mustRegister(request(apnsToken(1)) { $0.clientSequence = 6 })
        #expect(newer.device.clientSequence == 6)
        #expect(newer.device.id == first.device.id)
        try harness.verify()
    }

    @Test("without client_sequence there is no check, and the stored value stays")
    func noFieldNoCheck() throws {
        var harness = Harness()
        let first = try harness.mustRegister(request(apnsToken(1)) { $0.clientSequence = 9 })
        let plain = try harness.mustRegister(request(apnsToken(1)) { $0.tags = .merge(["a": .string("b")]) })
        #expect(plain.device.id == first.device.id)
        #expect(plain.device.clientSequence == 9)
        #expect(harness.register(request(apnsToken(1)) { $0.clientSequence = 9 }).rejection != nil)
        try harness.verify()
    }

    @Test("the device remembers the highest accepted value; a new device starts with the request's")
    func remembersHighest() throws {
        var harness = Harness()
        let device = try harness.mustRegister(request(apnsToken(1)) { $0.clientSequence = 0 }).device
        #expect(device.clientSequence == 0)
        #expect(harness.register(request(apnsToken(1)) { $0.clientSequence = 0 }).rejection != nil)
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.clientSequence = Limits.clientSequenceMax })
        #expect(harness.index.device(device.id)?.clientSequence == Limits.clientSequenceMax)
        let other = try harness.mustRegister(request(apnsToken(2)))
        #expect(other.device.clientSequence == nil)
        try harness.verify()
    }

    @Test("client_sequence above 2^53 - 1 is invalid_field")
    func outOfRange() {
        var harness = Harness()
        let result = harness.register(request(apnsToken(1)) { $0.clientSequence = Limits.clientSequenceMax + 1 })
        #expect(result.rejection == .invalidField("client_sequence"))
    }

    @Test("a device named by installation_id is checked: a slow retry of an old token is stale")
    func staleByInstallation() throws {
        var harness = Harness()
        let first = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.installationID = installation("i1"); $0.clientSequence = 1
            })
        _ = try harness.mustRegister(
            request(apnsToken(2)) {
                $0.installationID = installation("i1"); $0.clientSequence = 2
            })
        // The retry of the first registration: token 1 is free now, the installation names the device.
        let retry = harness.register(
            request(apnsToken(1)) {
                $0.installationID = installation("i1"); $0.clientSequence = 1
            })
        #expect(retry.rejection == .staleRegistration(stored: 2))
        #expect(harness.index.device(first.device.id)?.token == apnsToken(2))
        try harness.verify()
    }

    @Test("a proven device_id names its device; an unproven one does not")
    func staleByProof() throws {
        var harness = Harness()
        let device = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.installationSecretDigest = digest(1); $0.clientSequence = 7
            }
        ).device
        let proven = harness.register(
            request(apnsToken(2)) {
                $0.deviceID = device.id
                $0.installationSecretDigest = digest(1)
                $0.clientSequence = 7
            })
        #expect(proven.rejection == .staleRegistration(stored: 7))
        // A wrong secret proves nothing: a new device by token, no check against the named id.
        let unproven = try harness.mustRegister(
            request(apnsToken(2)) {
                $0.deviceID = device.id
                $0.installationSecretDigest = digest(2)
                $0.clientSequence = 3
            })
        #expect(unproven.created)
        try harness.verify()
    }

    @Test(
        "token and installation_id naming different devices: stale when either stores a value at or above",
        arguments: [(tokenHolder: UInt64(10), installation: UInt64(3)), (3, 10)])
    func twoNamedDevices(stored: (tokenHolder: UInt64, installation: UInt64)) throws {
        var harness = Harness()
        let holder = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.installationID = installation("a"); $0.clientSequence = stored.tokenHolder
            }
        ).device
        let named = try harness.mustRegister(
            request(apnsToken(2)) {
                $0.installationID = installation("b"); $0.clientSequence = stored.installation
            }
        ).device
        // Installation b with token 1: rule 4 would move the token to b and Reassign the holder.
        let stale = harness.register(
            request(apnsToken(1)) {
                $0.installationID = installation("b"); $0.clientSequence = 5
            })
        #expect(stale.rejection == .staleRegistration(stored: 10))
        let fresh = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.installationID = installation("b"); $0.clientSequence = 11
            })
        #expect(fresh.device.id == named.id)
        #expect(fresh.device.clientSequence == 11)
        // The Reassigned device did not accept the registration: it keeps its own value.
        let displaced = try #require(harness.index.device(holder.id))
        #expect(displaced.clientSequence == stored.tokenHolder)
        #expect(displaced.invalidationReason == .reassigned)
        try harness.verify()
    }

    @Test("a proven device and the token's holder (rule 5, Superseded): both are named")
    func provenAndHolder() throws {
        var harness = Harness()
        let proven = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.installationSecretDigest = digest(1); $0.clientSequence = 20
            }
        ).device
        _ = try harness.mustRegister(request(apnsToken(2)) { $0.clientSequence = 1 })
        let stale = harness.register(
            request(apnsToken(2)) {
                $0.deviceID = proven.id
                $0.installationSecretDigest = digest(1)
                $0.clientSequence = 15
            })
        #expect(stale.rejection == .staleRegistration(stored: 20))
        try harness.verify()
    }

    @Test("the stale check comes after the identity checks: a secured installation without proof stays 409 proof")
    func checkOrder() throws {
        var harness = Harness()
        _ = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.installationID = installation("s")
                $0.installationSecretDigest = digest(1)
                $0.clientSequence = 50
            })
        let result = harness.register(
            request(apnsToken(2)) {
                $0.installationID = installation("s"); $0.clientSequence = 1
            })
        #expect(result.rejection == .installationProofRequired)
    }

    // MARK: versions

    @Test("version is 1 at creation and moves on by one with every change of the device")
    func versionCountsChanges() throws {
        var harness = Harness()
        let created = try harness.mustRegister(request(apnsToken(1)))
        #expect(created.device.version == 1)
        let id = created.device.id
        // A later re-registration refreshes last_seen_at: a change.
        #expect(try harness.mustRegister(request(apnsToken(1))).device.version == 2)
        let patched = try #require(
            harness.index.patchDevice(id, tags: .merge(["a": .number(1)]), optedIn: nil, at: harness.now).value)
        harness.record(patched.mutations)
        #expect(patched.device.version == 3)
        let struck = try #require(harness.index.recordStrike(id).value)
        harness.record(struck.mutations)
        #expect(struck.device.version == 4)
        let feedback = harness.index.invalidate(
            token: apnsToken(1), reason: .dead, reportedAt: nil, at: harness.now)
        harness.record(feedback.mutations)
        #expect(harness.index.device(id)?.version == 5)
        // Re-registering clears the invalidation; moving to a person is a change too.
        #expect(try harness.mustRegister(request(apnsToken(1))).device.version == 6)
        let moved = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("p")) })
        #expect(moved.device.version == 7)
        let invalidated = try #require(harness.index.invalidateDevice(id, reason: .dead, at: harness.now).value)
        harness.record(invalidated.mutations)
        #expect(invalidated.device.version == 8)
        try harness.verify()
    }

    @Test("no change, no new version: same-millisecond identical registration, empty patch, repeated feedback")
    func noChangeNoBump() throws {
        var harness = Harness()
        let now = harness.now
        let first = try #require(harness.index.register(request(apnsToken(1)), at: now).value)
        harness.record(first.mutations)
        let again = try #require(harness.index.register(request(apnsToken(1)), at: now).value)
        harness.record(again.mutations)
        #expect(again.device.version == 1)
        #expect(again.device == first.device)
        // The clock behind: last_seen_at does not go back, nothing changes.
        let behind = try #require(
            harness.index.register(request(apnsToken(1)), at: Timestamp(millisecondsSinceEpoch: 5)).value)
        #expect(behind.device.version == 1)
        let id = first.device.id
        let noOp = try #require(harness.index.patchDevice(id, tags: .merge([:]), optedIn: true, at: harness.now).value)
        #expect(noOp.mutations.isEmpty && noOp.device.version == 1)
        let feedback = harness.index.invalidate(token: apnsToken(1), reason: .dead, reportedAt: nil, at: now)
        harness.record(feedback.mutations)
        #expect(harness.index.device(id)?.version == 2)
        let repeated = harness.index.invalidate(token: apnsToken(1), reason: .dead, reportedAt: nil, at: now)
        #expect(repeated.mutations.isEmpty)
        #expect(harness.index.device(id)?.version == 2)
        let invalidatedAgain = try #require(harness.index.invalidateDevice(id, reason: .dead, at: now).value)
        #expect(invalidatedAgain.mutations.isEmpty && invalidatedAgain.device.version == 2)
        try harness.verify()
    }

    @Test("every field a same-millisecond registration changes moves the version on", arguments: 0..<8)
    func eachFieldBumps(field: Int) throws {
        var harness = Harness()
        let now = harness.now
        let base = request(apnsToken(1)) {
            $0.appVersion = .set("1.0")
            $0.installationID = installation("i")
            $0.installationSecretDigest = digest(1)
        }
        harness.record(try #require(harness.index.register(base, at: now).value).mutations)
        var changed = base
        switch field {
        case 0: changed.appVersion = .set("2.0")
        case 1: changed.timezone = .set("Europe/Berlin")
        case 2: changed.pushPermission = .set(true)
        case 3: changed.optedIn = false
        case 4: changed.tags = .merge(["k": .bool(true)])
        case 5: changed.installationSecretDigest = digest(2)
        case 6: changed.clientSequence = 1
        default: changed.externalID = .set(person("someone"))
        }
        let outcome = try #require(harness.index.register(changed, at: now).value)
        harness.record(outcome.mutations)
        #expect(outcome.device.version == 2, "field \(field)")
        // The same again: nothing new (a client sequence must grow, so that case is done).
        if field != 6 {
            let again = try #require(harness.index.register(changed, at: now).value)
            #expect(again.device.version == 2, "field \(field) again")
            // Its history may coalesce a `registered` event: the log has it too.
            harness.record(again.mutations)
        }
        try harness.verify()
    }

    @Test("a device that loses its token (Reassigned) or its claim (Superseded) gets a new version")
    func displacedDevicesBump() throws {
        var harness = Harness()
        let holder = try harness.mustRegister(request(apnsToken(1)) { $0.installationID = installation("a") }).device
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.installationID = installation("b") })
        #expect(harness.index.device(holder.id)?.version == 2)
        #expect(harness.index.device(holder.id)?.invalidationReason == .reassigned)
        let proven = try harness.mustRegister(request(apnsToken(5)) { $0.installationSecretDigest = digest(3) }).device
        _ = try harness.mustRegister(request(apnsToken(6)))
        _ = try harness.mustRegister(
            request(apnsToken(6)) {
                $0.deviceID = proven.id; $0.installationSecretDigest = digest(3)
            })
        #expect(harness.index.device(proven.id)?.invalidationReason == .superseded)
        #expect(harness.index.device(proven.id)?.version == 2)
        try harness.verify()
    }

    @Test("after the largest version the next change wraps to 1, never 0")
    func versionWraps() {
        #expect(DeviceVersion.next(1) == 2)
        #expect(DeviceVersion.next(Limits.deviceVersionMax - 1) == Limits.deviceVersionMax)
        #expect(DeviceVersion.next(Limits.deviceVersionMax) == 1)
    }

    @Test("If-Match: a patch or delete whose condition the version does not meet is 412 and changes nothing")
    func conditions() throws {
        var harness = Harness()
        let id = try harness.mustRegister(request(apnsToken(1))).device.id
        let mismatch = harness.index.patchDevice(
            id, tags: .clear, optedIn: false, ifMatch: .oneOf([2, 3]), at: harness.now)
        #expect(mismatch.rejection == .preconditionFailed(currentVersion: 1))
        #expect(harness.index.device(id)?.optedIn == true)
        let empty = harness.index.deleteDevice(id, ifMatch: .oneOf([]))
        #expect(empty.rejection == .preconditionFailed(currentVersion: 1))
        let patched = try #require(
            harness.index.patchDevice(id, tags: .keep, optedIn: false, ifMatch: .oneOf([3, 1]), at: harness.now).value)
        harness.record(patched.mutations)
        #expect(patched.device.version == 2)
        #expect(
            harness.index.deleteDevice(id, ifMatch: .oneOf([1])).rejection == .preconditionFailed(currentVersion: 2))
        let removal = try #require(harness.index.deleteDevice(id, ifMatch: .anyVersion).value)
        harness.record(removal.mutations)
        #expect(removal.deleted)
        // Gone: delete answers deleted: false whatever the condition; patch is 404.
        #expect(harness.index.deleteDevice(id, ifMatch: .oneOf([2])).value?.deleted == false)
        #expect(
            harness.index.patchDevice(id, tags: .keep, optedIn: nil, ifMatch: .anyVersion, at: harness.now).rejection
                == .deviceNotFound)
        try harness.verify()
    }

    // MARK: storage

    @Test("a device upsert of format version 1 (before spec §7) reads as version 1 without client_sequence")
    func formatVersion1Reads() throws {
        var device = try MutationCodecTests.sampleDevice()
        device.version = 9
        device.clientSequence = 77
        let current = MutationCodec.encode(.deviceUpsert(device))
        #expect(current[0] == 2)
        // Version 1's layout is version 2's without its last fields (u32 version, presence byte, u64).
        var old = Array(current.dropLast(13))
        old[0] = 1
        let decoded = try MutationCodec.decode(old)
        var expected = device
        expected.version = 1
        expected.clientSequence = nil
        #expect(decoded == .deviceUpsert(expected))
        // The replay fast path takes it the same way.
        var fast = AppIndex(appID: device.id.appID, mode: device.mode)
        let taken = old.withUnsafeBytes { fast.store.applyEncodedDeviceUpsert($0) }
        #expect(taken)
        #expect(fast.device(device.id) == expected)
        // A version 2 record cut back to version 1's length is refused, not read as version 1.
        var cut = Array(current.dropLast(13))
        #expect(throws: ByteDecodingError.self) { try MutationCodec.decode(cut) }
        cut[0] = 3
        #expect(throws: ByteDecodingError.unsupportedVersion(3)) { try MutationCodec.decode(cut) }
    }

    @Test("version 0, a client sequence over 2^53 - 1 and a bad presence byte are refused by the codec")
    func codecRefusesBadValues() throws {
        var device = try MutationCodecTests.sampleDevice()
        device.clientSequence = 1
        let bytes = MutationCodec.encode(.deviceUpsert(device))
        let versionOffset = bytes.count - 13
        var zeroVersion = bytes
        for offset in versionOffset..<versionOffset + 4 { zeroVersion[offset] = 0 }
        #expect(throws: ByteDecodingError.self) { try MutationCodec.decode(zeroVersion) }
        var presence = bytes
        presence[versionOffset + 4] = 2
        #expect(throws: ByteDecodingError.self) { try MutationCodec.decode(presence) }
        var over = bytes
        let tooBig = Limits.clientSequenceMax + 1
        for byte in 0..<8 { over[versionOffset + 5 + byte] = UInt8(truncatingIfNeeded: tooBig >> UInt64(8 * byte)) }
        #expect(throws: ByteDecodingError.self) { try MutationCodec.decode(over) }
        for broken in [zeroVersion, presence, over] {
            var index = AppIndex(appID: device.id.appID, mode: device.mode)
            #expect(!broken.withUnsafeBytes { index.store.applyEncodedDeviceUpsert($0) })
        }
    }

    @Test(
        "version and client_sequence survive a snapshot and replay, and a device without one costs no side-table entry")
    func snapshotCarriesBoth() throws {
        var harness = Harness()
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.clientSequence = 3 })
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.clientSequence = 4 })
        _ = try harness.mustRegister(request(apnsToken(2)))
        #expect(harness.index.store.clientSequences.count == 1)
        var restored = AppIndex(appID: testApp, mode: .live)
        for mutation in harness.index.snapshotMutations() {
            let bytes = MutationCodec.encode(mutation)
            let fast = bytes.withUnsafeBytes { restored.store.applyEncodedDeviceUpsert($0) }
            if !fast { try restored.apply(MutationCodec.decode(bytes)) }
        }
        #expect(restored.snapshotMutations() == harness.index.snapshotMutations())
        #expect(restored.device(token: apnsToken(1))?.version == 2)
        #expect(restored.device(token: apnsToken(1))?.clientSequence == 4)
        #expect(restored.store.clientSequences.count == 1)
        #expect(restored.invariantViolations() == [])
        // Deleting the device frees its side-table entry.
        let id = try #require(restored.device(token: apnsToken(1))?.id)
        _ = restored.deleteDevice(id)
        #expect(restored.store.clientSequences.isEmpty)
        #expect(restored.invariantViolations() == [])
        try harness.verify()
    }
}
