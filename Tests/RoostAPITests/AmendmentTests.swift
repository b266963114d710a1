import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

/// Spec §12, the security amendments to v1 (and its two clarifications), through
/// the routes.
@Suite("Spec §12 amendments: duplicate names, installation proofs, token revocation, environment")
struct AmendmentTests {
    // MARK: - Duplicate names (I-JSON)

    @Test(
        "a JSON object with the same name twice is 400 malformed_json on every JSON route, and changes nothing",
        arguments: [
            #"{"platform":"ios","token":"\#(TestTokens.apns(1))","token":"\#(TestTokens.apns(2))"}"#,
            #"{"platform":"ios","platform":"android","token":"\#(TestTokens.apns(1))"}"#,
            #"{"platform":"ios","token":"\#(TestTokens.apns(1))","tags":{"plan":"pro","plan":"free"}}"#,
            #"{"platform":"ios","token":"\#(TestTokens.apns(1))","external_id":"a","external_id":"b"}"#,
            // The same name spelled with an escape is the same name.
            #"{"platform":"ios","token":"\#(TestTokens.apns(1))","\u0074oken":"\#(TestTokens.apns(2))"}"#,
        ])
    func duplicateNames(body: String) async throws {
        let app = try await DeviceApp.make()
        let answer = await app.register(body)
        #expect(answer.status == 400)
        #expect(answer.errorCode == "malformed_json")
        #expect(await app.call(.get, "/v1/stats").json?["devices"]?.intValue == 0)
    }

