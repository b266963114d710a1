import Testing

@testable import RoostModel

/// A catalog in memory: each command is planned, then its records applied,
/// as the API's logged state and replay both do.
private struct CatalogHarness {
    var contents = CatalogContents()
    var log: [CatalogRecord] = []
    var clockMilliseconds: Int64 = 1_700_000_000_000

    /// Plans `command`; on success applies and logs its records. A rejection
    /// must leave the state as it was.
    mutating func run(_ command: CatalogCommand) throws(CatalogRejection) -> CatalogOutcome {
        clockMilliseconds += 1_000
        let before = contents
        let plan: CatalogPlan
        do throws(CatalogRejection) {
            plan = try contents.plan(command)
        } catch {
            #expect(contents == before, "a rejection changed state")
            throw error
        }
        #expect(contents == before, "planning changed state")
        for record in plan.records { contents.apply(record) }
        log += plan.records
        return plan.outcome
    }

    /// Returns the rejection of `command`, nil when it succeeded.
    mutating func refusal(_ command: CatalogCommand) -> CatalogRejection? {
        do throws(CatalogRejection) {
            _ = try run(command)
            return nil
        } catch {
            return error
        }
    }

    mutating func app(_ name: String) throws(CatalogRejection) -> AppRecord {
        let outcome = try run(.createApp(name: name, settings: AppSettingsChange(), atMilliseconds: clockMilliseconds))
        guard case .app(let app) = outcome else { preconditionFailure("\(outcome)") }
        return app
    }

    func key(_ id: String, of app: AppID, mode: AppMode = .live, seed: UInt8) -> KeyRecord {
        let digest = KeyDigest(bytes: [UInt8](repeating: seed, count: 32))!
        return KeyRecord(
            id: id, appID: app, kind: .secret, mode: mode, capabilities: [.devicesRead], label: "",
            createdAtMilliseconds: clockMilliseconds, rateLimitPerSecond: nil, digest: digest)
    }
}

@Suite("Catalog commands: the catalog's rules as values (RoostModel)")
struct CatalogCommandTests {
    @Test("a secret key allows exactly the capabilities it holds, for each of the 32 sets; a mobile key none")
    func keyAllowsItsCapabilities() {
        let all = Capability.allCases
        let digest = KeyDigest(bytes: [UInt8](repeating: 7, count: 32))!
        for mask in 0..<(1 << all.count) {
            let held = Set(all.indices.filter { mask & (1 << $0) != 0 }.map { all[$0] })
            for kind in [KeyKind.secret, .mobile] {
                let key = KeyRecord(
                    id: "key_0000000000000001", appID: AppID(1), kind: kind, mode: .live, capabilities: held,
                    label: "", createdAtMilliseconds: 0, rateLimitPerSecond: nil, digest: digest)
                for capability in all {
                    #expect(key.allows(capability) == (kind == .secret && held.contains(capability)), "\(held) \(kind)")
                }
            }
        }
    }

    @Test("apps take ids from the logged counter, never reused after a deletion; replay gives the same state")
    func appIDs() throws {
        var harness = CatalogHarness()
        let first = try harness.app("one")
        let second = try harness.app("two")
        #expect(first.id == AppID(1))
        #expect(second.id == AppID(2))
        let deleted = try harness.run(.deleteApp(second.id))
        #expect(deleted == .appDeleted(keyIDs: []))
        #expect(try harness.app("three").id == AppID(3))
        let rebuilt = try CatalogContents.rebuild(harness.log.map { $0.encoded() })
        #expect(rebuilt.catalog == harness.contents.catalog)
    }

    @Test("an update that changes nothing logs nothing; one that changes a setting logs the app's after-image")
    func updates() throws {
        var harness = CatalogHarness()
        let app = try harness.app("one")
        let logged = harness.log.count
        #expect(try harness.run(.updateApp(app.id, name: "one", settings: AppSettingsChange())) == .app(app))
        #expect(harness.log.count == logged)
        let change = AppSettingsChange(maxDevicesPerPerson: 3, inactiveAfterDays: .some(nil))
        guard case .app(let next) = try harness.run(.updateApp(app.id, name: nil, settings: change)) else {
            Issue.record("not an app")
            return
        }
        #expect(next.settings.maxDevicesPerPerson == 3)
        #expect(next.settings.inactiveAfterDays == nil)
        #expect(harness.log.last == .app(next))
    }

