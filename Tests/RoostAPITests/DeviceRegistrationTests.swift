import RoostHTTP
import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

@Suite("POST /v1/devices and the identity rules (spec §4–5)")
struct DeviceRegistrationTests {
    static let deviceFields = [
        "id", "platform", "environment", "bundle_id", "installation_id", "external_id", "created_at",
        "last_seen_at", "bound_at", "app_version", "timezone", "locale", "push_permission", "opted_in", "tags",
        "invalidated_at", "invalidation_reason", "strikes", "mode", "version", "client_sequence",
    ]

    @Test("a new token is 201 with every Device JSON field, defaults and nulls, and never the token or secret")
    func newDevice() async throws {
        let app = try await DeviceApp.make()
        let answer = await app.registerIOS(1, #""installation_secret":"s3cret""#)
        #expect(answer.status == 201)
        #expect(answer.header("Content-Type") == "application/json")
        let json = try #require(answer.json)
        let keys = try #require(json.objectMembers).map(\.key)
        #expect(keys == DeviceRegistrationTests.deviceFields)
        #expect(!answer.text.contains(TestTokens.apns(1)))
        #expect(!answer.text.contains("s3cret"))
        #expect(!answer.text.contains("secret"))
        #expect(json["id"]?.stringValue?.hasPrefix("dev_") == true)
        #expect(json["platform"]?.stringValue == "ios")
        #expect(json["environment"]?.stringValue == "production")
        #expect(json["mode"]?.stringValue == "live")
        #expect(json["created_at"]?.stringValue == "2026-09-21T14:13:20.000Z")
        #expect(json["last_seen_at"]?.stringValue == "2026-09-21T14:13:20.000Z")
        #expect(json["opted_in"]?.boolValue == true)
        #expect(json["strikes"]?.intValue == 0)
        #expect(json["tags"]?.objectMembers?.isEmpty == true)
        for field in ["bundle_id", "installation_id", "external_id", "bound_at", "app_version", "push_permission"] {
            #expect(json[field]?.isNull == true, "\(field)")
        }
        #expect(json["invalidated_at"]?.isNull == true)
        #expect(json["invalidation_reason"]?.isNull == true)
    }

    @Test("rule 1: the same token again is 200, the same id, created_at kept, last_seen_at refreshed")
    func reRegistration() async throws {
        let app = try await DeviceApp.make()
        let first = try #require(await app.registerIOS(7).json)
        app.harness.clock.advance(milliseconds: 5_000)
        // Upper-case hex is the same APNs token.
        let again = await app.register(#"{"platform":"ios","token":"\#(TestTokens.apns(7).uppercased())"}"#)
        #expect(again.status == 200)
        #expect(again.json?["id"] == first["id"])
        #expect(again.json?["created_at"] == first["created_at"])
        #expect(again.json?["last_seen_at"]?.stringValue == "2026-09-21T14:13:25.000Z")
        let stats = await app.call(.get, "/v1/stats")
        #expect(stats.json?["devices"]?.intValue == 1)
    }

    @Test("omitted optional fields keep; null clears; tags merge; tags null clears; \"\" clears free text")
    func fieldChanges() async throws {
        let app = try await DeviceApp.make()
        let full =
            #""bundle_id":"com.example.app","external_id":"user_42","app_version":"2.4.0","timezone":"UTC","#
            + #""locale":"en-US","push_permission":true,"opted_in":false,"tags":{"plan":"pro","n":3}"#
        let id = try await app.registerID(1, full)
        let kept = try #require(await app.registerIOS(1).json)
        #expect(kept["id"]?.stringValue == id)
        #expect(kept["bundle_id"]?.stringValue == "com.example.app")
        #expect(kept["external_id"]?.stringValue == "user_42")
        #expect(kept["bound_at"]?.isNull == false)
        #expect(kept["app_version"]?.stringValue == "2.4.0")
        #expect(kept["push_permission"]?.boolValue == true)
        #expect(kept["opted_in"]?.boolValue == false)
        #expect(kept["tags"]?["plan"]?.stringValue == "pro")
        #expect(kept["tags"]?["n"] == .number("3"))

        let merged = try #require(await app.registerIOS(1, #""tags":{"plan":null,"trial":true}"#).json)
        #expect(merged["tags"]?["plan"] == nil)
        #expect(merged["tags"]?["trial"]?.boolValue == true)
        #expect(merged["tags"]?["n"] == .number("3"))

        let cleared = try #require(
            await app.registerIOS(
                1, #""external_id":null,"tags":null,"app_version":"","push_permission":null,"bundle_id":null"#
            ).json)
        #expect(cleared["external_id"]?.isNull == true)
        #expect(cleared["bound_at"]?.isNull == true)
        #expect(cleared["tags"]?.objectMembers?.isEmpty == true)
        #expect(cleared["app_version"]?.isNull == true)
        #expect(cleared["push_permission"]?.isNull == true)
        #expect(cleared["bundle_id"]?.isNull == true)
        #expect(cleared["timezone"]?.stringValue == "UTC")
    }

    @Test(
        "a bad body is 400 with its code and field, and registers nothing",
        arguments: [
            (#"{"token":"\#(TestTokens.apns(1))"}"#, "missing_field", "platform"),
            (#"{"platform":"ios"}"#, "missing_field", "token"),
            (#"{"platform":"ios","token":null}"#, "missing_field", "token"),
            (#"{"platform":"web","token":"\#(TestTokens.apns(1))"}"#, "invalid_platform", "platform"),
            (#"{"platform":1,"token":"\#(TestTokens.apns(1))"}"#, "invalid_platform", "platform"),
            (#"{"platform":"ios","token":"ExponentPushToken[abcdefghijklmnop]"}"#, "unsupported_token_type", "token"),
            (#"{"platform":"android","token":"ExponentPushToken[abc]"}"#, "unsupported_token_type", "token"),
            (#"{"platform":"ios","token":"abc"}"#, "invalid_token_format", "token"),
            (#"{"platform":"ios","token":"\#(String(repeating: "g", count: 64))"}"#, "invalid_token_format", "token"),
            (#"{"platform":"ios","token":"\#(String(repeating: "a", count: 65))"}"#, "invalid_token_format", "token"),
            (#"{"platform":"ios","token":7}"#, "invalid_token_format", "token"),
            (#"{"platform":"android","token":"short"}"#, "invalid_token_format", "token"),
            (
                #"{"platform":"android","token":"\#(TestTokens.fcm(1))","environment":"sandbox"}"#,
                "invalid_environment",
                "environment"
            ),
            (
                #"{"platform":"ios","token":"\#(TestTokens.apns(1))","environment":"staging"}"#, "invalid_environment",
                "environment"
            ),
            (#"{"platform":"ios","token":"\#(TestTokens.apns(1))","external_id":""}"#, "invalid_field", "external_id"),
            (
                #"{"platform":"ios","token":"\#(TestTokens.apns(1))","external_id":"\#(String(repeating: "e", count: 257))"}"#,
                "invalid_field", "external_id"
            ),
            (#"{"platform":"ios","token":"\#(TestTokens.apns(1))","external_id":5}"#, "invalid_field", "external_id"),
            (
                #"{"platform":"ios","token":"\#(TestTokens.apns(1))","installation_id":"\#(String(repeating: "i", count: 201))"}"#,
                "invalid_field", "installation_id"
            ),
            (
                #"{"platform":"ios","token":"\#(TestTokens.apns(1))","bundle_id":"com example"}"#, "invalid_field",
                "bundle_id"
            ),
            (
                #"{"platform":"ios","token":"\#(TestTokens.apns(1))","app_version":"\#(String(repeating: "1", count: 65))"}"#,
                "invalid_field", "app_version"
            ),
            (
                #"{"platform":"ios","token":"\#(TestTokens.apns(1))","installation_secret":""}"#, "invalid_field",
                "installation_secret"
            ),
            (#"{"platform":"ios","token":"\#(TestTokens.apns(1))","opted_in":"yes"}"#, "invalid_field", "opted_in"),
            (
                #"{"platform":"ios","token":"\#(TestTokens.apns(1))","push_permission":1}"#, "invalid_field",
                "push_permission"
            ),
            (#"{"platform":"ios","token":"\#(TestTokens.apns(1))","tags":[1]}"#, "invalid_tags", "tags"),
            (#"{"platform":"ios","token":"\#(TestTokens.apns(1))","tags":{"a":{"b":1}}}"#, "invalid_tags", "tags"),
            (#"{"platform":"ios","token":"\#(TestTokens.apns(1))","tags":{"":1}}"#, "invalid_tags", "tags"),
            (#"{"platform":"ios","token":"\#(TestTokens.apns(1))","tags":{"a":1e400}}"#, "invalid_tags", "tags"),
            (#"{"platform":"ios","token":"#, "invalid_json", nil),
            ("[]", "invalid_json", nil),
        ] as [(String, String, String?)])
    func badBodies(body: String, code: String, field: String?) async throws {
        let app = try await DeviceApp.make()
        let answer = await app.register(body)
        #expect(answer.status == 400)
        #expect(answer.errorCode == code)
        #expect(answer.errorField == field)
        #expect(await app.call(.get, "/v1/stats").json?["devices"]?.intValue == 0)
    }

    @Test("keys: none 401, operator 403, secret without devices:write 403, mobile 201; mobile only registers")
    func keys() async throws {
        let app = try await DeviceApp.make()
        let body = #"{"platform":"ios","token":"\#(TestTokens.apns(1))"}"#
        #expect(await app.harness.call(.post, "/v1/devices", body: body).status == 401)
        #expect(await app.harness.call(.post, "/v1/devices", key: "sk_live_nope", body: body).status == 401)
        #expect(await app.register(body, key: Harness.adminKey).status == 403)
        let reader = try await app.key(["devices:read"])
        #expect(await app.register(body, key: reader).errorCode == "forbidden")
        let created = await app.register(body, key: app.mobile)
        #expect(created.status == 201)
        let id = try #require(created.json?["id"]?.stringValue)
        let mobileElsewhere: [(HTTPMethod, String, String?)] = [
            (.get, "/v1/devices/\(id)", nil), (.patch, "/v1/devices/\(id)", "{}"), (.delete, "/v1/devices/\(id)", nil),
            (.get, "/v1/devices", nil), (.get, "/v1/devices/export", nil), (.get, "/v1/stats", nil),
            (.post, "/v1/feedback", "{}"), (.put, "/v1/people/u", nil), (.get, "/v1/people/u", nil),
            (.delete, "/v1/people/u", nil), (.put, "/v1/credentials/apns/com.x/production", "{}"),
            (.delete, "/v1/credentials/apns/com.x/production", nil),
        ]
        for (method, path, body) in mobileElsewhere {
            let answer = await app.call(method, path, key: app.mobile, body: body)
            #expect(answer.status == 403, "\(method.name) \(path)")
            #expect(answer.errorCode == "forbidden")
        }
        #expect(await app.importCSV("platform,token\n", key: app.mobile).status == 403)
    }

    @Test("rule 2: a token presented for another person moves the device; it is never on both")
    func tokenMovesBetweenPeople() async throws {
        let app = try await DeviceApp.make()
        let first = try #require(await app.registerIOS(1, #""external_id":"alice""#).json)
        app.harness.clock.advance(milliseconds: 1_000)
        let moved = try #require(await app.registerIOS(1, #""external_id":"bob""#).json)
        #expect(moved["id"] == first["id"])
        #expect(moved["external_id"]?.stringValue == "bob")
        #expect(moved["bound_at"] != first["bound_at"])
        let alice = await app.call(.get, "/v1/people/alice")
        #expect(alice.status == 200)
        #expect(alice.json?["devices"]?.arrayValue?.isEmpty == true)
        let bob = await app.call(.get, "/v1/people/bob")
        #expect(bob.json?["devices"]?.arrayValue?.map { $0["id"] } == [first["id"]])
    }

    @Test(
        "rule 2: binding one more device than max_devices_per_person evicts an invalidated one first, else the oldest",
        arguments: [false, true])
    func eviction(invalidateNewest: Bool) async throws {
        let app = try await DeviceApp.make(settings: #"{"max_devices_per_person":2}"#)
        let oldest = try await app.registerID(1, #""external_id":"p""#)
        app.harness.clock.advance(milliseconds: 1_000)
        let newer = try await app.registerID(2, #""external_id":"p""#)
        app.harness.clock.advance(milliseconds: 1_000)
        if invalidateNewest {
            let feedback = await app.call(
                .post, "/v1/feedback", body: #"{"provider":"apns","token":"\#(TestTokens.apns(2))"}"#)
            #expect(feedback.json?["invalidated"]?.boolValue == true)
        }
        let third = try await app.registerID(3, #""external_id":"p""#)
        let evicted = invalidateNewest ? newer : oldest
        let kept = invalidateNewest ? oldest : newer
        #expect(await app.device(evicted).errorCode == "device_not_found")
        #expect(await app.device(kept).status == 200)
        let person = await app.call(.get, "/v1/people/p")
        #expect(Set(person.json?["devices"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []) == [kept, third])
    }

    @Test("rule 3: require_known_person answers 409 unknown_identity and leaves nothing; a known person binds")
    func requireKnownPerson() async throws {
        let app = try await DeviceApp.make(settings: #"{"require_known_person":true}"#)
        let refused = await app.registerIOS(1, #""external_id":"stranger","tags":{"a":1}"#)
        #expect(refused.status == 409)
        #expect(refused.errorCode == "unknown_identity")
        #expect(refused.errorField == "external_id")
        let stats = await app.call(.get, "/v1/stats")
        #expect(stats.json?["devices"]?.intValue == 0)
        #expect(stats.json?["people"]?.intValue == 0)
        #expect(await app.call(.get, "/v1/people/stranger").status == 404)
        #expect(await app.call(.put, "/v1/people/stranger").status == 201)
        #expect(await app.registerIOS(1, #""external_id":"stranger""#).status == 201)
        // Without a person the token still registers.
        #expect(await app.registerIOS(2).status == 201)
    }

    @Test("rule 5: a matching device_id + installation_secret replaces the token on the same id")
    func provenReuse() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1, #""installation_secret":"s1","tags":{"keep":"me"}"#)
        let rotated = await app.registerIOS(2, #""device_id":"\#(id)","installation_secret":"s1""#)
        #expect(rotated.status == 200)
        #expect(rotated.json?["id"]?.stringValue == id)
        #expect(rotated.json?["tags"]?["keep"]?.stringValue == "me")
        #expect(await app.device(id).json?["token"]?.stringValue == TestTokens.apns(2))
        #expect(await app.call(.get, "/v1/stats").json?["devices"]?.intValue == 1)
    }

    @Test(
        "rule 5: a wrong or missing proof, an unknown, foreign or mis-cased id is no reuse: a new device",
        arguments: [
            ("real", "wrong"), ("real", nil), ("bogus", "s1"), ("upper", "s1"), ("foreign", "s1"),
        ] as [(String, String?)])
    func unprovenIsNew(idForm: String, secret: String?) async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1, #""installation_secret":"s1""#)
        let other = try await DeviceApp.make(app.harness)
        let foreign = try await other.registerID(1, #""installation_secret":"s1""#)
        let presented: String
        switch idForm {
        case "real": presented = id
        case "upper": presented = id.uppercased()
        case "foreign": presented = foreign
        default: presented = "dev_not_a_real_id"
        }
        let proof = secret.map { #","installation_secret":"\#($0)""# } ?? ""
        let answer = await app.registerIOS(2, #""device_id":"\#(presented)""# + proof)
        #expect(answer.status == 201)
        #expect(answer.json?["id"]?.stringValue != id)
        #expect(await app.device(id).json?["token"]?.stringValue == TestTokens.apns(1))
    }

    @Test("rule 5: when the new token belongs to another device, that device wins and the proven one is Superseded")
    func superseded() async throws {
        let app = try await DeviceApp.make()
        let proven = try await app.registerID(1, #""installation_secret":"s1""#)
        let holder = try await app.registerID(2)
        let answer = await app.registerIOS(2, #""device_id":"\#(proven)","installation_secret":"s1""#)
        #expect(answer.status == 200)
        #expect(answer.json?["id"]?.stringValue == holder)
        let lost = try #require(await app.device(proven).json)
        #expect(lost["invalidation_reason"]?.stringValue == "Superseded")
        #expect(lost["invalidated_at"]?.isNull == false)
    }

    @Test("rule 4: a token held by another installation moves; the device it left is Reassigned, without token")
    func reassigned() async throws {
        let app = try await DeviceApp.make()
        let first = try await app.registerID(1, #""installation_id":"install-1""#)
        let second = await app.registerIOS(1, #""installation_id":"install-2""#)
        #expect(second.status == 201)
        let left = try #require(await app.device(first).json)
        #expect(left["token"]?.isNull == true)
        #expect(left["invalidation_reason"]?.stringValue == "Reassigned")
        #expect(left["installation_id"]?.stringValue == "install-1")
        // The installation with a new token replaces its token and becomes active again.
        let back = await app.registerIOS(3, #""installation_id":"install-1""#)
        #expect(back.json?["id"]?.stringValue == first)
        #expect(back.json?["invalidated_at"]?.isNull == true)
    }

    @Test("rule 5: a device id of the other mode or platform is 422 device_identity_conflict")
    func identityConflict() async throws {
        let app = try await DeviceApp.make()
        let testID = try await app.registerID(1, #""installation_secret":"s""#, key: app.testSecret)
        let conflict = await app.registerIOS(1, #""device_id":"\#(testID)","installation_secret":"s""#)
        #expect(conflict.status == 422)
        #expect(conflict.errorCode == "device_identity_conflict")
        #expect(conflict.errorField == "device_id")
        let android = await app.register(
            #"{"platform":"android","token":"\#(TestTokens.fcm(1))","installation_id":"i-1"}"#)
        let androidID = try #require(android.json?["id"]?.stringValue)
        let crossPlatform = await app.registerIOS(9, #""device_id":"\#(androidID)""#)
        #expect(crossPlatform.status == 422)
        let installation = await app.registerIOS(9, #""installation_id":"i-1""#)
        #expect(installation.status == 422)
        #expect(installation.errorField == "installation_id")
        #expect(await app.call(.get, "/v1/stats").json?["devices"]?.intValue == 1)
    }

    @Test("rule 6: re-registering keeps strikes; a token moving to another device starts at 0")
    func strikes() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1, #""installation_id":"a""#)
        let deviceID = try #require(DeviceID(rendered: id))
        await app.onLiveIndex { index in
            var mutations: [Mutation] = []
            for _ in 0..<3 {
                if case .success(let change) = index.recordStrike(deviceID) { mutations += change.mutations }
            }
            return mutations
        }
        #expect(await app.device(id).json?["strikes"]?.intValue == 3)
        #expect(await app.registerIOS(1).json?["strikes"]?.intValue == 3)
        let moved = await app.registerIOS(1, #""installation_id":"b""#)
        #expect(moved.status == 201)
        #expect(moved.json?["strikes"]?.intValue == 0)
    }

    @Test("modes live apart: the same token under a test key is another device, invisible to live keys")
    func modesApart() async throws {
        let app = try await DeviceApp.make()
        let live = try await app.registerID(1)
        let test = await app.registerIOS(1, key: app.testSecret)
        #expect(test.status == 201)
        #expect(test.json?["mode"]?.stringValue == "test")
        let testID = try #require(test.json?["id"]?.stringValue)
        #expect(testID != live)
        #expect(await app.device(testID).errorCode == "device_not_found")
        #expect(await app.device(live, key: app.testSecret).status == 404)
        #expect(
            await app.call(.delete, "/v1/devices/\(live)", key: app.testSecret).json?["deleted"]?.boolValue == false)
        let listed = await app.call(.get, "/v1/devices", key: app.testSecret)
        #expect(listed.json?["devices"]?.arrayValue?.map { $0["id"]?.stringValue } == [testID])
    }

    @Test("tags: 50 keys and 4,096 bytes fit, one more is 400 tags_too_large and changes nothing")
    func tagLimits() async throws {
        let app = try await DeviceApp.make()
        let fifty = (0..<50).map { #""k\#($0)":true"# }.joined(separator: ",")
        let id = try await app.registerID(1, #""tags":{\#(fifty)}"#)
        let over = await app.registerIOS(1, #""tags":{"one_more":1}"#)
        #expect(over.status == 400)
        #expect(over.errorCode == "tags_too_large")
        #expect(await app.device(id).json?["tags"]?.objectMembers?.count == 50)
        // 4,096 bytes: key "b" (1) + 4,095-byte string.
        let exact = #""tags":null"#
        #expect(await app.registerIOS(1, exact).status == 200)
        let big = String(repeating: "v", count: 4_095)
        #expect(await app.registerIOS(1, #""tags":{"b":"\#(big)"}"#).status == 200)
        let patch = await app.call(.patch, "/v1/devices/\(id)", body: #"{"tags":{"c":true}}"#)
        #expect(patch.errorCode == "tags_too_large")
        #expect(await app.device(id).json?["tags"]?["c"] == nil)
    }
}
