import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting
import Testing

/// The Python that parses `/metrics` with the reference parser,
/// prometheus_client (docs/metrics-and-logs.md, "Testing the exposition").
///
/// `make test` creates `.venv-test` (pinned prometheus_client) and exports
/// `ROOST_TEST_PYTHON`; with it set, or with `CI` set, a missing or broken
/// interpreter fails the test. A plain `swift test` uses `.venv-test` when
/// it exists and otherwise skips the parse test (run `make test-venv`).
enum MetricsParser {
    /// The package root, three levels above this file.
    static let packageRoot: String = {
        var path = #filePath
        for _ in 0..<3 { path = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)]) }
        return path
    }()

    static let script = packageRoot + "/Tests/SystemTests/Fixtures/parse_metrics.py"

    static func environment(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 }
    }

    /// The interpreter to use; nil only when the test may be skipped.
    static var python: String? {
        if let configured = environment("ROOST_TEST_PYTHON") { return configured }
        let local = packageRoot + "/.venv-test/bin/python"
        if access(local, X_OK) == 0 { return local }
        // Under CI a missing environment is a failure, never a skip.
        return environment("CI") != nil ? local : nil
    }

    /// One sample as the reference parser read it.
    struct Sample {
        var family: String
        var type: String
        var name: String
        var labels: [String: String]
        var value: Double
    }

    /// Parses `exposition` with prometheus_client; throws with the parser's
    /// complaint when it does not parse or a histogram is inconsistent.
    static func parse(_ exposition: [UInt8], in directory: String) throws -> [Sample] {
        let python = try #require(python, "no Python for the metrics parser: run `make test-venv`")
        guard access(python, X_OK) == 0 else {
            throw MetricsParseError("no Python at \(python): run `make test-venv` (or `make test`)")
        }
        let input = directory + "/metrics.txt"
        let output = directory + "/metrics.jsonl"
        let errors = directory + "/metrics.err"
        try DurableFile.replace(path: input, with: exposition)
        let status = system("'\(python)' '\(script)' < '\(input)' > '\(output)' 2> '\(errors)'")
        let complaint = (try? DurableFile.readIfExists(path: errors, limitBytes: 1 << 20)).flatMap { $0 } ?? []
        guard status == 0 else {
            throw MetricsParseError(
                "prometheus_client refused the exposition (status \(status)): "
                    + String(decoding: complaint, as: UTF8.self))
        }
        let lines = try #require(try DurableFile.readIfExists(path: output, limitBytes: 64 << 20))
        return try lines.split(separator: UInt8(ascii: "\n")).map { line in
            let json = try JSONReader.parse(Array(line))
            var labels: [String: String] = [:]
            for (key, value) in json["labels"]?.objectMembers ?? [] { labels[key] = value.stringValue }
            return Sample(
                family: json["family"]?.stringValue ?? "", type: json["type"]?.stringValue ?? "",
                name: json["name"]?.stringValue ?? "", labels: labels, value: json["value"]?.doubleValue ?? .nan)
        }
    }
}

struct MetricsParseError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

extension [MetricsParser.Sample] {
    /// The value of the sample named `name` with exactly `labels`, or 0 when absent.
    func value(_ name: String, _ labels: [String: String] = [:]) -> Double {
        first { $0.name == name && $0.labels == labels }?.value ?? 0
    }
}

/// `GET /metrics` and the structured logs of the real binary.
@Suite("metrics and logs (system)", .serialized)
struct MetricsSystemTests {
    static let admin = ServeTests.adminKey

    /// Starts roost with stderr captured in `DIR/stderr.log`.
    static func start(_ extra: [String] = []) throws -> (RoostProcess, String) {
        let directory = try TemporaryDirectory.make(prefix: "roost-metrics")
        let process = try RoostProcess(
            arguments: ["serve", "--listen", "127.0.0.1:0", "--data", directory + "/data"] + extra,
            environment: ["ROOST_ADMIN_KEY=\(admin)"], standardErrorPath: directory + "/stderr.log")
        return (process, directory)
    }

    /// One request on a fresh connection with any headers.
    static func send(
        _ port: UInt16, _ method: String, _ target: String, key: String? = nil, body: String? = nil,
        contentType: String = "application/json"
    ) throws -> LoopbackResponse {
        let connection = try LoopbackConnection(port: port)
        var head = "\(method) \(target) HTTP/1.1\r\nHost: test\r\n"
        if let key { head += "Authorization: Bearer \(key)\r\n" }
        if let body { head += "Content-Type: \(contentType)\r\nContent-Length: \(body.utf8.count)\r\n" }
        try connection.send(head + "\r\n" + (body ?? ""))
        return try connection.readResponse(timeout: .seconds(10))
    }