    @Test("unknown apps, keys and identity keys are refused with the codes of the API")
    func unknowns() throws {
        var harness = CatalogHarness()
        let app = try harness.app("one")
        let other = try harness.app("two")
        #expect(harness.refusal(.deleteApp(AppID(99))) == .appNotFound)
        #expect(harness.refusal(.updateApp(AppID(99), name: "x", settings: .init())) == .appNotFound)
        #expect(harness.refusal(.createKey(harness.key("key_1", of: AppID(99), seed: 1))) == .appNotFound)
        _ = try harness.run(.createKey(harness.key("key_1", of: app.id, mode: .test, seed: 1)))
        // Another app's key, or the other mode's, answers as unknown.
        #expect(harness.refusal(.revokeKey(app: other.id, keyID: "key_1", onlyMode: nil)) == .keyNotFound)
        #expect(harness.refusal(.revokeKey(app: app.id, keyID: "key_1", onlyMode: .live)) == .keyNotFound)
        #expect(try harness.run(.revokeKey(app: app.id, keyID: "key_1", onlyMode: .test)) == .keyRevoked)
        #expect(harness.refusal(.revokeKey(app: app.id, keyID: "key_1", onlyMode: nil)) == .keyNotFound)
        #expect(harness.refusal(.removeIdentityKey(id: "ik_0000000000000000")) == .identityKeyNotFound)
        #expect(CatalogRejection.keyNotFound.httpStatus == 404)
        #expect(CatalogRejection.keyNotFound.code == "key_not_found")
    }

    @Test("deleting an app names its keys; uses of keys no longer live log nothing")
    func deletionAndUses() throws {
        var harness = CatalogHarness()
        let app = try harness.app("one")
        _ = try harness.run(.createKey(harness.key("key_a", of: app.id, seed: 1)))
        _ = try harness.run(.createKey(harness.key("key_b", of: app.id, seed: 2)))
        _ = try harness.run(.noteKeyUses([KeyUse(keyID: "key_a", atMilliseconds: 5)]))
        #expect(harness.contents.catalog.keyLastUsedMilliseconds["key_a"] == 5)
        guard case .appDeleted(let keyIDs) = try harness.run(.deleteApp(app.id)) else {
            Issue.record("not a deletion")
            return
        }
        #expect(keyIDs.sorted() == ["key_a", "key_b"])
        let logged = harness.log.count
        #expect(try harness.run(.noteKeyUses([KeyUse(keyID: "key_a", atMilliseconds: 9)])) == .keyUsesNoted)
        #expect(harness.log.count == logged)
        #expect(harness.contents.catalog.keyLastUsedMilliseconds.isEmpty)
    }

    @Test("an app holds at most keysPerAppMax keys")
    func keyLimit() throws {
        var harness = CatalogHarness()
        let app = try harness.app("one")
        for index in 0..<CatalogLimits.keysPerAppMax {
            var key = harness.key("key_\(index)", of: app.id, seed: 0)
            key.digest = KeyDigest(
                bytes: [UInt8(index & 0xff), UInt8(index >> 8)] + [UInt8](repeating: 7, count: 30))!
            harness.contents.apply(.key(key))
        }
        let refused = harness.refusal(.createKey(harness.key("key_x", of: app.id, seed: 9)))
        #expect(refused == .keysPerAppLimitReached)
        #expect(refused?.message == "an app holds at most 1000 keys")
    }

    @Test("identity keys: a rotation makes the new key current; the current key cannot be removed; at most keysMax")
    func identityKeys() throws {
        var harness = CatalogHarness()
        let first = IdentitySigningKey.mint(at: 1)
        #expect(IdentitySigningKey.isValidID(first.id))
        #expect(first.secret.count == IdentitySigningKey.secretBytes)
        #expect(try harness.run(.rotateIdentityKey(first)) == .identityKey(first))
        let second = IdentitySigningKey.mint(at: 2)
        _ = try harness.run(.rotateIdentityKey(second))
        #expect(harness.contents.identityKeys.currentID == second.id)
        #expect(harness.refusal(.removeIdentityKey(id: second.id)) == .currentIdentityKey)
        #expect(try harness.run(.removeIdentityKey(id: first.id)) == .identityKeyRemoved)
        while harness.contents.identityKeys.keys.count < IdentitySigningKey.keysMax {
            _ = try harness.run(.rotateIdentityKey(IdentitySigningKey.mint(at: 3)))
        }
        let refused = harness.refusal(.rotateIdentityKey(IdentitySigningKey.mint(at: 4)))
        #expect(refused == .identityKeysLimitReached)
        let rebuilt = try CatalogContents.rebuild(harness.log.map { $0.encoded() })
        #expect(rebuilt.identityKeys == harness.contents.identityKeys)
    }
}
