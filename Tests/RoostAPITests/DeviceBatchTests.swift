import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

/// Spec §7, first bullet: `POST /v1/devices/batch`.
@Suite("POST /v1/devices/batch (spec §7)")
struct DeviceBatchTests {
    /// `{"devices":[…]}` from register bodies.
    static func batch(_ items: [String]) -> String {
        #"{"devices":["# + items.joined(separator: ",") + "]}"
    }

    static func ios(_ n: Int, _ extra: String = "") -> String {
        #"{"platform":"ios","token":"\#(TestTokens.apns(n))"\#(extra.isEmpty ? "" : "," + extra)}"#
    }

    static func results(_ answer: Answer) -> [JSONValue] {
        answer.json?["results"]?.arrayValue ?? []
    }

    @Test("a secret key with devices:write may batch; a mobile key, a key without it, or none may not")
    func access() async throws {
        let app = try await DeviceApp.make()
        let body = DeviceBatchTests.batch([DeviceBatchTests.ios(1)])
        #expect(await app.call(.post, "/v1/devices/batch", body: body).status == 200)
        #expect(await app.call(.post, "/v1/devices/batch", key: app.mobile, body: body).status == 403)
        let reader = try await app.key(["devices:read"])
        #expect(await app.call(.post, "/v1/devices/batch", key: reader, body: body).status == 403)
        let anonymous = await app.harness.call(.post, "/v1/devices/batch", key: nil, body: body)
        #expect(anonymous.status == 401)
    }

    @Test("one result per item, in order: 201 with the device (never its token) or the item's error")
    func resultsInOrder() async throws {
        let app = try await DeviceApp.make()
        let answer = await app.call(
            .post, "/v1/devices/batch",
            body: DeviceBatchTests.batch([
                DeviceBatchTests.ios(1), #"{"platform":"web","token":"x"}"#, "42", DeviceBatchTests.ios(2),
                #"{"platform":"ios"}"#,
            ]))
        #expect(answer.status == 200)
        let results = DeviceBatchTests.results(answer)
        #expect(results.count == 5)
        #expect(results.map { $0["status"]?.intValue } == [201, 400, 400, 201, 400])
        #expect(results[1]["error"]?["code"]?.stringValue == "invalid_platform")
        #expect(results[2]["error"]?["code"]?.stringValue == "invalid_field")
        #expect(results[4]["error"]?["code"]?.stringValue == "missing_field")
        #expect(results[4]["error"]?["field"]?.stringValue == "token")
        #expect(results[1]["device"] == nil)
        let keys = try #require(results[0]["device"]?.objectMembers).map(\.key)
        #expect(keys == DeviceRegistrationTests.deviceFields)
        #expect(!answer.text.contains(TestTokens.apns(1)))
        #expect(results[0]["device"]?["id"] != results[3]["device"]?["id"])
        #expect(await app.call(.get, "/v1/stats").json?["devices"]?.intValue == 2)
    }

