import RoostCrypto
import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

/// Spec §9 (device history) and §10 (privacy: person export, erasure) over
/// the real routes. docs/api.md "§9 history, §10 privacy" maps each spec
/// sentence to these tests.
@Suite("Device history and privacy routes (spec §9 history, §10)")
struct HistoryAndPrivacyTests {
    /// The first 16 hex digits of SHA-256 (libcrypto) of a token as the API shows it.
    static func fingerprint(_ token: String) -> String {
        String(
            Crypto.sha256(token.utf8).prefix(8).map { byte in
                let hex = String(byte, radix: 16)
                return hex.count == 1 ? "0" + hex : hex
            }.joined())
    }

    static func events(_ answer: Answer) -> [JSONValue] { answer.json?["events"]?.arrayValue ?? [] }
    static func kinds(_ answer: Answer) -> [String] { events(answer).compactMap { $0["kind"]?.stringValue } }

    func history(_ app: DeviceApp, _ id: String, key: String? = nil) async -> Answer {
        await app.call(.get, "/v1/devices/\(id)/history", key: key)
    }

    @Test("GET history: 200 {events}, newest first, each change's kind, every event with all six members")
    func historyNewestFirst() async throws {
        let app = try await DeviceApp.make()
        let token = TestTokens.apns(1)
        let id = try await app.registerID(1, #""installation_id":"i-1","external_id":"ada""#)
        app.harness.clock.advance(milliseconds: 1_000)
        _ = try await app.registerID(1, #""external_id":"bob""#)
        app.harness.clock.advance(milliseconds: 1_000)
        _ = try await app.registerID(2, #""installation_id":"i-1""#)
        app.harness.clock.advance(milliseconds: 1_000)
        _ = try await app.registerID(2, #""external_id":null"#)
        app.harness.clock.advance(milliseconds: 1_000)
        #expect(
            await app.call(.patch, "/v1/devices/\(id)", body: #"{"tags":{"plan":"pro"},"opted_in":false}"#).status
                == 200)
        app.harness.clock.advance(milliseconds: 1_000)
        #expect(await app.call(.patch, "/v1/devices/\(id)", body: #"{"opted_in":true}"#).status == 200)
        let answer = await history(app, id)
        #expect(answer.status == 200)
        #expect(answer.header("Content-Type")?.hasPrefix("application/json") == true)
        #expect(
            Self.kinds(answer) == [
                "opted_in", "opted_out", "tags_changed", "unbound", "registered", "token_replaced", "moved",
                "registered", "created",
            ])
        let events = Self.events(answer)
        for event in events {
            let names = Set((event.objectMembers ?? []).map(\.key))
            #expect(names == ["at", "kind", "external_id", "previous_external_id", "token_fingerprint", "reason"])
            #expect(Timestamp(rfc3339: event["at"]?.stringValue ?? "") != nil)
        }
        let times = events.compactMap { $0["at"]?.stringValue }
        #expect(times == times.sorted(by: >), "newest first")
        let moved = events[6]
        #expect(moved["external_id"]?.stringValue == "bob" && moved["previous_external_id"]?.stringValue == "ada")
        let unbound = events[3]
        #expect(unbound["external_id"]?.isNull == true && unbound["previous_external_id"]?.stringValue == "bob")
        #expect(events[8]["external_id"]?.stringValue == "ada", "created names the person it was created for")
        #expect(events[8]["token_fingerprint"]?.stringValue == Self.fingerprint(token))
        #expect(events[5]["token_fingerprint"]?.stringValue == Self.fingerprint(TestTokens.apns(2)))
        #expect(events.allSatisfy { $0["reason"]?.isNull == true })
        #expect(events[0]["previous_external_id"]?.isNull == true)
    }

    @Test("token_fingerprint is the first 16 hex digits of SHA-256 of the stored token, never the token itself")
    func fingerprintNeverToken() async throws {
        let app = try await DeviceApp.make()
        let apns = TestTokens.apns(0xABCDEF).uppercased()
        let ios = await app.register(#"{"platform":"ios","token":"\#(apns)","external_id":"ada"}"#)
        let fcm = TestTokens.fcm(7)
        let android = await app.register(#"{"platform":"android","token":"\#(fcm)","external_id":"ada"}"#)
        let iosID = try #require(ios.json?["id"]?.stringValue)
        let androidID = try #require(android.json?["id"]?.stringValue)
        _ = await app.register(#"{"platform":"android","token":"\#(fcm)","tags":{"a":1}}"#)
        let iosHistory = await history(app, iosID)
        let androidHistory = await history(app, androidID)
        #expect(
            Self.events(iosHistory).first?["token_fingerprint"]?.stringValue
                == Self.fingerprint(apns.lowercased()), "APNs: the stored (lower-case) token")
        #expect(
            Self.events(androidHistory).allSatisfy { $0["token_fingerprint"]?.stringValue == Self.fingerprint(fcm) })
        let export = await app.call(.get, "/v1/people/ada/export")
        for text in [iosHistory.text, androidHistory.text, export.text] {
            #expect(!text.lowercased().contains(apns.lowercased()))
            #expect(!text.contains(fcm))
        }
    }

    @Test("history: 404 for an unknown, deleted, foreign-app or other-mode device; devices:read is needed")
    func historyNotFound() async throws {
        let app = try await DeviceApp.make()
        let other = try await DeviceApp.make(app.harness)
        let id = try await app.registerID(1)
        let foreign = try await other.registerID(2)
        let testID = try await app.registerID(3, key: app.testSecret)
        #expect(await history(app, "dev_nonsense").errorCode == "device_not_found")
        #expect(await history(app, foreign).status == 404)
        #expect(await history(app, testID).status == 404)
        #expect(await history(app, testID, key: app.testSecret).status == 200)
        let writer = try await app.key(["devices:write"])
        #expect(await history(app, id, key: writer).status == 403)
        #expect(await history(app, id, key: app.mobile).status == 403)
        #expect(await history(app, id, key: nil).status == 200)
        #expect(await app.call(.delete, "/v1/devices/\(id)").json?["deleted"]?.boolValue == true)
        #expect(await history(app, id).errorCode == "device_not_found", "a deleted device's history goes with it")
    }

    @Test("at most the last 100 events: 101 and more changes keep the newest 100")
    func lastHundred() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1)
        for step in 0..<101 {
            app.harness.clock.advance(milliseconds: 10)
            let body = step % 2 == 0 ? #"{"opted_in":false}"# : #"{"opted_in":true}"#
            #expect(await app.call(.patch, "/v1/devices/\(id)", body: body).status == 200)
        }
        let kinds = Self.kinds(await history(app, id))
        #expect(kinds.count == 100)
        #expect(!kinds.contains("created"), "102 events: created and the oldest change are dropped")
        #expect(kinds.first == "opted_out")
        #expect(kinds.last == "opted_in", "the 100th newest is the second change")
    }

    @Test("invalidated carries the invalidation's reason (feedback); revalidated follows a registration")
    func invalidatedReason() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1)
        app.harness.clock.advance(milliseconds: 1_000)
        let feedback = await app.call(
            .post, "/v1/feedback",
            body: #"{"provider":"apns","token":"\#(TestTokens.apns(1))","reason":"BadDeviceToken"}"#)
        #expect(feedback.json?["invalidated"]?.boolValue == true)
        app.harness.clock.advance(milliseconds: 1_000)
        _ = try await app.registerID(1)
        let events = Self.events(await history(app, id))
        #expect(
            events.compactMap { $0["kind"]?.stringValue } == ["revalidated", "registered", "invalidated", "created"])
        #expect(events[2]["reason"]?.stringValue == "BadDeviceToken")
    }

