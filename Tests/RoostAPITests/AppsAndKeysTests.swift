import RoostCrypto
import RoostHTTP
import RoostJSON
import RoostModel
import RoostPlatform
import RoostTesting
import Testing

@testable import RoostAPI

@Suite("Apps and keys (spec §3)")
struct AppsAndKeysTests {
    @Test("GET /healthz answers 200 {\"status\":\"ok\"} without a key")
    func health() async throws {
        let answer = try await Harness().call(.get, "/healthz")
        #expect(answer.status == 200)
        #expect(String(decoding: answer.body, as: UTF8.self) == #"{"status":"ok"}"#)
    }

    @Test("the operator creates apps with positive increasing ids, default settings and a created_at")
    func createApp() async throws {
        let harness = try Harness()
        let first = await harness.call(.post, "/v1/apps", key: Harness.adminKey, body: #"{"name":"Example"}"#)
        #expect(first.status == 201)
        let json = try #require(first.json)
        #expect(json["id"]?.intValue == 1)
        #expect(json["name"]?.stringValue == "Example")
        #expect(json["settings"]?["max_devices_per_person"]?.intValue == 10)
        #expect(json["settings"]?["require_known_person"]?.boolValue == false)
        #expect(json["created_at"]?.stringValue == "2026-09-21T14:13:20.000Z")
        #expect(try await harness.createApp("Second") == 2)
        let list = await harness.call(.get, "/v1/apps", key: Harness.adminKey)
        #expect(list.status == 200)
        #expect(list.json?["apps"]?.arrayValue?.compactMap { $0["name"]?.stringValue } == ["Example", "Second"])
    }

    @Test(
        "a malformed or invalid body answers 400 with its code and field",
        arguments: [
            ("{\"name\":\"x\"", "invalid_json", nil),
            ("{\"name\":\"x\"} trailing", "invalid_json", nil),
            ("[1,2]", "invalid_json", nil),
            ("", "invalid_json", nil),
            (String(repeating: "[", count: 100) + String(repeating: "]", count: 100), "invalid_json", nil),
            ("{}", "missing_field", "name"),
            ("{\"name\":7}", "invalid_field", "name"),
            ("{\"name\":\"\"}", "invalid_field", "name"),
            (
                "{\"name\":\"x\",\"settings\":{\"max_devices_per_person\":0}}", "invalid_field",
                "settings.max_devices_per_person"
            ),
            ("{\"name\":\"x\",\"settings\":{\"colour\":1}}", "invalid_field", "settings.colour"),
        ] as [(String, String, String?)])
    func badBodies(body: String, code: String, field: String?) async throws {
        let answer = try await Harness().call(.post, "/v1/apps", key: Harness.adminKey, body: body)
        #expect(answer.status == 400)
        #expect(answer.errorCode == code)
        #expect(answer.errorField == field)
        #expect(answer.json?["error"]?["message"]?.stringValue?.isEmpty == false)
    }

    @Test("invalid UTF-8 in a body answers 400 invalid_json")
    func invalidUTF8() async throws {
        let body: [UInt8] = Array(#"{"name":""#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8)
        let answer = try await Harness().call(.post, "/v1/apps", key: Harness.adminKey, rawBody: body)
        #expect(answer.status == 400)
        #expect(answer.errorCode == "invalid_json")
    }

    @Test("an unknown route answers 404 not_found and a wrong method 405 with Allow")
    func unknownRouteAndMethod() async throws {
        let harness = try Harness()
        let missing = await harness.call(.get, "/v1/nothing", key: Harness.adminKey)
        #expect(missing.status == 404)
        #expect(missing.errorCode == "not_found")
        let wrong = await harness.call(.put, "/v1/apps", key: Harness.adminKey)
        #expect(wrong.status == 405)
        #expect(wrong.errorCode == "method_not_allowed")
        #expect(wrong.header("Allow") == "POST, GET")
    }

    @Test("a missing, malformed or unknown key answers 401 unauthorized")
    func unauthorized() async throws {
        let harness = try Harness()
        for key in [nil, "", "wrong-key", Harness.adminKey + "x"] as [String?] {
            let answer = await harness.call(.get, "/v1/apps", key: key)
            #expect(answer.status == 401)
            #expect(answer.errorCode == "unauthorized")
        }
        var headers = HTTPHeaders([("Authorization", "Basic \(Harness.adminKey)")])
        headers.append(name: "Host", value: "x")
        let head = HTTPRequestHead(
            method: .get, target: "/v1/apps", version: .http11, headers: headers, keepAlive: true)
        #expect(await harness.service.handle(HTTPRequest(head: head, body: [])).status == 401)
    }

    @Test("a key is shown once, carries what was asked, and the catalog keeps only its SHA-256")
    func createKey() async throws {
        let harness = try Harness()
        let app = try await harness.createApp()
        let answer = await harness.call(
            .post, "/v1/apps/\(app)/keys", key: Harness.adminKey,
            body: #"{"kind":"secret","mode":"test","capabilities":["devices:read","devices:write"],"label":"backend"}"#)
        #expect(answer.status == 201)
        let json = try #require(answer.json)
        let key = try #require(json["key"]?.stringValue)
        #expect(key.hasPrefix("sk_test_"))
        #expect(json["id"]?.stringValue?.hasPrefix("key_") == true)
        #expect(json["kind"]?.stringValue == "secret")
        #expect(json["mode"]?.stringValue == "test")
        #expect(json["capabilities"]?.arrayValue?.compactMap(\.stringValue) == ["devices:read", "devices:write"])
        #expect(json["label"]?.stringValue == "backend")
        #expect(json["created_at"]?.stringValue != nil)
        let encoded = harness.catalog.snapshotRecords().flatMap { $0.encoded() }
        #expect(!encoded.contains(bytes: Array(key.utf8)))
        #expect(encoded.contains(bytes: Crypto.sha256(key.utf8)))
    }

    @Test(
        "key creation refuses bad kinds, modes, capabilities and rate limits",
        arguments: [
            (#"{"mode":"live"}"#, "missing_field", "kind"),
            (#"{"kind":"admin"}"#, "invalid_field", "kind"),
            (#"{"kind":"secret","mode":"prod"}"#, "invalid_field", "mode"),
            (#"{"kind":"secret","capabilities":["devices:fly"]}"#, "invalid_field", "capabilities"),
            (#"{"kind":"secret","capabilities":"devices:read"}"#, "invalid_field", "capabilities"),
            (#"{"kind":"mobile","capabilities":["devices:write"]}"#, "invalid_field", "capabilities"),
            (#"{"kind":"secret","rate_limit_per_second":0}"#, "invalid_field", "rate_limit_per_second"),
        ])
    func badKeyBodies(body: String, code: String, field: String) async throws {
        let harness = try Harness()
        let app = try await harness.createApp()
        let answer = await harness.call(.post, "/v1/apps/\(app)/keys", key: Harness.adminKey, body: body)
        #expect(answer.status == 400)
        #expect(answer.errorCode == code)
        #expect(answer.errorField == field)
    }

    @Test("a setup:write key manages its own app; another app's ids answer 404; without the capability 403")
    func keyScope() async throws {
        let harness = try Harness()
        let mine = try await harness.createApp("Mine")
        let theirs = try await harness.createApp("Theirs")
        let setup = try await harness.createKey(app: mine, #"{"kind":"secret","capabilities":["setup:write"]}"#)
        let reader = try await harness.createKey(app: mine, #"{"kind":"secret","capabilities":["devices:read"]}"#)
        let mobile = try await harness.createKey(app: mine, #"{"kind":"mobile"}"#)

        #expect(await harness.call(.get, "/v1/apps/\(mine)", key: setup.key).status == 200)
        let patched = await harness.call(
            .patch, "/v1/apps/\(mine)", key: setup.key,
            body: #"{"settings":{"max_devices_per_person":3,"require_known_person":true}}"#)
        #expect(patched.status == 200)
        #expect(patched.json?["settings"]?["max_devices_per_person"]?.intValue == 3)
        #expect(patched.json?["settings"]?["require_known_person"]?.boolValue == true)
        #expect(
            await harness.call(.post, "/v1/apps/\(mine)/keys", key: setup.key, body: #"{"kind":"mobile"}"#).status
                == 201)

        for (method, path) in [
            (HTTPMethod.get, "/v1/apps/\(theirs)"), (.patch, "/v1/apps/\(theirs)"), (.post, "/v1/apps/\(theirs)/keys"),
            (.get, "/v1/apps/999"),
        ] {
            let answer = await harness.call(method, path, key: setup.key, body: #"{"kind":"mobile"}"#)
            #expect(answer.status == 404, "\(method.name) \(path)")
            #expect(answer.errorCode == "app_not_found")
        }
        for key in [reader.key, mobile.key] {
            #expect(await harness.call(.get, "/v1/apps/\(mine)", key: key).errorCode == "forbidden")
            #expect(
                await harness.call(.post, "/v1/apps/\(mine)/keys", key: key, body: #"{"kind":"mobile"}"#).status == 403)
        }
        // Operator-only routes refuse every app key.
        #expect(await harness.call(.get, "/v1/apps", key: setup.key).status == 403)
        #expect(await harness.call(.post, "/v1/apps", key: setup.key, body: #"{"name":"x"}"#).status == 403)
        #expect(await harness.call(.delete, "/v1/apps/\(mine)", key: setup.key).status == 403)
    }

    @Test("a revoked key and the keys of a deleted app answer 401; the deleted app answers 404")
    func revokeAndDelete() async throws {
        let harness = try Harness()
        let app = try await harness.createApp()
        let first = try await harness.createKey(app: app, #"{"kind":"secret","capabilities":["setup:write"]}"#)
        let second = try await harness.createKey(app: app, #"{"kind":"secret","capabilities":["setup:write"]}"#)
        let revoked = await harness.call(.delete, "/v1/apps/\(app)/keys/\(first.id)", key: second.key)
        #expect(revoked.status == 200)
        #expect(revoked.json?["revoked"]?.boolValue == true)
        #expect(await harness.call(.get, "/v1/apps/\(app)", key: first.key).status == 401)
        #expect(
            await harness.call(.delete, "/v1/apps/\(app)/keys/\(first.id)", key: second.key).errorCode
                == "key_not_found")

        let deleted = await harness.call(.delete, "/v1/apps/\(app)", key: Harness.adminKey)
        #expect(deleted.status == 200)
        #expect(deleted.json?["deleted"]?.boolValue == true)
        #expect(deleted.json?["devices_removed"]?.intValue == 0)
        #expect(await harness.call(.get, "/v1/apps/\(app)", key: second.key).status == 401)
        #expect(await harness.call(.get, "/v1/apps/\(app)", key: Harness.adminKey).errorCode == "app_not_found")
        #expect(await harness.call(.delete, "/v1/apps/\(app)", key: Harness.adminKey).status == 404)
    }

    @Test("a key over its rate limit answers 429 rate_limited with Retry-After ≥ 1, and recovers")
    func rateLimit() async throws {
        let harness = try Harness()
        let app = try await harness.createApp()
        let limited = try await harness.createKey(
            app: app, #"{"kind":"secret","capabilities":["setup:write"],"rate_limit_per_second":2}"#)
        #expect(await harness.call(.get, "/v1/apps/\(app)", key: limited.key).status == 200)
        #expect(await harness.call(.get, "/v1/apps/\(app)", key: limited.key).status == 200)
        let refused = await harness.call(.get, "/v1/apps/\(app)", key: limited.key)
        #expect(refused.status == 429)
        #expect(refused.errorCode == "rate_limited")
        #expect(Int(refused.header("Retry-After") ?? "") ?? 0 >= 1)
        harness.clock.advance(milliseconds: 1000)
        #expect(await harness.call(.get, "/v1/apps/\(app)", key: limited.key).status == 200)
    }

    @Test("apps, keys, settings and the id counter survive a restart through the log, which holds no key")
    func persistence() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (first, firstEngine) = try await Harness.durable(directory)
        let app = try await first.createApp("Durable")
        let gone = try await first.createApp("Gone")
        #expect(await first.call(.delete, "/v1/apps/\(gone)", key: Harness.adminKey).status == 200)
        let key = try await first.createKey(
            app: app, #"{"kind":"secret","capabilities":["setup:write"],"label":"ops"}"#)
        let patched = await first.call(
            .patch, "/v1/apps/\(app)", key: key.key, body: #"{"settings":{"max_devices_per_person":4}}"#)
        #expect(patched.status == 200)
        firstEngine.close()

        let (reopened, engine) = try await Harness.durable(directory)
        defer { engine.close() }
        let answer = await reopened.call(.get, "/v1/apps/\(app)", key: key.key)
        #expect(answer.status == 200)
        #expect(answer.json?["name"]?.stringValue == "Durable")
        #expect(answer.json?["settings"]?["max_devices_per_person"]?.intValue == 4)
        #expect(await reopened.call(.get, "/v1/apps/\(gone)", key: Harness.adminKey).status == 404)
        #expect(try await reopened.createApp("Next") == gone + 1)
        let segment = try #require(
            try DurableFile.readIfExists(path: directory + "/wal/00000000000000000001.seg", limitBytes: 1 << 27))
        #expect(!segment.contains(bytes: Array(key.key.utf8)))
        #expect(segment.contains(bytes: Crypto.sha256(key.key.utf8)))
    }
}

extension Array where Element == UInt8 {
    /// Returns whether `bytes` occurs in this array. O(n·m) at worst.
    func contains(bytes: [UInt8]) -> Bool {
        guard let first = bytes.first else { return true }
        guard bytes.count <= count else { return false }
        return withUnsafeBufferPointer { haystack in
            bytes.withUnsafeBufferPointer { needle in
                var start = 0
                while start <= haystack.count - needle.count {
                    if haystack[start] == first {
                        var matched = 1
                        while matched < needle.count && haystack[start + matched] == needle[matched] { matched += 1 }
                        if matched == needle.count { return true }
                    }
                    start += 1
                }
                return false
            }
        }
    }
}
