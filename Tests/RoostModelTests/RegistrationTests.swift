import Testing

@testable import RoostModel

@Suite("Registration: rules 1 to 3 (token, person, known person)")
struct TokenAndPersonRuleTests {
    @Test("a new token creates a device (201) with defaults, created_at = last_seen_at = now")
    func createsDevice() throws {
        var harness = Harness()
        let outcome = try harness.mustRegister(request(apnsToken(1)))
        #expect(outcome.created)
        #expect(outcome.tokenChange == .unchanged)
        let device = outcome.device
        #expect(device.platform == .ios)
        #expect(device.mode == .live)
        #expect(device.environment == .production)
        #expect(device.createdAt == harness.now)
        #expect(device.lastSeenAt == harness.now)
        #expect(device.externalID == nil && device.boundAt == nil)
        #expect(device.optedIn)
        #expect(device.pushPermission == nil)
        #expect(device.tags.isEmpty)
        #expect(device.strikes == 0)
        #expect(device.invalidatedAt == nil && device.invalidationReason == nil)
        #expect(harness.index.device(device.id) == device)
        #expect(DeviceID(rendered: device.id.rendered) == device.id)
        try harness.verify()
    }

    @Test(
        "the same token again is the same device (200): last_seen_at refreshed, created_at kept, invalidation cleared")
    func reregisters() throws {
        var harness = Harness()
        let first = try harness.mustRegister(request(apnsToken(1)) { $0.appVersion = .set("1.0") })
        harness.advance(seconds: 60)
        let feedback = harness.index.invalidate(
            token: apnsToken(1), reason: try InvalidationReason("Unregistered"), reportedAt: harness.now,
            at: harness.now)
        harness.record(feedback.mutations)
        #expect(feedback.result == .invalidated(first.device.id))
        let second = try harness.mustRegister(request(apnsToken(1)))
        #expect(!second.created)
        #expect(second.device.id == first.device.id)
        #expect(second.device.createdAt == first.device.createdAt)
        #expect(second.device.lastSeenAt == harness.now)
        #expect(second.device.lastSeenAt > first.device.lastSeenAt)
        #expect(second.device.invalidatedAt == nil && second.device.invalidationReason == nil)
        #expect(second.device.appVersion == "1.0", "omitted fields keep their stored value")
        #expect(harness.index.stats().devices == 1)
        try harness.verify()
    }

    @Test("a token is unique per platform: the same characters on android are another device")
    func perPlatform() throws {
        var harness = Harness()
        let text = String(repeating: "ab", count: 32)
        let ios = try harness.mustRegister(request(try PushToken(parsing: text, platform: .ios)))
        let android = try harness.mustRegister(request(try PushToken(parsing: text, platform: .android)))
        #expect(ios.device.id != android.device.id)
        #expect(android.created)
        #expect(harness.index.stats().byPlatform == [.ios: 1, .android: 1])
        try harness.verify()
    }

