import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting
import Testing

/// The native device API on the built `roost` binary, over loopback.
@Suite("roost serve: devices (system)", .serialized)
struct DeviceSystemTests {
    /// Creates an app and returns (secret key with every capability, mobile key).
    static func setUp(_ port: UInt16) throws -> (secret: String, mobile: String) {
        let app = try ServeTests.request(port, "POST", "/v1/apps", key: ServeTests.adminKey, body: #"{"name":"A"}"#)
        let id = try #require(try JSONReader.parse(app.body)["id"]?.intValue)
        let capabilities = #"["devices:write","devices:read","devices:delete","people:write","setup:write"]"#
        let secret = try ServeTests.request(
            port, "POST", "/v1/apps/\(id)/keys", key: ServeTests.adminKey,
            body: #"{"kind":"secret","capabilities":\#(capabilities)}"#)
        let mobile = try ServeTests.request(
            port, "POST", "/v1/apps/\(id)/keys", key: ServeTests.adminKey, body: #"{"kind":"mobile"}"#)
        return (
            try #require(try JSONReader.parse(secret.body)["key"]?.stringValue),
            try #require(try JSONReader.parse(mobile.body)["key"]?.stringValue)
        )
    }

    static func token(_ n: Int) -> String {
        let hex = String(n, radix: 16)
        return String(repeating: "0", count: 64 - hex.count) + hex
    }

    @Test("a mobile key registers (201, no token), again (200, same id); a secret key reads it with its token")
    func registerAndGet() throws {
        let (process, directory) = try ServeTests.start()
        defer {
            process.stop()
            TemporaryDirectory.remove(directory)
        }
        let keys = try DeviceSystemTests.setUp(process.port)
        let body = #"{"platform":"ios","token":"\#(DeviceSystemTests.token(1))","external_id":"user_42"}"#
        let created = try ServeTests.request(process.port, "POST", "/v1/devices", key: keys.mobile, body: body)
        #expect(created.status == 201)
        #expect(!created.bodyText.contains(DeviceSystemTests.token(1)))
        let id = try #require(try JSONReader.parse(created.body)["id"]?.stringValue)
        let again = try ServeTests.request(process.port, "POST", "/v1/devices", key: keys.mobile, body: body)
        #expect(again.status == 200)
        #expect(try JSONReader.parse(again.body)["id"]?.stringValue == id)
        let read = try ServeTests.request(process.port, "GET", "/v1/devices/\(id)", key: keys.secret)
        #expect(read.status == 200)
        #expect(try JSONReader.parse(read.body)["token"]?.stringValue == DeviceSystemTests.token(1))
        #expect(try ServeTests.request(process.port, "GET", "/v1/devices/\(id)", key: keys.mobile).status == 403)
        let person = try ServeTests.request(process.port, "GET", "/v1/people/user_42", key: keys.secret)
        #expect(try JSONReader.parse(person.body)["devices"]?.arrayValue?.count == 1)
    }

    @Test("a CSV import over the socket, then an export streamed in chunks: every device once, in order")
    func importThenStreamedExport() throws {
        let (process, directory) = try ServeTests.start()
        defer {
            process.stop()
            TemporaryDirectory.remove(directory)
        }
        let keys = try DeviceSystemTests.setUp(process.port)
        let count = 2_500
        var csv = "platform,token,tags\r\n"
        for n in 0..<count { csv += "ios,\(DeviceSystemTests.token(n)),\"{\"\"n\"\":\(n)}\"\r\n" }
        csv += "web,\(DeviceSystemTests.token(9_999)),\r\n"
        let upload = try LoopbackConnection(port: process.port)
        try upload.send(
            "POST /v1/devices/import HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(keys.secret)\r\n"
                + "Content-Type: text/csv\r\nContent-Length: \(csv.utf8.count)\r\n\r\n" + csv)
        let imported = try upload.readResponse(timeout: .seconds(30))
        #expect(imported.status == 200)
        let summary = try JSONReader.parse(imported.body)
        #expect(summary["created"]?.intValue == count)
        #expect(summary["rejected"]?.arrayValue?.first?["line"]?.intValue == count + 2)
        #expect(summary["rejected"]?.arrayValue?.first?["code"]?.stringValue == "invalid_platform")

        let connection = try LoopbackConnection(port: process.port)
        try connection.send(
            "GET /v1/devices/export HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(keys.secret)\r\n\r\n")
        let export = try connection.readResponse(timeout: .seconds(30))
        #expect(export.status == 200)
        #expect(export.header("Content-Type") == "application/x-ndjson")
        #expect(export.header("Transfer-Encoding")?.lowercased() == "chunked")
        #expect(export.header("Content-Length") == nil)
        let lines = export.bodyText.split(separator: "\n")
        #expect(lines.count == count)
        var inOrder = true
        for (n, line) in lines.enumerated() {
            let device = try JSONReader.parse(Array(line.utf8))
            if device["token"]?.stringValue != DeviceSystemTests.token(n) || device["tags"]?["n"]?.intValue != n {
                inOrder = false
            }
        }
        #expect(inOrder)
        // The connection stays usable after the streamed answer.
        try connection.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(try connection.readResponse().status == 200)
    }

    @Test("a client that hangs up in the middle of an export costs only its connection; the shard keeps serving")
    func exportAbandoned() throws {
        let (process, directory) = try ServeTests.start()
        defer {
            process.stop()
            TemporaryDirectory.remove(directory)
        }
        let keys = try DeviceSystemTests.setUp(process.port)
        var csv = "platform,token,app_version\n"
        let version = String(repeating: "9", count: 64)
        for n in 0..<20_000 { csv += "ios,\(DeviceSystemTests.token(n)),\(version)\n" }
        let upload = try LoopbackConnection(port: process.port)
        try upload.send(
            "POST /v1/devices/import HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(keys.secret)\r\n"
                + "Content-Type: text/csv\r\nContent-Length: \(csv.utf8.count)\r\n\r\n" + csv)
        #expect(try upload.readResponse(timeout: .seconds(60)).status == 200)
        for _ in 0..<3 {
            let reader = try LoopbackConnection(port: process.port)
            try reader.send(
                "GET /v1/devices/export HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(keys.secret)\r\n\r\n")
            _ = try reader.readResponse(timeout: .seconds(10), forHead: true)
            reader.close()
        }
        let body = #"{"platform":"ios","token":"\#(DeviceSystemTests.token(99_999))"}"#
        #expect(try ServeTests.request(process.port, "POST", "/v1/devices", key: keys.mobile, body: body).status == 201)
        let stats = try ServeTests.request(process.port, "GET", "/v1/stats", key: keys.secret)
        #expect(try JSONReader.parse(stats.body)["devices"]?.intValue == 20_001)
    }
}
