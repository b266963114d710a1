import Glibc
import RoostCrypto
import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostPlatform
import RoostTesting
import Testing

@testable import RoostAPI

/// seeds/connect-register-device.txt and spec §6's principals (docs/compat.md §3).
@Suite("Connect-style principals: /v1/identities, /v1/me/devices, identity keys")
struct ConnectTests {
    struct App {
        var id: Int
        var mobile: String
        var secret: String
    }

    static func setUp(_ harness: Harness, mode: String = "live") async throws -> App {
        let app = try await harness.createApp()
        let mobile = try await harness.createKey(app: app, #"{"kind":"mobile","mode":"\#(mode)"}"#).key
        let secret = try await harness.createKey(
            app: app, #"{"kind":"secret","mode":"\#(mode)","capabilities":["people:write"]}"#
        ).key
        return App(id: app, mobile: mobile, secret: secret)
    }

    static func guest(_ harness: Harness, _ app: App) async throws -> (principal: String, token: String) {
        let answer = await harness.call(.post, "/v1/identities/guest", key: app.mobile)
        guard answer.status == 201, let principal = answer.json?["principal"]?.stringValue,
            let token = answer.json?["identity_token"]?.stringValue
        else { throw HarnessError(message: "guest answered \(answer.status): \(answer.text)") }
        return (principal, token)
    }

    static func user(_ harness: Harness, _ app: App, _ externalID: String, ttl: Int? = nil) async throws -> String {
        let ttlMember = ttl.map { #","ttl_seconds":\#($0)"# } ?? ""
        let answer = await harness.call(
            .post, "/v1/identities/authenticated", key: app.secret,
            body: #"{"external_id":"\#(externalID)"\#(ttlMember)}"#)
        guard answer.status == 201, let token = answer.json?["identity_token"]?.stringValue else {
            throw HarnessError(message: "authenticated answered \(answer.status): \(answer.text)")
        }
        return token
    }

    static func device(installation: String = "A1B2-install", token: String = TestTokens.apns(1)) -> String {
        #"{"installation_id":"\#(installation)","platform":"ios","token":"\#(token)","environment":"production"}"#
    }

    @Test("POST /v1/identities/guest with a mobile key → 201 {principal: guest:…, identity_token}")
    func mintGuest() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        let answer = await harness.call(.post, "/v1/identities/guest", key: app.mobile)
        #expect(answer.status == 201)
        let principal = try #require(answer.json?["principal"]?.stringValue)
        #expect(principal.hasPrefix("guest:") && principal.utf8.count == 38)
        #expect(answer.json?["identity_token"]?.stringValue?.hasPrefix("rit3.ik_") == true)
        #expect(answer.json?["expires_at"]?.stringValue == "2026-09-22T14:13:20.000Z")
        let other = try await ConnectTests.guest(harness, app)
        #expect(other.principal != principal)
        #expect(await harness.call(.post, "/v1/identities/guest").status == 401)
        #expect(await harness.call(.post, "/v1/identities/guest", key: app.secret).status == 403)
        #expect(await harness.call(.post, "/v1/identities/guest", key: Harness.adminKey).status == 403)
    }

    @Test("POST /v1/identities/authenticated (secret, people:write) {external_id} → 201 {principal: user:…}")
    func mintUser() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        let answer = await harness.call(
            .post, "/v1/identities/authenticated", key: app.secret, body: #"{"external_id":"user_42"}"#)
        #expect(answer.status == 201)
        #expect(answer.json?["principal"]?.stringValue == "user:user_42")
        #expect(answer.json?["identity_token"]?.stringValue?.isEmpty == false)
        let writer = try await harness.createKey(app: app.id, #"{"kind":"secret","capabilities":["devices:write"]}"#)
            .key
        for key in [app.mobile, writer] {
            let refused = await harness.call(
                .post, "/v1/identities/authenticated", key: key, body: #"{"external_id":"user_42"}"#)
            #expect(refused.status == 403)
        }
        for (body, code) in [
            ("{}", "missing_field"), (#"{"external_id":""}"#, "invalid_field"),
            (#"{"external_id":"guest:abc"}"#, "invalid_field"),
            (#"{"external_id":"u","ttl_seconds":5}"#, "invalid_field"),
        ] {
            let bad = await harness.call(.post, "/v1/identities/authenticated", key: app.secret, body: body)
            #expect(bad.status == 400)
            #expect(bad.errorCode == code)
        }
    }

    @Test("PUT /v1/me/devices registers for the token's principal: 201 new, 200 again, never the token")
    func registerAsGuest() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        let guest = try await ConnectTests.guest(harness, app)
        let created = await harness.call(.put, "/v1/me/devices", key: guest.token, body: ConnectTests.device())
        #expect(created.status == 201)
        let json = try #require(created.json)
        #expect(json["external_id"]?.stringValue == guest.principal)
        #expect(json["installation_id"]?.stringValue == "A1B2-install")
        #expect(json["id"]?.stringValue?.hasPrefix("dev_") == true)
        #expect(json["token"] == nil)
        #expect(!created.text.contains(TestTokens.apns(1)))
        let again = await harness.call(.put, "/v1/me/devices", key: guest.token, body: ConnectTests.device())
        #expect(again.status == 200)
        #expect(again.json?["id"] == json["id"])
    }

    @Test("keyed on the installation: a new token updates the existing record rather than creating a second")
    func newTokenSameInstallation() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        let user = try await ConnectTests.user(harness, app, "user_42")
        let first = await harness.call(.put, "/v1/me/devices", key: user, body: ConnectTests.device())
        let rotated = await harness.call(
            .put, "/v1/me/devices", key: user, body: ConnectTests.device(token: TestTokens.apns(2)))
        #expect(rotated.status == 200)
        #expect(rotated.json?["id"] == first.json?["id"])
        #expect(try await harness.stats(app: app.id).devices == 1)
        #expect(
            try await harness.device(app: app.id, token: TestTokens.apns(2))?.installationID?.rawValue == "A1B2-install"
        )
    }

    @Test("after sign-in the registration moves from the guest identity to the user; the guest is forgotten")
    func guestToUser() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        let guest = try await ConnectTests.guest(harness, app)
        let asGuest = await harness.call(.put, "/v1/me/devices", key: guest.token, body: ConnectTests.device())
        harness.clock.advance(milliseconds: 10_000)
        let user = try await ConnectTests.user(harness, app, "user_42")
        let asUser = await harness.call(.put, "/v1/me/devices", key: user, body: ConnectTests.device())
        #expect(asUser.status == 200)
        #expect(asUser.json?["id"] == asGuest.json?["id"])
        #expect(asUser.json?["external_id"]?.stringValue == "user_42")
        #expect(asUser.json?["bound_at"]?.stringValue == "2026-09-21T14:13:30.000Z")
        #expect(try await harness.person(app: app.id, guest.principal) == nil)
        #expect(try await harness.stats(app: app.id).people == 1)
        // The guest can no longer remove what is now the user's device.
        let guestDelete = await harness.call(.delete, "/v1/me/devices/A1B2-install", key: guest.token)
        #expect(guestDelete.text == #"{"deleted":false}"#)
    }

    @Test("the body can never name a user: external_id in the body is refused and binds nothing")
    func bodyCannotNameUser() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        let guest = try await ConnectTests.guest(harness, app)
        for value in [#""user_42""#, "null"] {
            let answer = await harness.call(
                .put, "/v1/me/devices", key: guest.token,
                body:
                    #"{"installation_id":"i","platform":"ios","token":"\#(TestTokens.apns(1))","external_id":\#(value)}"#
            )
            #expect(answer.status == 400)
            #expect(answer.errorField == "external_id")
        }
        #expect(try await harness.person(app: app.id, "user_42") == nil)
        #expect(try await harness.stats(app: app.id).devices == 0)
    }

    @Test("one user cannot remove another's device; the owner's DELETE answers {\"deleted\":true}, then false")
    func deleteOnlyOwn() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        let alice = try await ConnectTests.user(harness, app, "alice")
        let bob = try await ConnectTests.user(harness, app, "bob")
        _ = await harness.call(.put, "/v1/me/devices", key: alice, body: ConnectTests.device())
        let byBob = await harness.call(.delete, "/v1/me/devices/A1B2-install", key: bob)
        #expect(byBob.status == 200)
        #expect(byBob.text == #"{"deleted":false}"#)
        #expect(try await harness.stats(app: app.id).devices == 1)
        let byAlice = await harness.call(.delete, "/v1/me/devices/A1B2-install", key: alice)
        #expect(byAlice.text == #"{"deleted":true}"#)
        let again = await harness.call(.delete, "/v1/me/devices/A1B2-install", key: alice)
        #expect(again.text == #"{"deleted":false}"#)
        #expect(await harness.call(.delete, "/v1/me/devices/A1B2-install").status == 401)
    }

    @Test("a guest deleting its only device is forgotten as a person")
    func guestDeleteForgetsGuest() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        let guest = try await ConnectTests.guest(harness, app)
        _ = await harness.call(.put, "/v1/me/devices", key: guest.token, body: ConnectTests.device())
        #expect(try await harness.stats(app: app.id).people == 1)
        let deleted = await harness.call(.delete, "/v1/me/devices/A1B2-install", key: guest.token)
        #expect(deleted.text == #"{"deleted":true}"#)
        #expect(try await harness.stats(app: app.id).people == 0)
    }

