import RoostHTTP
import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

/// Spec §11: `POST /v1/devices/import` also accepts `Content-Type:
/// application/x-ndjson` in the exact format of `GET /v1/devices/export`, so an
/// export can be imported as is (ids and timestamps kept where free, else the
/// line is rejected). Decision 0053; the sentence → test list is in docs/api.md.
@Suite("NDJSON import of an export (spec §11)")
struct NDJSONImportTests {
    /// An app holding every kind of device the export writes: with a person,
    /// tags of each type, an installation (with a secret), sandbox, metadata,
    /// opted out, push permission false, invalidated by feedback, a deleted
    /// one (a gap in the ids), an android one, a strike.
    static func populated(_ harness: Harness? = nil) async throws -> DeviceApp {
        let app = try await DeviceApp.make(harness)
        let h = app.harness
        #expect(await app.call(.put, "/v1/people/known").status == 201)
        _ = try await app.registerID(
            1,
            #""external_id":"user_42","tags":{"plan":"pro","n":30,"ratio":0.25,"beta":true},"#
                + #""installation_id":"inst-1","installation_secret":"s3cret","bundle_id":"com.example.app","#
                + #""app_version":"2.4.0","timezone":"America/New_York","locale":"en-US","push_permission":false,"#
                + #""environment":"sandbox""#)
        h.clock.advance(milliseconds: 1_234)
        let deleted = try await app.registerID(2)
        h.clock.advance(milliseconds: 10)
        _ = try await app.registerID(3, #""external_id":"user_42","opted_in":false"#)
        h.clock.advance(milliseconds: 10)
        _ = try await app.registerID(4, #""external_id":"known""#)
        let android = await app.register(
            #"{"platform":"android","token":"\#(TestTokens.fcm(1))","tags":{"q":"\"x\""}}"#)
        #expect(android.status == 201)
        h.clock.advance(milliseconds: 60_000)
        _ = try await app.registerID(3)  // re-registered: last_seen_at moves, created_at stays
        #expect(await app.call(.delete, "/v1/devices/\(deleted)").json?["deleted"]?.boolValue == true)
        h.clock.advance(milliseconds: 5)
        let feedback = await app.call(
            .post, "/v1/feedback",
            body: #"{"provider":"apns","token":"\#(TestTokens.apns(4))","reason":"Unregistered"}"#)
        #expect(feedback.json?["invalidated"]?.boolValue == true)
        return app
    }

    /// `POST /v1/devices/import` with an NDJSON body.
    static func importNDJSON(_ app: DeviceApp, _ body: [UInt8], key: String? = nil) async -> Answer {
        var headers = HTTPHeaders([("Host", "test"), ("Authorization", "Bearer \(key ?? app.secret)")])
        headers.append(name: "Content-Type", value: "application/x-ndjson")
        let head = HTTPRequestHead(
            method: .post, target: "/v1/devices/import", version: .http11, headers: headers, keepAlive: true)
        let response = await app.harness.service.handle(HTTPRequest(head: head, body: body))
        return Answer(status: response.status, headers: response.headers, body: response.body)
    }

    @Test("an export imported as is into an empty app gives the same export, byte for byte")
    func roundTrip() async throws {
        let source = try await Self.populated()
        let export = await source.call(.get, "/v1/devices/export")
        #expect(export.status == 200)
        #expect(export.text.split(separator: "\n").count == 4)
        // Another server: its first app has the same id, so every id is free there.
        let target = try await DeviceApp.make()
        #expect(target.app == source.app)
        target.harness.clock.advance(milliseconds: 3_600_000)  // the import runs an hour later
        let answer = await Self.importNDJSON(target, export.body)
        #expect(answer.status == 200)
        #expect(answer.json?["created"]?.intValue == 4)
        #expect(answer.json?["updated"]?.intValue == 0)
        #expect(answer.json?["rejected"]?.arrayValue?.isEmpty == true)
        let again = await target.call(.get, "/v1/devices/export")
        #expect(again.body == export.body)
        // The people came with them; a new device gets an id after the imported ones.
        let person = await target.call(.get, "/v1/people/user_42")
        #expect(person.json?["devices"]?.arrayValue?.count == 2)
        let fresh = try await target.registerID(77)
        #expect(try #require(DeviceID(rendered: fresh)).sequence == 6)
    }

    @Test("ids and timestamps are kept: the imported device reads as the exported one")
    func idsAndTimestampsKept() async throws {
        let source = try await Self.populated()
        let export = await source.call(.get, "/v1/devices/export")
        let target = try await DeviceApp.make()
        target.harness.clock.advance(milliseconds: 86_400_000)
        #expect(await Self.importNDJSON(target, export.body).json?["created"]?.intValue == 4)
        for line in export.text.split(separator: "\n") {
            let exported = try JSONReader.parse(Array(line.utf8))
            let id = try #require(exported["id"]?.stringValue)
            let read = await target.device(id)
            #expect(read.status == 200)
            #expect(read.json == exported)
        }
    }

    @Test("a line whose id, token or installation is not free is rejected and changes nothing; the rest apply")
    func notFreeRejected() async throws {
        let source = try await Self.populated()
        let export = await source.call(.get, "/v1/devices/export")
        // Into the same app: every id was handed out there already.
        let same = await Self.importNDJSON(source, export.body)
        #expect(same.status == 200)
        #expect(same.json?["created"]?.intValue == 0)
        let codes = same.json?["rejected"]?.arrayValue?.compactMap { $0["code"]?.stringValue }
        #expect(codes == Array(repeating: "device_id_taken", count: 4))
        #expect(await source.call(.get, "/v1/devices/export").body == export.body)

        // Into an app whose index already holds a token of the export, and an id beyond it.
        let target = try await DeviceApp.make()
        _ = try await target.registerID(3)  // holds device 3's token, takes sequence 1
        let lines = export.text.split(separator: "\n").map(String.init)
        let answer = await Self.importNDJSON(target, Array(export.body))
        let rejected = answer.json?["rejected"]?.arrayValue?.map {
            ($0["line"]?.intValue ?? 0, $0["code"]?.stringValue ?? "")
        }
        // Line 1 is sequence 1 (taken); line 2 (sequence 3) holds the taken token.
        #expect(rejected?.map(\.0) == [1, 2])
        #expect(rejected?.map(\.1) == ["device_id_taken", "token_taken"])
        #expect(answer.json?["created"]?.intValue == lines.count - 2)

        // Into another app: the ids name the first app.
        let otherApp = try await DeviceApp.make(target.harness)
        let foreign = await Self.importNDJSON(otherApp, export.body)
        #expect(
            foreign.json?["rejected"]?.arrayValue?.compactMap { $0["code"]?.stringValue }
                == Array(repeating: "device_identity_conflict", count: 4))
        #expect(await otherApp.call(.get, "/v1/stats").json?["devices"]?.intValue == 0)
        // A test key's index: the ids are live ones.
        let testMode = await Self.importNDJSON(otherApp, export.body, key: otherApp.testSecret)
        #expect(testMode.json?["created"]?.intValue == 0)
    }

    @Test("per-line errors are reported as the CSV import does: {line, code}, blank lines skipped, the rest applied")
    func perLineErrors() async throws {
        let source = try await Self.populated()
        let lines = await source.call(.get, "/v1/devices/export").text.split(separator: "\n").map(String.init)
        let first = lines[0]
        let body = [
            lines[0],  // 1 created
            "",  // 2 blank
            "{not json",  // 3
            "[1,2]",  // 4
            first.replacing(#""mode":"live""#, with: #""mode":"live","colour":"red""#),  // 5
            first.replacing(#""strikes":0"#, with: #""strikes":-1"#),  // 6
            #"{"id":"dev_nope","platform":"ios","created_at":"2026-09-21T14:13:20.000Z"}"#,  // 7
            first.replacing(#""platform":"ios""#, with: #""platform":"web""#),  // 8
            lines[1] + "\r",  // 9 created (CRLF)
            first.replacing(#""mode":"live""#, with: #""mode":"live","mode":"live""#),  // 10
            lines[2],  // 11 created
        ].joined(separator: "\n")
        let target = try await DeviceApp.make()
        let answer = await Self.importNDJSON(target, Array(body.utf8))
        #expect(answer.status == 200)
        let json = try #require(answer.json)
        #expect(json["created"]?.intValue == 3)
        let rejected = json["rejected"]?.arrayValue?.map { ($0["line"]?.intValue ?? 0, $0["code"]?.stringValue ?? "") }
        let expected: [(Int, String)] = [
            (3, "invalid_ndjson_line"), (4, "invalid_ndjson_line"), (5, "invalid_field"), (6, "invalid_field"),
            (7, "invalid_field"), (8, "invalid_platform"), (10, "malformed_json"),
        ]
        #expect(rejected?.map(\.0) == expected.map(\.0))
        #expect(rejected?.map(\.1) == expected.map(\.1))
        #expect(json["rejected_count"]?.intValue == expected.count)
    }

    @Test("the same route, key and body limit as the CSV import; other content types are 415")
    func sameLimits() async throws {
        let app = try await DeviceApp.make()
        let reader = try await app.key(["devices:read"])
        #expect(await Self.importNDJSON(app, [], key: reader).status == 403)
        #expect(await Self.importNDJSON(app, [], key: app.mobile).status == 403)
        let empty = await Self.importNDJSON(app, [])
        #expect(empty.status == 200)
        #expect(empty.json?["created"]?.intValue == 0)
        var headers = HTTPHeaders()
        headers.append(name: "Content-Type", value: "application/x-ndjson")
        let head = HTTPRequestHead(
            method: .post, target: "/v1/devices/import", version: .http11, headers: headers, keepAlive: true)
        #expect(app.harness.service.bodyLimitBytes(for: head) == DeviceImport.bodyBytesMax)
        let json = await app.importCSV("{}", contentType: "application/json")
        #expect(json.status == 415)
        #expect(json.errorCode == "unsupported_media_type")
        let parameters = await app.importCSV("", contentType: "Application/X-NDJSON; charset=utf-8")
        #expect(parameters.status == 200)
    }

    @Test("more lines than one job holds are imported in batches")
    func manyLines() async throws {
        let source = try await DeviceApp.make()
        let count = DeviceImport.rowsPerJob + 7
        for n in 0..<count { _ = try await source.registerID(n) }
        let export = await source.call(.get, "/v1/devices/export")
        let target = try await DeviceApp.make()
        #expect(await Self.importNDJSON(target, export.body).json?["created"]?.intValue == count)
        #expect(await target.call(.get, "/v1/devices/export").body == export.body)
    }

    @Test("the NDJSON reader: LF lines, a CR before LF dropped, blank lines skipped, physical line numbers")
    func reader() {
        var reader = NDJSONReader(Array("\u{FEFF}a\r\n\n b \n\r\nlast".utf8))
        let lines = [reader.next(), reader.next(), reader.next(), reader.next()]
        #expect(lines[0].map { ($0.number, Array($0.bytes)) }! == (1, Array("a".utf8)))
        #expect(lines[1].map { ($0.number, Array($0.bytes)) }! == (3, Array(" b ".utf8)))
        #expect(lines[2].map { ($0.number, Array($0.bytes)) }! == (5, Array("last".utf8)))
        #expect(lines[3] == nil)
        #expect(reader.isAtEnd)
    }
}
