import Glibc
import RoostJSON
import RoostTesting
import Testing

/// Issue 24 H-1 on the built `roost` binary: connections that ask for the
/// largest answer (a person export) and never read hold a bounded window
/// each, not the answer (decision 0081, docs/limits.md).
@Suite("roost serve: person exports to clients that do not read (system)", .serialized)
struct PersonExportAbuseSystemTests {
    /// The person: devices (one batch each round), and rounds of
    /// registration. The first creates each device; every later one
    /// re-registers it with new tags, two events (`registered`,
    /// `tags_changed`): 99 events a device (of the 100 kept), an answer of ~16 MB,
    /// close to issue 24's 1,000 × 100.
    static let devices = 1_000
    static let rounds = 50
    static let eventsPerDevice = 1 + 2 * (rounds - 1)
    /// Connections that ask for the export and never read.
    static let stalledConnections = 20
    /// The tripwire of issue 24: resident growth per stalled connection on
    /// the largest answer. Streamed, a connection holds the frozen view
    /// (the person's devices and events as values), one window of
    /// `PersonExportStream.windowDevices` devices and the stream's 256 KiB;
    /// rendered whole it held the answer and its copy.
    static let residentGrowthPerConnectionMaxBytes = 8 * 1024 * 1024

    /// `ServeTests.request` with a timeout for large bodies and answers.
    static func request(_ port: UInt16, _ method: String, _ path: String, key: String, body: String? = nil)
        throws -> LoopbackResponse
    {
        let connection = try LoopbackConnection(port: port)
        var head = "\(method) \(path) HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer \(key)\r\n"
        if let body { head += "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n" }
        try connection.send(head + "\r\n" + (body ?? ""))
        return try connection.readResponse(timeout: .seconds(60))
    }

    /// Creates an app that allows 1,000 devices per person, and its secret key.
    static func setUp(_ port: UInt16) throws -> String {
        let app = try ServeTests.request(port, "POST", "/v1/apps", key: ServeTests.adminKey, body: #"{"name":"A"}"#)
        let id = try #require(try JSONReader.parse(app.body)["id"]?.intValue)
        let patched = try ServeTests.request(
            port, "PATCH", "/v1/apps/\(id)", key: ServeTests.adminKey,
            body: #"{"settings":{"max_devices_per_person":1000}}"#)
        try #require(patched.status == 200, "\(patched.bodyText)")
        let secret = try ServeTests.request(
            port, "POST", "/v1/apps/\(id)/keys", key: ServeTests.adminKey,
            body: #"{"kind":"secret","capabilities":["devices:write","devices:read","people:write"]}"#)
        return try #require(try JSONReader.parse(secret.body)["key"]?.stringValue)
    }

    /// Builds person `big` through `POST /v1/devices/batch`: every round
    /// re-registers all devices with new tags (one `tags_changed` each).
    static func buildPerson(_ port: UInt16, key: String) throws {
        for round in 0..<Self.rounds {
            var body = #"{"devices":["#
            for n in 0..<Self.devices {
                if n > 0 { body += "," }
                body +=
                    #"{"platform":"ios","token":"\#(DeviceSystemTests.token(n))","external_id":"big","tags":{"round":"r\#(round)"}}"#
            }
            body += "]}"
            let answer = try Self.request(port, "POST", "/v1/devices/batch", key: key, body: body)
            try #require(answer.status == 200, "\(answer.bodyText.prefix(300))")
        }
    }

    @Test(
        "20 connections asking for a 1,000-device × 99-event person export and reading nothing grow the server's resident set by at most 8 MB each"
    )
    func stalledExportsHoldAWindow() throws {
        let (process, directory) = try ServeTests.start()
        defer {
            process.stop()
            TemporaryDirectory.remove(directory)
        }
        let key = try Self.setUp(process.port)
        try Self.buildPerson(process.port, key: key)
        let path = "/v1/people/big/export"
        let sample = try Self.request(process.port, "GET", path, key: key)
        try #require(sample.status == 200)
        let json = try JSONReader.parse(sample.body)
        let listed = try #require(json["devices"]?.arrayValue)
        try #require(listed.count == Self.devices)
        try #require(listed[0]["history"]?.arrayValue?.count == Self.eventsPerDevice)
        let answerBytes = sample.body.count
        let baseline = try HTTPAbuseSystemTests.residentBytes(process.pid)

        let request = "GET \(path) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(key)\r\n\r\n"
        var stalled: [HTTPAbuseSystemTests.SilentSocket] = []
        defer { stalled.removeAll() }
        for _ in 0..<Self.stalledConnections {
            let client = try HTTPAbuseSystemTests.SilentSocket(port: process.port)
            try client.send(request)
            stalled.append(client)
        }
        // The server renders until every stream waits for its socket; then
        // its CPU time stops growing.
        let (peak, quiet) = try HTTPAbuseSystemTests.peakResidentUntilBlocked(
            process, connections: Self.stalledConnections, from: baseline)
        #expect(quiet, "the server was still busy after 20 s")
        let perConnection = (peak - baseline) / Self.stalledConnections
        print(
            "person export of \(answerBytes) bytes: resident \(baseline / 1_048_576) MB → \(peak / 1_048_576) MB with "
                + "\(Self.stalledConnections) stalled connections, \(perConnection / 1024) KiB each")
        #expect(
            perConnection <= Self.residentGrowthPerConnectionMaxBytes,
            "\(perConnection / 1024) KiB per stalled connection > \(Self.residentGrowthPerConnectionMaxBytes / 1024) KiB"
        )
        // The server still answers the export in full to a client that reads.
        #expect(try Self.request(process.port, "GET", path, key: key).body == sample.body)
    }
}
