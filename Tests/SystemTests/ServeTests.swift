import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting
import Testing

/// The built `roost` binary, started on port 0 and driven over loopback.
@Suite("roost serve (system)", .serialized)
struct ServeTests {
    static let adminKey = "system-test-admin-key-0123456789"

    /// Starts roost with a fresh data directory; the caller stops it.
    static func start(
        data: String? = nil, adminKeyFromEnvironment: Bool = true, extra: [String] = []
    ) throws -> (RoostProcess, String) {
        let directory = try data ?? TemporaryDirectory.make(prefix: "roost-system")
        let environment = adminKeyFromEnvironment ? ["ROOST_ADMIN_KEY=\(adminKey)"] : []
        let process = try RoostProcess(
            arguments: ["serve", "--listen", "127.0.0.1:0", "--data", directory + "/data"] + extra,
            environment: environment)
        return (process, directory)
    }

    static func request(_ port: UInt16, _ method: String, _ path: String, key: String? = nil, body: String? = nil)
        throws -> LoopbackResponse
    {
        let connection = try LoopbackConnection(port: port)
        var head = "\(method) \(path) HTTP/1.1\r\nHost: test\r\n"
        if let key { head += "Authorization: Bearer \(key)\r\n" }
        if let body { head += "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n" }
        try connection.send(head + "\r\n" + (body ?? ""))
        return try connection.readResponse(timeout: .seconds(5))
    }

    @Test("prints exactly one line, 'listening on 127.0.0.1:PORT', and answers /healthz")
    func listeningLineAndHealth() throws {
        let (process, directory) = try ServeTests.start()
        defer { TemporaryDirectory.remove(directory) }
        #expect(process.startupOutput == "listening on 127.0.0.1:\(process.port)\n")
        let answer = try ServeTests.request(process.port, "GET", "/healthz")
        #expect(answer.status == 200)
        #expect(answer.bodyText == #"{"status":"ok"}"#)
        #expect(process.stop(signal: SIGTERM) == 0)
    }

