import RoostCrypto
import RoostHTTP
import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

/// Spec §11 "Operating": `GET /v1/apps/{app}/keys` and `GET /v1/people`
/// (decision 0053). Every sentence of the two bullets has a test here; the
/// list is in docs/api.md ("§11 operating").
@Suite("Operator listings: keys and people (spec §11)")
struct OperatorListingTests {
    static let keyMembers = ["id", "kind", "mode", "capabilities", "label", "created_at", "last_used_at"]

    // MARK: - GET /v1/apps/{app}/keys

    @Test("GET /v1/apps/{app}/keys → 200 {keys:[{id,kind,mode,capabilities,label,created_at,last_used_at}]}")
    func listKeys() async throws {
        let harness = try Harness()
        let app = try await harness.createApp()
        let secret = try await harness.createKey(
            app: app, #"{"kind":"secret","mode":"live","capabilities":["devices:read","setup:write"],"label":"ops"}"#)
        harness.clock.advance(milliseconds: 5)
        let mobile = try await harness.createKey(app: app, #"{"kind":"mobile","mode":"test","label":"ios app"}"#)
        let answer = await harness.call(.get, "/v1/apps/\(app)/keys", key: Harness.adminKey)
        #expect(answer.status == 200)
        #expect(answer.header("Content-Type") == "application/json")
        let keys = try #require(answer.json?["keys"]?.arrayValue)
        #expect(keys.count == 2)
        for key in keys {
            #expect(key.objectMembers?.map(\.key) == Self.keyMembers)
        }
        #expect(keys.map { $0["id"]?.stringValue } == [secret.id, mobile.id])
        #expect(keys[0]["kind"]?.stringValue == "secret")
        #expect(keys[0]["mode"]?.stringValue == "live")
        #expect(keys[0]["capabilities"]?.arrayValue?.compactMap(\.stringValue) == ["devices:read", "setup:write"])
        #expect(keys[0]["label"]?.stringValue == "ops")
        #expect(keys[0]["created_at"]?.stringValue == "2026-09-21T14:13:20.000Z")
        #expect(keys[1]["kind"]?.stringValue == "mobile")
        #expect(keys[1]["mode"]?.stringValue == "test")
        #expect(keys[1]["capabilities"]?.arrayValue?.isEmpty == true)
        #expect(keys[1]["created_at"]?.stringValue == "2026-09-21T14:13:20.005Z")
        // The operator's own calls are not a use of the app's keys.
        #expect(keys.allSatisfy { $0["last_used_at"]?.isNull == true })
    }

    @Test("the list never holds a key or its digest")
    func neverTheKeyOrItsDigest() async throws {
        let harness = try Harness()
        let app = try await harness.createApp()
        var secrets: [String] = []
        for body in [
            #"{"kind":"secret","capabilities":["setup:write"]}"#, #"{"kind":"mobile"}"#,
            #"{"kind":"secret","mode":"test","capabilities":["devices:read"]}"#,
        ] {
            secrets.append(try await harness.createKey(app: app, body).key)
        }
        _ = await harness.call(.get, "/v1/apps/\(app)", key: secrets[0])  // a use: last_used_at is set
        let answer = await harness.call(.get, "/v1/apps/\(app)/keys", key: secrets[0])
        #expect(answer.status == 200)
        #expect(answer.json?["keys"]?.arrayValue?.count == 3)
        let text = answer.text
        for secret in secrets {
            #expect(!text.contains(secret))
            let digest = Crypto.sha256(secret.utf8)
            #expect(!answer.body.contains(bytes: digest))
            #expect(!text.lowercased().contains(Hex.encode(digest)))
            #expect(!text.contains(String(secret.suffix(48))))
        }
        #expect(!text.contains("digest") && !text.contains("\"key\""))
    }

    @Test("access as the other §3 routes: operator, or the app's secret key with setup:write; else 401/403/404")
    func keysAccess() async throws {
        let harness = try Harness()
        let app = try await harness.createApp()
        let other = try await harness.createApp("Other")
        let setup = try await harness.createKey(app: app, #"{"kind":"secret","capabilities":["setup:write"]}"#).key
        let reader = try await harness.createKey(app: app, #"{"kind":"secret","capabilities":["devices:read"]}"#).key
        let mobile = try await harness.createKey(app: app, #"{"kind":"mobile"}"#).key
        let foreign = try await harness.createKey(app: other, #"{"kind":"secret","capabilities":["setup:write"]}"#)
            .key
        let path = "/v1/apps/\(app)/keys"
        #expect(await harness.call(.get, path, key: Harness.adminKey).status == 200)
        #expect(await harness.call(.get, path, key: setup).status == 200)
        #expect(await harness.call(.get, path).status == 401)
        #expect(await harness.call(.get, path, key: "sk_live_nope").status == 401)
        #expect(await harness.call(.get, path, key: reader).status == 403)
        #expect(await harness.call(.get, path, key: mobile).status == 403)
        let foreignAnswer = await harness.call(.get, path, key: foreign)
        #expect(foreignAnswer.status == 404)
        #expect(foreignAnswer.errorCode == "app_not_found")
        #expect(await harness.call(.get, "/v1/apps/999/keys", key: Harness.adminKey).errorCode == "app_not_found")
        #expect(await harness.call(.get, "/v1/apps/x/keys", key: Harness.adminKey).status == 404)
    }

    @Test("a test key sees the test keys only; revoked keys are not listed")
    func testModeAndRevoked() async throws {
        let harness = try Harness()
        let app = try await harness.createApp()
        let live = try await harness.createKey(app: app, #"{"kind":"secret","capabilities":["setup:write"]}"#)
        harness.clock.advance(milliseconds: 1)  // oldest first: the order is by created_at, then id
        let test = try await harness.createKey(
            app: app, #"{"kind":"secret","mode":"test","capabilities":["setup:write"]}"#)
        let gone = try await harness.createKey(app: app, #"{"kind":"mobile"}"#)
        #expect(await harness.call(.delete, "/v1/apps/\(app)/keys/\(gone.id)", key: Harness.adminKey).status == 200)
        let all = await harness.call(.get, "/v1/apps/\(app)/keys", key: live.key)
        #expect(all.json?["keys"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == [live.id, test.id])
        let testOnly = await harness.call(.get, "/v1/apps/\(app)/keys", key: test.key)
        #expect(testOnly.json?["keys"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == [test.id])
    }

    @Test("last_used_at moves after a use, in memory at every use, logged at most once a minute per key")
    func lastUsedAt() async throws {
        let harness = try Harness()
        let app = try await harness.createApp()
        let key = try await harness.createKey(app: app, #"{"kind":"secret","capabilities":["setup:write"]}"#)
        func lastUsed() async -> String? {
            let answer = await harness.call(.get, "/v1/apps/\(app)/keys", key: Harness.adminKey)
            return answer.json?["keys"]?.arrayValue?.first?["last_used_at"]?.stringValue
        }
        func logged() -> Int64? { harness.catalog.currentState().keyLastUsedMilliseconds[key.id] }
        #expect(await lastUsed() == nil)
        let start = harness.clock.wallMilliseconds()
        harness.clock.advance(milliseconds: 1_000)
        #expect(await harness.call(.get, "/v1/apps/\(app)", key: key.key).status == 200)
        #expect(await lastUsed() == Timestamp(millisecondsSinceEpoch: start + 1_000).rfc3339)
        #expect(logged() == start + 1_000)  // the first use of a run is logged at once
        // Within the minute: the listing moves, the log does not.
        harness.clock.advance(milliseconds: 30_000)
        #expect(await harness.call(.get, "/v1/apps/\(app)", key: key.key).status == 200)
        #expect(await lastUsed() == Timestamp(millisecondsSinceEpoch: start + 31_000).rfc3339)
        #expect(logged() == start + 1_000)
        // A failed authorization (403) is still a use of the key: it authenticated.
        harness.clock.advance(milliseconds: 30_000)
        #expect(await harness.call(.get, "/v1/apps", key: key.key).status == 403)
        #expect(await lastUsed() == Timestamp(millisecondsSinceEpoch: start + 61_000).rfc3339)
        #expect(logged() == start + 61_000)
        // A clean shutdown logs what the hot path left in memory.
        harness.clock.advance(milliseconds: 10_000)
        _ = await harness.call(.get, "/v1/apps/\(app)", key: key.key)
        #expect(logged() == start + 61_000)
        #expect(harness.catalog.flushKeyUsage() != .refused)
        #expect(logged() == start + 71_000)
    }

    @Test("last_used_at survives a restart (clean shutdown keeps the last use; a crash loses under a minute)")
    func lastUsedAtSurvivesRestart() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (first, firstEngine) = try await Harness.durable(directory)
        let app = try await first.createApp()
        let key = try await first.createKey(app: app, #"{"kind":"secret","capabilities":["setup:write"]}"#)
        let start = first.clock.wallMilliseconds()
        #expect(await first.call(.get, "/v1/apps/\(app)", key: key.key).status == 200)  // logged: start
        first.clock.advance(milliseconds: 20_000)
        #expect(await first.call(.get, "/v1/apps/\(app)", key: key.key).status == 200)  // in memory only
        // A crash: the engine stops without the shutdown's flush.
        firstEngine.close()

        let (second, secondEngine) = try await Harness.durable(directory)
        func lastUsed(_ harness: Harness) async -> String? {
            let answer = await harness.call(.get, "/v1/apps/\(app)/keys", key: Harness.adminKey)
            return answer.json?["keys"]?.arrayValue?.first?["last_used_at"]?.stringValue
        }
        #expect(await lastUsed(second) == Timestamp(millisecondsSinceEpoch: start).rfc3339)
        second.clock.advance(milliseconds: 45_000)
        #expect(await second.call(.get, "/v1/apps/\(app)", key: key.key).status == 200)
        second.clock.advance(milliseconds: 5_000)
        #expect(await second.call(.get, "/v1/apps/\(app)", key: key.key).status == 200)
        #expect(await lastUsed(second) == Timestamp(millisecondsSinceEpoch: start + 50_000).rfc3339)
        // A clean shutdown: `roost serve` flushes the uses, then snapshots and closes.
        _ = second.catalog.flushKeyUsage()
        _ = try await secondEngine.snapshot()
        secondEngine.close()

        let (third, thirdEngine) = try await Harness.durable(directory)
        defer { thirdEngine.close() }
        #expect(await lastUsed(third) == Timestamp(millisecondsSinceEpoch: start + 50_000).rfc3339)
    }

    // MARK: - GET /v1/people

    /// Makes `count` people in the live index, person `i` with `i % 3` devices.
    static func people(_ app: DeviceApp, count: Int) async throws -> [String: Int] {
        var devices: [String: Int] = [:]
        var token = 0
        for index in 0..<count {
            let name = "person-\(index)"
            #expect(await app.call(.put, "/v1/people/\(name)").status == 201)
            for _ in 0..<(index % 3) {
                token += 1
                _ = try await app.registerID(token, #""external_id":"\#(name)""#)
            }
            devices[name] = index % 3
        }
        return devices
    }

    @Test("GET /v1/people → 200 {people:[{external_id,created_at,devices:N}],next_cursor}")
    func listPeople() async throws {
        let app = try await DeviceApp.make()
        let expected = try await Self.people(app, count: 5)
        _ = try await app.registerID(900, #""external_id":"implicit""#)  // made known by binding
        let answer = await app.call(.get, "/v1/people")
        #expect(answer.status == 200)
        let json = try #require(answer.json)
        #expect(json.objectMembers?.map(\.key) == ["people", "next_cursor"])
        #expect(json["next_cursor"]?.isNull == true)
        let people = try #require(json["people"]?.arrayValue)
        #expect(people.count == 6)
        for person in people {
            #expect(person.objectMembers?.map(\.key) == ["external_id", "created_at", "devices"])
            #expect(person["created_at"]?.stringValue == "2026-09-21T14:13:20.000Z")
        }
        var counts: [String: Int] = [:]
        for person in people { counts[person["external_id"]?.stringValue ?? ""] = person["devices"]?.intValue }
        #expect(counts == expected.merging(["implicit": 1]) { $1 })
    }

    @Test("a stable cursor: pages of limit N walk every person once, next_cursor null at the end, across erasures")
    func peopleCursor() async throws {
        let app = try await DeviceApp.make()
        let expected = try await Self.people(app, count: 23)
        var seen: [String] = []
        var cursor: String?
        var pages = 0
        repeat {
            let query = "/v1/people?limit=5" + (cursor.map { "&cursor=\($0)" } ?? "")
            let answer = await app.call(.get, query)
            #expect(answer.status == 200)
            let page = answer.json?["people"]?.arrayValue ?? []
            #expect(page.count <= 5)
            seen += page.compactMap { $0["external_id"]?.stringValue }
            cursor = answer.json?["next_cursor"]?.stringValue
            if pages == 1 {
                // Erasing a person already listed, and one not listed yet, during the walk.
                #expect(await app.call(.delete, "/v1/people/\(seen[0])").status == 200)
                #expect(await app.call(.delete, "/v1/people/person-22").status == 200)
            }
            pages += 1
        } while cursor != nil && pages < 10
        #expect(cursor == nil)
        #expect(pages == 5)
        #expect(Set(seen).count == seen.count, "a person appeared twice: \(seen)")
        #expect(Set(seen) == Set(expected.keys).subtracting(["person-22"]))
        // The same walk again gives the same order.
        let first = await app.call(.get, "/v1/people?limit=1000")
        let again = await app.call(.get, "/v1/people?limit=1000")
        #expect(first.body == again.body)
    }

    @Test("limit is 1 to 1000 (default 100); a cursor not from this server is 400, one from before a restart 410")
    func peopleLimitsAndCursors() async throws {
        let app = try await DeviceApp.make()
        _ = try await Self.people(app, count: 101)
        let defaultPage = await app.call(.get, "/v1/people")
        #expect(defaultPage.json?["people"]?.arrayValue?.count == Limits.listLimitDefault)
        let cursor = try #require(defaultPage.json?["next_cursor"]?.stringValue)
        let rest = await app.call(.get, "/v1/people?cursor=\(cursor)")
        #expect(rest.json?["people"]?.arrayValue?.count == 1)
        #expect(rest.json?["next_cursor"]?.isNull == true)
        #expect(await app.call(.get, "/v1/people?limit=1000").json?["people"]?.arrayValue?.count == 101)
        for bad in ["limit=0", "limit=1001", "limit=-1", "limit=ten", "limit="] {
            let answer = await app.call(.get, "/v1/people?\(bad)")
            #expect(answer.status == 400, "\(bad)")
            #expect(answer.errorCode == "invalid_field")
            #expect(answer.errorField == "limit")
        }
        let garbage = await app.call(.get, "/v1/people?cursor=nope")
        #expect(garbage.status == 400)
        #expect(garbage.errorField == "cursor")
        let unknown = await app.call(.get, "/v1/people?colour=red")
        #expect(unknown.status == 400)
        #expect(unknown.errorField == "colour")
        // Another run (another service: a restart) does not take this run's cursor.
        let restarted = try await DeviceApp.make()
        let expired = await restarted.call(.get, "/v1/people?cursor=\(cursor)")
        #expect(expired.status == 410)
        #expect(expired.errorCode == "cursor_expired")
    }

    @Test("GET /v1/people needs devices:read, and a key sees only its own app and mode's people")
    func peopleAccess() async throws {
        let app = try await DeviceApp.make()
        #expect(await app.call(.put, "/v1/people/live-one").status == 201)
        #expect(await app.call(.put, "/v1/people/test-one", key: app.testSecret).status == 201)
        let writer = try await app.key(["devices:write", "people:write"])
        #expect(await app.call(.get, "/v1/people", key: writer).status == 403)
        #expect(await app.call(.get, "/v1/people", key: app.mobile).status == 403)
        #expect(await app.harness.call(.get, "/v1/people", key: Harness.adminKey).status == 403)
        #expect(await app.harness.call(.get, "/v1/people").status == 401)
        func names(_ key: String) async -> [String] {
            await app.call(.get, "/v1/people", key: key).json?["people"]?.arrayValue?.compactMap {
                $0["external_id"]?.stringValue
            } ?? []
        }
        #expect(await names(app.secret) == ["live-one"])
        #expect(await names(app.testSecret) == ["test-one"])
        let other = try await DeviceApp.make(app.harness)
        #expect(await names(other.secret) == [])
    }
}
