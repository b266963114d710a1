import RoostHTTP
import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

@Suite("Export and CSV import (spec §4)")
struct DeviceExportImportTests {
    @Test("export streams one device with its token per line, in creation order, across several chunks")
    func export() async throws {
        let app = try await DeviceApp.make()
        let count = 2_017
        var ids: [String] = []
        for n in 0..<count { ids.append(try await app.registerID(n)) }
        _ = try await app.registerID(1, key: app.testSecret)
        let answer = await app.call(.get, "/v1/devices/export")
        #expect(answer.status == 200)
        #expect(answer.header("Content-Type") == "application/x-ndjson")
        let lines = answer.text.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.count == count + 1)
        #expect(lines.last == "")
        let devices = try lines.dropLast().map { try JSONReader.parse(Array($0.utf8)) }
        #expect(devices.compactMap { $0["id"]?.stringValue } == ids)
        #expect(devices.enumerated().allSatisfy { $1["token"]?.stringValue == TestTokens.apns($0) })
        #expect(devices.allSatisfy { $0["mode"]?.stringValue == "live" })
    }

    @Test("export of an empty index is an empty 200 body; it needs devices:read")
    func emptyExport() async throws {
        let app = try await DeviceApp.make()
        let answer = await app.call(.get, "/v1/devices/export")
        #expect(answer.status == 200)
        #expect(answer.body.isEmpty)
        let writer = try await app.key(["devices:write"])
        #expect(await app.call(.get, "/v1/devices/export", key: writer).status == 403)
    }

    @Test("import applies good rows, rejects bad ones with their line and code, and counts created and updated")
    func importMixed() async throws {
        let app = try await DeviceApp.make(settings: #"{"require_known_person":true}"#)
        _ = await app.call(.put, "/v1/people/known")
        _ = try await app.registerID(5)
        let csv = [
            "platform,token,external_id,tags,opted_in,app_version",  // 1
            "ios,\(TestTokens.apns(1)),known,\"{\"\"plan\"\":\"\"pro\"\",\"\"n\"\":2}\",true,1.0",  // 2 created
            "ios,\(TestTokens.apns(5)),,,false,",  // 3 updated
            "web,\(TestTokens.apns(2)),,,,",  // 4 invalid_platform
            "ios,ExponentPushToken[x],,,,",  // 5 unsupported_token_type
            "ios,\(TestTokens.apns(3)),stranger,,,",  // 6 unknown_identity
            "",  // 7 blank: skipped
            "ios,\(TestTokens.apns(4)),,{bad json},,",  // 8 invalid_tags
            "ios,\(TestTokens.apns(6)),,,maybe,",  // 9 invalid_field
            "ios,\(TestTokens.apns(7))",  // 10 invalid_csv_row (too few fields)
            "android,\(TestTokens.fcm(1)),,\"{\"\"multi\"\":",  // 11 (quoted field spans a line break)
            "\"\"line\"\"}\",,",  // 12
            "ios,\(TestTokens.apns(8)),,,,2.0",  // 13 created
            "ios,\(TestTokens.apns(9)),,,\"tr\"ue,",  // 14 invalid_csv_row (text after a closing quote)
        ].joined(separator: "\r\n")
        let answer = await app.importCSV(csv)
        #expect(answer.status == 200)
        let json = try #require(answer.json)
        #expect(json["created"]?.intValue == 3)
        #expect(json["updated"]?.intValue == 1)
        let rejected = json["rejected"]?.arrayValue?.map { ($0["line"]?.intValue ?? 0, $0["code"]?.stringValue ?? "") }
        let expected: [(Int, String)] = [
            (4, "invalid_platform"), (5, "unsupported_token_type"), (6, "unknown_identity"), (8, "invalid_tags"),
            (9, "invalid_field"), (10, "invalid_csv_row"), (14, "invalid_csv_row"),
        ]
        #expect(rejected?.map(\.0) == expected.map(\.0))
        #expect(rejected?.map(\.1) == expected.map(\.1))
        #expect(json["rejected_count"]?.intValue == 7)
        let person = await app.call(.get, "/v1/people/known")
        let device = try #require(person.json?["devices"]?.arrayValue?.first)
        #expect(device["tags"]?["plan"]?.stringValue == "pro")
        #expect(device["app_version"]?.stringValue == "1.0")
        let android = await app.call(.get, "/v1/devices?platform=android")
        #expect(android.json?["devices"]?.arrayValue?.first?["tags"]?["multi"]?.stringValue == "line")
        let updated = await app.call(.get, "/v1/devices?limit=1")
        #expect(updated.json?["devices"]?.arrayValue?.first?["opted_in"]?.boolValue == false)
        // Importing the same file again creates nothing.
        let again = try #require(await app.importCSV(csv).json)
        #expect(again["created"]?.intValue == 0)
        #expect(again["updated"]?.intValue == 4)
    }

    @Test("import applies more rows than one job holds")
    func importManyRows() async throws {
        let app = try await DeviceApp.make()
        let rows = (0..<(DeviceImport.rowsPerJob * 2 + 3)).map { "ios,\(TestTokens.apns($0))" }
        let answer = await app.importCSV("\u{FEFF}platform , token\n" + rows.joined(separator: "\n") + "\n")
        #expect(answer.json?["created"]?.intValue == rows.count)
        #expect(answer.json?["rejected"]?.arrayValue?.isEmpty == true)
        #expect(await app.call(.get, "/v1/stats").json?["devices"]?.intValue == rows.count)
    }

    @Test(
        "import refuses a body that is not text/csv (415) and a bad header (400 invalid_csv)",
        arguments: [
            ("platform,token\n", "application/json", 415, "unsupported_media_type", nil),
            ("platform,token\n", nil, 415, "unsupported_media_type", nil),
            ("", "text/csv", 400, "invalid_csv", nil),
            ("platform,token,colour\n", "text/csv; charset=utf-8", 400, "invalid_csv", "colour"),
            ("platform,platform,token\n", "TEXT/CSV", 400, "invalid_csv", "platform"),
            ("token,external_id\n", "text/csv", 400, "invalid_csv", "platform"),
            ("platform,external_id\n", "text/csv", 400, "invalid_csv", "token"),
            ("\"platform,token\n", "text/csv", 400, "invalid_csv", nil),
        ] as [(String, String?, Int, String, String?)])
    func importRefusals(csv: String, contentType: String?, status: Int, code: String, field: String?) async throws {
        let app = try await DeviceApp.make()
        let answer = await app.importCSV(csv, contentType: contentType)
        #expect(answer.status == status)
        #expect(answer.errorCode == code)
        #expect(answer.errorField == field)
    }

    @Test("import needs a secret key with devices:write, and its route takes a 64 MiB body")
    func importKeysAndLimit() async throws {
        let app = try await DeviceApp.make()
        let reader = try await app.key(["devices:read"])
        #expect(await app.importCSV("platform,token\n", key: reader).status == 403)
        #expect(await app.importCSV("platform,token\n", key: app.mobile).status == 403)
        let head = HTTPRequestHead(
            method: .post, target: "/v1/devices/import", version: .http11, headers: HTTPHeaders(), keepAlive: true)
        #expect(app.harness.service.bodyLimitBytes(for: head) == 64 * 1024 * 1024)
    }

    @Test("the CSV reader follows RFC 4180: quotes, escaped quotes, CRLF and LF, line numbers of record starts")
    func csvReader() {
        var reader = CSVReader(Array("a,\"b,c\",\"d\"\"e\"\r\n\"multi\nline\",x\n\nlast,\n".utf8))
        let first = reader.next()
        #expect(first?.line == 1)
        #expect(first?.fields == ["a", "b,c", "d\"e"])
        let second = reader.next()
        #expect(second?.line == 2)
        #expect(second?.fields == ["multi\nline", "x"])
        let third = reader.next()
        #expect(third?.line == 5)
        #expect(third?.fields == ["last", ""])
        #expect(reader.next() == nil)
        var broken = CSVReader(Array("a\"b,c\nok,1\n\"open".utf8))
        #expect(broken.next()?.fields == nil)
        #expect(broken.next()?.fields == ["ok", "1"])
        let open = broken.next()
        #expect(open?.line == 3)
        #expect(open?.fields == nil)
        var invalidUTF8 = CSVReader([0x61, 0xC3, 0x28, 0x0A, 0x62])
        #expect(invalidUTF8.next()?.fields == nil)
        #expect(invalidUTF8.next()?.fields == ["b"])
    }
}
