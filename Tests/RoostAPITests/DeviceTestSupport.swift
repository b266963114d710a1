import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostTesting

@testable import RoostAPI

/// An app with the keys the device tests need, on a fresh harness.
struct DeviceApp {
    let harness: Harness
    let app: Int
    /// Live secret key with every capability.
    let secret: String
    /// Live mobile key.
    let mobile: String
    /// Test-mode secret key with every capability.
    let testSecret: String

    static let allCapabilities = #"["devices:write","devices:read","devices:delete","people:write","setup:write"]"#

    static func make(_ harness: Harness? = nil, settings: String? = nil) async throws -> DeviceApp {
        let harness = try harness ?? Harness()
        let app = try await harness.createApp()
        if let settings {
            let patched = await harness.call(
                .patch, "/v1/apps/\(app)", key: Harness.adminKey, body: #"{"settings":\#(settings)}"#)
            guard patched.status == 200 else { throw HarnessError(message: "settings answered \(patched.status)") }
        }
        let secret = try await harness.createKey(
            app: app, #"{"kind":"secret","mode":"live","capabilities":\#(allCapabilities)}"#)
        let mobile = try await harness.createKey(app: app, #"{"kind":"mobile","mode":"live"}"#)
        let test = try await harness.createKey(
            app: app, #"{"kind":"secret","mode":"test","capabilities":\#(allCapabilities)}"#)
        return DeviceApp(harness: harness, app: app, secret: secret.key, mobile: mobile.key, testSecret: test.key)
    }

    /// Creates a live secret key with exactly these capabilities.
    func key(_ capabilities: [String], mode: String = "live") async throws -> String {
        let list = "[" + capabilities.map { "\"\($0)\"" }.joined(separator: ",") + "]"
        return try await harness.createKey(
            app: app, #"{"kind":"secret","mode":"\#(mode)","capabilities":\#(list)}"#
        ).key
    }

    func call(_ method: HTTPMethod, _ target: String, key: String? = nil, body: String? = nil) async -> Answer {
        await harness.call(method, target, key: key ?? secret, body: body)
    }

    /// `POST /v1/devices` with a raw JSON body.
    func register(_ body: String, key: String? = nil) async -> Answer {
        await call(.post, "/v1/devices", key: key ?? secret, body: body)
    }

    /// Registers an ios device with token number `n` and extra members; returns the answer.
    func registerIOS(_ n: Int, _ extra: String = "", key: String? = nil) async -> Answer {
        let members = extra.isEmpty ? "" : "," + extra
        return await register(#"{"platform":"ios","token":"\#(TestTokens.apns(n))"\#(members)}"#, key: key)
    }

    /// Registers and returns the device id (fails the caller when the status is not 2xx).
    func registerID(_ n: Int, _ extra: String = "", key: String? = nil) async throws -> String {
        let answer = await registerIOS(n, extra, key: key)
        guard answer.status == 200 || answer.status == 201, let id = answer.json?["id"]?.stringValue else {
            throw HarnessError(message: "register answered \(answer.status): \(answer.text)")
        }
        return id
    }

    func device(_ id: String, key: String? = nil) async -> Answer {
        await call(.get, "/v1/devices/\(id)", key: key)
    }

    /// `POST /v1/devices/import` with a CSV body and content type.
    func importCSV(_ csv: String, contentType: String? = "text/csv", key: String? = nil) async -> Answer {
        var headers = HTTPHeaders([("Host", "test"), ("Authorization", "Bearer \(key ?? secret)")])
        if let contentType { headers.append(name: "Content-Type", value: contentType) }
        let head = HTTPRequestHead(
            method: .post, target: "/v1/devices/import", version: .http11, headers: headers, keepAlive: true)
        let response = await harness.service.handle(HTTPRequest(head: head, body: Array(csv.utf8)))
        return Answer(status: response.status, headers: response.headers, body: response.body)
    }

    /// Runs `body` on the live index of this app directly (to set up state no route makes, such as strikes).
    func onLiveIndex(_ body: @escaping @Sendable (inout AppIndex) -> [Mutation]) async {
        _ = await harness.service.registry.perform(IndexKey(app: AppID(UInt32(app)), mode: .live)) { index in
            ((), body(&index))
        }
    }
}

extension Answer {
    var text: String { String(decoding: body, as: UTF8.self) }
}
