import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

/// `Idempotency-Key` on every write route of spec §4, §6 and §7: each route
/// family's retry is the first answer, marked, and applies nothing.
@Suite("Idempotency-Key on every write route (spec §7)")
struct IdempotencyRoutesTests {
    /// One request of a route family, with what it needs set up.
    struct Case: Sendable, CustomStringConvertible {
        var name: String
        var method: HTTPMethod
        var target: String
        var body: String?
        /// Which credential sends it: secret, mobile, user identity token, or none (Native Notify).
        var credential: String

        var description: String { name }
    }

    static let token = TestTokens.apns(77)

    static let cases: [Case] = [
        Case(
            name: "POST /v1/devices", method: .post, target: "/v1/devices",
            body: #"{"platform":"ios","token":"\#(token)"}"#, credential: "secret"),
        Case(
            name: "POST /v1/devices (mobile key)", method: .post, target: "/v1/devices",
            body: #"{"platform":"ios","token":"\#(token)"}"#, credential: "mobile"),
        Case(
            name: "POST /v1/devices/batch", method: .post, target: "/v1/devices/batch",
            body: #"{"devices":[{"platform":"ios","token":"\#(token)"},{"platform":"x"}]}"#, credential: "secret"),
        Case(
            name: "PATCH /v1/devices/{id}", method: .patch, target: "/v1/devices/{id}",
            body: #"{"tags":{"t":1}}"#, credential: "secret"),
        Case(name: "DELETE /v1/devices/{id}", method: .delete, target: "/v1/devices/{id}", credential: "secret"),
        Case(
            name: "PUT /v1/people/{external_id}", method: .put, target: "/v1/people/new_person",
            credential: "secret"),
        Case(
            name: "DELETE /v1/people/{external_id}", method: .delete, target: "/v1/people/user_42",
            credential: "secret"),
        Case(
            name: "PUT /v1/credentials/apns/…", method: .put, target: "/v1/credentials/apns/com.other.app/production",
            body: #"{"team_id":"T2","key_id":"K2"}"#, credential: "secret"),
        Case(
            name: "DELETE /v1/credentials/apns/…", method: .delete,
            target: "/v1/credentials/apns/com.example.app/production", credential: "secret"),
        Case(
            name: "POST /v1/feedback", method: .post, target: "/v1/feedback",
            body: #"{"provider":"apns","token":"\#(TestTokens.apns(1))","reason":"Unregistered"}"#,
            credential: "secret"),
        Case(
            name: "POST /v1/devices/import", method: .post, target: "/v1/devices/import",
            body: "platform,token\nios,\(token)\nios,bad\n", credential: "secret"),
        Case(
            name: "PUT /api/integrations/v1/devices (Barua)", method: .put, target: "/api/integrations/v1/devices",
            body:
                #"{"provider":"apns","app":"com.example.app","environment":"production","token":"\#(token)","external_id":"user_42"}"#,
            credential: "secret"),
        Case(
            name: "DELETE /api/integrations/v1/devices (Barua)", method: .delete,
            target: "/api/integrations/v1/devices",
            body:
                #"{"provider":"apns","app":"com.example.app","environment":"production","token":"\#(TestTokens.apns(1))","external_id":"user_42"}"#,
            credential: "secret"),
        Case(
            name: "POST /api/universal/device/register (Native Notify)", method: .post,
            target: "/api/universal/device/register",
            body:
                #"{"appId":{app},"appToken":"{mobile}","deviceId":"nn-1","platform":"ios","tokens":{"apnsToken":"\#(token)"}}"#,
            credential: "none"),
        Case(
            name: "POST /api/universal/device/deregister (Native Notify)", method: .post,
            target: "/api/universal/device/deregister",
            body: #"{"appId":{app},"appToken":"{mobile}","deviceId":"inst-1"}"#, credential: "none"),
        Case(
            name: "POST /v1/identities/guest (Connect)", method: .post, target: "/v1/identities/guest",
            credential: "mobile"),
        Case(
            name: "POST /v1/identities/authenticated (Connect)", method: .post,
            target: "/v1/identities/authenticated", body: #"{"external_id":"user_42"}"#, credential: "secret"),
        Case(
            name: "PUT /v1/me/devices (Connect)", method: .put, target: "/v1/me/devices",
            body: #"{"installation_id":"me-1","platform":"ios","token":"\#(token)","environment":"production"}"#,
            credential: "identity"),
        Case(
            name: "DELETE /v1/me/devices/{installation_id} (Connect)", method: .delete,
            target: "/v1/me/devices/me-0", credential: "identity"),
    ]

    @Test("the retry gets the same status and body, Idempotent-Replayed: true, and nothing changes", arguments: cases)
    func replayOnEveryRoute(_ route: Case) async throws {
        let app = try await DeviceApp.make()
        let harness = app.harness
        // Set-up: a credential, a person with a device, an installation, an identity token's device.
        let credentialPut = await app.call(
            .put, "/v1/credentials/apns/com.example.app/production", body: #"{"team_id":"T","key_id":"K"}"#)
        #expect(credentialPut.status == 200)
        let deviceID = try await app.registerID(
            1, #""external_id":"user_42","bundle_id":"com.example.app","installation_id":"inst-1""#)
        let identity = try await ConnectTests.user(
            harness, ConnectTests.App(id: app.app, mobile: app.mobile, secret: app.secret), "user_42")
        let me = await harness.call(
            .put, "/v1/me/devices", key: identity,
            body: ConnectTests.device(installation: "me-0", token: TestTokens.apns(2)))
        #expect(me.status == 201)

        let credential: String? =
            switch route.credential {
            case "secret": app.secret
            case "mobile": app.mobile
            case "identity": identity
            default: nil
            }
        let target = route.target.replacing("{id}", with: deviceID)
        let body = route.body?.replacing("{app}", with: "\(app.app)")
            .replacing("{mobile}", with: app.mobile)
        let headers: [(String, String)] =
            route.target == "/v1/devices/import" ? [("Content-Type", "text/csv")] : []
        let first = await harness.call(
            route.method, target, key: credential, body: body, idempotencyKey: "retry-1", headers: headers)
        #expect((200..<300).contains(first.status), "\(route): \(first.status) \(first.text)")
        #expect(first.header("Idempotent-Replayed") == nil)
        let state = try await harness.indexState(app: app.app)
        harness.clock.advance(milliseconds: 1_000)
        let again = await harness.call(
            route.method, target, key: credential, body: body, idempotencyKey: "retry-1", headers: headers)
        #expect(again.status == first.status, "\(route)")
        #expect(again.body == first.body, "\(route): \(again.text) vs \(first.text)")
        #expect(again.header("Idempotent-Replayed") == "true", "\(route)")
        #expect(try await harness.indexState(app: app.app) == state, "\(route): the replay applied something")
        // The same key for another body is a reuse.
        let other = await harness.call(
            route.method, target, key: credential, body: (body ?? "") + " ", idempotencyKey: "retry-1",
            headers: headers)
        #expect(other.status == 422, "\(route)")
        #expect(other.errorCode == "idempotency_key_reused")
    }
}