    @Test("a token presented for another person moves the device; it is never on both")
    func movesBetweenPeople() throws {
        var harness = Harness()
        let first = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("alice")) })
        #expect(first.device.boundAt == harness.now)
        let again = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("alice")) })
        #expect(again.device.boundAt == first.device.boundAt, "same person: bound_at unchanged")
        let moved = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("bob")) })
        #expect(moved.device.id == first.device.id)
        #expect(moved.device.externalID == person("bob"))
        #expect(moved.device.boundAt == harness.now)
        #expect(moved.device.boundAt != first.device.boundAt)
        #expect(harness.index.person(person("alice"))?.devices == [])
        #expect(harness.index.person(person("bob"))?.devices.map(\.id) == [first.device.id])
        #expect(harness.index.stats().people == 2)
        try harness.verify()
    }

    @Test("external_id null clears the person; omitted keeps it")
    func clearsPerson() throws {
        var harness = Harness()
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("alice")) })
        let kept = try harness.mustRegister(request(apnsToken(1)))
        #expect(kept.device.externalID == person("alice"))
        let cleared = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .clear })
        #expect(cleared.device.externalID == nil)
        #expect(cleared.device.boundAt == nil)
        #expect(harness.index.person(person("alice"))?.devices == [], "the person stays known without devices")
        try harness.verify()
    }

    /// Registers four devices for one person with `max_devices_per_person` 3
    /// after invalidating the devices listed, and names the one evicted.
    @Test(
        "max_devices_per_person evicts an invalidated device first, else the least recently registered",
        arguments: [
            ([], 0),  // none invalidated: the oldest registration goes
            ([2], 2),  // an invalidated device goes even though it is newer
            ([1, 2], 1),  // several invalidated: the least recently registered of them
        ])
    func eviction(invalidated: [Int], expectedVictim: Int) throws {
        var harness = Harness(settings: AppSettings(maxDevicesPerPerson: 3, requireKnownPerson: false))
        var ids: [DeviceID] = []
        for n in 0..<3 {
            ids.append(
                try harness.mustRegister(request(apnsToken(UInt64(n))) { $0.externalID = .set(person("p")) }).device.id)
        }
        // Refresh device 0 last, so the least recently registered is device 1 unless 0 was never refreshed.
        if expectedVictim != 0 || !invalidated.isEmpty {
            _ = try harness.mustRegister(request(apnsToken(0)))
        }
        for n in invalidated {
            let feedback = harness.index.invalidate(
                token: apnsToken(UInt64(n)), reason: try InvalidationReason("Unregistered"), reportedAt: nil,
                at: harness.now)
            harness.record(feedback.mutations)
        }
        let fourth = try harness.mustRegister(request(apnsToken(9)) { $0.externalID = .set(person("p")) })
        #expect(fourth.evicted == [ids[expectedVictim]])
        #expect(harness.index.device(ids[expectedVictim]) == nil)
        let remaining = try #require(harness.index.person(person("p"))).devices.map(\.id)
        #expect(remaining.count == 3)
        #expect(remaining.contains(fourth.device.id))
        try harness.verify()
    }

    @Test("a route may fix the person limit whatever the app setting (Barua: 10)")
    func limitOverride() throws {
        var harness = Harness(settings: AppSettings(maxDevicesPerPerson: 2, requireKnownPerson: false))
        var evicted: [DeviceID] = []
        for n in 0..<11 {
            let outcome = try harness.mustRegister(
                request(apnsToken(UInt64(n))) {
                    $0.externalID = .set(person("p"))
                    $0.maxDevicesPerPersonOverride = 10
                })
            evicted += outcome.evicted
        }
        #expect(evicted.count == 1)
        #expect(harness.index.person(person("p"))?.devices.count == 10)
        let bad = harness.register(request(apnsToken(99)) { $0.maxDevicesPerPersonOverride = 0 })
        #expect(bad.rejection == .invalidField("max_devices_per_person"))
        try harness.verify()
    }

    @Test("a test-mode index mints test-mode ids and refuses live ones with 422")
    func testMode() throws {
        var harness = Harness(mode: .test)
        let device = try harness.mustRegister(request(apnsToken(1)) { $0.installationSecretDigest = digest(1) }).device
        #expect(device.mode == .test)
        #expect(DeviceID(rendered: device.id.rendered)?.mode == .test)
        let live = DeviceID(appID: testApp, mode: .live, platform: .ios, sequence: device.id.sequence)
        #expect(harness.index.device(live) == nil)
        let result = harness.register(
            request(apnsToken(2)) {
                $0.deviceID = live
                $0.installationSecretDigest = digest(1)
            })
        #expect(result.rejection == .deviceIdentityConflict(field: "device_id"))
        try harness.verify()
    }

    @Test("re-registering a device its person already has does not evict")
    func noEvictionWithoutNewBinding() throws {
        var harness = Harness(settings: AppSettings(maxDevicesPerPerson: 2, requireKnownPerson: false))
        for n in 0..<2 {
            _ = try harness.mustRegister(request(apnsToken(UInt64(n))) { $0.externalID = .set(person("p")) })
        }
        let again = try harness.mustRegister(request(apnsToken(0)) { $0.externalID = .set(person("p")) })
        #expect(again.evicted.isEmpty)
        #expect(harness.index.stats().devices == 2)
        try harness.verify()
    }

    @Test(
        "require_known_person: binding an unknown person is 409 unknown_identity and nothing changes",
        arguments: [(true, false), (false, true)])
    func requireKnownPerson(appSetting: Bool, routeFlag: Bool) throws {
        var harness = Harness(settings: AppSettings(maxDevicesPerPerson: 10, requireKnownPerson: appSetting))
        let existing = try harness.mustRegister(request(apnsToken(1)))
        let rejected = harness.register(
            request(apnsToken(1)) {
                $0.externalID = .set(person("stranger"))
                $0.requireKnownPerson = routeFlag
                $0.appVersion = .set("2.0")
            })
        #expect(rejected.rejection == .unknownIdentity)
        #expect(harness.index.person(person("stranger")) == nil)
        #expect(harness.index.device(existing.device.id)?.appVersion == nil)
        let fresh = harness.register(
            request(apnsToken(2)) {
                $0.externalID = .set(person("stranger"))
                $0.requireKnownPerson = routeFlag
            })
        #expect(fresh.rejection == .unknownIdentity)
        #expect(harness.index.stats().devices == 1)
        harness.record(harness.index.putPerson(person("stranger"), at: harness.now).mutations)
        let accepted = try harness.mustRegister(
            request(apnsToken(2)) {
                $0.externalID = .set(person("stranger"))
                $0.requireKnownPerson = routeFlag
            })
        #expect(accepted.device.externalID == person("stranger"))
        try harness.verify()
    }

    @Test("android accepts only the production environment")
    func androidEnvironment() throws {
        var harness = Harness()
        #expect(harness.register(request(fcmToken(1)) { $0.environment = .sandbox }).rejection == .invalidEnvironment)
        let sandbox = try harness.mustRegister(request(apnsToken(1)) { $0.environment = .sandbox })
        #expect(sandbox.device.environment == .sandbox)
        try harness.verify()
    }

    @Test("metadata bounds are enforced per field", arguments: ["app_version", "timezone", "locale"])
    func metadataBounds(field: String) throws {
        var harness = Harness()
        for bad in ["", String(repeating: "x", count: 65)] {
            let result = harness.register(
                request(apnsToken(1)) {
                    switch field {
                    case "app_version": $0.appVersion = .set(bad)
                    case "timezone": $0.timezone = .set(bad)
                    default: $0.locale = .set(bad)
                    }
                })
            #expect(result.rejection == .invalidField(field))
        }
        #expect(harness.index.stats().devices == 0)
    }

    @Test("the Barua route needs an APNs credential for the bundle id and environment")
    func requiresCredential() throws {
        var harness = Harness()
        let bundle = try BundleID("com.example.app")
        let needs = request(apnsToken(1)) {
            $0.bundleID = .set(bundle)
            $0.requireCredential = true
        }
        #expect(harness.register(needs).rejection == .credentialNotFound)
        let credential = try APNsCredential(
            key: CredentialKey(bundleID: bundle, environment: .production), teamID: "TEAM123456", keyID: "KEY1234567")
        harness.record(harness.index.putCredential(credential))
        #expect(try harness.mustRegister(needs).created)
        var sandbox = needs
        sandbox.environment = .sandbox
        #expect(harness.register(sandbox).rejection == .credentialNotFound)
        try harness.verify()
    }

    @Test("registration stores metadata and returns it; tags merge, null clears, omitted keeps")
    func metadataAndTags() throws {
        var harness = Harness()
        let full = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.bundleID = .set(try! BundleID("com.example.app"))
                $0.appVersion = .set("2.4.0")
                $0.timezone = .set("America/New_York")
                $0.locale = .set("en-US")
                $0.pushPermission = .set(true)
                $0.optedIn = false
                $0.tags = .merge(["plan": .string("pro"), "age": .number(30), "beta": .bool(true)])
            })
        #expect(full.device.timezone == "America/New_York")
        #expect(full.device.pushPermission == true)
        #expect(!full.device.optedIn)
        #expect(full.device.tags["age"] == .number(30))
        let merged = try harness.mustRegister(
            request(apnsToken(1)) { $0.tags = .merge(["plan": nil, "team": .string("red")]) })
        #expect(merged.device.tags == (try Tags(["age": .number(30), "beta": .bool(true), "team": .string("red")])))
        #expect(merged.device.locale == "en-US")
        let kept = try harness.mustRegister(request(apnsToken(1)))
        #expect(kept.device.tags == merged.device.tags)
        let cleared = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.tags = .clear; $0.locale = .clear
            })
        #expect(cleared.device.tags.isEmpty)
        #expect(cleared.device.locale == nil)
        try harness.verify()
    }
}

