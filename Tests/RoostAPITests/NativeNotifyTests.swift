import RoostHTTP
import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

/// seeds/nativenotify-device-registration.md, rule by rule (docs/compat.md §2).
@Suite("Native Notify: /api/universal/device/register, /deregister, /health")
struct NativeNotifyTests {
    static let register = "/api/universal/device/register"
    static let deregister = "/api/universal/device/deregister"

    /// An app with a live mobile key (the `appToken`).
    static func setUp(_ harness: Harness) async throws -> (app: Int, token: String) {
        let app = try await harness.createApp()
        let key = try await harness.createKey(app: app, #"{"kind":"mobile","mode":"live"}"#).key
        return (app, key)
    }

    /// A register body; `extra` is spliced in as further members.
    static func body(
        app: Int, token: String, deviceId: String = "A1B2C3D4-install-key", platform: String = "ios",
        tokens: String? = nil, extra: String = ""
    ) -> String {
        let tokensJSON = tokens ?? #"{"apnsToken":"\#(TestTokens.apns(1))"}"#
        return
            #"{"appId":\#(app),"appToken":"\#(token)","deviceId":"\#(deviceId)","platform":"\#(platform)","tokens":\#(tokensJSON)\#(extra)}"#
    }

    @Test("the seed's example registers: 201 with ok, the device and tokens.apnsToken \"ok\"; never the token")
    func example() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        let apns = "9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f009f8a7b6c5d4e3f2a1b0c9d8e"
        let body = #"""
            {"appId":\#(app),"appToken":"\#(token)","deviceId":"A1B2C3D4-install-key","platform":"ios",
             "subscriberId":"user_8241","appVersion":"2.4.0","timezone":"America/New_York",
             "tokens":{"apnsToken":"\#(apns)"}}
            """#
        let answer = await harness.call(.post, NativeNotifyTests.register, body: body)
        #expect(answer.status == 201)
        let json = try #require(answer.json)
        #expect(json["ok"]?.boolValue == true)
        #expect(answer.keys == ["device", "ok", "tokens"])
        let device = try #require(json["device"])
        #expect(device["appId"]?.intValue == app)
        #expect(device["deviceId"]?.stringValue == "A1B2C3D4-install-key")
        #expect(device["platform"]?.stringValue == "ios")
        #expect(device["subscriberId"]?.stringValue == "user_8241")
        #expect(device["appVersion"]?.stringValue == "2.4.0")
        #expect(device["timezone"]?.stringValue == "America/New_York")
        #expect(device["createdAt"]?.stringValue == "2026-09-21T14:13:20.000Z")
        #expect(device["lastSeenAt"]?.stringValue == "2026-09-21T14:13:20.000Z")
        #expect(json["tokens"]?["apnsToken"]?.stringValue == "ok")
        #expect(!answer.text.contains(apns))
        let stored = try #require(try await harness.device(app: app, installation: "A1B2C3D4-install-key"))
        #expect(stored.externalID?.rawValue == "user_8241")
        #expect(stored.mode == .live)
    }

    @Test("re-registering never duplicates: createdAt kept, lastSeenAt refreshed, status ok")
    func reRegister() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        _ = await harness.call(.post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: token))
        harness.clock.advance(milliseconds: 3_600_000)
        let again = await harness.call(
            .post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: token))
        #expect(again.status == 201)
        #expect(again.json?["device"]?["createdAt"]?.stringValue == "2026-09-21T14:13:20.000Z")
        #expect(again.json?["device"]?["lastSeenAt"]?.stringValue == "2026-09-21T15:13:20.000Z")
        #expect(again.json?["tokens"]?["apnsToken"]?.stringValue == "ok")
        #expect(try await harness.stats(app: app).devices == 1)
    }

    @Test("token rotation: same deviceId, new token → refreshed, still one device")
    func rotation() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        _ = await harness.call(.post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: token))
        let rotated = await harness.call(
            .post, NativeNotifyTests.register,
            body: NativeNotifyTests.body(app: app, token: token, tokens: #"{"apnsToken":"\#(TestTokens.apns(2))"}"#))
        #expect(rotated.json?["tokens"]?["apnsToken"]?.stringValue == "refreshed")
        #expect(try await harness.stats(app: app).devices == 1)
        #expect(try await harness.device(app: app, token: TestTokens.apns(1)) == nil)
    }

    @Test("a token only ever exists once per app: moving it to another deviceId answers reassigned")
    func reassigned() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        _ = await harness.call(
            .post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: token, deviceId: "one"))
        let moved = await harness.call(
            .post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: token, deviceId: "two"))
        #expect(moved.status == 201)
        #expect(moved.json?["tokens"]?["apnsToken"]?.stringValue == "reassigned")
        let holder = try #require(try await harness.device(app: app, token: TestTokens.apns(1)))
        #expect(holder.installationID?.rawValue == "two")
        let left = try #require(try await harness.device(app: app, installation: "one"))
        #expect(left.token == nil)
    }

    @Test("a registration clears the dead flag; strikes stay on the same device and reset when the token moves")
    func deadFlagAndStrikes() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        _ = await harness.call(
            .post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: token, deviceId: "one"))
        let id = try #require(try await harness.device(app: app, installation: "one")).id
        try await harness.withIndex(app: app) { index, now -> (Void, [Mutation]) in
            var mutations: [Mutation] = []
            for _ in 0..<2 {
                if case .success(let change) = index.recordStrike(id) { mutations += change.mutations }
            }
            if case .success(let change) = index.invalidateDevice(id, reason: .dead, at: now) {
                mutations += change.mutations
            }
            return ((), mutations)
        }
        #expect(try await harness.device(app: app, installation: "one")?.isActive == false)
        harness.clock.advance(milliseconds: 1_000)
        _ = await harness.call(
            .post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: token, deviceId: "one"))
        let revived = try #require(try await harness.device(app: app, installation: "one"))
        #expect(revived.isActive)
        #expect(revived.strikes == 2)
        _ = await harness.call(
            .post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: token, deviceId: "two"))
        #expect(try await harness.device(app: app, installation: "two")?.strikes == 0)
    }

    @Test("omitted optional fields keep their stored value: appVersion alone never wipes the subscriber id")
    func omittedFieldsKeep() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        _ = await harness.call(
            .post, NativeNotifyTests.register,
            body: NativeNotifyTests.body(
                app: app, token: token, extra: #","subscriberId":"user_8241","timezone":"Europe/Paris""#))
        let answer = await harness.call(
            .post, NativeNotifyTests.register,
            body: NativeNotifyTests.body(app: app, token: token, extra: #","appVersion":"2.5.0""#))
        let device = try #require(answer.json?["device"])
        #expect(device["subscriberId"]?.stringValue == "user_8241")
        #expect(device["timezone"]?.stringValue == "Europe/Paris")
        #expect(device["appVersion"]?.stringValue == "2.5.0")
    }

    @Test("subscriberId: numbers are coerced; omitted or empty is a mass device; over 256 or wrong type is refused")
    func subscriberRules() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        let mass = await harness.call(
            .post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: token, deviceId: "m"))
        #expect(mass.json?["device"]?["subscriberId"]?.isNull == true)
        let number = await harness.call(
            .post, NativeNotifyTests.register,
            body: NativeNotifyTests.body(app: app, token: token, extra: #","subscriberId":8241"#))
        #expect(number.json?["device"]?["subscriberId"]?.stringValue == "8241")
        let empty = await harness.call(
            .post, NativeNotifyTests.register,
            body: NativeNotifyTests.body(app: app, token: token, extra: #","subscriberId":"""#))
        #expect(empty.json?["device"]?["subscriberId"]?.isNull == true)
        let longest = String(repeating: "s", count: 256)
        let fits = await harness.call(
            .post, NativeNotifyTests.register,
            body: NativeNotifyTests.body(app: app, token: token, extra: #","subscriberId":"\#(longest)""#))
        #expect(fits.status == 201)
        for bad in [#""\#(longest)s""#, "true", "{}", "[1]"] {
            let answer = await harness.call(
                .post, NativeNotifyTests.register,
                body: NativeNotifyTests.body(app: app, token: token, extra: #","subscriberId":\#(bad)"#))
            #expect(answer.status == 400)
            #expect(answer.errorCode == "invalid_subscriber_id")
            #expect(answer.errorField == "subscriberId")
        }
    }

    @Test("deviceId: required, at most 200 characters, a string")
    func deviceIDRules() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        let longest = String(repeating: "d", count: 200)
        let fits = await harness.call(
            .post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: token, deviceId: longest))
        #expect(fits.status == 201)
        let tooLong = await harness.call(
            .post, NativeNotifyTests.register,
            body: NativeNotifyTests.body(app: app, token: token, deviceId: longest + "d"))
        #expect(tooLong.errorCode == "invalid_device_id")
        #expect(tooLong.errorField == "deviceId")
        let number = await harness.call(
            .post, NativeNotifyTests.register,
            body:
                #"{"appId":\#(app),"appToken":"\#(token)","deviceId":12,"platform":"ios","tokens":{"apnsToken":"\#(TestTokens.apns(1))"}}"#
        )
        #expect(number.status == 400)
        #expect(number.errorCode == "invalid_device_id")
        for missing in [
            #"{"appId":\#(app),"appToken":"\#(token)","platform":"ios","tokens":{"apnsToken":"\#(TestTokens.apns(1))"}}"#,
            #"{"appId":\#(app),"appToken":"\#(token)","deviceId":"","platform":"ios","tokens":{"apnsToken":"\#(TestTokens.apns(1))"}}"#,
        ] {
            let answer = await harness.call(.post, NativeNotifyTests.register, body: missing)
            #expect(answer.status == 400)
            #expect(answer.errorCode == "missing_field")
            #expect(answer.errorField == "deviceId")
        }
    }

    @Test("platform: required; anything but ios or android is invalid_platform")
    func platformRules() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        let missing = await harness.call(
            .post, NativeNotifyTests.register,
            body:
                #"{"appId":\#(app),"appToken":"\#(token)","deviceId":"d","tokens":{"apnsToken":"\#(TestTokens.apns(1))"}}"#
        )
        #expect(missing.errorCode == "missing_field")
        #expect(missing.errorField == "platform")
        for platform in ["windows", "iOS", ""] {
            let answer = await harness.call(
                .post, NativeNotifyTests.register,
                body: NativeNotifyTests.body(app: app, token: token, platform: platform))
            #expect(answer.status == 400)
            #expect(answer.errorCode == "invalid_platform")
            #expect(answer.errorField == "platform")
        }
    }

    @Test(
        "tokens: aliases, shapes, the 400-character cap, Expo refusal and platform pairing",
        arguments: [
            ("ios", #"{"apns_token":"\#(TestTokens.apns(1))"}"#, 201, "apnsToken"),
            ("ios", #"{"apnToken":"\#(TestTokens.apns(1))"}"#, 201, "apnsToken"),
            ("ios", #"{"apnsToken":"\#(TestTokens.apns(1).uppercased())"}"#, 201, "apnsToken"),
            ("ios", #"{"apnsToken":"\#(String(repeating: "ab", count: 200))"}"#, 201, "apnsToken"),
            ("android", #"{"fcmToken":"\#(TestTokens.fcm(1))"}"#, 201, "fcmToken"),
            ("android", #"{"fcm_token":"\#(TestTokens.fcm(1))"}"#, 201, "fcmToken"),
            ("android", #"{"fcmToken":"\#(String(repeating: "a", count: 32))"}"#, 201, "fcmToken"),
            ("android", #"{"fcmToken":"\#(String(repeating: "a", count: 400))"}"#, 201, "fcmToken"),
            ("ios", #"{"apnsToken":"\#(String(repeating: "ab", count: 201))"}"#, 400, "invalid_token_format"),
            ("ios", #"{"apnsToken":"\#(String(repeating: "a", count: 63))"}"#, 400, "invalid_token_format"),
            ("ios", #"{"apnsToken":"\#(String(repeating: "g", count: 64))"}"#, 400, "invalid_token_format"),
            ("ios", #"{"apnsToken":12345}"#, 400, "invalid_token_format"),
            ("android", #"{"fcmToken":"\#(String(repeating: "a", count: 401))"}"#, 400, "invalid_token_format"),
            ("android", #"{"fcmToken":"\#(String(repeating: "a", count: 31))"}"#, 400, "invalid_token_format"),
            ("android", #"{"fcmToken":"\#(String(repeating: "a", count: 40))/+="}"#, 400, "invalid_token_format"),
            ("ios", #"{"apnsToken":"ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]"}"#, 400, "unsupported_token_type"),
            ("android", #"{"fcmToken":"ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]"}"#, 400, "unsupported_token_type"),
            ("android", #"{"apnsToken":"\#(TestTokens.apns(1))"}"#, 400, "token_platform_mismatch"),
            ("ios", #"{"fcmToken":"\#(TestTokens.fcm(1))"}"#, 400, "token_platform_mismatch"),
            (
                "ios", #"{"apnsToken":"\#(TestTokens.apns(1))","fcmToken":"\#(TestTokens.fcm(1))"}"#, 400,
                "token_platform_mismatch"
            ),
            ("ios", "{}", 400, "no_tokens_provided"),
            ("ios", #"{"apnsToken":""}"#, 400, "no_tokens_provided"),
        ] as [(String, String, Int, String)])
    func tokenRules(platform: String, tokens: String, status: Int, expectation: String) async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        let answer = await harness.call(
            .post, NativeNotifyTests.register,
            body: NativeNotifyTests.body(app: app, token: token, platform: platform, tokens: tokens))
        #expect(answer.status == status)
        if status == 201 {
            #expect(answer.json?["tokens"]?[expectation]?.stringValue == "ok")
        } else {
            #expect(answer.errorCode == expectation)
            #expect(answer.errorField?.hasPrefix("tokens") == true)
            #expect(try await harness.stats(app: app).devices == 0)
        }
    }

    @Test("no tokens object at all is missing_field (tokens)")
    func tokensMissing() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        let answer = await harness.call(
            .post, NativeNotifyTests.register,
            body: #"{"appId":\#(app),"appToken":"\#(token)","deviceId":"d","platform":"ios"}"#)
        #expect(answer.status == 400)
        #expect(answer.errorCode == "missing_field")
        #expect(answer.errorField == "tokens")
    }

    @Test("appVersion is trimmed and capped at 50 characters, timezone at 60")
    func trimmingAndCaps() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        let version = "  " + String(repeating: "v", count: 70) + "\n"
        let zone = "\t" + String(repeating: "z", count: 61) + " "
        let answer = await harness.call(
            .post, NativeNotifyTests.register,
            body: NativeNotifyTests.body(
                app: app, token: token,
                extra: #","appVersion":"\#(version)","timezone":"\#(zone)""#
                    .replacingNewlinesWithEscapes()))
        #expect(answer.status == 201)
        #expect(answer.json?["device"]?["appVersion"]?.stringValue == String(repeating: "v", count: 50))
        #expect(answer.json?["device"]?["timezone"]?.stringValue == String(repeating: "z", count: 60))
        let trimmed = await harness.call(
            .post, NativeNotifyTests.register,
            body: NativeNotifyTests.body(app: app, token: token, extra: #","appVersion":"  2.4.0 ""#))
        #expect(trimmed.json?["device"]?["appVersion"]?.stringValue == "2.4.0")
    }

    @Test("appId: missing is missing_field, unknown is app_not_found; a wrong appToken answers 401")
    func appIdentity() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        let other = try await harness.createApp("Other")
        let otherKey = try await harness.createKey(app: other, #"{"kind":"mobile"}"#).key
        let missing = await harness.call(
            .post, NativeNotifyTests.register,
            body:
                #"{"appToken":"\#(token)","deviceId":"d","platform":"ios","tokens":{"apnsToken":"\#(TestTokens.apns(1))"}}"#
        )
        #expect(missing.status == 400)
        #expect(missing.errorCode == "missing_field")
        #expect(missing.errorField == "appId")
        let unknown = await harness.call(
            .post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: 99, token: token))
        #expect(unknown.status == 404)
        #expect(unknown.errorCode == "app_not_found")
        let testKey = try await harness.createKey(app: app, #"{"kind":"mobile","mode":"test"}"#).key
        let readOnly = try await harness.createKey(app: app, #"{"kind":"secret","capabilities":["devices:read"]}"#).key
        for wrong in ["nope", otherKey, testKey, readOnly, Harness.adminKey] {
            let answer = await harness.call(
                .post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: wrong))
            #expect(answer.status == 401)
            #expect(answer.errorCode == "unauthorized")
        }
        let noToken = await harness.call(
            .post, NativeNotifyTests.register,
            body: #"{"appId":\#(app),"deviceId":"d","platform":"ios","tokens":{"apnsToken":"\#(TestTokens.apns(1))"}}"#)
        #expect(noToken.status == 401)
        let writer = try await harness.createKey(app: app, #"{"kind":"secret","capabilities":["devices:write"]}"#).key
        let secret = await harness.call(
            .post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: writer))
        #expect(secret.status == 201)
        let asString = await harness.call(
            .post, NativeNotifyTests.register,
            body:
                #"{"appId":"\#(app)","appToken":"\#(token)","deviceId":"s","platform":"ios","tokens":{"apnsToken":"\#(TestTokens.apns(2))"}}"#
        )
        #expect(asString.status == 201)
        #expect(try await harness.stats(app: app, mode: .test).devices == 0)
    }

    @Test("errors use the envelope {error:{code,message,field?}}")
    func envelope() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        let answer = await harness.call(
            .post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: token, platform: "web"))
        #expect(answer.keys == ["error"])
        let error = try #require(answer.json?["error"])
        #expect(error.objectMembers?.map(\.key).sorted() == ["code", "field", "message"])
        #expect(error["message"]?.stringValue?.isEmpty == false)
    }

    @Test("deregister is a hard delete answering {ok, deviceId, removed, tokensRemoved}; unknown ids answer 200")
    func deregister() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        _ = await harness.call(.post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: token))
        let body = #"{ "appId": \#(app), "appToken": "\#(token)", "deviceId": "A1B2C3D4-install-key" }"#
        let removed = await harness.call(.post, NativeNotifyTests.deregister, body: body)
        #expect(removed.status == 200)
        #expect(removed.text == #"{"ok":true,"deviceId":"A1B2C3D4-install-key","removed":true,"tokensRemoved":1}"#)
        #expect(try await harness.stats(app: app).devices == 0)
        let again = await harness.call(.post, NativeNotifyTests.deregister, body: body)
        #expect(again.status == 200)
        #expect(again.text == #"{"ok":true,"deviceId":"A1B2C3D4-install-key","removed":false,"tokensRemoved":0}"#)
        // Hard delete: the same deviceId later is a new device with a new createdAt.
        harness.clock.advance(milliseconds: 1_000)
        let fresh = await harness.call(
            .post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: token))
        #expect(fresh.json?["device"]?["createdAt"]?.stringValue == "2026-09-21T14:13:21.000Z")
        let wrong = await harness.call(
            .post, NativeNotifyTests.deregister, body: #"{"appId":\#(app),"appToken":"x","deviceId":"d"}"#)
        #expect(wrong.status == 401)
        let missing = await harness.call(
            .post, NativeNotifyTests.deregister, body: #"{"appId":\#(app),"appToken":"\#(token)"}"#)
        #expect(missing.errorCode == "missing_field")
        #expect(missing.errorField == "deviceId")
    }

    @Test("deregistering a device whose token moved away removes it with tokensRemoved 0")
    func deregisterWithoutToken() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        _ = await harness.call(
            .post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: token, deviceId: "one"))
        _ = await harness.call(
            .post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: token, deviceId: "two"))
        let answer = await harness.call(
            .post, NativeNotifyTests.deregister, body: #"{"appId":\#(app),"appToken":"\#(token)","deviceId":"one"}"#)
        #expect(answer.text == #"{"ok":true,"deviceId":"one","removed":true,"tokensRemoved":0}"#)
    }

    @Test("health shows the app's counts for the appId/appToken pair")
    func health() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        _ = await harness.call(
            .post, NativeNotifyTests.register,
            body: NativeNotifyTests.body(app: app, token: token, deviceId: "a", extra: #","subscriberId":"u1""#))
        _ = await harness.call(
            .post, NativeNotifyTests.register,
            body: NativeNotifyTests.body(
                app: app, token: token, deviceId: "b", platform: "android",
                tokens: #"{"fcmToken":"\#(TestTokens.fcm(1))"}"#))
        let answer = await harness.call(.get, "/api/universal/health?appId=\(app)&appToken=\(token)")
        #expect(answer.status == 200)
        #expect(
            answer.text
                == #"{"ok":true,"appId":\#(app),"counts":{"devices":2,"active":2,"invalidated":0,"subscribers":1,"ios":1,"android":1}}"#
        )
        #expect(await harness.call(.get, "/api/universal/health?appId=\(app)&appToken=wrong").status == 401)
        #expect(await harness.call(.get, "/api/universal/health?appId=\(app)").status == 401)
        #expect(await harness.call(.get, "/api/universal/health").errorCode == "missing_field")
        #expect(await harness.call(.get, "/api/universal/health?appId=77&appToken=\(token)").status == 404)
    }

    @Test("the same deviceId on another platform is a 422 device_identity_conflict on deviceId; nothing changes")
    func platformChange() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        _ = await harness.call(.post, NativeNotifyTests.register, body: NativeNotifyTests.body(app: app, token: token))
        let answer = await harness.call(
            .post, NativeNotifyTests.register,
            body: NativeNotifyTests.body(
                app: app, token: token, platform: "android", tokens: #"{"fcmToken":"\#(TestTokens.fcm(1))"}"#))
        #expect(answer.status == 422)
        #expect(answer.errorCode == "device_identity_conflict")
        #expect(answer.errorField == "deviceId")
        #expect(try await harness.stats(app: app).devices == 1)
    }
}

extension String {
    /// The text with raw newlines and tabs escaped for a JSON string literal.
    func replacingNewlinesWithEscapes() -> String {
        var out = ""
        for character in self {
            switch character {
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            default: out.append(character)
            }
        }
        return out
    }
}
