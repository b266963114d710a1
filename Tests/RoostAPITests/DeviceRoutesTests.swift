import RoostHTTP
import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

@Suite("GET, PATCH, DELETE, list, feedback, stats (spec §4)")
struct DeviceRoutesTests {
    @Test("GET /v1/devices/{id} answers the device with its token; unknown and foreign ids are 404 device_not_found")
    func getDevice() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1)
        let answer = await app.device(id)
        #expect(answer.status == 200)
        #expect(answer.json?["token"]?.stringValue == TestTokens.apns(1))
        #expect(answer.json?["id"]?.stringValue == id)
        let other = try await DeviceApp.make(app.harness)
        for key in [other.secret] {
            let foreign = await app.device(id, key: key)
            #expect(foreign.status == 404)
            #expect(foreign.errorCode == "device_not_found")
            #expect(await app.call(.patch, "/v1/devices/\(id)", key: key, body: "{}").status == 404)
            #expect(await app.call(.delete, "/v1/devices/\(id)", key: key).json?["deleted"]?.boolValue == false)
        }
        for bogus in ["dev_x", "nothing", "dev_" + String(repeating: "0", count: 26), id.uppercased()] {
            #expect(await app.device(bogus).errorCode == "device_not_found", "\(bogus)")
        }
        let writer = try await app.key(["devices:write"])
        #expect(await app.device(id, key: writer).status == 403)
        #expect(await app.device(id, key: Harness.adminKey).status == 403)
        // The device still exists after the foreign attempts.
        #expect(await app.device(id).status == 200)
    }

    @Test("PATCH merges tags (null removes a key), sets opted_in, and leaves last_seen_at and metadata alone")
    func patch() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1, #""tags":{"plan":"free","trial":true},"app_version":"1.0""#)
        let before = try #require(await app.device(id).json)
        app.harness.clock.advance(milliseconds: 60_000)
        let answer = await app.call(
            .patch, "/v1/devices/\(id)", body: #"{"tags":{"plan":"pro","trial":null,"seats":5},"opted_in":false}"#)
        #expect(answer.status == 200)
        let json = try #require(answer.json)
        #expect(json["token"] == nil)
        #expect(json["tags"]?["plan"]?.stringValue == "pro")
        #expect(json["tags"]?["trial"] == nil)
        #expect(json["tags"]?["seats"] == .number("5"))
        #expect(json["opted_in"]?.boolValue == false)
        #expect(json["last_seen_at"] == before["last_seen_at"])
        #expect(json["app_version"]?.stringValue == "1.0")
        // An empty patch is a no-op; tags null clears.
        #expect(await app.call(.patch, "/v1/devices/\(id)", body: "{}").json?["tags"]?["plan"]?.stringValue == "pro")
        let cleared = await app.call(.patch, "/v1/devices/\(id)", body: #"{"tags":null}"#)
        #expect(cleared.json?["tags"]?.objectMembers?.isEmpty == true)
        let bad = await app.call(.patch, "/v1/devices/\(id)", body: #"{"opted_in":"no"}"#)
        #expect(bad.errorCode == "invalid_field")
        #expect(bad.errorField == "opted_in")
        #expect(await app.call(.patch, "/v1/devices/\(id)", body: #"{"tags":"x"}"#).errorCode == "invalid_tags")
        let reader = try await app.key(["devices:read"])
        #expect(await app.call(.patch, "/v1/devices/\(id)", key: reader, body: "{}").status == 403)
    }

    @Test("DELETE answers {\"deleted\":true} once, then false; the token registered again is a new device")
    func delete() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1)
        let writer = try await app.key(["devices:write"])
        #expect(await app.call(.delete, "/v1/devices/\(id)", key: writer).status == 403)
        let deleted = await app.call(.delete, "/v1/devices/\(id)")
        #expect(deleted.status == 200)
        #expect(deleted.text == #"{"deleted":true}"#)
        #expect(await app.call(.delete, "/v1/devices/\(id)").text == #"{"deleted":false}"#)
        #expect(await app.call(.delete, "/v1/devices/garbage").text == #"{"deleted":false}"#)
        #expect(await app.device(id).status == 404)
        let again = await app.registerIOS(1)
        #expect(again.status == 201)
        #expect(again.json?["id"]?.stringValue != id)
    }

    @Test("list pages follow creation order with a stable cursor: every device once, limit respected")
    func listPagination() async throws {
        let app = try await DeviceApp.make()
        var ids: [String] = []
        for n in 0..<25 { ids.append(try await app.registerID(n)) }
        var seen: [String] = []
        var cursor: String?
        var pages = 0
        repeat {
            let target = "/v1/devices?limit=10" + (cursor.map { "&cursor=\($0)" } ?? "")
            let page = try #require(await app.call(.get, target).json)
            let devices = try #require(page["devices"]?.arrayValue)
            #expect(devices.count <= 10)
            #expect(devices.allSatisfy { $0["token"]?.stringValue != nil })
            seen += devices.compactMap { $0["id"]?.stringValue }
            cursor = page["next_cursor"]?.stringValue
            pages += 1
            if pages == 1 {
                // A device deleted behind the cursor and one added after do not disturb the walk.
                #expect(await app.call(.delete, "/v1/devices/\(ids[3])").json?["deleted"]?.boolValue == true)
                ids.append(try await app.registerID(100))
            }
        } while cursor != nil && pages < 10
        // The first page held the deleted device; the one added later comes last.
        #expect(pages == 3)
        #expect(seen == ids)
        let all = await app.call(.get, "/v1/devices")
        #expect(all.json?["devices"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == ids.filter { $0 != ids[3] })
        #expect(all.json?["next_cursor"]?.isNull == true)
    }

    @Test("list filters: external_id, platform, tag.KEY=VALUE (percent-decoded), state, combined")
    func listFilters() async throws {
        let app = try await DeviceApp.make()
        let a = try await app.registerID(1, #""external_id":"user 1+2","tags":{"plan":"pro","seats":3}"#)
        let b = try await app.registerID(2, #""external_id":"user 1+2","tags":{"plan":"free"}"#)
        let c = try await app.registerID(3, #""tags":{"plan":"pro","beta":true}"#)
        let android = await app.register(
            #"{"platform":"android","token":"\#(TestTokens.fcm(1))","tags":{"plan":"pro"}}"#)
        let d = try #require(android.json?["id"]?.stringValue)
        _ = await app.call(.post, "/v1/feedback", body: #"{"provider":"apns","token":"\#(TestTokens.apns(3))"}"#)
        let cases: [(String, [String])] = [
            ("external_id=user%201%2B2", [a, b]),
            ("external_id=user+1%2B2", [a, b]),
            ("external_id=nobody", []),
            ("platform=android", [d]),
            ("platform=ios", [a, b, c]),
            ("tag.plan=pro", [a, c, d]),
            ("tag.plan=pro&platform=ios", [a, c]),
            ("tag.seats=3.0", [a]),
            ("tag.beta=true", [c]),
            ("tag.pl%61n=free", [b]),
            ("state=invalidated", [c]),
            ("state=active", [a, b, d]),
            ("state=all", [a, b, c, d]),
            ("external_id=user%201%2B2&tag.plan=pro&state=active", [a]),
        ]
        for (query, expected) in cases {
            let answer = await app.call(.get, "/v1/devices?\(query)")
            #expect(answer.status == 200, "\(query)")
            #expect(answer.json?["devices"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == expected, "\(query)")
        }
    }

    @Test(
        "list: bad query values are 400 naming the parameter",
        arguments: [
            ("limit=0", "invalid_field", "limit"), ("limit=1001", "invalid_field", "limit"),
            ("limit=abc", "invalid_field", "limit"), ("limit=-5", "invalid_field", "limit"),
            ("cursor=zzz", "invalid_field", "cursor"), ("state=dead", "invalid_field", "state"),
            ("platform=web", "invalid_platform", "platform"), ("colour=red", "invalid_field", "colour"),
            ("limit=", "invalid_field", "limit"), ("tag.=x", "invalid_field", "tag."),
            ("external_id=%ZZ", "invalid_field", "external_id"),
        ] as [(String, String, String)])
    func listBadQueries(query: String, code: String, field: String) async throws {
        let app = try await DeviceApp.make()
        let answer = await app.call(.get, "/v1/devices?\(query)")
        #expect(answer.status == 400)
        #expect(answer.errorCode == code)
        #expect(answer.errorField == field)
    }

    @Test("feedback: APNs feedback not later than the latest registration is ignored; later feedback invalidates")
    func feedbackTiming() async throws {
        let app = try await DeviceApp.make()
        // Registered at 2026-09-21T14:13:20.000Z.
        let id = try await app.registerID(1)
        func report(_ time: String) async -> Answer {
            await app.call(
                .post, "/v1/feedback",
                body:
                    #"{"provider":"apns","token":"\#(TestTokens.apns(1))","reason":"Unregistered","timestamp":"\#(time)"}"#
            )
        }
        #expect(await report("2026-09-21T14:13:19.999Z").text == #"{"invalidated":false}"#)
        #expect(await report("2026-09-21T14:13:20.000Z").text == #"{"invalidated":false}"#)
        #expect(await app.device(id).json?["invalidated_at"]?.isNull == true)
        #expect(await report("2026-09-21T14:13:20.001Z").text == #"{"invalidated":true}"#)
        let device = try #require(await app.device(id).json)
        #expect(device["invalidated_at"]?.stringValue == "2026-09-21T14:13:20.001Z")
        #expect(device["invalidation_reason"]?.stringValue == "Unregistered")
        // A repeat reports the same state; re-registration clears the invalidation.
        #expect(await report("2026-09-21T14:13:21.000Z").json?["invalidated"]?.boolValue == true)
        app.harness.clock.advance(milliseconds: 10_000)
        #expect(await app.registerIOS(1).json?["invalidated_at"]?.isNull == true)
        #expect(await report("2026-09-21T14:13:25.000Z").json?["invalidated"]?.boolValue == false)
        // FCM has no registration-time rule; an unknown token is false.
        _ = await app.register(#"{"platform":"android","token":"\#(TestTokens.fcm(1))"}"#)
        let fcm = await app.call(.post, "/v1/feedback", body: #"{"provider":"fcm","token":"\#(TestTokens.fcm(1))"}"#)
        #expect(fcm.json?["invalidated"]?.boolValue == true)
        let unknown = await app.call(
            .post, "/v1/feedback", body: #"{"provider":"fcm","token":"\#(TestTokens.fcm(2))"}"#)
        #expect(unknown.json?["invalidated"]?.boolValue == false)
        let listed = await app.call(.get, "/v1/devices?state=invalidated&platform=android")
        #expect(listed.json?["devices"]?.arrayValue?.first?["invalidation_reason"]?.stringValue == "UNREGISTERED")
    }

    @Test(
        "feedback: bad bodies are 400 with code and field",
        arguments: [
            (#"{"token":"\#(TestTokens.apns(1))"}"#, "missing_field", "provider"),
            (#"{"provider":"gcm","token":"\#(TestTokens.apns(1))"}"#, "invalid_field", "provider"),
            (#"{"provider":"apns"}"#, "missing_field", "token"),
            (#"{"provider":"apns","token":"\#(TestTokens.fcm(1))"}"#, "invalid_token_format", "token"),
            (
                #"{"provider":"apns","token":"\#(TestTokens.apns(1))","timestamp":"yesterday"}"#, "invalid_field",
                "timestamp"
            ),
            (#"{"provider":"apns","token":"\#(TestTokens.apns(1))","reason":""}"#, "invalid_field", "reason"),
        ] as [(String, String, String)])
    func feedbackBadBodies(body: String, code: String, field: String) async throws {
        let app = try await DeviceApp.make()
        let answer = await app.call(.post, "/v1/feedback", body: body)
        #expect(answer.status == 400)
        #expect(answer.errorCode == code)
        #expect(answer.errorField == field)
    }

    @Test("stats count devices, active, invalidated, people and platforms of the key's mode")
    func stats() async throws {
        let app = try await DeviceApp.make()
        _ = try await app.registerID(1, #""external_id":"a""#)
        _ = try await app.registerID(2, #""external_id":"b""#)
        _ = await app.register(#"{"platform":"android","token":"\#(TestTokens.fcm(1))"}"#)
        _ = await app.call(.post, "/v1/feedback", body: #"{"provider":"apns","token":"\#(TestTokens.apns(2))"}"#)
        _ = try await app.registerID(3, key: app.testSecret)
        let stats = await app.call(.get, "/v1/stats")
        #expect(
            stats.text == #"{"devices":3,"active":2,"invalidated":1,"people":2,"by_platform":{"android":1,"ios":2}}"#)
        let test = await app.call(.get, "/v1/stats", key: app.testSecret)
        #expect(test.json?["devices"]?.intValue == 1)
    }
}

@Suite("People and credentials (spec §4)")
struct PeopleAndCredentialTests {
    @Test("PUT person is 201 then 200 with the same created_at; GET lists their devices with tokens")
    func putAndGet() async throws {
        let app = try await DeviceApp.make()
        let created = await app.call(.put, "/v1/people/user_42")
        #expect(created.status == 201)
        #expect(created.text == #"{"external_id":"user_42","created_at":"2026-09-21T14:13:20.000Z"}"#)
        app.harness.clock.advance(milliseconds: 1_000)
        let again = await app.call(.put, "/v1/people/user_42")
        #expect(again.status == 200)
        #expect(again.text == created.text)
        let id = try await app.registerID(1, #""external_id":"user_42""#)
        let read = try #require(await app.call(.get, "/v1/people/user_42").json)
        #expect(read["external_id"]?.stringValue == "user_42")
        #expect(read["devices"]?.arrayValue?.map { $0["id"]?.stringValue } == [id])
        #expect(read["devices"]?.arrayValue?.first?["token"]?.stringValue == TestTokens.apns(1))
        // Percent-encoded path segments decode.
        #expect(await app.call(.put, "/v1/people/a%20b").json?["external_id"]?.stringValue == "a b")
    }

    @Test("GET of an unknown person is 404 person_not_found; a too long id is 400; keys are checked")
    func unknownAndBad() async throws {
        let app = try await DeviceApp.make()
        let missing = await app.call(.get, "/v1/people/nobody")
        #expect(missing.status == 404)
        #expect(missing.errorCode == "person_not_found")
        let long = await app.call(.put, "/v1/people/" + String(repeating: "x", count: 257))
        #expect(long.errorCode == "invalid_field")
        #expect(long.errorField == "external_id")
        let reader = try await app.key(["devices:read"])
        #expect(await app.call(.put, "/v1/people/u", key: reader).status == 403)
        #expect(await app.call(.delete, "/v1/people/u", key: reader).status == 403)
        let peopleWriter = try await app.key(["people:write"])
        #expect(await app.call(.get, "/v1/people/u", key: peopleWriter).status == 403)
        // Another app's person does not exist here.
        _ = await app.call(.put, "/v1/people/shared")
        let other = try await DeviceApp.make(app.harness)
        #expect(await other.call(.get, "/v1/people/shared").status == 404)
        #expect(await app.call(.get, "/v1/people/shared", key: app.testSecret).status == 404)
    }

    @Test("DELETE erases the person and their devices; the id later starts with none; unknown is erased:false")
    func erase() async throws {
        let app = try await DeviceApp.make()
        let first = try await app.registerID(1, #""external_id":"gone""#)
        _ = try await app.registerID(2, #""external_id":"gone""#)
        let kept = try await app.registerID(3, #""external_id":"stays""#)
        let erased = await app.call(.delete, "/v1/people/gone")
        #expect(erased.status == 200)
        let at = Timestamp(millisecondsSinceEpoch: app.harness.clock.wallMilliseconds()).rfc3339
        #expect(erased.text == #"{"erased":true,"devices_removed":2,"erased_at":"\#(at)"}"#, "spec §10 adds erased_at")
        #expect(await app.device(first).status == 404)
        #expect(await app.device(kept).status == 200)
        #expect(await app.call(.get, "/v1/people/gone").status == 404)
        let unknown = await app.call(.delete, "/v1/people/gone")
        #expect(unknown.status == 200)
        #expect(unknown.text == #"{"erased":false,"devices_removed":0,"erased_at":null}"#)
        _ = try await app.registerID(4, #""external_id":"gone""#)
        #expect(await app.call(.get, "/v1/people/gone").json?["devices"]?.arrayValue?.count == 1)
    }

    @Test("credentials: PUT stores metadata; DELETE removes the credential and its ios devices")
    func credentials() async throws {
        let app = try await DeviceApp.make()
        let path = "/v1/credentials/apns/com.example.app/sandbox"
        let put = await app.call(.put, path, body: #"{"team_id":"TEAM123","key_id":"KEY456"}"#)
        #expect(put.status == 200)
        #expect(
            put.text
                == #"{"bundle_id":"com.example.app","environment":"sandbox","team_id":"TEAM123","key_id":"KEY456"}"#)
        let gone = try await app.registerID(1, #""bundle_id":"com.example.app","environment":"sandbox""#)
        let otherEnvironment = try await app.registerID(2, #""bundle_id":"com.example.app""#)
        let deleted = await app.call(.delete, path)
        #expect(deleted.text == #"{"deleted":true,"devices_removed":1}"#)
        #expect(await app.device(gone).status == 404)
        #expect(await app.device(otherEnvironment).status == 200)
        #expect(await app.call(.delete, path).text == #"{"deleted":false,"devices_removed":0}"#)
    }

    @Test(
        "credentials: bad input is 400; a key without setup:write is 403",
        arguments: [
            (
                "/v1/credentials/apns/com.example/staging", #"{"team_id":"T","key_id":"K"}"#, "invalid_environment",
                "environment"
            ),
            ("/v1/credentials/apns/com%20x/production", #"{"team_id":"T","key_id":"K"}"#, "invalid_field", "bundle_id"),
            ("/v1/credentials/apns/com.example/production", #"{"key_id":"K"}"#, "missing_field", "team_id"),
            (
                "/v1/credentials/apns/com.example/production", #"{"team_id":"T-1","key_id":"K"}"#, "invalid_field",
                "team_id"
            ),
            ("/v1/credentials/apns/com.example/production", #"{"team_id":"T","key_id":""}"#, "invalid_field", "key_id"),
        ] as [(String, String, String, String)])
    func credentialErrors(path: String, body: String, code: String, field: String) async throws {
        let app = try await DeviceApp.make()
        let answer = await app.call(.put, path, body: body)
        #expect(answer.status == 400)
        #expect(answer.errorCode == code)
        #expect(answer.errorField == field)
        let writer = try await app.key(["devices:write"])
        #expect(await app.call(.put, "/v1/credentials/apns/com.x/production", key: writer, body: body).status == 403)
    }
}