@Suite("Registration: rule 4 (installation ids)")
struct InstallationRuleTests {
    @Test("a known installation with a new token replaces the token on that device and keeps its strikes")
    func rotatesToken() throws {
        var harness = Harness()
        let first = try harness.mustRegister(request(apnsToken(1)) { $0.installationID = installation("A") })
        harness.record(try #require(harness.index.recordStrike(first.device.id).value).mutations)
        let rotated = try harness.mustRegister(request(apnsToken(2)) { $0.installationID = installation("A") })
        #expect(!rotated.created)
        #expect(rotated.device.id == first.device.id)
        #expect(rotated.device.token == apnsToken(2))
        #expect(rotated.tokenChange == .refreshed)
        #expect(rotated.device.strikes == 1)
        #expect(harness.index.device(token: apnsToken(1)) == nil, "the old token is gone")
        try harness.verify()
    }

    @Test("a token held by another installation moves; the device it left is Reassigned, keeps its id, has no token")
    func reassigns() throws {
        var harness = Harness()
        let a = try harness.mustRegister(request(apnsToken(1)) { $0.installationID = installation("A") })
        harness.record(try #require(harness.index.recordStrike(a.device.id).value).mutations)
        // Installation B is new: it is created with the token.
        let b = try harness.mustRegister(request(apnsToken(1)) { $0.installationID = installation("B") })
        #expect(b.created)
        #expect(b.tokenChange == .reassigned)
        #expect(b.displaced == a.device.id)
        #expect(b.device.strikes == 0, "rule 6: a token that moves starts with 0 strikes")
        let left = try #require(harness.index.device(a.device.id))
        #expect(left.token == nil)
        #expect(left.invalidationReason == .reassigned)
        #expect(left.invalidatedAt == harness.now)
        #expect(left.installationID == installation("A"))
        #expect(harness.index.device(token: apnsToken(1))?.id == b.device.id)
        // A registers again with a token: it is valid again.
        let back = try harness.mustRegister(request(apnsToken(3)) { $0.installationID = installation("A") })
        #expect(back.device.id == a.device.id)
        #expect(back.device.invalidatedAt == nil)
        #expect(back.tokenChange == .refreshed)
        try harness.verify()
    }

    @Test("a token moves to a known installation's device; that device's old token is dropped")
    func reassignsToKnownInstallation() throws {
        var harness = Harness()
        let a = try harness.mustRegister(request(apnsToken(1)) { $0.installationID = installation("A") })
        let b = try harness.mustRegister(request(apnsToken(2)) { $0.installationID = installation("B") })
        let moved = try harness.mustRegister(request(apnsToken(1)) { $0.installationID = installation("B") })
        #expect(moved.device.id == b.device.id)
        #expect(moved.displaced == a.device.id)
        #expect(harness.index.device(token: apnsToken(2)) == nil)
        #expect(harness.index.device(a.device.id)?.invalidationReason == .reassigned)
        #expect(
            harness.index.stats()
                == RegistryStats(devices: 2, active: 1, invalidated: 1, people: 0, byPlatform: [.ios: 2, .android: 0]))
        try harness.verify()
    }

    @Test("a device registered by token alone adopts the installation id named later")
    func adoptsInstallation() throws {
        var harness = Harness()
        let plain = try harness.mustRegister(request(fcmToken(1)))
        let named = try harness.mustRegister(request(fcmToken(1)) { $0.installationID = installation("X") })
        #expect(named.device.id == plain.device.id)
        #expect(named.device.installationID == installation("X"))
        #expect(harness.index.device(installation: installation("X"))?.id == plain.device.id)
        try harness.verify()
    }

    enum MissingProof: String, CaseIterable, Sendable {
        case none, secretOnly, deviceIDOnly, wrongSecret, otherDevicesProof
    }

    @Test(
        "an installation whose device holds a secret is reached only with its proof: 409, nothing changes",
        arguments: MissingProof.allCases)
    func installationProofRequired(missing: MissingProof) throws {
        var harness = Harness()
        let secured = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.installationID = installation("A")
                $0.installationSecretDigest = digest(1)
            })
        let other = try harness.mustRegister(request(apnsToken(9)) { $0.installationSecretDigest = digest(9) })
        let result = harness.register(
            request(apnsToken(2)) {
                $0.installationID = installation("A")
                $0.externalID = .set(person("intruder"))
                switch missing {
                case .none: break
                case .secretOnly: $0.installationSecretDigest = digest(1)
                case .deviceIDOnly: $0.deviceID = secured.device.id
                case .wrongSecret:
                    $0.deviceID = secured.device.id
                    $0.installationSecretDigest = digest(2)
                case .otherDevicesProof:
                    $0.deviceID = other.device.id
                    $0.installationSecretDigest = digest(9)
                }
            })
        #expect(result.rejection == .installationProofRequired)
        #expect(result.rejection?.httpStatus == 409)
        #expect(result.rejection?.code == "installation_proof_required")
        #expect(result.rejection?.field == "installation_id")
        #expect(harness.index.device(secured.device.id)?.token == apnsToken(1))
        // With the proof the same request goes through, on the same device.
        let proven = try harness.mustRegister(
            request(apnsToken(2)) {
                $0.installationID = installation("A")
                $0.deviceID = secured.device.id
                $0.installationSecretDigest = digest(1)
            })
        #expect(proven.device.id == secured.device.id)
        #expect(proven.tokenChange == .refreshed)
        try harness.verify()
    }

    @Test("a secured installation's own token re-registers without the proof (rule 1 reaches it)")
    func securedInstallationOwnToken() throws {
        var harness = Harness()
        let secured = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.installationID = installation("A")
                $0.installationSecretDigest = digest(1)
            })
        let again = try harness.mustRegister(request(apnsToken(1)) { $0.installationID = installation("A") })
        #expect(again.device.id == secured.device.id)
        #expect(!again.created)
        try harness.verify()
    }

    @Test("a reinstall (new installation id, no secret) takes the token to a new device; the old one is Reassigned")
    func reinstall() throws {
        var harness = Harness()
        let old = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.installationID = installation("A")
                $0.installationSecretDigest = digest(1)
            })
        let fresh = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.installationID = installation("B")
                $0.installationSecretDigest = digest(2)
            })
        #expect(fresh.created)
        #expect(fresh.displaced == old.device.id)
        let left = try #require(harness.index.device(old.device.id))
        #expect(left.invalidationReason == .reassigned)
        #expect(left.installationID == installation("A"))
        #expect(left.token == nil)
        try harness.verify()
    }

    @Test("an existing device keeps its environment when a registration omits it; a new device gets production")
    func environmentKept() throws {
        var harness = Harness()
        let sandbox = try harness.mustRegister(
            RegisterRequest(token: apnsToken(1), environment: .sandbox))
        #expect(sandbox.device.environment == .sandbox)
        #expect(try harness.mustRegister(request(apnsToken(1))).device.environment == .sandbox)
        let named = try harness.mustRegister(
            request(apnsToken(2)) {
                $0.environment = .sandbox
                $0.installationID = installation("A")
            })
        let rotated = try harness.mustRegister(request(apnsToken(3)) { $0.installationID = installation("A") })
        #expect(rotated.device.id == named.device.id)
        #expect(rotated.device.environment == .sandbox)
        #expect(try harness.mustRegister(request(apnsToken(4))).device.environment == .production)
        #expect(
            try harness.mustRegister(RegisterRequest(token: apnsToken(1), environment: .production)).device.environment
                == .production)
        try harness.verify()
    }

    @Test("an installation id of another platform is 422 device_identity_conflict")
    func installationOtherPlatform() throws {
        var harness = Harness()
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.installationID = installation("A") })
        let result = harness.register(request(fcmToken(1)) { $0.installationID = installation("A") })
        #expect(result.rejection == .deviceIdentityConflict(field: "installation_id"))
        try harness.verify()
    }
}

