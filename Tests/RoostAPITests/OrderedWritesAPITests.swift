import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

/// Spec §7's last two bullets over the real routes: `client_sequence`
/// (ordered registration) and `version` / `ETag` / `If-Match` (conditional
/// writes). docs/api.md "§7 ordered and conditional writes" maps each
/// sentence of the spec to these tests.
@Suite("§7 ordered and conditional writes (HTTP)")
struct OrderedWritesAPITests {
    /// A request with extra header fields (If-Match), as `Harness.call` sends it otherwise.
    static func call(
        _ app: DeviceApp, _ method: HTTPMethod, _ target: String, body: String? = nil,
        headers extra: [(String, String)] = [], key: String? = nil
    ) async -> Answer {
        var headers = HTTPHeaders([("Host", "test"), ("Authorization", "Bearer \(key ?? app.secret)")])
        for (name, value) in extra { headers.append(name: name, value: value) }
        let head = HTTPRequestHead(method: method, target: target, version: .http11, headers: headers, keepAlive: true)
        let response = await app.harness.service.handle(HTTPRequest(head: head, body: Array((body ?? "").utf8)))
        return Answer(status: response.status, headers: response.headers, body: response.body)
    }

    static func version(_ answer: Answer) -> Int? { answer.json?["version"]?.intValue }

    // MARK: client_sequence