    @Test("a second roost serve on a data directory in use refuses: exit 2, one line naming the directory")
    func secondServerOnTheSameDirectoryRefuses() throws {
        let (first, directory) = try ServeTests.start()
        defer { TemporaryDirectory.remove(directory) }
        let data = directory + "/data"
        let created = try ServeTests.request(
            first.port, "POST", "/v1/apps", key: ServeTests.adminKey, body: #"{"name":"kept"}"#)
        #expect(created.status == 201)
        let second = CatalogSystemTests.run(["serve", "--listen", "127.0.0.1:0", "--data", data], in: directory)
        #expect(second.code == 2, "\(second.output)")
        let lines = second.output.split(separator: "\n")
        #expect(lines.count == 1, "\(second.output)")
        #expect(second.output.contains("the data directory \(data) is in use by another roost process"))
        #expect(!second.output.contains("listening on"))
        // The first server is untouched and keeps serving.
        let listed = try ServeTests.request(first.port, "GET", "/v1/apps/1", key: ServeTests.adminKey)
        #expect(listed.status == 200)
        #expect(first.stop(signal: SIGTERM) == 0)
        // Once it is gone the directory is free again, and nothing was lost.
        let (again, _) = try ServeTests.start(data: directory)
        let after = try ServeTests.request(again.port, "GET", "/v1/apps/1", key: ServeTests.adminKey)
        #expect(after.status == 200)
        #expect(again.stop(signal: SIGTERM) == 0)
    }

    @Test("with DIR/lock deleted under a running server, a second roost serve on DIR still refuses: exit 2")
    func secondServerRefusesWithTheLockFileDeleted() throws {
        let (first, directory) = try ServeTests.start()
        defer { TemporaryDirectory.remove(directory) }
        let data = directory + "/data"
        #expect(unlink(data + "/" + DirectoryLock.fileName) == 0)
        let second = CatalogSystemTests.run(["serve", "--listen", "127.0.0.1:0", "--data", data], in: directory)
        #expect(second.code == 2, "\(second.output)")
        #expect(second.output.split(separator: "\n").count == 1, "\(second.output)")
        #expect(second.output.contains("the data directory \(data) is in use by another roost process"))
        #expect(!second.output.contains("listening on"))
        #expect(try ServeTests.request(first.port, "GET", "/healthz").status == 200)
        #expect(first.stop(signal: SIGTERM) == 0)
        // Gone, it frees the directory; the next server makes the lock file again.
        let (again, _) = try ServeTests.start(data: directory)
        #expect(DurableFile.exists(data + "/" + DirectoryLock.fileName))
        #expect(again.stop(signal: SIGTERM) == 0)
    }

    @Test("a second roost serve on an address another process listens on refuses: exit 2, one line naming it")
    func secondServerOnTheSameAddressRefuses() throws {
        let (first, directory) = try ServeTests.start()
        defer { TemporaryDirectory.remove(directory) }
        let address = "127.0.0.1:\(first.port)"
        let second = CatalogSystemTests.run(
            ["serve", "--listen", address, "--data", directory + "/other"], in: directory)
        #expect(second.code == 2, "\(second.output)")
        #expect(second.output.split(separator: "\n").count == 1, "\(second.output)")
        #expect(second.output.contains("\(address) is already in use by another process"))
        // Every connection still reaches the first server (no second process joined it).
        for _ in 0..<20 {
            let health = try ServeTests.request(first.port, "GET", "/healthz")
            #expect(health.status == 200)
        }
        #expect(first.stop(signal: SIGTERM) == 0)
    }

    @Test("without ROOST_ADMIN_KEY the server creates DIR/admin.key (0600) once and reuses it")
    func adminKeyFile() throws {
        let (first, directory) = try ServeTests.start(adminKeyFromEnvironment: false)
        defer { TemporaryDirectory.remove(directory) }
        let path = directory + "/data/admin.key"
        var info = stat()
        #expect(stat(path, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o600)
        var dataInfo = stat()
        #expect(stat(directory + "/data", &dataInfo) == 0)
        #expect(dataInfo.st_mode & 0o777 == 0o700)
        let key = try #require(try DurableFile.readIfExists(path: path, limitBytes: 4096))
        let keyText = String(decoding: key, as: UTF8.self).split(separator: "\n").first.map(String.init) ?? ""
        #expect(first.startupOutput.contains(keyText) == false)
        let created = try ServeTests.request(first.port, "POST", "/v1/apps", key: keyText, body: #"{"name":"A"}"#)
        #expect(created.status == 201)
        #expect(first.stop() == 0)

        let (second, _) = try ServeTests.start(data: directory, adminKeyFromEnvironment: false)
        #expect(try DurableFile.readIfExists(path: path, limitBytes: 4096) == key)
        let listed = try ServeTests.request(second.port, "GET", "/v1/apps", key: keyText)
        #expect(listed.status == 200)
        #expect(try JSONReader.parse(listed.body)["apps"]?.arrayValue?.count == 1)
        #expect(second.stop() == 0)
    }

    @Test("apps and keys made over HTTP survive a restart; a revoked key stays revoked")
    func catalogSurvivesRestart() throws {
        let (first, directory) = try ServeTests.start()
        defer { TemporaryDirectory.remove(directory) }
        _ = try ServeTests.request(first.port, "POST", "/v1/apps", key: ServeTests.adminKey, body: #"{"name":"A"}"#)
        let made = try ServeTests.request(
            first.port, "POST", "/v1/apps/1/keys", key: ServeTests.adminKey,
            body: #"{"kind":"secret","capabilities":["setup:write"]}"#)
        let json = try JSONReader.parse(made.body)
        let key = try #require(json["key"]?.stringValue)
        let keyID = try #require(json["id"]?.stringValue)
        let spare = try JSONReader.parse(
            try ServeTests.request(
                first.port, "POST", "/v1/apps/1/keys", key: ServeTests.adminKey, body: #"{"kind":"mobile"}"#
            ).body)
        let spareID = try #require(spare["id"]?.stringValue)
        #expect(try ServeTests.request(first.port, "DELETE", "/v1/apps/1/keys/\(spareID)", key: key).status == 200)
        #expect(first.stop() == 0)

        let (second, _) = try ServeTests.start(data: directory)
        defer { second.stop() }
        #expect(try ServeTests.request(second.port, "GET", "/v1/apps/1", key: key).status == 200)
        let revoked = try ServeTests.request(second.port, "DELETE", "/v1/apps/1/keys/\(spareID)", key: key)
        #expect(revoked.status == 404)
        #expect(keyID.hasPrefix("key_"))
    }

    @Test(
        "a malformed request gets exactly one error answer and a close; the request pipelined after it never runs",
        arguments: [
            ("POST /v1/apps HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400),
            ("POST /v1/apps HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            ("POST /v1/apps HTTP/1.1\r\nHost: x\r\nContent-Length: -4\r\n\r\n", 400),
            ("POST /v1/apps HTTP/1.1\r\nHost: x\r\nContent-Length: 4, 5\r\n\r\n", 400),
            ("POST /v1/apps HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551616\r\n\r\n", 400),
            ("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n\r\n", 400),
            ("GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n", 400),
            ("GET /healthz HTTP/1.1\r\n\r\n", 400),
            ("GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400),
            ("GET /healthz HTTP/1.1\nHost: x\n\n", 400),
            ("POST /v1/apps HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
            ("POST /v1/apps HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
            ("POST /v1/apps HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 501),
            ("GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505),
            ("GET /healthz\r\n\r\n", 400),
        ])
    func refusals(raw: String, status: Int) throws {
        let (process, directory) = try ServeTests.start()
        defer {
            process.stop()
            TemporaryDirectory.remove(directory)
        }
        let connection = try LoopbackConnection(port: process.port)
        // The pipelined request would create an app if it ran.
        let follower =
            "POST /v1/apps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(ServeTests.adminKey)\r\n"
            + "Content-Length: 12\r\n\r\n{\"name\":\"x\"}"
        try connection.send(raw + follower)
        let answer = try connection.readResponse(timeout: .seconds(5))
        #expect(answer.status == status)
        #expect(answer.header("Connection")?.lowercased() == "close")
        let error = try JSONReader.parse(answer.body)["error"]
        #expect(error?["code"]?.stringValue?.isEmpty == false)
        #expect(connection.isClosedByPeer(timeout: .seconds(5)))
        let apps = try ServeTests.request(process.port, "GET", "/v1/apps", key: ServeTests.adminKey)
        #expect(try JSONReader.parse(apps.body)["apps"]?.arrayValue?.isEmpty == true)
    }

    @Test("431 for a head over 16 KiB and 413 for a JSON body over 64 KiB, each with the envelope")
    func sizeLimits() throws {
        let (process, directory) = try ServeTests.start()
        defer {
            process.stop()
            TemporaryDirectory.remove(directory)
        }
        let big = try LoopbackConnection(port: process.port)
        try big.send("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "a", count: 17_000))\r\n\r\n")
        let headers = try big.readResponse(timeout: .seconds(5))
        #expect(headers.status == 431)
        #expect(try JSONReader.parse(headers.body)["error"]?["code"]?.stringValue == "headers_too_large")

        let body = try LoopbackConnection(port: process.port)
        try body.send(
            "POST /v1/apps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(ServeTests.adminKey)\r\n"
                + "Content-Length: \(64 * 1024 + 1)\r\n\r\n")
        let payload = try body.readResponse(timeout: .seconds(5))
        #expect(payload.status == 413)
        #expect(try JSONReader.parse(payload.body)["error"]?["code"]?.stringValue == "payload_too_large")
    }

    @Test("keep-alive, pipelining in order, HTTP/1.0 with and without keep-alive, Connection: close")
    func connectionHandling() throws {
        let (process, directory) = try ServeTests.start()
        defer {
            process.stop()
            TemporaryDirectory.remove(directory)
        }
        let pipelined = try LoopbackConnection(port: process.port)
        try pipelined.send(
            "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
                + "POST /v1/apps HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nAuthorization: Bearer "
                + "\(ServeTests.adminKey)\r\n\r\n5\r\n{\"nam\r\n7\r\ne\":\"C\"}\r\n0\r\n\r\n")
        #expect(try pipelined.readResponse().status == 200)
        #expect(try pipelined.readResponse().status == 404)
        let created = try pipelined.readResponse()
        #expect(created.status == 201)
        #expect(try JSONReader.parse(created.body)["name"]?.stringValue == "C")

        let old = try LoopbackConnection(port: process.port)
        try old.send("GET /healthz HTTP/1.0\r\n\r\n")
        #expect(try old.readResponse().status == 200)
        #expect(old.isClosedByPeer())

        let oldKeepAlive = try LoopbackConnection(port: process.port)
        try oldKeepAlive.send("GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        #expect(try oldKeepAlive.readResponse().header("Connection")?.lowercased() == "keep-alive")
        try oldKeepAlive.send("GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        #expect(try oldKeepAlive.readResponse().status == 200)

        let closing = try LoopbackConnection(port: process.port)
        try closing.send("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        #expect(try closing.readResponse().header("Connection")?.lowercased() == "close")
        #expect(closing.isClosedByPeer())
    }

    @Test("with 300 idle connections and one client stuck halfway through a body, /healthz answers at once")
    func slowClientsCostOnlyTheirConnection() throws {
        let (process, directory) = try ServeTests.start()
        defer {
            process.stop()
            TemporaryDirectory.remove(directory)
        }
        var idle: [LoopbackConnection] = []
        for _ in 0..<300 { idle.append(try LoopbackConnection(port: process.port)) }
        let stuck = try LoopbackConnection(port: process.port)
        try stuck.send("POST /v1/apps HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"name\":")
        let clock = ContinuousClock()
        var slowest = Duration.zero
        for _ in 0..<20 {
            let started = clock.now
            let answer = try ServeTests.request(process.port, "GET", "/healthz")
            slowest = max(slowest, clock.now - started)
            #expect(answer.status == 200)
        }
        // "At once": the machine is shared and noisy, so the bound is generous;
        // a server blocked on the stuck body would take the whole body timeout (30 s).
        #expect(slowest < .milliseconds(250), "slowest /healthz took \(slowest)")
        #expect(idle.count == 300)
    }

    @Test("SIGHUP is logged as signal.ignored and the server keeps serving; SIGTERM then exits 0")
    func hangUpIsIgnored() throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-system")
        defer { TemporaryDirectory.remove(directory) }
        let log = directory + "/stderr.log"
        let process = try RoostProcess(
            arguments: ["serve", "--listen", "127.0.0.1:0", "--data", directory + "/data"],
            environment: ["ROOST_ADMIN_KEY=\(ServeTests.adminKey)"], standardErrorPath: log)
        // A signal whose action is to end the process ends it as it is sent:
        // an answer after kill() returns proves the server took it and lived.
        #expect(kill(process.pid, SIGHUP) == 0)
        #expect(try ServeTests.request(process.port, "GET", "/healthz").status == 200)
        #expect(kill(process.pid, SIGHUP) == 0)
        #expect(try ServeTests.request(process.port, "GET", "/readyz").status == 200)
        #expect(process.stop(signal: SIGTERM) == 0)
        let text = try #require(try DurableFile.readIfExists(path: log, limitBytes: 1 << 20))
        let lines = String(decoding: text, as: UTF8.self).split(separator: "\n")
        let ignored = lines.filter { $0.contains(#""event":"signal.ignored""#) }
        #expect(!ignored.isEmpty, "\(lines)")
        #expect(ignored.allSatisfy { $0.contains(#""signal":\#(SIGHUP)"#) }, "\(ignored)")
        #expect(lines.contains { $0.contains(#""event":"shutdown.stopped""#) })
    }

    @Test(
        "a long poll with nothing to show answers its empty page once wait_ms passed: a timer of the loop, both loops")
    func longPollTimesOutOnTheLoop() throws {
        let (process, directory) = try ServeTests.start(extra: ["--event-loops", "2"])
        defer { TemporaryDirectory.remove(directory) }
        let key = try CrashRecoveryTests.setUp(port: process.port)
        let feed = try ServeTests.request(process.port, "GET", "/v1/changes", key: key)
        let cursor = try #require(try JSONReader.parse(feed.body)["next_cursor"]?.stringValue)
        // Two connections: whichever loop takes a request, the shard's loop times the wait.
        for _ in 0..<2 {
            let clock = ContinuousClock()
            let started = clock.now
            let answer = try ServeTests.request(
                process.port, "GET", "/v1/changes?after=\(cursor)&wait_ms=150", key: key)
            let elapsed = clock.now - started
            #expect(answer.status == 200)
            #expect(try JSONReader.parse(answer.body)["next_cursor"]?.stringValue == cursor)
            #expect(elapsed >= .milliseconds(150) && elapsed < .seconds(5), "\(elapsed)")
        }
        #expect(process.stop(signal: SIGTERM) == 0)
    }

    @Test(
        "after SIGTERM a kept-alive /readyz poller gets 503 shutting_down while a long poll drains; a write on another idle connection ends it; exit 0"
    )
    func readinessPollerSeesTheDrain() throws {
        // One event loop: every connection sees the drain begin at the same point.
        let (process, directory) = try ServeTests.start(extra: ["--event-loops", "1"])
        defer { TemporaryDirectory.remove(directory) }
        let key = try CrashRecoveryTests.setUp(port: process.port)
        let feed = try ServeTests.request(process.port, "GET", "/v1/changes", key: key)
        #expect(feed.status == 200)
        let cursor = try #require(try JSONReader.parse(feed.body)["next_cursor"]?.stringValue)
        let readyz = "GET /readyz HTTP/1.1\r\nHost: test\r\n\r\n"
        let poller = try LoopbackConnection(port: process.port)
        let writer = try LoopbackConnection(port: process.port)
        let probe = try LoopbackConnection(port: process.port)
        for connection in [poller, writer, probe] {
            try connection.send(readyz)
            #expect(try connection.readResponse().status == 200)
        }
        // One unanswered request per connection: /healthz is answered only
        // once the long poll behind it was dispatched, so the drain owes it.
        let waiting = try LoopbackConnection(port: process.port)
        try waiting.send(
            "GET /healthz HTTP/1.1\r\nHost: test\r\n\r\nGET /v1/changes?after=\(cursor)&wait_ms=30000 HTTP/1.1\r\n"
                + "Host: test\r\nAuthorization: Bearer \(key)\r\n\r\n")
        #expect(try waiting.readResponse().status == 200)
        #expect(kill(process.pid, SIGTERM) == 0)
        // The probe asks until an answer ends its connection (or, before
        // issue 24, the drain closed it): then the loop has begun the drain,
        // and the poller, idle all along, has been through it.
        let deadline = ContinuousClock.now + .seconds(10)
        var drainBegun = false
        while !drainBegun && ContinuousClock.now < deadline {
            do {
                try probe.send(readyz)
                let answer = try probe.readResponse()
                drainBegun = answer.header("Connection") == "close"
            } catch {
                drainBegun = true
            }
        }
        #expect(drainBegun)
        probe.close()
        try poller.send(readyz)
        let polled = try poller.readResponse()
        #expect(polled.status == 503)
        #expect(polled.bodyText == #"{"status":"shutting_down"}"#)
        #expect(polled.header("Connection") == "close")
        // The other idle connection's last request: a write that wakes the long poll, which ends the drain.
        let body = #"{"platform":"ios","token":"\#(String(repeating: "ab", count: 32))"}"#
        try writer.send(
            "POST /v1/devices HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer \(key)\r\n"
                + "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n" + body)
        let registered = try writer.readResponse(timeout: .seconds(10))
        #expect(registered.status == 201)
        #expect(registered.header("Connection") == "close")
        let changes = try waiting.readResponse(timeout: .seconds(10))
        #expect(changes.status == 200)
        #expect(changes.bodyText.contains(String(repeating: "ab", count: 32)))
        #expect(changes.header("Connection") == "close")
        for connection in [poller, writer, waiting] { connection.close() }
        #expect(process.stop(signal: SIGTERM) == 0)
    }

    @Test("SIGTERM and SIGINT stop the server with exit code 0")
    func gracefulSignals() throws {
        for signal in [SIGTERM, SIGINT] {
            let (process, directory) = try ServeTests.start()
            defer { TemporaryDirectory.remove(directory) }
            #expect(try ServeTests.request(process.port, "GET", "/healthz").status == 200)
            #expect(process.stop(signal: signal) == 0)
        }
    }
}