@Suite("Registration: rules 5 and 6 (device id proof, strikes)")
struct ProofRuleTests {
    @Test("a matching proof replaces the token on the same device id, keeping omitted attributes")
    func proofReplacesToken() throws {
        var harness = Harness()
        let first = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.installationSecretDigest = digest(7)
                $0.timezone = .set("Europe/Paris")
            })
        let proven = try harness.mustRegister(
            request(apnsToken(2)) {
                $0.deviceID = first.device.id
                $0.installationSecretDigest = digest(7)
            })
        #expect(!proven.created)
        #expect(proven.device.id == first.device.id)
        #expect(proven.device.token == apnsToken(2))
        #expect(proven.device.timezone == "Europe/Paris")
        #expect(harness.index.device(token: apnsToken(1)) == nil)
        try harness.verify()
    }

    enum Proof: String, CaseIterable, Sendable {
        case wrongSecret, missingSecret, deletedDevice, foreignApp, noStoredSecret
    }

    @Test("an unknown or foreign id, or a missing or wrong proof, does not reuse the row", arguments: Proof.allCases)
    func noReuse(proof: Proof) throws {
        var harness = Harness()
        let first = try harness.mustRegister(
            request(apnsToken(1)) { $0.installationSecretDigest = proof == .noStoredSecret ? nil : digest(7) })
        var id = first.device.id
        var secret: SecretDigest? = digest(7)
        switch proof {
        case .wrongSecret: secret = digest(8)
        case .missingSecret: secret = nil
        case .deletedDevice: harness.record(harness.index.deleteDevice(id).mutations)
        case .foreignApp: id = DeviceID(appID: AppID(99), mode: .test, platform: .android, sequence: id.sequence)
        case .noStoredSecret: break
        }
        let second = try harness.mustRegister(
            request(apnsToken(2)) {
                $0.deviceID = id
                $0.installationSecretDigest = secret
            })
        #expect(second.created)
        #expect(second.device.id != first.device.id)
        if proof != .deletedDevice {
            #expect(harness.index.device(first.device.id)?.token == apnsToken(1), "the old row is untouched")
        }
        try harness.verify()
    }

    @Test("when the new token belongs to another device, that device wins and the proven one is Superseded")
    func superseded() throws {
        var harness = Harness()
        let proven = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.installationSecretDigest = digest(7)
                $0.installationID = installation("I")
            })
        let holder = try harness.mustRegister(request(apnsToken(2)) { $0.appVersion = .set("9") })
        harness.record(try #require(harness.index.recordStrike(holder.device.id).value).mutations)
        // No installation id named: rule 5 decides.
        let result = try harness.mustRegister(
            request(apnsToken(2)) {
                $0.deviceID = proven.device.id
                $0.installationSecretDigest = digest(7)
            })
        #expect(!result.created)
        #expect(result.device.id == holder.device.id)
        #expect(result.displaced == proven.device.id)
        #expect(result.device.installationID == nil)
        #expect(result.device.installationSecretDigest == digest(7))
        #expect(result.device.strikes == 1, "the token did not move: the winner keeps its strikes")
        let loser = try #require(harness.index.device(proven.device.id))
        #expect(loser.invalidationReason == .superseded)
        #expect(loser.invalidatedAt == harness.now)
        #expect(loser.installationID == installation("I"), "no installation id is overwritten silently")
        #expect(loser.installationSecretDigest == nil, "the old id no longer proves anything")
        #expect(loser.token == apnsToken(1))
        try harness.verify()
    }

    @Test("proof + installation_id + another installation's token: rule 4 decides; the holder keeps its installation")
    func proofInstallationAndForeignToken() throws {
        var harness = Harness()
        let proven = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.installationSecretDigest = digest(7)
                $0.installationID = installation("P")
            })
        let holder = try harness.mustRegister(request(apnsToken(2)) { $0.installationID = installation("H") })
        harness.record(try #require(harness.index.recordStrike(holder.device.id).value).mutations)
        let result = try harness.mustRegister(
            request(apnsToken(2)) {
                $0.deviceID = proven.device.id
                $0.installationSecretDigest = digest(7)
                $0.installationID = installation("P")
            })
        #expect(!result.created)
        #expect(result.device.id == proven.device.id)
        #expect(result.device.token == apnsToken(2))
        #expect(result.device.installationID == installation("P"))
        #expect(result.tokenChange == .reassigned)
        #expect(result.displaced == holder.device.id)
        #expect(result.device.strikes == 0, "rule 6: the token moved")
        let left = try #require(harness.index.device(holder.device.id))
        #expect(left.invalidationReason == .reassigned)
        #expect(left.token == nil)
        #expect(left.installationID == installation("H"))
        #expect(harness.index.device(token: apnsToken(1)) == nil, "the proven device's old token is dropped")
        try harness.verify()
    }

    @Test("a proof and an installation id naming two devices is 422, even when the named one holds the token")
    func proofAndInstallationNameTwoDevices() throws {
        var harness = Harness()
        let proven = try harness.mustRegister(request(apnsToken(1)) { $0.installationSecretDigest = digest(7) })
        _ = try harness.mustRegister(request(apnsToken(2)) { $0.installationID = installation("H") })
        for token in [apnsToken(2), apnsToken(3)] {
            let result = harness.register(
                request(token) {
                    $0.deviceID = proven.device.id
                    $0.installationSecretDigest = digest(7)
                    $0.installationID = installation("H")
                })
            #expect(result.rejection == .deviceIdentityConflict(field: "installation_id"))
        }
        try harness.verify()
    }

    @Test(
        "a device id of another mode or platform is 422 device_identity_conflict and nothing changes",
        arguments: [(AppMode.test, Platform.ios), (.live, .android), (.test, .android)])
    func conflict(mode: AppMode, platform: Platform) throws {
        var harness = Harness()
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.installationSecretDigest = digest(7) })
        let elsewhere = DeviceID(appID: testApp, mode: mode, platform: platform, sequence: 1)
        let result = harness.register(
            request(apnsToken(5)) {
                $0.deviceID = elsewhere
                $0.installationSecretDigest = digest(7)
            })
        #expect(result.rejection == .deviceIdentityConflict(field: "device_id"))
        #expect(result.rejection?.httpStatus == 422)
        #expect(harness.index.stats().devices == 1)
        try harness.verify()
    }

    @Test("a device id proven for one device while the installation id names another is 422")
    func proofAndInstallationDisagree() throws {
        var harness = Harness()
        let a = try harness.mustRegister(request(apnsToken(1)) { $0.installationSecretDigest = digest(1) })
        _ = try harness.mustRegister(request(apnsToken(2)) { $0.installationID = installation("B") })
        let result = harness.register(
            request(apnsToken(3)) {
                $0.deviceID = a.device.id
                $0.installationSecretDigest = digest(1)
                $0.installationID = installation("B")
            })
        #expect(result.rejection == .deviceIdentityConflict(field: "installation_id"))
        try harness.verify()
    }

    @Test("strikes: kept on re-registration and token rotation, reset when a token moves to another device")
    func strikes() throws {
        var harness = Harness()
        let a = try harness.mustRegister(request(apnsToken(1)) { $0.installationID = installation("A") })
        for _ in 0..<3 { harness.record(try #require(harness.index.recordStrike(a.device.id).value).mutations) }
        #expect(try harness.mustRegister(request(apnsToken(1))).device.strikes == 3)
        #expect(
            try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("p")) }).device.strikes == 3)
        let b = try harness.mustRegister(request(apnsToken(2)) { $0.installationID = installation("B") })
        harness.record(try #require(harness.index.recordStrike(b.device.id).value).mutations)
        let moved = try harness.mustRegister(request(apnsToken(1)) { $0.installationID = installation("B") })
        #expect(moved.device.id == b.device.id)
        #expect(moved.device.strikes == 0)
        try harness.verify()
    }
}