    @Test(
        "client_sequence that is not an integer from 0 to 2^53-1 is 400 invalid_field, nothing changes",
        arguments: [
            "-1", "9007199254740992", "18446744073709551616", "1.5", "1.0", "1e3", "\"5\"", "null", "true",
            "[1]", "{}",
        ])
    func invalidClientSequence(literal: String) async throws {
        let app = try await DeviceApp.make()
        let answer = await app.registerIOS(1, #""client_sequence":\#(literal)"#)
        #expect(answer.status == 400, "\(literal)")
        #expect(answer.errorCode == "invalid_field")
        #expect(answer.errorField == "client_sequence")
        let stats = await app.call(.get, "/v1/stats")
        #expect(stats.json?["devices"]?.intValue == 0)
    }

    @Test("client_sequence 0 and 2^53-1 are accepted; the device shows the highest it accepted")
    func boundsAccepted() async throws {
        let app = try await DeviceApp.make()
        let first = await app.registerIOS(1, #""client_sequence":0"#)
        #expect(first.status == 201)
        #expect(first.json?["client_sequence"]?.intValue == 0)
        let id = try #require(first.json?["id"]?.stringValue)
        let top = await app.registerIOS(1, #""client_sequence":9007199254740991"#)
        #expect(top.status == 200)
        #expect(top.json?["client_sequence"]?.intValue == 9_007_199_254_740_991)
        #expect(await app.device(id).json?["client_sequence"]?.intValue == 9_007_199_254_740_991)
        let other = await app.registerIOS(2)
        #expect(other.json?["client_sequence"]?.isNull == true)
    }

    @Test(
        "a registration naming a device by token with client_sequence <= stored is 409 stale_registration; nothing changes",
        arguments: [3, 5])
    func staleByToken(sequence: Int) async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1, #""client_sequence":5,"tags":{"plan":"pro"}"#)
        let before = await app.device(id).text
        app.harness.clock.advance(milliseconds: 1000)
        let stale = await app.registerIOS(1, #""client_sequence":\#(sequence),"tags":null,"external_id":"u""#)
        #expect(stale.status == 409)
        #expect(stale.errorCode == "stale_registration")
        #expect(stale.errorField == "client_sequence")
        #expect(await app.device(id).text == before)
        let newer = await app.registerIOS(1, #""client_sequence":6"#)
        #expect(newer.status == 200)
        #expect(newer.json?["client_sequence"]?.intValue == 6)
    }

    @Test("a registration naming a device by installation_id is checked (a slow retry of an old token)")
    func staleByInstallation() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1, #""installation_id":"inst-1","client_sequence":1"#)
        #expect(await app.registerIOS(2, #""installation_id":"inst-1","client_sequence":2"#).status == 200)
        let retry = await app.registerIOS(1, #""installation_id":"inst-1","client_sequence":1"#)
        #expect(retry.status == 409)
        #expect(retry.errorCode == "stale_registration")
        #expect(await app.device(id).json?["token"]?.stringValue == TestTokens.apns(2))
    }

    @Test("a registration naming a device by a proven device_id is checked; an unproven id is not")
    func staleByProof() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1, #""installation_secret":"s3cret","client_sequence":8"#)
        let proven = await app.registerIOS(
            2, #""device_id":"\#(id)","installation_secret":"s3cret","client_sequence":8"#)
        #expect(proven.status == 409)
        #expect(proven.errorCode == "stale_registration")
        let unproven = await app.registerIOS(
            2, #""device_id":"\#(id)","installation_secret":"wrong","client_sequence":1"#)
        #expect(unproven.status == 201)
    }

    @Test("without client_sequence there is no check")
    func withoutFieldNoCheck() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1, #""client_sequence":100"#)
        let plain = await app.registerIOS(1, #""app_version":"2.0""#)
        #expect(plain.status == 200)
        #expect(plain.json?["id"]?.stringValue == id)
        #expect(plain.json?["client_sequence"]?.intValue == 100)
    }

    @Test("token and installation_id naming two devices: the higher stored client_sequence of the two decides")
    func twoNamedDevices() async throws {
        let app = try await DeviceApp.make()
        let holder = try await app.registerID(1, #""installation_id":"a","client_sequence":10"#)
        let named = try await app.registerID(2, #""installation_id":"b","client_sequence":3"#)
        let stale = await app.registerIOS(1, #""installation_id":"b","client_sequence":5"#)
        #expect(stale.status == 409)
        #expect(stale.errorCode == "stale_registration")
        #expect(await app.device(holder).json?["token"]?.stringValue == TestTokens.apns(1))
        let fresh = await app.registerIOS(1, #""installation_id":"b","client_sequence":11"#)
        #expect(fresh.status == 200)
        #expect(fresh.json?["id"]?.stringValue == named)
        let displaced = await app.device(holder)
        #expect(displaced.json?["invalidation_reason"]?.stringValue == "Reassigned")
        #expect(displaced.json?["client_sequence"]?.intValue == 10)
    }

    @Test("CSV import checks client_sequence as POST /v1/devices does: a stale row is rejected alone")
    func importChecks() async throws {
        let app = try await DeviceApp.make()
        _ = try await app.registerID(1, #""client_sequence":7"#)
        let csv =
            "platform,token,client_sequence\n" + "ios,\(TestTokens.apns(1)),7\n" + "ios,\(TestTokens.apns(2)),x\n"
            + "ios,\(TestTokens.apns(3)),1\n" + "ios,\(TestTokens.apns(1)),8\n"
        let answer = await app.importCSV(csv)
        #expect(answer.status == 200)
        let rejected = try #require(answer.json?["rejected"]?.arrayValue)
        #expect(rejected.count == 2)
        #expect(rejected.first?["line"]?.intValue == 2)
        #expect(rejected.first?["code"]?.stringValue == "stale_registration")
        #expect(rejected.last?["code"]?.stringValue == "invalid_field")
        #expect(answer.json?["created"]?.intValue == 1)
        #expect(answer.json?["updated"]?.intValue == 1)
    }

    @Test("compatibility routes carry no client_sequence: they register a device that stores one without a check")
    func compatNoCheck() async throws {
        let app = try await DeviceApp.make()
        _ = try await app.registerID(1, #""installation_id":"A1B2C3D4-install-key","client_sequence":50"#)
        let body = NativeNotifyTests.body(
            app: app.app, token: app.mobile, tokens: #"{"apnsToken":"\#(TestTokens.apns(2))"}"#,
            extra: #","client_sequence":1"#)
        let answer = await app.harness.call(.post, NativeNotifyTests.register, body: body)
        #expect(answer.status == 201)  // the vendor's answer to every registration
        let device = await app.call(.get, "/v1/devices?limit=10")
        let devices = try #require(device.json?["devices"]?.arrayValue)
        #expect(devices.count == 1)
        #expect(devices.first?["token"]?.stringValue == TestTokens.apns(2))
        #expect(devices.first?["client_sequence"]?.intValue == 50)
    }

    // MARK: version and ETag

    @Test("version is 1 at creation and +1 on every change; answers with one device carry ETag \"<version>\"")
    func versionAndETag() async throws {
        let app = try await DeviceApp.make()
        let created = await app.registerIOS(1)
        #expect(created.status == 201)
        #expect(Self.version(created) == 1)
        #expect(created.header("ETag") == "\"1\"")
        let id = try #require(created.json?["id"]?.stringValue)
        // Same millisecond, same body: nothing changes, not even last_seen_at.
        let same = await app.registerIOS(1)
        #expect(Self.version(same) == 1)
        #expect(same.header("ETag") == "\"1\"")
        app.harness.clock.advance(milliseconds: 5)
        #expect(Self.version(await app.registerIOS(1)) == 2)  // last_seen_at moved
        let patched = await app.call(.patch, "/v1/devices/\(id)", body: #"{"tags":{"plan":"pro"}}"#)
        #expect(Self.version(patched) == 3)
        #expect(patched.header("ETag") == "\"3\"")
        let samePatch = await app.call(.patch, "/v1/devices/\(id)", body: #"{"tags":{"plan":"pro"},"opted_in":true}"#)
        #expect(Self.version(samePatch) == 3)
        let read = await app.device(id)
        #expect(Self.version(read) == 3)
        #expect(read.header("ETag") == "\"3\"")
        let feedback = #"{"provider":"apns","token":"\#(TestTokens.apns(1))","reason":"Unregistered"}"#
        #expect(await app.call(.post, "/v1/feedback", body: feedback).json?["invalidated"]?.boolValue == true)
        #expect(Self.version(await app.device(id)) == 4)
        #expect(await app.call(.post, "/v1/feedback", body: feedback).status == 200)  // already invalidated
        #expect(Self.version(await app.device(id)) == 4)
        app.harness.clock.advance(milliseconds: 5)
        #expect(Self.version(await app.registerIOS(1)) == 5)  // invalidation cleared
        #expect(Self.version(await app.registerIOS(1, #""external_id":"alice""#)) == 6)  // bound to a person
        #expect(Self.version(await app.registerIOS(1, #""external_id":"bob""#)) == 7)  // moved to another
        #expect(Self.version(await app.registerIOS(1, #""external_id":"bob""#)) == 7)  // same ms, nothing new
    }

    @Test("a device Reassigned by another installation's registration gets a new version")
    func reassignedBumps() async throws {
        let app = try await DeviceApp.make()
        let holder = try await app.registerID(1, #""installation_id":"a""#)
        #expect(await app.registerIOS(1, #""installation_id":"b""#).status == 201)
        let displaced = await app.device(holder)
        #expect(displaced.json?["invalidation_reason"]?.stringValue == "Reassigned")
        #expect(Self.version(displaced) == 2)
        #expect(displaced.header("ETag") == "\"2\"")
    }

    @Test("answers that return several devices or none carry no ETag; the Connect route's one device does")
    func etagOnlyOnOneDevice() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1)
        #expect(await app.call(.get, "/v1/devices").header("ETag") == nil)
        let deleted = await app.call(.delete, "/v1/devices/\(id)")
        #expect(deleted.status == 200)
        #expect(deleted.header("ETag") == nil)
        let connect = try await ConnectTests.setUp(app.harness)
        let guest = try await ConnectTests.guest(app.harness, connect)
        let put = await app.harness.call(.put, "/v1/me/devices", key: guest.token, body: ConnectTests.device())
        #expect(put.status == 201)
        #expect(put.header("ETag") == "\"1\"")
        #expect(Self.version(put) == 1)
    }

    // MARK: If-Match

    @Test("PATCH with a matching If-Match applies; a mismatch is 412 precondition_failed naming the version")
    func patchIfMatch() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1)
        let mismatch = await Self.call(
            app, .patch, "/v1/devices/\(id)", body: #"{"opted_in":false}"#, headers: [("If-Match", "\"2\"")])
        #expect(mismatch.status == 412)
        #expect(mismatch.errorCode == "precondition_failed")
        let message = try #require(mismatch.json?["error"]?["message"]?.stringValue)
        #expect(message.contains("version 1"))
        #expect(await app.device(id).json?["opted_in"]?.boolValue == true)
        let match = await Self.call(
            app, .patch, "/v1/devices/\(id)", body: #"{"opted_in":false}"#, headers: [("If-Match", "\"1\"")])
        #expect(match.status == 200)
        #expect(match.header("ETag") == "\"2\"")
        let old = await Self.call(
            app, .patch, "/v1/devices/\(id)", body: #"{"opted_in":true}"#, headers: [("If-Match", "\"1\"")])
        #expect(old.status == 412)
        #expect(old.json?["error"]?["message"]?.stringValue?.contains("version 2") == true)
        #expect(await app.device(id).json?["opted_in"]?.boolValue == false)
    }

    @Test("DELETE with a matching If-Match deletes; a mismatch is 412 and the device stays")
    func deleteIfMatch() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1)
        let mismatch = await Self.call(app, .delete, "/v1/devices/\(id)", headers: [("If-Match", "\"7\"")])
        #expect(mismatch.status == 412)
        #expect(mismatch.errorCode == "precondition_failed")
        #expect(mismatch.json?["error"]?["message"]?.stringValue?.contains("version 1") == true)
        #expect(await app.device(id).status == 200)
        let match = await Self.call(app, .delete, "/v1/devices/\(id)", headers: [("If-Match", "\"1\"")])
        #expect(match.status == 200)
        #expect(match.json?["deleted"]?.boolValue == true)
        #expect(await app.device(id).status == 404)
        // Gone: a conditional delete answers as the unconditional one does (already applied).
        let again = await Self.call(app, .delete, "/v1/devices/\(id)", headers: [("If-Match", "\"1\"")])
        #expect(again.status == 200)
        #expect(again.json?["deleted"]?.boolValue == false)
    }

    @Test("If-Match: * matches any existing device; on a missing device PATCH stays 404")
    func ifMatchStar() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1)
        let patched = await Self.call(
            app, .patch, "/v1/devices/\(id)", body: #"{"opted_in":false}"#, headers: [("If-Match", "*")])
        #expect(patched.status == 200)
        let deleted = await Self.call(app, .delete, "/v1/devices/\(id)", headers: [("If-Match", "*")])
        #expect(deleted.json?["deleted"]?.boolValue == true)
        let missing = await Self.call(
            app, .patch, "/v1/devices/\(id)", body: #"{"opted_in":false}"#, headers: [("If-Match", "*")])
        #expect(missing.status == 404)
    }

    @Test(
        "If-Match lists: a match of any strong tag applies; weak, non-version and empty-list tags never match",
        arguments: [
            ("\"3\", \"1\"", true), ("\"9\",\"1\"", true), ("W/\"1\"", false), ("\"01\"", false),
            ("\"abc\"", false), ("\"\"", false), ("\"4294967297\"", false),
        ])
    func ifMatchLists(value: String, matches: Bool) async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1)
        let answer = await Self.call(
            app, .patch, "/v1/devices/\(id)", body: #"{"opted_in":false}"#, headers: [("If-Match", value)])
        #expect(answer.status == (matches ? 200 : 412), "\(value)")
    }

    @Test("two If-Match fields are one list")
    func ifMatchFieldsCombine() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1)
        let answer = await Self.call(
            app, .delete, "/v1/devices/\(id)", headers: [("If-Match", "\"5\""), ("If-Match", "\"1\"")])
        #expect(answer.json?["deleted"]?.boolValue == true)
    }

    @Test(
        "a malformed If-Match is 400 invalid_field (If-Match) and nothing changes",
        arguments: [
            "1", "\"1", "W/1", "*, \"1\"", "\"1\" \"2\"", "", ",", "w/\"1\"", "\"a\"b\"", "\"\u{7F}\"", "\"1 \"",
        ])
    func malformedIfMatch(value: String) async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1)
        for method in [HTTPMethod.patch, .delete] {
            let answer = await Self.call(
                app, method, "/v1/devices/\(id)", body: #"{"opted_in":false}"#, headers: [("If-Match", value)])
            #expect(answer.status == 400, "\(method) \(value)")
            #expect(answer.errorCode == "invalid_field")
            #expect(answer.errorField == "If-Match")
        }
        let device = await app.device(id)
        #expect(device.json?["opted_in"]?.boolValue == true)
        #expect(Self.version(device) == 1)
    }

    @Test("more than 64 entity tags in If-Match is 400")
    func tooManyTags() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1)
        let list = (2...66).map { "\"\($0)\"" }.joined(separator: ",")
        let answer = await Self.call(app, .delete, "/v1/devices/\(id)", headers: [("If-Match", list)])
        #expect(answer.status == 400)
        let fits = (2...64).map { "\"\($0)\"" }.joined(separator: ",") + ",\"1\""
        #expect(await Self.call(app, .delete, "/v1/devices/\(id)", headers: [("If-Match", fits)]).status == 200)
    }

    // MARK: durability

    @Test("version and client_sequence are durable: they come back from the log and from a snapshot")
    func durable() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (harness, engine) = try await Harness.durable(directory)
        let app = try await DeviceApp.make(harness)
        let id = try await app.registerID(1, #""client_sequence":41"#)
        harness.clock.advance(milliseconds: 10)
        #expect(await app.call(.patch, "/v1/devices/\(id)", body: #"{"tags":{"a":"b"}}"#).status == 200)
        engine.close()
        for round in ["log", "snapshot"] {
            let (reopened, engine) = try await Harness.durable(directory)
            let restarted = DeviceApp(
                harness: reopened, app: app.app, secret: app.secret, mobile: app.mobile, testSecret: app.testSecret)
            let device = await restarted.device(id)
            #expect(Self.version(device) == 2, "\(round)")
            #expect(device.json?["client_sequence"]?.intValue == 41, "\(round)")
            #expect(device.header("ETag") == "\"2\"", "\(round)")
            #expect(await restarted.registerIOS(1, #""client_sequence":41"#).status == 409, "\(round)")
            if round == "log" { _ = try await engine.snapshot() }
            engine.close()
        }
    }
}