    @Test("duplicate names are refused on the compatibility routes too (a proxy reading the first value is not fooled)")
    func duplicateNamesCompat() async throws {
        let app = try await DeviceApp.make()
        let other = try await DeviceApp.make(app.harness)
        // Native Notify: the first appToken is another app's, the last this app's.
        let body =
            #"{"appId":\#(app.app),"appToken":"\#(other.mobile)","appToken":"\#(app.mobile)","deviceId":"d1","#
            + #""platform":"ios","tokens":{"apnsToken":"\#(TestTokens.apns(1))"}}"#
        let answer = await app.harness.call(.post, "/api/universal/device/register", body: body)
        #expect(answer.status == 400)
        #expect(answer.errorCode == "malformed_json")
        #expect(await app.call(.get, "/v1/stats").json?["devices"]?.intValue == 0)
        let apps = await app.harness.call(
            .post, "/v1/apps", key: Harness.adminKey, body: #"{"name":"a","name":"b"}"#)
        #expect(apps.status == 400)
        #expect(apps.errorCode == "malformed_json")
        // Distinct names, and the same name in two different objects, are fine.
        let fine = await app.registerIOS(1, #""tags":{"plan":"pro"},"x":{"plan":"free"}"#)
        #expect(fine.status == 201)
    }

    // MARK: - Installation proofs

    /// Registers installation `A1` with token 1 and a secret; returns its device id.
    static func securedInstallation(_ app: DeviceApp) async throws -> String {
        try await app.registerID(1, #""installation_id":"A1","installation_secret":"s3cret""#)
    }

    @Test(
        "a device holding a secret is not reached by installation_id without the proof: 409, nothing changes",
        arguments: ["mobile", "secret"])
    func takeoverRefused(keyKind: String) async throws {
        let app = try await DeviceApp.make()
        let id = try await AmendmentTests.securedInstallation(app)
        let key = keyKind == "mobile" ? app.mobile : app.secret
        let before = await app.device(id).text
        let proofs = [
            "",  // none
            #","installation_secret":"s3cret""#,  // secret without the device id
            #","device_id":"\#(id)""#,  // device id without the secret
            #","device_id":"\#(id)","installation_secret":"wrong""#,
        ]
        for proof in proofs {
            let answer = await app.registerIOS(
                2, #""installation_id":"A1","external_id":"attacker""# + proof, key: key)
            #expect(answer.status == 409, "proof \(proof)")
            #expect(answer.errorCode == "installation_proof_required")
            #expect(answer.errorField == "installation_id")
        }
        #expect(await app.device(id).text == before)
        let stats = await app.call(.get, "/v1/stats").json
        #expect(stats?["devices"]?.intValue == 1)
        #expect(stats?["people"]?.intValue == 0)
        // With the proof the installation's own client rotates its token.
        let proven = await app.registerIOS(
            2, #""installation_id":"A1","device_id":"\#(id)","installation_secret":"s3cret""#, key: key)
        #expect(proven.status == 200)
        #expect(proven.json?["id"]?.stringValue == id)
        #expect(await app.device(id).json?["token"]?.stringValue == TestTokens.apns(2))
    }

    @Test("the installation proof is required on the compatibility routes keyed on installation ids")
    func takeoverRefusedCompat() async throws {
        let app = try await DeviceApp.make()
        let id = try await AmendmentTests.securedInstallation(app)
        let before = await app.device(id).text
        let nativeNotify = await app.harness.call(
            .post, "/api/universal/device/register",
            body:
                #"{"appId":\#(app.app),"appToken":"\#(app.mobile)","deviceId":"A1","platform":"ios","#
                + #""tokens":{"apnsToken":"\#(TestTokens.apns(2))"}}"#)
        #expect(nativeNotify.status == 409)
        #expect(nativeNotify.errorCode == "installation_proof_required")
        let guest = await app.harness.call(.post, "/v1/identities/guest", key: app.mobile)
        let identity = try #require(guest.json?["identity_token"]?.stringValue)
        let connect = await app.harness.call(
            .put, "/v1/me/devices", key: identity,
            body: #"{"installation_id":"A1","platform":"ios","token":"\#(TestTokens.apns(3))"}"#)
        #expect(connect.status == 409)
        #expect(connect.errorCode == "installation_proof_required")
        #expect(await app.device(id).text == before)
    }

    @Test("Native Notify's deregister cannot delete a device holding a secret by its installation id alone: 409")
    func deregisterSecuredRefused() async throws {
        let app = try await DeviceApp.make()
        let id = try await AmendmentTests.securedInstallation(app)
        let plain = try await app.registerID(5, #""installation_id":"plain""#)
        let deregister = { (deviceID: String) in
            await app.harness.call(
                .post, "/api/universal/device/deregister",
                body: #"{"appId":\#(app.app),"appToken":"\#(app.mobile)","deviceId":"\#(deviceID)"}"#)
        }
        let refused = await deregister("A1")
        #expect(refused.status == 409)
        #expect(refused.errorCode == "installation_proof_required")
        #expect(refused.errorField == "deviceId")
        #expect(await app.device(id).status == 200)
        // A device without a secret is deregistered as the vendor's API says.
        #expect(await deregister("plain").json?["removed"]?.boolValue == true)
        #expect(await app.device(plain).status == 404)
    }

    @Test("without a stored secret, rule 4 stands: a new token for a known installation replaces it")
    func noSecretRuleFourStands() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1, #""installation_id":"A1""#)
        let answer = await app.registerIOS(2, #""installation_id":"A1""#, key: app.mobile)
        #expect(answer.status == 200)
        #expect(answer.json?["id"]?.stringValue == id)
    }

    @Test("a reinstall with a new installation id recovers without the old secret; the old device is Reassigned")
    func reinstallRecovers() async throws {
        let app = try await DeviceApp.make()
        let old = try await AmendmentTests.securedInstallation(app)
        // Same token (APNs keeps it across a reinstall), new installation id, new secret.
        let fresh = await app.registerIOS(
            1, #""installation_id":"A2","installation_secret":"new-secret""#, key: app.mobile)
        #expect(fresh.status == 201)
        #expect(fresh.json?["id"]?.stringValue != old)
        let left = try #require(await app.device(old).json)
        #expect(left["invalidation_reason"]?.stringValue == "Reassigned")
        #expect(left["installation_id"]?.stringValue == "A1")
        #expect(left["token"]?.isNull == true)
    }

    // MARK: - Clarifications

    @Test("re-registering an existing device without environment keeps the stored one; a new device gets production")
    func environmentKept() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1, #""environment":"sandbox""#)
        let again = await app.registerIOS(1, #""app_version":"2.0""#)
        #expect(again.status == 200)
        #expect(again.json?["environment"]?.stringValue == "sandbox")
        #expect(await app.device(id).json?["environment"]?.stringValue == "sandbox")
        let byInstallation = try await app.registerID(2, #""environment":"sandbox","installation_id":"I""#)
        let rotated = await app.registerIOS(3, #""installation_id":"I""#)
        #expect(rotated.json?["id"]?.stringValue == byInstallation)
        #expect(rotated.json?["environment"]?.stringValue == "sandbox")
        #expect(await app.registerIOS(4).json?["environment"]?.stringValue == "production")
        let production = await app.registerIOS(1, #""environment":"production""#)
        #expect(production.json?["environment"]?.stringValue == "production")
        // The Connect route keys on the installation: the same holds there.
        let guest = await app.harness.call(.post, "/v1/identities/guest", key: app.mobile)
        let identity = try #require(guest.json?["identity_token"]?.stringValue)
        let body = { (token: Int, environment: String) in
            #"{"installation_id":"C","platform":"ios","token":"\#(TestTokens.apns(token))"\#(environment)}"#
        }
        _ = await app.harness.call(.put, "/v1/me/devices", key: identity, body: body(10, #","environment":"sandbox""#))
        let connect = await app.harness.call(.put, "/v1/me/devices", key: identity, body: body(11, ""))
        #expect(connect.status == 200)
        #expect(connect.json?["environment"]?.stringValue == "sandbox")
    }

    @Test(
        "proof + installation_id meet another installation's token: rule 4 decides; that device keeps its installation")
    func proofInstallationAndForeignToken() async throws {
        let app = try await DeviceApp.make()
        let proven = try await app.registerID(1, #""installation_id":"P","installation_secret":"sp""#)
        let holder = try await app.registerID(2, #""installation_id":"H""#)
        let answer = await app.registerIOS(
            2, #""installation_id":"P","device_id":"\#(proven)","installation_secret":"sp""#)
        #expect(answer.status == 200)
        #expect(answer.json?["id"]?.stringValue == proven)
        #expect(answer.json?["installation_id"]?.stringValue == "P")
        #expect(await app.device(proven).json?["token"]?.stringValue == TestTokens.apns(2))
        let left = try #require(await app.device(holder).json)
        #expect(left["invalidation_reason"]?.stringValue == "Reassigned")
        #expect(left["installation_id"]?.stringValue == "H", "no installation id is overwritten silently")
        #expect(left["token"]?.isNull == true)
    }

    @Test(
        "a proof naming one device and an installation_id naming another is refused, even when that one holds the token"
    )
    func proofAndInstallationNameTwoDevices() async throws {
        let app = try await DeviceApp.make()
        let proven = try await app.registerID(1, #""installation_id":"P","installation_secret":"sp""#)
        let other = try await app.registerID(2, #""installation_id":"H""#)
        let beforeProven = await app.device(proven).text
        let beforeOther = await app.device(other).text
        let answer = await app.registerIOS(
            2, #""installation_id":"H","device_id":"\#(proven)","installation_secret":"sp""#)
        #expect(answer.status == 422)
        #expect(answer.errorCode == "device_identity_conflict")
        #expect(answer.errorField == "installation_id")
        #expect(await app.device(proven).text == beforeProven)
        #expect(await app.device(other).text == beforeOther)
    }

    // MARK: - Identity tokens follow their minting key

    @Test("revoking a key revokes the identity tokens it minted: 401; other keys' tokens and the signing key stay")
    func revokedKeyRevokesTokens() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        let otherMobile = try await harness.createKey(app: app.id, #"{"kind":"mobile"}"#).key
        let keysBefore = await harness.call(.get, "/v1/identity-keys", key: Harness.adminKey).text
        let guest = try await ConnectTests.guest(harness, app)
        let user = try await ConnectTests.user(harness, app, "user_42")
        let survivor = await harness.call(.post, "/v1/identities/guest", key: otherMobile)
        let survivorToken = try #require(survivor.json?["identity_token"]?.stringValue)
        for token in [guest.token, user, survivorToken] {
            #expect(await harness.call(.put, "/v1/me/devices", key: token, body: ConnectTests.device()).status != 401)
        }
        for minting in [app.mobile, app.secret] {
            let keyID = try #require(try harness.catalog.key(presented: minting[...])?.id)
            let revoked = await harness.call(.delete, "/v1/apps/\(app.id)/keys/\(keyID)", key: Harness.adminKey)
            #expect(revoked.status == 200)
        }
        for token in [guest.token, user] {
            let answer = await harness.call(.put, "/v1/me/devices", key: token, body: ConnectTests.device())
            #expect(answer.status == 401)
            #expect(answer.errorCode == "unauthorized")
            #expect(await harness.call(.delete, "/v1/me/devices/A1B2-install", key: token).status == 401)
        }
        #expect(
            await harness.call(.put, "/v1/me/devices", key: survivorToken, body: ConnectTests.device()).status == 200)
        #expect(
            await harness.call(.get, "/v1/identity-keys", key: Harness.adminKey).text == keysBefore,
            "no signing key was rotated or removed")
    }

    @Test("deleting an app revokes every identity token of it")
    func deletedAppRevokesTokens() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        let guest = try await ConnectTests.guest(harness, app)
        #expect(await harness.call(.put, "/v1/me/devices", key: guest.token, body: ConnectTests.device()).status == 201)
        #expect(await harness.call(.delete, "/v1/apps/\(app.id)", key: Harness.adminKey).status == 200)
        let answer = await harness.call(.put, "/v1/me/devices", key: guest.token, body: ConnectTests.device())
        #expect(answer.status == 401)
    }

    // MARK: - Modes apart, also for keys

    @Test("a test-mode key with setup:write makes and revokes test keys only: a live key is 403 / unknown (404)")
    func testKeyCannotManageLiveKeys() async throws {
        let app = try await DeviceApp.make()
        let test = app.testSecret
        let live = await app.call(
            .post, "/v1/apps/\(app.app)/keys", key: test,
            body: #"{"kind":"secret","mode":"live","capabilities":["devices:read"]}"#)
        #expect(live.status == 403)
        #expect(live.errorCode == "forbidden")
        let defaultMode = await app.call(
            .post, "/v1/apps/\(app.app)/keys", key: test, body: #"{"kind":"mobile"}"#)
        #expect(defaultMode.status == 201)
        #expect(defaultMode.json?["mode"]?.stringValue == "test", "a test key's new key defaults to test mode")
        let testKey = await app.call(
            .post, "/v1/apps/\(app.app)/keys", key: test, body: #"{"kind":"secret","mode":"test"}"#)
        #expect(testKey.status == 201)
        let liveID = try #require(try app.harness.catalog.key(presented: app.secret[...])?.id)
        let revokeLive = await app.call(.delete, "/v1/apps/\(app.app)/keys/\(liveID)", key: test)
        #expect(revokeLive.status == 404)
        #expect(revokeLive.errorCode == "key_not_found")
        #expect(await app.call(.get, "/v1/stats").status == 200, "the live key still works")
        let testID = try #require(testKey.json?["id"]?.stringValue)
        #expect(await app.call(.delete, "/v1/apps/\(app.app)/keys/\(testID)", key: test).status == 200)
        // A live key (and the operator) manages both modes.
        let fromLive = await app.call(
            .post, "/v1/apps/\(app.app)/keys", key: app.secret, body: #"{"kind":"secret","mode":"test"}"#)
        #expect(fromLive.status == 201)
    }
}
