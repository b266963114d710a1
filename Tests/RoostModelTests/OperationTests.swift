import Testing

@testable import RoostModel

@Suite("Tags")
struct TagsTests {
    /// `count` keys whose entries total `bytes` bytes (key "kNN" + string value).
    static func tags(count: Int, bytes: Int) -> [TagKey: TagValue?] {
        var result: [TagKey: TagValue?] = [:]
        var remaining = bytes
        for n in 0..<count {
            let key = n < 10 ? "k0\(n)" : "k\(n)"
            let share = n == count - 1 ? remaining - key.utf8.count : min(remaining / (count - n), 80) - key.utf8.count
            result[TagKey(key)] = .string(String(repeating: "v", count: share))
            remaining -= key.utf8.count + share
        }
        return result
    }

    @Test(
        "limits after the merge: 50 keys and 4,096 bytes pass, one more is rejected",
        arguments: [
            (50, 200, nil as RegistryRejection?), (51, 204, .tagsTooLarge), (50, 4_096, nil),
            (50, 4_097, .tagsTooLarge),
        ])
    func limits(count: Int, bytes: Int, expected: RegistryRejection?) {
        let patch = Self.tags(count: count, bytes: bytes)
        var tags = Tags()
        do throws(RegistryRejection) {
            try tags.merge(patch)
            #expect(expected == nil)
            #expect(tags.count == count)
            #expect(tags.byteCount == bytes)
        } catch {
            #expect(error == expected)
            #expect(tags.isEmpty, "a rejected merge leaves the tags unchanged")
        }
    }

    @Test("bytes count key UTF-8 plus value: string UTF-8, number 8, boolean 1")
    func byteCounting() throws {
        let tags = try Tags(["é": .string("ab"), "n": .number(1.5), "b": .bool(false)])
        #expect(tags.byteCount == (2 + 2) + (1 + 8) + (1 + 1))
    }

    @Test("null deletes a key, other keys stay, an empty map is a no-op")
    func mergeSemantics() throws {
        var tags = try Tags(["a": .string("1"), "b": .bool(true)])
        try tags.merge(["a": nil, "c": .number(3)])
        #expect(tags == (try Tags(["b": .bool(true), "c": .number(3)])))
        let before = tags
        try tags.merge([:])
        #expect(tags == before)
        try tags.merge(["missing": nil])
        #expect(tags == before)
    }

    @Test(
        "malformed keys and values are invalid_tags",
        arguments: [
            ["": .string("x")], [TagKey(String(repeating: "k", count: 129)): .string("x")], ["n": .number(.nan)],
            ["n": .number(.infinity)],
        ] as [[TagKey: TagValue?]])
    func malformed(patch: [TagKey: TagValue?]) {
        var tags = Tags()
        #expect(throws: RegistryRejection.invalidTags) { try tags.merge(patch) }
    }

    @Test("a merge that makes room by deleting keys is accepted")
    func deleteMakesRoom() throws {
        var tags = Tags()
        try tags.merge(Self.tags(count: 50, bytes: 500))
        var patch: [TagKey: TagValue?] = ["k00": nil]
        patch["new"] = .bool(true)
        try tags.merge(patch)
        #expect(tags.count == 50)
    }

    @Test(
        "list filters compare strings exactly, numbers numerically, booleans by name",
        arguments: [
            (TagValue.string("pro"), "pro", true), (.string("pro"), "Pro", false), (.number(30), "30", true),
            (.number(30), "30.0", true), (.number(30), "thirty", false), (.bool(true), "true", true),
            (.bool(false), "true", false),
        ])
    func filterMatching(value: TagValue, text: String, matches: Bool) {
        #expect(value.matches(filterText: text) == matches)
    }
}