    @Test("a restart gives the same history: from the log alone, and from a snapshot plus the log")
    func restart() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (first, engine) = try await Harness.durable(directory)
        let app = try await DeviceApp.make(first)
        let id = try await app.registerID(1, #""external_id":"ada""#)
        let before = try await app.registerID(2, #""external_id":"ada""#)
        for round in 0..<3 {
            first.clock.advance(milliseconds: 1_000)
            _ = try await app.registerID(1, #""external_id":"p\#(round)","tags":{"r":\#(round)}"#)
            _ = await app.call(.patch, "/v1/devices/\(before)", body: #"{"opted_in":\#(round % 2 == 1)}"#)
        }
        let expected = (await history(app, id).text, await history(app, before).text)
        let export = await app.call(.get, "/v1/people/p2/export").text
        engine.close()

        let (second, secondEngine) = try await Harness.durable(directory)
        let replayed = DeviceApp(
            harness: second, app: app.app, secret: app.secret, mobile: app.mobile, testSecret: app.testSecret)
        #expect(await history(replayed, id).text == expected.0, "log replay")
        #expect(await history(replayed, before).text == expected.1, "log replay")
        #expect(await replayed.call(.get, "/v1/people/p2/export").text == export)
        #expect(try await secondEngine.snapshot() != nil)
        secondEngine.close()

        let (third, thirdEngine) = try await Harness.durable(directory)
        defer { thirdEngine.close() }
        let restored = DeviceApp(
            harness: third, app: app.app, secret: app.secret, mobile: app.mobile, testSecret: app.testSecret)
        #expect(await history(restored, id).text == expected.0, "snapshot")
        #expect(await history(restored, before).text == expected.1, "snapshot")
        #expect(Self.kinds(await history(restored, id)).count == 10)
    }

    @Test("person export: external_id, created_at, devices without token plus token_fingerprint and history")
    func personExport() async throws {
        let app = try await DeviceApp.make()
        let put = await app.call(.put, "/v1/people/ada")
        #expect(put.status == 201)
        let first = try await app.registerID(1, #""external_id":"ada","tags":{"plan":"pro"}"#)
        app.harness.clock.advance(milliseconds: 1_000)
        let second = try await app.registerID(2, #""external_id":"ada""#)
        _ = try await app.registerID(1, #""external_id":"ada","opted_in":false"#)
        let answer = await app.call(.get, "/v1/people/ada/export")
        #expect(answer.status == 200)
        let json = try #require(answer.json)
        #expect(json["external_id"]?.stringValue == "ada")
        #expect(json["created_at"]?.stringValue == put.json?["created_at"]?.stringValue)
        let devices = try #require(json["devices"]?.arrayValue)
        #expect(devices.compactMap { $0["id"]?.stringValue } == [first, second])
        let device = await app.device(first)
        for member in device.json?.objectMembers ?? [] where member.key != "token" {
            #expect(devices[0][member.key] == member.value, "\(member.key) as in Device JSON")
        }
        #expect(devices.allSatisfy { $0["token"] == nil }, "without token")
        #expect(devices[0]["token_fingerprint"]?.stringValue == Self.fingerprint(TestTokens.apns(1)))
        #expect(devices[1]["token_fingerprint"]?.stringValue == Self.fingerprint(TestTokens.apns(2)))
        #expect(devices[0]["history"] == (await history(app, first)).json?["events"])
        #expect(
            devices[0]["history"]?.arrayValue?.compactMap { $0["kind"]?.stringValue } == [
                "opted_out", "registered", "created",
            ])
        #expect(devices[1]["history"]?.arrayValue?.count == 1)
        #expect(!answer.text.contains(TestTokens.apns(1)) && !answer.text.contains(TestTokens.apns(2)))
        let empty = await app.call(.put, "/v1/people/nobody-devices")
        #expect(empty.status == 201)
        #expect(await app.call(.get, "/v1/people/nobody-devices/export").json?["devices"]?.arrayValue?.isEmpty == true)
    }

    @Test("person export: 404 person_not_found for an unknown person, another app's or the other mode's; devices:read")
    func personExportNotFound() async throws {
        let app = try await DeviceApp.make()
        let other = try await DeviceApp.make(app.harness)
        _ = try await other.registerID(1, #""external_id":"ada""#)
        _ = try await app.registerID(2, #""external_id":"bob""#, key: app.testSecret)
        #expect(await app.call(.get, "/v1/people/ada/export").errorCode == "person_not_found")
        #expect(await app.call(.get, "/v1/people/bob/export").status == 404)
        #expect(await app.call(.get, "/v1/people/bob/export", key: app.testSecret).status == 200)
        let writer = try await app.key(["people:write", "devices:write"])
        #expect(await app.call(.get, "/v1/people/bob/export", key: writer).status == 403)
        let tooLong = String(repeating: "x", count: Limits.externalIDCharactersMax + 1)
        #expect(await app.call(.get, "/v1/people/\(tooLong)/export").errorCode == "invalid_field")
    }

    @Test("DELETE person: erased_at (RFC 3339) added, devices and their histories removed, the rest kept")
    func erasure() async throws {
        let app = try await DeviceApp.make()
        let gone = try await app.registerID(1, #""external_id":"ada","tags":{"a":1}"#)
        let moved = try await app.registerID(2, #""external_id":"ada""#)
        _ = try await app.registerID(2, #""external_id":"bob""#)
        app.harness.clock.advance(milliseconds: 1_234)
        let erased = await app.call(.delete, "/v1/people/ada")
        #expect(erased.status == 200)
        let members = (erased.json?.objectMembers ?? []).map(\.key)
        #expect(members == ["erased", "devices_removed", "erased_at"])
        #expect(erased.json?["erased"]?.boolValue == true)
        #expect(erased.json?["devices_removed"]?.intValue == 1)
        let erasedAt = try #require(erased.json?["erased_at"]?.stringValue)
        #expect(Timestamp(rfc3339: erasedAt)?.millisecondsSinceEpoch == app.harness.clock.wallMilliseconds())
        #expect(erasedAt.hasSuffix("Z") && erasedAt.count == "2026-09-20T14:02:11.000Z".count)
        #expect(await history(app, gone).status == 404, "erasure removes the history of the devices it removes")
        #expect(await app.call(.get, "/v1/people/ada/export").status == 404)
        #expect(Self.kinds(await history(app, moved)) == ["moved", "registered", "created"])
        _ = await app.call(.put, "/v1/people/ada")
        #expect(await app.call(.get, "/v1/people/ada/export").json?["devices"]?.arrayValue?.isEmpty == true)
        let again = await app.call(.delete, "/v1/people/nobody")
        #expect(again.status == 200)
        #expect(again.json?["erased"]?.boolValue == false)
        #expect(again.json?["erased_at"]?.isNull == true)
    }
}