    static func scrape(_ port: UInt16) throws -> LoopbackResponse {
        let answer = try send(port, "GET", "/metrics", key: admin)
        #expect(answer.status == 200)
        #expect(answer.header("Content-Type") == "text/plain; version=0.0.4; charset=utf-8")
        return answer
    }

    @Test(
        "GET /metrics parses with prometheus_client, and a request moves its route's counter",
        .enabled(if: MetricsParser.python != nil, "no .venv-test: run `make test-venv` (make test always runs this)"))
    func exposition() throws {
        let (process, directory) = try Self.start()
        defer { TemporaryDirectory.remove(directory) }
        #expect(process.startupOutput == "listening on 127.0.0.1:\(process.port)\n")
        let before = try MetricsParser.parse(Self.scrape(process.port).body, in: directory)
        let created = try Self.send(process.port, "POST", "/v1/apps", key: Self.admin, body: #"{"name":"Metrics"}"#)
        #expect(created.status == 201)
        let after = try MetricsParser.parse(Self.scrape(process.port).body, in: directory)

        let route = ["method": "POST", "route": "/v1/apps"]
        let createdLabels = route.merging(["code": "201"]) { $1 }
        #expect(before.value("roost_http_requests_total", createdLabels) == 0)
        #expect(after.value("roost_http_requests_total", createdLabels) == 1)
        #expect(after.value("roost_http_request_duration_seconds_count", route) == 1)
        #expect(after.value("roost_http_request_duration_seconds_bucket", route.merging(["le": "+Inf"]) { $1 }) == 1)
        #expect(after.value("roost_wal_records_total") > before.value("roost_wal_records_total"))
        #expect(after.value("roost_wal_bytes_written_total") > before.value("roost_wal_bytes_written_total"))
        #expect(
            after.value("roost_wal_fsync_duration_seconds_count")
                > before.value("roost_wal_fsync_duration_seconds_count"))
        // Under --fsync always only the log's I/O thread writes (decision 0095).
        #expect(
            after.value("roost_wal_plans_total", ["thread": "log"])
                > before.value("roost_wal_plans_total", ["thread": "log"]))
        #expect(after.value("roost_wal_plans_total", ["thread": "loop"]) == 0)
        #expect(after.value("roost_http_connections_accepted_total") >= 3)
        #expect(after.value("roost_apps") == 1)
        #expect(after.value("roost_recovery_duration_seconds", ["phase": "total"]) > 0)
        // The first scrape is counted by the second.
        #expect(after.value("roost_http_requests_total", ["method": "GET", "route": "/metrics", "code": "200"]) == 1)
        let families = Dictionary(after.map { ($0.family, $0.type) }) { first, _ in first }
        for (family, type) in [
            ("roost_http_requests", "counter"), ("roost_http_request_duration_seconds", "histogram"),
            ("roost_http_connections_open", "gauge"), ("roost_http_refusals", "counter"),
            ("roost_http_connections_write_blocked", "gauge"),
            ("roost_wal_appends", "counter"), ("roost_wal_records", "counter"), ("roost_wal_bytes_written", "counter"),
            ("roost_wal_fsync_duration_seconds", "histogram"), ("roost_wal_records_per_fsync", "histogram"),
            ("roost_wal_plans", "counter"),
            ("roost_snapshots", "counter"), ("roost_recovery_duration_seconds", "gauge"),
            ("roost_rate_limited_requests", "counter"), ("roost_apps", "gauge"),
            ("process_start_time_seconds", "gauge"),
        ] {
            #expect(families[family] == type, "family \(family)")
        }
        #expect(process.stop(signal: SIGTERM) == 0)
    }

    @Test(
        "--fsync never: registrations' groups are written by their event loop (roost_wal_plans_total{thread=loop})",
        .enabled(if: MetricsParser.python != nil, "no .venv-test: run `make test-venv` (make test always runs this)"))
    func loopsWriteUnderNever() throws {
        let (process, directory) = try Self.start(["--fsync", "never"])
        defer { TemporaryDirectory.remove(directory) }
        #expect(
            try Self.send(process.port, "POST", "/v1/apps", key: Self.admin, body: #"{"name":"Loops"}"#).status == 201)
        let created = try Self.send(
            process.port, "POST", "/v1/apps/1/keys", key: Self.admin,
            body: #"{"kind":"secret","capabilities":["devices:write"]}"#)
        let key = try #require(try JSONReader.parse(created.body)["key"]?.stringValue)
        let before = try MetricsParser.parse(Self.scrape(process.port).body, in: directory)
        // Several, one after another: a loop that finds the I/O thread busy
        // (a log-end mark, say) hands its group over instead.
        for index in 0..<5 {
            let token = String(repeating: "0", count: 63) + String(index)
            let answer = try Self.send(
                process.port, "POST", "/v1/devices", key: key, body: #"{"platform":"ios","token":"\#(token)"}"#)
            #expect(answer.status == 201)
        }
        let after = try MetricsParser.parse(Self.scrape(process.port).body, in: directory)
        #expect(
            after.value("roost_wal_plans_total", ["thread": "loop"])
                > before.value("roost_wal_plans_total", ["thread": "loop"]))
        #expect(after.value("roost_wal_records_total") >= before.value("roost_wal_records_total") + 5)
        #expect(process.stop(signal: SIGTERM) == 0)
    }

    @Test("every route with --access-log: one JSON line each, and no key, token, identity token or secret on stderr")
    func accessLogCarriesNoSecrets() throws {
        let (process, directory) = try Self.start(["--access-log"])
        defer { TemporaryDirectory.remove(directory) }
        let port = process.port
        var secrets: [String] = [Self.admin]
        var answers: [(String, Int)] = []
        func call(
            _ method: String, _ target: String, key: String? = nil, body: String? = nil,
            contentType: String = "application/json"
        ) throws -> LoopbackResponse {
            let answer = try Self.send(port, method, target, key: key, body: body, contentType: contentType)
            answers.append(("\(method) \(target)", answer.status))
            #expect(answer.header("X-Request-Id")?.utf8.count == 15, "\(method) \(target)")
            return answer
        }
        func json(_ answer: LoopbackResponse) throws -> JSONValue { try JSONReader.parse(answer.body) }
        let capabilities = #"["devices:write","devices:read","devices:delete","people:write","setup:write"]"#

        #expect(try call("GET", "/healthz").status == 200)
        #expect(try call("GET", "/readyz").status == 200)
        #expect(try call("GET", "/console").status == 200)
        #expect(try call("GET", "/console/app.js").status == 200)
        // A scrape counts in the next one only: one now, one at the end.
        #expect(try call("GET", "/metrics", key: Self.admin).status == 200)
        #expect(try call("POST", "/v1/apps", key: Self.admin, body: #"{"name":"Routes"}"#).status == 201)
        #expect(try call("POST", "/v1/apps", key: Self.admin, body: #"{"name":"Doomed"}"#).status == 201)
        let secretKey = try #require(
            try json(
                call(
                    "POST", "/v1/apps/1/keys", key: Self.admin,
                    body: #"{"kind":"secret","capabilities":\#(capabilities)}"#)
            )["key"]?.stringValue)
        let mobileKey = try #require(
            try json(call("POST", "/v1/apps/1/keys", key: Self.admin, body: #"{"kind":"mobile"}"#))["key"]?.stringValue)
        let spare = try json(call("POST", "/v1/apps/1/keys", key: Self.admin, body: #"{"kind":"mobile"}"#))
        let spareKey = try #require(spare["key"]?.stringValue)
        let spareID = try #require(spare["id"]?.stringValue)
        secrets += [secretKey, mobileKey, spareKey]
        #expect(try call("DELETE", "/v1/apps/1/keys/\(spareID)", key: Self.admin).status == 200)
        #expect(try call("GET", "/v1/apps", key: Self.admin).status == 200)
        #expect(try call("GET", "/v1/apps/1", key: secretKey).status == 200)
        #expect(
            try call("PATCH", "/v1/apps/1", key: secretKey, body: #"{"settings":{"max_devices_per_person":5}}"#)
                .status == 200)
        #expect(
            try call(
                "PUT", "/v1/credentials/apns/com.example.app/production", key: secretKey,
                body: #"{"team_id":"TEAM1","key_id":"KEY1"}"#
            ).status == 200)
        #expect(try call("PUT", "/v1/people/user_42", key: secretKey).status == 201)
        #expect(try call("GET", "/v1/apps/1/keys", key: secretKey).status == 200)
        #expect(try call("GET", "/v1/people?limit=10", key: secretKey).status == 200)

        let tokens = (1...5).map { index in String(repeating: String(format2(index)), count: 32) }
        let fcmToken = "fcm-token_" + String(repeating: "Q7x", count: 12)
        let installationSecret = "installation-secret-" + String(repeating: "s9", count: 16)
        let importSecret = "import-installation-secret-" + String(repeating: "k4", count: 16)
        secrets += tokens + [fcmToken, installationSecret, importSecret]
        let registered = try call(
            "POST", "/v1/devices", key: mobileKey,
            body: #"{"platform":"ios","token":"\#(tokens[0])","bundle_id":"com.example.app","external_id":"user_42","#
                + #""installation_id":"inst-1","installation_secret":"\#(installationSecret)"}"#)
        #expect(registered.status == 201)
        let deviceID = try #require(try json(registered)["id"]?.stringValue)
        let batch = try call(
            "POST", "/v1/devices/batch", key: secretKey,
            body: #"{"devices":[{"platform":"ios","token":"\#(tokens[0])"}]}"#)
        #expect(try json(batch)["results"]?.arrayValue?.first?["status"]?.intValue == 200)
        #expect(try call("GET", "/v1/devices/\(deviceID)", key: secretKey).status == 200)
        #expect(
            try call("PATCH", "/v1/devices/\(deviceID)", key: secretKey, body: #"{"tags":{"plan":"pro"}}"#).status
                == 200)
        #expect(try call("GET", "/v1/devices?external_id=user_42", key: secretKey).status == 200)
        #expect(try call("GET", "/v1/devices/export", key: secretKey).status == 200)
        #expect(try call("GET", "/v1/changes?limit=10", key: secretKey).status == 200)
        #expect(
            try call(
                "POST", "/v1/devices/import", key: secretKey,
                body: "platform,token,installation_secret\nandroid,\(fcmToken),\(importSecret)\n",
                contentType: "text/csv"
            ).status == 200)
        #expect(
            try call(
                "POST", "/v1/feedback", key: secretKey,
                body:
                    #"{"provider":"fcm","token":"\#(fcmToken)","reason":"Unregistered","timestamp":"2026-01-01T00:00:00.000Z"}"#
            ).status == 200)
        #expect(try call("GET", "/v1/stats", key: secretKey).status == 200)
        #expect(try call("GET", "/v1/devices/inactive?older_than_days=30", key: secretKey).status == 200)
        #expect(
            try call("POST", "/v1/devices/inactive/invalidate", key: secretKey, body: #"{"older_than_days":30}"#)
                .status == 200)
        #expect(try call("GET", "/v1/people/user_42", key: secretKey).status == 200)
        #expect(try call("GET", "/v1/people/user_42/export", key: secretKey).status == 200)
        #expect(try call("GET", "/v1/devices/\(deviceID)/history", key: secretKey).status == 200)

        let guest = try #require(
            try json(call("POST", "/v1/identities/guest", key: mobileKey))["identity_token"]?.stringValue)
        let user = try #require(
            try json(call("POST", "/v1/identities/authenticated", key: secretKey, body: #"{"external_id":"user_7"}"#))[
                "identity_token"]?.stringValue)
        secrets += [guest, user]
        #expect(
            try call(
                "PUT", "/v1/me/devices", key: guest,
                body: #"{"installation_id":"inst-me","platform":"ios","token":"\#(tokens[2])"}"#
            ).status == 201)
        #expect(try call("DELETE", "/v1/me/devices/inst-me", key: guest).status == 200)
        let keyList = try json(call("GET", "/v1/identity-keys", key: Self.admin))
        let firstSigningKey = try #require(keyList["current"]?.stringValue)
        #expect(try call("POST", "/v1/identity-keys", key: Self.admin).status == 201)

        let barua =
            #"{"provider":"apns","app":"com.example.app","environment":"production","token":"\#(tokens[3])","external_id":"user_42"}"#
        #expect(try call("PUT", "/api/integrations/v1/devices", key: secretKey, body: barua).status == 200)
        #expect(try call("DELETE", "/api/integrations/v1/devices", key: secretKey, body: barua).status == 200)
        let nativeNotify =
            #"{"appId":1,"appToken":"\#(mobileKey)","deviceId":"nn-install","platform":"ios","subscriberId":8,"#
            + #""tokens":{"apns_token":"\#(tokens[4])"}}"#
        #expect(try call("POST", "/api/universal/device/register", body: nativeNotify).status == 201)
        #expect(try call("GET", "/api/universal/health?appId=1&appToken=\(mobileKey)").status == 200)
        #expect(
            try call(
                "POST", "/api/universal/device/deregister",
                body: #"{"appId":1,"appToken":"\#(mobileKey)","deviceId":"nn-install"}"#
            ).status == 200)

        // Secrets in paths and headers of requests that fail: never echoed to the log.
        #expect(try call("GET", "/v1/devices/\(installationSecret)", key: secretKey).status == 404)
        #expect(try call("GET", "/no/such/\(secretKey)").status == 404)
        let malformed = try LoopbackConnection(port: port)
        try malformed.send(
            "GET / HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer \(secretKey)\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"
        )
        #expect(try malformed.readResponse().status == 400)

        #expect(try call("DELETE", "/v1/devices/\(deviceID)", key: secretKey).status == 200)
        #expect(try call("DELETE", "/v1/people/user_42", key: secretKey).status == 200)
        #expect(try call("DELETE", "/v1/credentials/apns/com.example.app/production", key: secretKey).status == 200)
        #expect(try call("DELETE", "/v1/identity-keys/\(firstSigningKey)", key: Self.admin).status == 200)
        #expect(try call("DELETE", "/v1/apps/2", key: Self.admin).status == 200)
        let exposition = String(decoding: try call("GET", "/metrics", key: Self.admin).body, as: UTF8.self)

        // The server's inactivity sweeper is exported from the start (spec §8).
        #expect(exposition.contains(#"roost_inactivity_sweeps_total{result="complete"} 0"#))
        #expect(exposition.contains("roost_inactivity_invalidated_total 0"))
        // Every route of the table (the histogram lists them all) was driven.
        var routes: [String: Double] = [:]
        let prefix = "roost_http_request_duration_seconds_count{"
        for line in exposition.split(separator: "\n") where line.hasPrefix(prefix) {
            let labels = line.dropFirst(prefix.utf8.count).prefix { $0 != "}" }
            routes[String(labels)] = Double(line.split(separator: " ").last ?? "")
        }
        #expect(routes.count >= 30, "only \(routes.count) routes in the exposition")
        for (labels, count) in routes where !labels.contains(#"method="any""#) {
            #expect((count) >= 1, "route \(labels) was never driven by this test")
        }
        #expect(process.stop(signal: SIGTERM) == 0)

        let stderr = String(
            decoding: try #require(try DurableFile.readIfExists(path: directory + "/stderr.log", limitBytes: 16 << 20)),
            as: UTF8.self)
        let folded = stderr.lowercased()
        for (index, secret) in secrets.enumerated() {
            let leaked = folded.contains(secret.lowercased())
            #expect(!leaked, "secret \(index) of \(secrets.count) (\(secret.prefix(6))…) reached stderr")
        }
        let lines = stderr.split(separator: "\n")
        for line in lines {
            let object = try JSONReader.parse(Array(line.utf8))
            #expect(object["ts"]?.stringValue != nil && object["event"]?.stringValue != nil, "\(line)")
        }
        let requestLines = lines.filter { $0.contains(#""event":"http.request""#) }
        // Every answered request has its line (the malformed one too: route "refused").
        #expect(requestLines.count == answers.count + 1, "\(requestLines.count) lines for \(answers.count + 1) answers")
        #expect(requestLines.contains { $0.contains(#""http.route":"/v1/devices/{id}""#) })
        #expect(requestLines.contains { $0.contains(#""http.route":"refused""#) })
        #expect(lines.contains { $0.contains(#""event":"http.refusal""#) && $0.contains("bad_request") })
        #expect(lines.contains { $0.contains(#""event":"recovery.done""#) })
        #expect(lines.contains { $0.contains(#""event":"shutdown.stopped""#) })
        // roost serve runs the inactivity sweep (spec §8) every 5 minutes.
        #expect(
            lines.contains {
                $0.contains(#""event":"inactivity.started""#) && $0.contains(#""inactivity.interval_s":300"#)
            })
    }
}

/// Two hex digits for token number `index` (`a1`, `a2`, …).
private func format2(_ index: Int) -> String {
    "a" + String(index, radix: 16)
}