    @Test("each item answers as a single POST /v1/devices would: same status, device JSON and errors")
    func mirrorsSingleRegistration() async throws {
        let batched = try await DeviceApp.make()
        let single = try await DeviceApp.make()
        let bodies = [
            DeviceBatchTests.ios(1, #""external_id":"u1","tags":{"a":1}"#),
            DeviceBatchTests.ios(1, #""tags":{"b":true}"#),
            #"{"platform":"android","token":"ExponentPushToken[abc]"}"#,
            DeviceBatchTests.ios(2, #""installation_id":"inst-1","installation_secret":"s""#),
            DeviceBatchTests.ios(3, #""installation_id":"inst-1""#),
            #"{"platform":"android","environment":"sandbox","token":"\#(TestTokens.fcm(1))"}"#,
        ]
        let answer = await batched.call(.post, "/v1/devices/batch", body: DeviceBatchTests.batch(bodies))
        let results = DeviceBatchTests.results(answer)
        #expect(results.count == bodies.count)
        for (index, body) in bodies.enumerated() {
            let alone = await single.register(body)
            #expect(results[index]["status"]?.intValue == alone.status, "item \(index)")
            if alone.status >= 400 {
                #expect(results[index]["error"] == alone.json?["error"], "item \(index)")
            } else {
                var device = try #require(results[index]["device"]?.objectMembers)
                var expected = try #require(alone.json?.objectMembers)
                // Ids name their app; everything else must be the same.
                device.removeAll { $0.key == "id" }
                expected.removeAll { $0.key == "id" }
                #expect(JSONValue.object(device) == JSONValue.object(expected), "item \(index)")
            }
        }
        #expect(results.map { $0["status"]?.intValue } == [201, 200, 400, 201, 409, 400])
    }

    @Test("a rejected item changes nothing and does not stop the items after it")
    func rejectedItemChangesNothing() async throws {
        let app = try await DeviceApp.make(settings: #"{"require_known_person":true}"#)
        #expect(await app.call(.put, "/v1/people/known").status == 201)
        let answer = await app.call(
            .post, "/v1/devices/batch",
            body: DeviceBatchTests.batch([
                DeviceBatchTests.ios(1, #""external_id":"known""#),
                DeviceBatchTests.ios(2, #""external_id":"stranger""#),
                DeviceBatchTests.ios(3),
            ]))
        let results = DeviceBatchTests.results(answer)
        #expect(results.map { $0["status"]?.intValue } == [201, 409, 201])
        #expect(results[1]["error"]?["code"]?.stringValue == "unknown_identity")
        let stats = await app.call(.get, "/v1/stats")
        #expect(stats.json?["devices"]?.intValue == 2)
        #expect(stats.json?["people"]?.intValue == 1)
        #expect(await app.call(.get, "/v1/people/stranger").status == 404)
    }

    @Test("items apply in order: a later item sees what an earlier one did")
    func appliedInOrder() async throws {
        let app = try await DeviceApp.make()
        let answer = await app.call(
            .post, "/v1/devices/batch",
            body: DeviceBatchTests.batch([
                DeviceBatchTests.ios(1, #""external_id":"a""#), DeviceBatchTests.ios(1, #""external_id":"b""#),
            ]))
        let results = DeviceBatchTests.results(answer)
        #expect(results.map { $0["status"]?.intValue } == [201, 200])
        #expect(results[0]["device"]?["id"] == results[1]["device"]?["id"])
        #expect(results[1]["device"]?["external_id"]?.stringValue == "b")
    }

    @Test("1,000 items are accepted; 1,001 are 400 batch_too_large and nothing is applied")
    func itemLimit() async throws {
        let app = try await DeviceApp.make()
        let full = (0..<DeviceBatch.itemsMax).map { DeviceBatchTests.ios($0) }
        let accepted = await app.call(.post, "/v1/devices/batch", body: DeviceBatchTests.batch(full))
        #expect(accepted.status == 200)
        #expect(DeviceBatchTests.results(accepted).count == 1_000)
        let over = (0...DeviceBatch.itemsMax).map { DeviceBatchTests.ios(5_000 + $0) }
        let refused = await app.call(.post, "/v1/devices/batch", body: DeviceBatchTests.batch(over))
        #expect(refused.status == 400)
        #expect(refused.errorCode == "batch_too_large")
        #expect(await app.call(.get, "/v1/stats").json?["devices"]?.intValue == 1_000)
    }

    @Test(
        "no items, a missing or non-array devices member, and a body that is not an object are 400",
        arguments: [
            (#"{"devices":[]}"#, "invalid_field"), (#"{"devices":{}}"#, "invalid_field"),
            (#"{"devices":"x"}"#, "invalid_field"), (#"{}"#, "missing_field"), (#"{"devices":null}"#, "missing_field"),
            (#"[]"#, "invalid_json"),
        ])
    func badBodies(body: String, code: String) async throws {
        let app = try await DeviceApp.make()
        let answer = await app.call(.post, "/v1/devices/batch", body: body)
        #expect(answer.status == 400)
        #expect(answer.errorCode == code)
        if code != "invalid_json" { #expect(answer.errorField == "devices") }
    }

    @Test("a body over the batch body limit is 413; the limit is above 1,000 ordinary items")
    func bodyLimit() async throws {
        let app = try await DeviceApp.make()
        let service = app.harness.service
        let head = HTTPRequestHead(
            method: .post, target: "/v1/devices/batch", version: .http11, headers: HTTPHeaders([]), keepAlive: true)
        #expect(service.bodyLimitBytes(for: head) == DeviceRoutes.batchBodyBytesMax)
        let thousand = DeviceBatchTests.batch(
            (0..<DeviceBatch.itemsMax).map {
                DeviceBatchTests.ios($0, #""external_id":"user_\#($0)","app_version":"2.4.0","locale":"en-US""#)
            })
        #expect(thousand.utf8.count * 8 < DeviceRoutes.batchBodyBytesMax)
    }

    @Test("the answer comes once every applied item is durable, from one log append and one fsync")
    func oneAppendOneSync() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (harness, engine) = try await Harness.durable(directory)
        let app = try await DeviceApp.make(harness)
        // The key's first use is logged once (`last_used_at`, decision 0053):
        // use it, and let that record be synced, before counting.
        #expect(await app.call(.get, "/v1/stats").status == 200)
        _ = await ConditionWait.until(within: .seconds(5)) { () async -> Bool in
            engine.log.wal.acknowledgedLSN == engine.log.wal.appendedLSN
        }
        let before = engine.log.wal.ioStatistics
        let items = (0..<DeviceBatch.itemsMax).map { DeviceBatchTests.ios($0) }
        let answer = await app.call(.post, "/v1/devices/batch", body: DeviceBatchTests.batch(items))
        #expect(answer.status == 200)
        let after = engine.log.wal.ioStatistics
        #expect(after.appends - before.appends == 1)
        #expect(after.syncs - before.syncs == 1)
        #expect(engine.log.wal.acknowledgedLSN == engine.log.wal.appendedLSN)
        engine.close()

        let (reopened, reopenedEngine) = try await Harness.durable(directory)
        defer { reopenedEngine.close() }
        let stats = await reopened.call(.get, "/v1/stats", key: app.secret)
        #expect(stats.json?["devices"]?.intValue == 1_000)
    }
}
