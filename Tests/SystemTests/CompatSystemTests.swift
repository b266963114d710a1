import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting
import Testing

/// The drop-in routes against the real `roost` binary over loopback, as a
/// vendor's client would call them (docs/compat.md).
@Suite("compatibility routes (system)", .serialized)
struct CompatSystemTests {
    static let admin = ServeTests.adminKey

    static func json(_ response: LoopbackResponse) throws -> JSONValue {
        try JSONReader.parse(response.body)
    }

    /// Creates app 1 and a key on it; returns the key.
    static func key(_ port: UInt16, _ body: String, createApp: Bool = true) throws -> String {
        if createApp {
            let app = try ServeTests.request(port, "POST", "/v1/apps", key: admin, body: #"{"name":"A"}"#)
            #expect(app.status == 201)
        }
        let made = try ServeTests.request(port, "POST", "/v1/apps/1/keys", key: admin, body: body)
        return try #require(try json(made)["key"]?.stringValue)
    }

    @Test("Native Notify: register → 201 ok, health counts it, deregister removes it, wrong appToken 401")
    func nativeNotify() throws {
        let (process, directory) = try ServeTests.start()
        defer { TemporaryDirectory.remove(directory) }
        let token = try CompatSystemTests.key(process.port, #"{"kind":"mobile"}"#)
        let apns = String(repeating: "9f", count: 32)
        let body = #"""
            {"appId":1,"appToken":"\#(token)","deviceId":"A1B2C3D4-install-key","platform":"ios",
             "subscriberId":8241,"tokens":{"apns_token":"\#(apns)"}}
            """#
        let registered = try ServeTests.request(process.port, "POST", "/api/universal/device/register", body: body)
        #expect(registered.status == 201)
        let answer = try CompatSystemTests.json(registered)
        #expect(answer["tokens"]?["apnsToken"]?.stringValue == "ok")
        #expect(answer["device"]?["subscriberId"]?.stringValue == "8241")
        #expect(!registered.bodyText.contains(apns))
        let health = try ServeTests.request(
            process.port, "GET", "/api/universal/health?appId=1&appToken=\(token)")
        #expect(try CompatSystemTests.json(health)["counts"]?["devices"]?.intValue == 1)
        let removed = try ServeTests.request(
            process.port, "POST", "/api/universal/device/deregister",
            body: #"{"appId":1,"appToken":"\#(token)","deviceId":"A1B2C3D4-install-key"}"#)
        #expect(removed.bodyText == #"{"ok":true,"deviceId":"A1B2C3D4-install-key","removed":true,"tokensRemoved":1}"#)
        let wrong = try ServeTests.request(
            process.port, "POST", "/api/universal/device/register",
            body: #"{"appId":1,"appToken":"wrong","deviceId":"d","platform":"ios","tokens":{"apnsToken":"\#(apns)"}}"#)
        #expect(wrong.status == 401)
        #expect(process.stop(signal: SIGTERM) == 0)
    }

    @Test("Barua: register after the upload and the person exist; the device survives a restart; DELETE removes it")
    func barua() throws {
        let (first, directory) = try ServeTests.start()
        defer { TemporaryDirectory.remove(directory) }
        let live = try CompatSystemTests.key(first.port, #"{"kind":"secret","capabilities":["devices:write"]}"#)
        let test = try CompatSystemTests.key(
            first.port, #"{"kind":"secret","mode":"test","capabilities":["devices:write"]}"#, createApp: false)
        let setup = try CompatSystemTests.key(
            first.port, #"{"kind":"secret","capabilities":["setup:write","people:write"]}"#, createApp: false)
        let token = String(repeating: "6f", count: 32)
        let body =
            #"{"provider":"apns","app":"com.example.app","environment":"production","token":"\#(token)","external_id":"user_42"}"#
        let path = "/api/integrations/v1/devices"
        #expect(try ServeTests.request(first.port, "PUT", path, body: body).status == 401)
        #expect(try ServeTests.request(first.port, "PUT", path, key: test, body: body).status == 403)
        let unknown = try ServeTests.request(first.port, "PUT", path, key: live, body: body)
        #expect(unknown.status == 409)
        #expect(try CompatSystemTests.json(unknown)["error"]?["code"]?.stringValue == "unknown_identity")
        #expect(try ServeTests.request(first.port, "PUT", "/v1/people/user_42", key: setup).status == 201)
        let noUpload = try ServeTests.request(first.port, "PUT", path, key: live, body: body)
        #expect(noUpload.status == 409)
        #expect(try CompatSystemTests.json(noUpload)["error"]?["code"]?.stringValue == "notification_app_not_found")
        let upload = try ServeTests.request(
            first.port, "PUT", "/v1/credentials/apns/com.example.app/production", key: setup,
            body: #"{"team_id":"TEAM1","key_id":"KEY1"}"#)
        #expect(upload.status == 200 || upload.status == 201)
        let registered = try ServeTests.request(first.port, "PUT", path, key: live, body: body)
        #expect(registered.status == 200)
        let boundAt = try CompatSystemTests.json(registered)["bound_at"]?.stringValue
        #expect(boundAt != nil)
        #expect(!registered.bodyText.contains(token))
        #expect(first.stop(signal: SIGTERM) == 0)

        let (second, _) = try ServeTests.start(data: directory)
        defer { second.stop() }
        let again = try ServeTests.request(second.port, "PUT", path, key: live, body: body)
        #expect(again.status == 200)
        #expect(try CompatSystemTests.json(again)["bound_at"]?.stringValue == boundAt)
        let deleted = try ServeTests.request(second.port, "DELETE", path, key: live, body: body)
        #expect(deleted.bodyText == #"{"deleted":true}"#)
        let repeated = try ServeTests.request(second.port, "DELETE", path, key: live, body: body)
        #expect(repeated.bodyText == #"{"deleted":false}"#)
    }

    @Test("Connect: identity tokens keep verifying after a restart; a rotated key set survives it too")
    func connectAcrossRestart() throws {
        let (first, directory) = try ServeTests.start()
        defer { TemporaryDirectory.remove(directory) }
        let mobile = try CompatSystemTests.key(first.port, #"{"kind":"mobile"}"#)
        let guest = try ServeTests.request(first.port, "POST", "/v1/identities/guest", key: mobile)
        #expect(guest.status == 201)
        let identity = try #require(try CompatSystemTests.json(guest)["identity_token"]?.stringValue)
        let principal = try #require(try CompatSystemTests.json(guest)["principal"]?.stringValue)
        let device =
            #"{"installation_id":"A1B2-install","platform":"ios","token":"\#(String(repeating: "ab", count: 32))"}"#
        let registered = try ServeTests.request(first.port, "PUT", "/v1/me/devices", key: identity, body: device)
        #expect(registered.status == 201)
        #expect(try CompatSystemTests.json(registered)["external_id"]?.stringValue == principal)
        let rotated = try ServeTests.request(first.port, "POST", "/v1/identity-keys", key: CompatSystemTests.admin)
        #expect(rotated.status == 201)
        #expect(first.stop(signal: SIGTERM) == 0)

        // The keys are log records now: no side file is written.
        var info = stat()
        #expect(stat(directory + "/data/identity-keys.json", &info) != 0)

        let (second, _) = try ServeTests.start(data: directory)
        defer { second.stop() }
        let again = try ServeTests.request(second.port, "PUT", "/v1/me/devices", key: identity, body: device)
        #expect(again.status == 200)
        #expect(try CompatSystemTests.json(again)["id"] == CompatSystemTests.json(registered)["id"])
        let keys = try ServeTests.request(second.port, "GET", "/v1/identity-keys", key: CompatSystemTests.admin)
        #expect(try CompatSystemTests.json(keys)["keys"]?.arrayValue?.count == 2)
        let flipped = String(identity.dropLast()) + (identity.hasSuffix("A") ? "B" : "A")
        let forged = try ServeTests.request(second.port, "PUT", "/v1/me/devices", key: flipped, body: device)
        #expect(forged.status == 401)
    }
}
