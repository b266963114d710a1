import RoostHTTP
import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

/// seeds/barua-register-devices.txt, sentence by sentence (docs/compat.md §1).
@Suite("Barua: PUT and DELETE /api/integrations/v1/devices")
struct BaruaTests {
    static let path = "/api/integrations/v1/devices"

    /// An app with a live `devices:write` key, a production credential for
    /// com.example.app and the known person user_42.
    static func setUp(_ harness: Harness) async throws -> (app: Int, key: String) {
        let app = try await harness.createApp()
        let key = try await harness.createKey(
            app: app, #"{"kind":"secret","mode":"live","capabilities":["devices:write"]}"#
        ).key
        try await harness.putCredential(app: app)
        try await harness.putPerson(app: app, "user_42")
        return (app, key)
    }

    static func body(
        token: String = TestTokens.apns(1), person: String = "user_42", app: String = "com.example.app",
        environment: String = "production"
    ) -> String {
        #"{"provider":"apns","app":"\#(app)","environment":"\#(environment)","token":"\#(token)","external_id":"\#(person)"}"#
    }

    @Test("the seed's example registers: 200 {registered, registered_at, bound_at}, never the token")
    func example() async throws {
        let harness = try Harness()
        let (app, key) = try await BaruaTests.setUp(harness)
        let token = "6f1c9a2e4b7d0835c2e9f14a7b3d6e0c58a1f2b9d4e7c03a6b8f1e2d5c9a4b70"
        let answer = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body(token: token))
        #expect(answer.status == 200)
        #expect(answer.keys == ["bound_at", "registered", "registered_at"])
        #expect(answer.json?["registered"]?.boolValue == true)
        #expect(answer.json?["registered_at"]?.stringValue == "2026-09-21T14:13:20.000Z")
        #expect(answer.json?["bound_at"]?.stringValue == "2026-09-21T14:13:20.000Z")
        #expect(!answer.text.contains(token))
        #expect(answer.header("Content-Type") == "application/json")
        let device = try #require(try await harness.device(app: app, token: token))
        #expect(device.externalID?.rawValue == "user_42")
        #expect(device.bundleID?.rawValue == "com.example.app")
        #expect(device.environment == .production)
        #expect(device.mode == .live)
    }

    @Test(
        "only a live secret key with devices:write registers: test keys, mobile keys and keys without it get 403",
        arguments: [
            #"{"kind":"secret","mode":"test","capabilities":["devices:write"]}"#,
            #"{"kind":"secret","mode":"live","capabilities":["devices:read","people:write"]}"#,
            #"{"kind":"mobile","mode":"live"}"#,
        ])
    func keyRules(keyBody: String) async throws {
        let harness = try Harness()
        let (app, _) = try await BaruaTests.setUp(harness)
        let other = try await harness.createKey(app: app, keyBody).key
        for method in [HTTPMethod.put, .delete] {
            let answer = await harness.call(method, BaruaTests.path, key: other, body: BaruaTests.body())
            #expect(answer.status == 403)
            #expect(answer.errorCode == "forbidden")
        }
        #expect(try await harness.stats(app: app).devices == 0)
        #expect(try await harness.stats(app: app, mode: .test).devices == 0)
    }

    @Test("no key or an unknown key is 401; the operator key is 403 (it holds no app)")
    func missingKey() async throws {
        let harness = try Harness()
        _ = try await BaruaTests.setUp(harness)
        #expect(await harness.call(.put, BaruaTests.path, body: BaruaTests.body()).status == 401)
        #expect(await harness.call(.put, BaruaTests.path, key: "sk_live_nope", body: BaruaTests.body()).status == 401)
        #expect(await harness.call(.put, BaruaTests.path, key: Harness.adminKey, body: BaruaTests.body()).status == 403)
    }

    @Test(
        "409 notification_app_not_found when no key was uploaded for that bundle id and environment",
        arguments: [("com.example.app", "sandbox"), ("com.example.other", "production")])
    func credentialRequired(bundle: String, environment: String) async throws {
        let harness = try Harness()
        let (app, key) = try await BaruaTests.setUp(harness)
        let answer = await harness.call(
            .put, BaruaTests.path, key: key, body: BaruaTests.body(app: bundle, environment: environment))
        #expect(answer.status == 409)
        #expect(answer.errorCode == "notification_app_not_found")
        #expect(answer.errorField == "app")
        #expect(try await harness.stats(app: app).devices == 0)
    }

    @Test("production and sandbox name the matching upload; any other environment is 400 invalid_environment")
    func environments() async throws {
        let harness = try Harness()
        let (app, key) = try await BaruaTests.setUp(harness)
        try await harness.putCredential(app: app, environment: .sandbox)
        let sandbox = await harness.call(
            .put, BaruaTests.path, key: key, body: BaruaTests.body(token: TestTokens.apns(2), environment: "sandbox"))
        #expect(sandbox.status == 200)
        #expect(try await harness.device(app: app, token: TestTokens.apns(2))?.environment == .sandbox)
        let bad = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body(environment: "staging"))
        #expect(bad.status == 400)
        #expect(bad.errorCode == "invalid_environment")
        #expect(bad.errorField == "environment")
    }

    @Test("409 unknown_identity until Barua knows the person, and nothing changes; then registering again works")
    func unknownPerson() async throws {
        let harness = try Harness()
        let (app, key) = try await BaruaTests.setUp(harness)
        let refused = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body(person: "user_7"))
        #expect(refused.status == 409)
        #expect(refused.errorCode == "unknown_identity")
        #expect(refused.errorField == "external_id")
        let stats = try await harness.stats(app: app)
        #expect(stats.devices == 0)
        #expect(stats.people == 1)
        try await harness.putPerson(app: app, "user_7")
        let accepted = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body(person: "user_7"))
        #expect(accepted.status == 200)
    }

    @Test("registering the same token again is safe: one device, bound_at kept, registered_at refreshed")
    func sameTokenAgain() async throws {
        let harness = try Harness()
        let (app, key) = try await BaruaTests.setUp(harness)
        let first = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body())
        harness.clock.advance(milliseconds: 60_000)
        let second = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body())
        #expect(second.status == 200)
        #expect(second.json?["bound_at"] == first.json?["bound_at"])
        #expect(second.json?["registered_at"]?.stringValue == "2026-09-21T14:14:20.000Z")
        #expect(try await harness.stats(app: app).devices == 1)
    }

    @Test("the same token for another person (a shared phone) moves the device: bound_at changes")
    func sharedPhone() async throws {
        let harness = try Harness()
        let (app, key) = try await BaruaTests.setUp(harness)
        try await harness.putPerson(app: app, "user_43")
        _ = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body())
        harness.clock.advance(milliseconds: 5_000)
        let moved = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body(person: "user_43"))
        #expect(moved.status == 200)
        #expect(moved.json?["bound_at"]?.stringValue == "2026-09-21T14:13:25.000Z")
        #expect(try await harness.person(app: app, "user_42")?.devices.isEmpty == true)
        #expect(try await harness.person(app: app, "user_43")?.devices.count == 1)
        #expect(try await harness.stats(app: app).devices == 1)
    }

    @Test("a person keeps at most 10 devices: the eleventh replaces the one registered longest ago")
    func eleventhEvictsOldest() async throws {
        let harness = try Harness()
        let (app, key) = try await BaruaTests.setUp(harness)
        // The app's own setting does not apply on this route: the seed fixes 10.
        let patched = await harness.call(
            .patch, "/v1/apps/\(app)", key: Harness.adminKey, body: #"{"settings":{"max_devices_per_person":3}}"#)
        #expect(patched.status == 200)
        for seed in 1...10 {
            harness.clock.advance(milliseconds: 1_000)
            let answer = await harness.call(
                .put, BaruaTests.path, key: key, body: BaruaTests.body(token: TestTokens.apns(seed)))
            #expect(answer.status == 200)
        }
        // Device 1 registers again, so device 2 is now the one registered longest ago.
        harness.clock.advance(milliseconds: 1_000)
        _ = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body(token: TestTokens.apns(1)))
        harness.clock.advance(milliseconds: 1_000)
        _ = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body(token: TestTokens.apns(11)))
        #expect(try await harness.person(app: app, "user_42")?.devices.count == 10)
        #expect(try await harness.device(app: app, token: TestTokens.apns(2)) == nil)
        #expect(try await harness.device(app: app, token: TestTokens.apns(1)) != nil)
    }

    @Test("an eleventh device replaces one Apple reported gone before the one registered longest ago")
    func eleventhEvictsGoneFirst() async throws {
        let harness = try Harness()
        let (app, key) = try await BaruaTests.setUp(harness)
        for seed in 1...10 {
            harness.clock.advance(milliseconds: 1_000)
            _ = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body(token: TestTokens.apns(seed)))
        }
        try await harness.reportGone(app: app, token: TestTokens.apns(7))
        _ = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body(token: TestTokens.apns(11)))
        #expect(try await harness.device(app: app, token: TestTokens.apns(7)) == nil)
        #expect(try await harness.device(app: app, token: TestTokens.apns(1)) != nil)
        #expect(try await harness.person(app: app, "user_42")?.devices.count == 10)
    }

    @Test("DELETE with the same body removes the device while it belongs to that person: {\"deleted\":true}")
    func forget() async throws {
        let harness = try Harness()
        let (app, key) = try await BaruaTests.setUp(harness)
        _ = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body())
        let answer = await harness.call(.delete, BaruaTests.path, key: key, body: BaruaTests.body())
        #expect(answer.status == 200)
        #expect(answer.text == #"{"deleted":true}"#)
        #expect(try await harness.stats(app: app).devices == 0)
        let again = await harness.call(.delete, BaruaTests.path, key: key, body: BaruaTests.body())
        #expect(again.status == 200)
        #expect(again.text == #"{"deleted":false}"#)
    }

    @Test("a late sign-out can't remove the next person's registration on a shared phone")
    func lateSignOut() async throws {
        let harness = try Harness()
        let (app, key) = try await BaruaTests.setUp(harness)
        try await harness.putPerson(app: app, "user_43")
        _ = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body())
        _ = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body(person: "user_43"))
        let late = await harness.call(.delete, BaruaTests.path, key: key, body: BaruaTests.body())
        #expect(late.text == #"{"deleted":false}"#)
        #expect(try await harness.device(app: app, token: TestTokens.apns(1))?.externalID?.rawValue == "user_43")
    }

    @Test("on 429 the answer carries Retry-After; the same request later succeeds")
    func rateLimited() async throws {
        let harness = try Harness()
        let app = try await harness.createApp()
        let key = try await harness.createKey(
            app: app, #"{"kind":"secret","capabilities":["devices:write"],"rate_limit_per_second":1}"#
        ).key
        try await harness.putCredential(app: app)
        try await harness.putPerson(app: app, "user_42")
        #expect(await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body()).status == 200)
        let limited = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body())
        #expect(limited.status == 429)
        #expect(limited.errorCode == "rate_limited")
        let retryAfter = try #require(limited.header("Retry-After").flatMap { Int($0) })
        #expect(retryAfter >= 1)
        harness.clock.advance(milliseconds: Int64(retryAfter) * 1000)
        #expect(await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body()).status == 200)
    }

    @Test("503 with Retry-After when the log refuses the write; retrying refreshes the same device")
    func unavailable() async throws {
        let log = SwitchableLog()
        let harness = Harness(log: log)
        let (app, key) = try await BaruaTests.setUp(harness)
        log.failing.withLock { $0 = true }
        let refused = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body())
        #expect(refused.status == 503)
        #expect(refused.errorCode == "unavailable")
        #expect(refused.header("Retry-After") == "1")
        log.failing.withLock { $0 = false }
        #expect(await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body()).status == 200)
        #expect(await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body()).status == 200)
        #expect(try await harness.stats(app: app).devices == 1)
    }

    @Test(
        "malformed bodies are 400 with the field at fault",
        arguments: [
            (
                #"{"app":"com.example.app","environment":"production","external_id":"user_42"}"#, "missing_field",
                "token"
            ),
            (
                #"{"app":"com.example.app","environment":"production","token":"\#(TestTokens.apns(1))"}"#,
                "missing_field",
                "external_id"
            ),
            (
                #"{"environment":"production","token":"\#(TestTokens.apns(1))","external_id":"u"}"#, "missing_field",
                "app"
            ),
            (
                #"{"app":"com.example.app","token":"\#(TestTokens.apns(1))","external_id":"u"}"#, "missing_field",
                "environment"
            ),
            (BaruaTests.body(token: "xyz"), "invalid_token_format", "token"),
            (BaruaTests.body(token: String(repeating: "a", count: 63)), "invalid_token_format", "token"),
            (BaruaTests.body(token: "ExponentPushToken[abc]"), "unsupported_token_type", "token"),
            (BaruaTests.body(app: "com example"), "invalid_field", "app"),
            (BaruaTests.body(person: ""), "invalid_field", "external_id"),
            (
                #"{"provider":"fcm","app":"a","environment":"production","token":"\#(TestTokens.apns(1))","external_id":"u"}"#,
                "invalid_field", "provider"
            ),
            ("not json", "invalid_json", nil),
        ] as [(String, String, String?)])
    func badBodies(body: String, code: String, field: String?) async throws {
        let harness = try Harness()
        let (app, key) = try await BaruaTests.setUp(harness)
        let answer = await harness.call(.put, BaruaTests.path, key: key, body: body)
        #expect(answer.status == 400)
        #expect(answer.errorCode == code)
        #expect(answer.errorField == field)
        #expect(try await harness.stats(app: app).devices == 0)
    }

    @Test("the token is case-insensitive hex: upper-case is the same device")
    func upperCaseToken() async throws {
        let harness = try Harness()
        let (app, key) = try await BaruaTests.setUp(harness)
        let token = "6F1C9A2E4B7D0835C2E9F14A7B3D6E0C58A1F2B9D4E7C03A6B8F1E2D5C9A4B70"
        _ = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body(token: token))
        _ = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body(token: token.lowercased()))
        #expect(try await harness.stats(app: app).devices == 1)
    }

    @Test("deleting the app removes the devices registered for it; an erased person's external_id starts with none")
    func erasureAndAppDeletion() async throws {
        let harness = try Harness()
        let (app, key) = try await BaruaTests.setUp(harness)
        _ = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body(token: TestTokens.apns(1)))
        _ = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body(token: TestTokens.apns(2)))
        let erased = await harness.call(.delete, "/v1/people/user_42", key: try await harness.setupKey(app: app))
        #expect(erased.json?["devices_removed"]?.intValue == 2)
        try await harness.putPerson(app: app, "user_42")
        _ = await harness.call(.put, BaruaTests.path, key: key, body: BaruaTests.body(token: TestTokens.apns(3)))
        #expect(try await harness.person(app: app, "user_42")?.devices.count == 1)
        let deleted = await harness.call(.delete, "/v1/apps/\(app)", key: Harness.adminKey)
        #expect(deleted.json?["devices_removed"]?.intValue == 1)
    }
}