@Suite("Device operations")
struct DeviceOperationTests {
    @Test("PATCH merges tags and sets opted_in without touching last_seen_at")
    func patch() throws {
        var harness = Harness()
        let device = try harness.mustRegister(request(apnsToken(1)) { $0.tags = .merge(["plan": .string("free")]) })
            .device
        harness.advance(seconds: 100)
        let change = try #require(
            harness.index.patchDevice(
                device.id, tags: .merge(["plan": .string("pro"), "trial": nil]), optedIn: false, at: harness.now
            ).value)
        harness.record(change.mutations)
        #expect(change.device.tags["plan"] == .string("pro"))
        #expect(!change.device.optedIn)
        #expect(change.device.lastSeenAt == device.lastSeenAt)
        #expect(change.device.createdAt == device.createdAt)
        let noOp = try #require(
            harness.index.patchDevice(device.id, tags: .merge([:]), optedIn: nil, at: harness.now).value)
        #expect(noOp.mutations.isEmpty, "an empty map is a no-op and logs nothing")
        try harness.verify()
    }

    @Test("PATCH beyond the tag limits is rejected and changes nothing", arguments: [(51, 300), (10, 4_097)])
    func patchTooLarge(count: Int, bytes: Int) throws {
        var harness = Harness()
        let device = try harness.mustRegister(request(apnsToken(1)) { $0.tags = .merge(["a": .bool(true)]) }).device
        let result = harness.index.patchDevice(
            device.id, tags: .merge(TagsTests.tags(count: count, bytes: bytes)), optedIn: false, at: harness.now)
        #expect(result.rejection == .tagsTooLarge)
        #expect(harness.index.device(device.id) == device)
        let viaRegistration = harness.register(
            request(apnsToken(1)) { $0.tags = .merge(TagsTests.tags(count: count, bytes: bytes)) })
        #expect(viaRegistration.rejection == .tagsTooLarge)
        try harness.verify()
    }

    @Test("PATCH, strikes and delete of an unknown device")
    func unknownDevice() {
        var index = AppIndex(appID: testApp, mode: .live)
        let id = DeviceID(appID: testApp, mode: .live, platform: .ios, sequence: 5)
        #expect(
            index.patchDevice(id, tags: .keep, optedIn: true, at: Timestamp(millisecondsSinceEpoch: 0)).rejection
                == .deviceNotFound)
        #expect(index.recordStrike(id).rejection == .deviceNotFound)
        #expect(index.deleteDevice(id) == Removal(deleted: false, devicesRemoved: 0, mutations: []))
    }

    @Test("delete removes the device; the same token later is a new device with a new id")
    func delete() throws {
        var harness = Harness()
        let first = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("p")) }).device
        let removal = harness.index.deleteDevice(first.id)
        harness.record(removal.mutations)
        #expect(removal.deleted)
        #expect(harness.index.deleteDevice(first.id).deleted == false)
        let again = try harness.mustRegister(request(apnsToken(1)))
        #expect(again.created)
        #expect(again.device.id != first.id)
        try harness.verify()
    }

    @Test("delete by token honours the owner (Barua) and by installation (Native Notify)")
    func conditionalDeletes() throws {
        var harness = Harness()
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("alice")) })
        #expect(harness.index.deleteDevice(token: apnsToken(1), ownedBy: person("bob")).deleted == false)
        let removal = harness.index.deleteDevice(token: apnsToken(1), ownedBy: person("alice"))
        harness.record(removal.mutations)
        #expect(removal.deleted)
        _ = try harness.mustRegister(request(fcmToken(1)) { $0.installationID = installation("NN-1") })
        let byInstallation = harness.index.deleteDevice(installation: installation("NN-1"))
        harness.record(byInstallation.mutations)
        #expect(byInstallation.devicesRemoved == 1)
        #expect(harness.index.stats().devices == 0)
        try harness.verify()
    }

    @Test(
        "APNs feedback not later than the latest registration is ignored",
        arguments: [(-1, false), (0, false), (1, true)])
    func staleFeedback(offsetMilliseconds: Int64, applies: Bool) throws {
        var harness = Harness()
        let device = try harness.mustRegister(request(apnsToken(1))).device
        let reported = device.lastSeenAt.adding(milliseconds: offsetMilliseconds)
        harness.advance(seconds: 5)
        let feedback = harness.index.invalidate(
            token: apnsToken(1), reason: try InvalidationReason("Unregistered"), reportedAt: reported, at: harness.now)
        harness.record(feedback.mutations)
        #expect(feedback.result == (applies ? .invalidated(device.id) : .stale(device.id)))
        let stored = try #require(harness.index.device(device.id))
        #expect((stored.invalidatedAt == reported) == applies)
        #expect(stored.invalidationReason == (applies ? try InvalidationReason("Unregistered") : nil))
        try harness.verify()
    }

    @Test("FCM feedback applies without a time; repeated feedback changes nothing; unknown tokens are reported")
    func fcmFeedback() throws {
        var harness = Harness()
        let device = try harness.mustRegister(request(fcmToken(1))).device
        let reason = try InvalidationReason("UNREGISTERED")
        let first = harness.index.invalidate(token: fcmToken(1), reason: reason, reportedAt: nil, at: harness.now)
        harness.record(first.mutations)
        #expect(first.result == .invalidated(device.id))
        let second = harness.index.invalidate(token: fcmToken(1), reason: reason, reportedAt: nil, at: harness.now)
        #expect(second.result == .alreadyInvalidated(device.id))
        #expect(second.mutations.isEmpty)
        #expect(
            harness.index.invalidate(token: fcmToken(2), reason: reason, reportedAt: nil, at: harness.now).result
                == .unknownToken)
        #expect(harness.index.stats().invalidated == 1)
        #expect(harness.index.stats().active == 0)
        try harness.verify()
    }

    @Test("deleting a credential removes the ios devices of that bundle id and environment only")
    func deleteCredential() throws {
        var harness = Harness()
        let bundle = try BundleID("com.example.app")
        let other = try BundleID("com.example.other")
        let key = CredentialKey(bundleID: bundle, environment: .production)
        harness.record(harness.index.putCredential(try APNsCredential(key: key, teamID: "T1", keyID: "K1")))
        let doomed = try harness.mustRegister(request(apnsToken(1)) { $0.bundleID = .set(bundle) }).device
        _ = try harness.mustRegister(
            request(apnsToken(2)) {
                $0.bundleID = .set(bundle)
                $0.environment = .sandbox
            })
        _ = try harness.mustRegister(request(apnsToken(3)) { $0.bundleID = .set(other) })
        _ = try harness.mustRegister(request(fcmToken(4)) { $0.bundleID = .set(bundle) })
        let removal = harness.index.deleteCredential(key)
        harness.record(removal.mutations)
        #expect(removal.deleted)
        #expect(removal.devicesRemoved == 1)
        #expect(harness.index.device(doomed.id) == nil)
        #expect(harness.index.credentials[key] == nil)
        #expect(harness.index.stats().devices == 3)
        try harness.verify()
    }

    @Test("settings are validated and logged once")
    func settings() throws {
        var harness = Harness()
        #expect(
            harness.index.updateSettings(AppSettings(maxDevicesPerPerson: 0, requireKnownPerson: false)).rejection
                == .invalidField("max_devices_per_person"))
        let changed = AppSettings(maxDevicesPerPerson: 2, requireKnownPerson: true)
        harness.record(try #require(harness.index.updateSettings(changed).value))
        #expect(harness.index.updateSettings(changed).value == [])
        #expect(harness.index.settings == changed)
        try harness.verify()
    }
}