    @Test("a forged, altered, expired or deleted-app token, or an app key, answers 401")
    func badTokens() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        let token = try await ConnectTests.user(harness, app, "user_42", ttl: 60)
        var parts = token.split(separator: ".").map(String.init)
        #expect(parts.count == 10)
        // Flip the last signature character.
        var forged = parts
        forged[9] = String(forged[9].dropLast()) + (forged[9].hasSuffix("A") ? "B" : "A")
        // Claim another app, another mode, another minting key, another user, a later expiry.
        var otherApp = parts
        otherApp[2] = "2"
        var otherMode = parts
        otherMode[3] = "test"
        var otherMinter = parts
        otherMinter[4] = "key_0000000000000000"
        var otherUser = parts
        otherUser[6] = Base64URL.encode(Array("user_43".utf8))
        var later = parts
        later[7] = String(Int(parts[7])! + 3600)
        // The retired rit1 layout (no minting key) with a valid signature is refused too.
        var rit1 = parts
        rit1.remove(at: 8)
        rit1.remove(at: 4)
        rit1[0] = "rit1"
        let signingKey = try #require(harness.service.identityKeys.currentState().keys.first)
        let rit1Signed = rit1[0..<7].joined(separator: ".")
        rit1[7] = Base64URL.encode(Crypto.hmacSHA256(key: signingKey.secret, message: Array(rit1Signed.utf8)))
        for bad in [forged, otherApp, otherMode, otherMinter, otherUser, later, rit1].map({ $0.joined(separator: ".") })
            + [
                "rit2.ik_0000000000000000.1.live.key_0000000000000000.user.dXNlcl80Mg.9999999999.AAAA", "garbage",
                app.mobile, app.secret,
            ]
        {
            let answer = await harness.call(.put, "/v1/me/devices", key: bad, body: ConnectTests.device())
            #expect(answer.status == 401)
            #expect(answer.errorCode == "unauthorized")
        }
        #expect(await harness.call(.put, "/v1/me/devices", key: token, body: ConnectTests.device()).status == 201)
        harness.clock.advance(milliseconds: 60_000)
        #expect(await harness.call(.put, "/v1/me/devices", key: token, body: ConnectTests.device()).status == 401)
        parts = try await ConnectTests.user(harness, app, "user_42").split(separator: ".").map(String.init)
        _ = await harness.call(.delete, "/v1/apps/\(app.id)", key: Harness.adminKey)
        let orphan = await harness.call(
            .put, "/v1/me/devices", key: parts.joined(separator: "."), body: ConnectTests.device())
        #expect(orphan.status == 401)
    }

    @Test("a token is bound to its app and mode: a test-mode guest's device lives in test mode only")
    func boundToMode() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness, mode: "test")
        let guest = try await ConnectTests.guest(harness, app)
        let answer = await harness.call(.put, "/v1/me/devices", key: guest.token, body: ConnectTests.device())
        #expect(answer.json?["mode"]?.stringValue == "test")
        #expect(try await harness.stats(app: app.id, mode: .test).devices == 1)
        #expect(try await harness.stats(app: app.id, mode: .live).devices == 0)
    }

    @Test("under require_known_person a guest still registers; an unknown user gets 409 unknown_identity")
    func requireKnownPerson() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        _ = await harness.call(
            .patch, "/v1/apps/\(app.id)", key: Harness.adminKey, body: #"{"settings":{"require_known_person":true}}"#)
        let guest = try await ConnectTests.guest(harness, app)
        #expect(await harness.call(.put, "/v1/me/devices", key: guest.token, body: ConnectTests.device()).status == 201)
        let user = try await ConnectTests.user(harness, app, "user_42")
        let refused = await harness.call(.put, "/v1/me/devices", key: user, body: ConnectTests.device())
        #expect(refused.status == 409)
        #expect(refused.errorCode == "unknown_identity")
        #expect(
            try await harness.device(app: app.id, installation: "A1B2-install")?.externalID?.rawValue
                == guest.principal)
        // A refused guest registration leaves no guest person behind.
        let second = try await ConnectTests.guest(harness, app)
        let conflict = await harness.call(
            .put, "/v1/me/devices", key: second.token,
            body: #"{"installation_id":"A1B2-install","platform":"android","token":"\#(TestTokens.fcm(1))"}"#)
        #expect(conflict.status == 422)
        #expect(try await harness.person(app: app.id, second.principal) == nil)
    }

    @Test(
        "PUT /v1/me/devices validates its body like POST /v1/devices",
        arguments: [
            (#"{"platform":"ios","token":"\#(TestTokens.apns(1))"}"#, "missing_field", "installation_id"),
            (#"{"installation_id":"i","token":"\#(TestTokens.apns(1))"}"#, "missing_field", "platform"),
            (#"{"installation_id":"i","platform":"ios"}"#, "missing_field", "token"),
            (
                #"{"installation_id":"i","platform":"web","token":"\#(TestTokens.apns(1))"}"#, "invalid_platform",
                "platform"
            ),
            (#"{"installation_id":"i","platform":"ios","token":"zz"}"#, "invalid_token_format", "token"),
            (
                #"{"installation_id":"i","platform":"android","token":"\#(TestTokens.fcm(1))","environment":"sandbox"}"#,
                "invalid_environment", "environment"
            ),
            (
                #"{"installation_id":"\#(String(repeating: "i", count: 201))","platform":"ios","token":"\#(TestTokens.apns(1))"}"#,
                "invalid_field", "installation_id"
            ),
        ] as [(String, String, String)])
    func badBodies(body: String, code: String, field: String) async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        let guest = try await ConnectTests.guest(harness, app)
        let answer = await harness.call(.put, "/v1/me/devices", key: guest.token, body: body)
        #expect(answer.status == 400)
        #expect(answer.errorCode == code)
        #expect(answer.errorField == field)
    }

    @Test("rotation: a new current key signs, old tokens verify until their key is removed, then 401")
    func rotation() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        let old = try await ConnectTests.user(harness, app, "user_42")
        let listed = await harness.call(.get, "/v1/identity-keys", key: Harness.adminKey)
        let oldID = try #require(listed.json?["current"]?.stringValue)
        let rotated = await harness.call(.post, "/v1/identity-keys", key: Harness.adminKey)
        #expect(rotated.status == 201)
        let newID = try #require(rotated.json?["id"]?.stringValue)
        #expect(newID != oldID)
        let fresh = try await ConnectTests.user(harness, app, "user_42")
        #expect(fresh.split(separator: ".")[1] == Substring(newID))
        #expect(await harness.call(.put, "/v1/me/devices", key: old, body: ConnectTests.device()).status == 201)
        let cannot = await harness.call(.delete, "/v1/identity-keys/\(newID)", key: Harness.adminKey)
        #expect(cannot.status == 409)
        #expect(cannot.errorCode == "current_key")
        let removed = await harness.call(.delete, "/v1/identity-keys/\(oldID)", key: Harness.adminKey)
        #expect(removed.text == #"{"deleted":true}"#)
        #expect(await harness.call(.put, "/v1/me/devices", key: old, body: ConnectTests.device()).status == 401)
        #expect(await harness.call(.put, "/v1/me/devices", key: fresh, body: ConnectTests.device()).status == 200)
        let list = await harness.call(.get, "/v1/identity-keys", key: Harness.adminKey)
        #expect(list.json?["keys"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == [newID])
        #expect(!list.text.contains("secret"))
        #expect(await harness.call(.post, "/v1/identity-keys", key: app.secret).status == 403)
        #expect(await harness.call(.delete, "/v1/identity-keys/ik_nothing", key: Harness.adminKey).status == 404)
    }

    @Test("signing keys are log records: made at first start, they and their rotations survive restarts")
    func keysPersist() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (harness, firstEngine) = try await Harness.durable(directory)
        let app = try await ConnectTests.setUp(harness)
        let token = try await ConnectTests.user(harness, app, "user_42")
        let rotated = await harness.call(.post, "/v1/identity-keys", key: Harness.adminKey)
        #expect(rotated.status == 201)
        let rotatedID = try #require(rotated.json?["id"]?.stringValue)
        firstEngine.close()
        #expect(!DurableFile.exists(directory + "/identity-keys.json"))

        let (second, engine) = try await Harness.durable(directory)
        defer { engine.close() }
        let keys = second.service.identityKeys
        #expect(keys.currentKey().id == rotatedID)
        #expect(keys.list().keys.count == 2)
        let claims = IdentityToken.verify(token[...], keys: keys, nowSeconds: 1_790_000_000)
        #expect(claims?.principal == .user(try ExternalID("user_42")))
        #expect(claims?.app == AppID(UInt32(app.id)))
    }

    @Test("an unreadable identity key file of an older release stops start-up with its path, changing nothing")
    func corruptKeyFile() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let path = directory + "/identity-keys.json"
        try DurableFile.replace(path: path, with: Array(#"{"version":1,"current":"x","keys":[]}"#.utf8))
        await #expect {
            _ = try await Harness.durable(directory)
        } throws: { error in
            "\(error)".contains(path) && "\(error)".contains("damaged")
        }
        #expect(DurableFile.exists(path))
        #expect(!DurableFile.exists(path + ".migrated"))
    }

    @Test("base64url round-trips every length and refuses padding and foreign characters")
    func base64URL() {
        for length in 0..<40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            #expect(Base64URL.decode(Base64URL.encode(bytes)[...]) == bytes)
        }
        #expect(Base64URL.encode(Array("user_42".utf8)) == "dXNlcl80Mg")
        #expect(Base64URL.decode("dXNlcl80Mg==") == nil)
        #expect(Base64URL.decode("dXNl+l80") == nil)
        #expect(Base64URL.decode("A") == nil)
        #expect(Base64URL.decode("AB") == nil)
    }
}