@Suite("People")
struct PeopleTests {
    @Test("PUT creates a person once (201 then 200) and GET lists their devices")
    func putAndGet() throws {
        var harness = Harness()
        let put = harness.index.putPerson(person("p"), at: harness.now)
        harness.record(put.mutations)
        #expect(put.created)
        harness.advance()
        let again = harness.index.putPerson(person("p"), at: harness.now)
        #expect(!again.created)
        #expect(again.person.createdAt == put.person.createdAt)
        let device = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("p")) }).device
        let view = try #require(harness.index.person(person("p")))
        #expect(view.devices == [device])
        #expect(harness.index.person(person("nobody")) == nil)
        try harness.verify()
    }

    @Test("erasing a person deletes their devices; the same external_id later starts with none")
    func erase() throws {
        var harness = Harness()
        for n in 0..<3 {
            _ = try harness.mustRegister(request(apnsToken(UInt64(n))) { $0.externalID = .set(person("p")) })
        }
        _ = try harness.mustRegister(request(apnsToken(9)) { $0.externalID = .set(person("q")) })
        let erased = try #require(harness.index.erasePerson(person("p")).value)
        harness.record(erased.mutations)
        #expect(erased.devicesRemoved == 3)
        #expect(harness.index.person(person("p")) == nil)
        #expect(harness.index.stats().devices == 1)
        #expect(harness.index.erasePerson(person("p")).rejection == .personNotFound)
        let fresh = try harness.mustRegister(request(apnsToken(5)) { $0.externalID = .set(person("p")) })
        #expect(try #require(harness.index.person(person("p"))).devices.map(\.id) == [fresh.device.id])
        try harness.verify()
    }
}

@Suite("Listing and stats")
struct ListingTests {
    /// 30 devices: even ones android, every third invalidated, people p0..p4, tag "n" = index % 4.
    static func populated() throws -> Harness {
        var harness = Harness()
        for n in 0..<30 {
            let token = n % 2 == 0 ? fcmToken(UInt64(n)) : apnsToken(UInt64(n))
            _ = try harness.mustRegister(
                request(token) {
                    $0.externalID = .set(person("p\(n % 5)"))
                    $0.tags = .merge(["n": .number(Double(n % 4))])
                })
            if n % 3 == 0 {
                harness.record(
                    harness.index.invalidate(
                        token: token, reason: try InvalidationReason("Unregistered"), reportedAt: nil, at: harness.now
                    ).mutations)
            }
        }
        return harness
    }

    /// Returns every device of the query, following cursors.
    static func all(_ index: AppIndex, _ query: DeviceQuery) throws -> [Device] {
        var query = query
        var result: [Device] = []
        while true {
            let page = try #require(index.listDevices(query).value)
            result += page.devices
            guard let next = page.nextCursor else { return result }
            #expect(DeviceCursor(encoded: next.encoded) == next)
            query.cursor = next
        }
    }

    @Test("pages follow creation order and cover every device exactly once", arguments: [1, 7, 30, 1000])
    func pagination(limit: Int) throws {
        let harness = try Self.populated()
        let devices = try Self.all(harness.index, DeviceQuery(limit: limit))
        #expect(devices.count == 30)
        #expect(devices.map(\.id.sequence) == Array(1...30))
    }

    @Test("filters by person, platform, tag and state")
    func filters() throws {
        let index = try Self.populated().index
        let sequences = { (query: DeviceQuery) in try Self.all(index, query).map { Int($0.id.sequence) - 1 } }
        #expect(try sequences(DeviceQuery(externalID: person("p1"), limit: 2)) == [1, 6, 11, 16, 21, 26])
        #expect(try sequences(DeviceQuery(platform: .android, limit: 4)) == Array(stride(from: 0, to: 30, by: 2)))
        #expect(try sequences(DeviceQuery(tags: ["n": "2"], limit: 3)) == Array(stride(from: 2, to: 30, by: 4)))
        #expect(try sequences(DeviceQuery(state: .invalidated)) == Array(stride(from: 0, to: 30, by: 3)))
        #expect(try sequences(DeviceQuery(state: .active)).count == 20)
        #expect(
            try sequences(
                DeviceQuery(externalID: person("p0"), platform: .android, tags: ["n": "0"], state: .invalidated))
                == [0])
        #expect(try sequences(DeviceQuery(externalID: person("nobody"))) == [])
    }

    @Test("a device deleted during pagination does not make others skip or repeat")
    func stableUnderDeletes() throws {
        var harness = try Self.populated()
        let firstPage = try #require(harness.index.listDevices(DeviceQuery(limit: 10)).value)
        for device in try Self.all(harness.index, DeviceQuery()) where device.id.sequence % 5 == 0 {
            harness.record(harness.index.deleteDevice(device.id).mutations)
        }
        _ = try harness.mustRegister(request(apnsToken(1_000)))
        let rest = try Self.all(harness.index, DeviceQuery(limit: 4, cursor: firstPage.nextCursor))
        #expect(rest.map(\.id.sequence) == (11...31).filter { $0 % 5 != 0 }.map(UInt64.init))
        try harness.verify()
    }

    @Test("limits outside 1...1000 and foreign cursors are refused", arguments: [0, 1001])
    func badLimits(limit: Int) {
        #expect(
            AppIndex(appID: testApp, mode: .live).listDevices(DeviceQuery(limit: limit)).rejection
                == .invalidField("limit"))
        #expect(DeviceCursor(encoded: "dev_x") == nil)
        #expect(DeviceCursor(encoded: "c000000000000000g") == nil)
    }

    @Test("stats count devices, active, invalidated, people and platforms")
    func stats() throws {
        let stats = try Self.populated().index.stats()
        #expect(
            stats
                == RegistryStats(
                    devices: 30, active: 20, invalidated: 10, people: 5, byPlatform: [.ios: 15, .android: 15]))
    }
}
