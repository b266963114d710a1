import Glibc
import RoostPlatform
import Synchronization
import Testing

@testable import RoostHTTP
@testable import RoostTesting

/// A responder for tests. Targets:
/// `/hold` keeps the sink until `releaseHeld` is called; `/defer/<name>`
/// keeps it until `answerDeferred("/defer/<name>")` answers it from the
/// test's thread, in the order the test chooses; anything else answers at
/// once with `<method> <target> <body bytes>`, except `/large`: 256 KiB of "a".
final class TestResponder: HTTPResponder {
    private let seen = Mutex<[String]>([])
    private let held = Mutex<[any HTTPReplySink]>([])
    private let deferred = Mutex<[String: any HTTPReplySink]>([:])

    /// Targets that reached `respond`, in order.
    var seenTargets: [String] { seen.withLock { $0 } }

    var heldCount: Int { held.withLock { $0.count } }

    func releaseHeld() {
        let sinks = held.withLock { sinks in
            let taken = sinks
            sinks = []
            return taken
        }
        for sink in sinks { sink.send(HTTPResponse(status: 200, body: Array("held".utf8))) }
    }

    /// Answers the deferred request for `target` (`deferred <target>`);
    /// returns whether it had arrived.
    @discardableResult
    func answerDeferred(_ target: String) -> Bool {
        guard let sink = deferred.withLock({ $0.removeValue(forKey: target) }) else { return false }
        sink.send(HTTPResponse(status: 200, body: Array("deferred \(target)".utf8)))
        return true
    }

    func bodyLimitBytes(for head: HTTPRequestHead) -> Int {
        head.path == "/big" ? 1_000_000 : 1024
    }

    func respond(to request: HTTPRequest, sink: any HTTPReplySink) -> HTTPResponderResult {
        let target = request.head.target
        seen.withLock { $0.append(target) }
        if target == "/hold" {
            held.withLock { $0.append(sink) }
            return .deferred(nil)
        }
        if target == "/large" {
            return .respond(HTTPResponse(status: 200, body: [UInt8](repeating: UInt8(ascii: "a"), count: 256 << 10)))
        }
        if target.hasPrefix("/defer/") {
            deferred.withLock { $0[target] = sink }
            return .deferred(nil)
        }
        let text = "\(request.head.method.name) \(target) \(request.body.count)"
        return .respond(HTTPResponse(status: 200, headers: [("Content-Type", "text/plain")], body: Array(text.utf8)))
    }

    func response(for failure: HTTPRequestFailure) -> HTTPResponse {
        HTTPResponse(status: failure.status, body: Array("refused".utf8))
    }
}

/// Starts a two-loop server on a free port and stops it after `body`.
func withServer(
    limits: HTTPServerLimits = HTTPServerLimits(), responder: TestResponder = TestResponder(),
    _ body: (UInt16, TestResponder, HTTPServer) throws -> Void
) throws {
    try withResponderServer(responder, limits: limits) { port, server in try body(port, responder, server) }
}

func get(_ target: String, _ extra: String = "") -> String {
    "GET \(target) HTTP/1.1\r\nHost: test\r\n\(extra)\r\n"
}

/// Serialized, with the streaming and reliability suites nested in it: their
/// clients block threads, and deferred answers need the task pool's threads.
@Suite("HTTP server over loopback", .serialized)
struct HTTPServerTests {
    @Test("keep-alive serves several requests on one connection, HEAD has no body")
    func keepAlive() throws {
        try withServer { port, _, _ in
            let client = try LoopbackConnection(port: port)
            for index in 0..<3 {
                try client.send(get("/k\(index)"))
                let response = try client.readResponse()
                #expect(response.status == 200)
                #expect(response.bodyText == "GET /k\(index) 0")
                #expect(response.header("Connection") == "keep-alive")
            }
            try client.send("HEAD /h HTTP/1.1\r\nHost: t\r\n\r\n")
            let head = try client.readResponse(forHead: true)
            #expect(head.header("Content-Length") == "9")  // the length of "HEAD /h 0"
            try client.send(
                "POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n")
            #expect(try client.readResponse().bodyText == "POST /p 3")
        }
    }

    @Test("Connection: close and plain HTTP/1.0 get Connection: close, then the server closes")
    func connectionClose() throws {
        try withServer { port, _, _ in
            for request in [get("/c", "Connection: close\r\n"), "GET /old HTTP/1.0\r\n\r\n"] {
                let client = try LoopbackConnection(port: port)
                try client.send(request)
                let response = try client.readResponse()
                #expect(response.status == 200)
                #expect(response.header("Connection") == "close")
                #expect(client.isClosedByPeer())
            }
            let client = try LoopbackConnection(port: port)
            try client.send("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            #expect(try client.readResponse().header("Connection") == "keep-alive")
            try client.send("GET /b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            #expect(try client.readResponse().bodyText == "GET /b 0")
        }
    }

    static let wireRefusals: [(String, Int)] = [
        (
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n",
            400
        ),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4, 5\r\n\r\nabcd", 400),
        ("GET / HTTP/1.1\r\nHost: a\r\nX: one\r\n two\r\n\r\n", 400),
        ("GET / HTTP/1.1\nHost: a\n\n", 400),
        ("GET / HTTP/1.1\r\nHost: a\r\nX: a\u{0}b\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\n\r\n", 400),
        ("GET /\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 501),
        ("GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2000\r\n\r\n", 413),
        ("GET / HTTP/1.1\r\nHost: a\r\nX: " + String(repeating: "x", count: 17 * 1024) + "\r\n\r\n", 431),
    ]

    @Test("a refused request gets exactly one error response with Connection: close, and nothing pipelined runs")
    func refusalsOverTheWire() throws {
        try withServer { port, responder, _ in
            for (text, status) in Self.wireRefusals {
                let client = try LoopbackConnection(port: port)
                try client.send(get("/before") + text + get("/after"))
                let first = try client.readResponse()
                #expect(first.bodyText == "GET /before 0")
                let refusal = try client.readResponse()
                #expect(refusal.status == status, "\(text.prefix(60).debugDescription)")
                #expect(refusal.header("Connection") == "close")
                #expect(refusal.bodyText == "refused")
                let rest = try client.readUntilClosed()
                #expect(rest.isEmpty, "bytes after the refusal: \(rest.count)")
            }
            #expect(!responder.seenTargets.contains("/after"))
        }
    }

    @Test("pipelined answers go out in request order even when a later one is ready first")
    func pipelineOrder() throws {
        // Every request dispatched at once, so that a later answer can be ready first.
        try withServer(limits: HTTPConnectionMachineTests.dispatchingAhead()) { port, responder, _ in
            let client = try LoopbackConnection(port: port)
            try client.send(get("/defer/slow") + get("/now") + get("/defer/quick") + get("/last"))
            #expect(ConditionWait.until { responder.seenTargets.count == 4 }, "all four dispatched")
            // /now and /last are answered; the later deferred answer is ready before the first.
            #expect(responder.answerDeferred("/defer/quick"))
            #expect(responder.answerDeferred("/defer/slow"))
            #expect(try client.readResponse().bodyText == "deferred /defer/slow")
            #expect(try client.readResponse().bodyText == "GET /now 0")
            #expect(try client.readResponse().bodyText == "deferred /defer/quick")
            #expect(try client.readResponse().bodyText == "GET /last 0")
        }
    }

    /// That nothing past the cap is dispatched is asserted step by step in
    /// `HTTPConnectionMachineTests.pipelineCap`; here the loop must resume reading.
    @Test("at the pipelining cap the connection resumes once answers drain")
    func pipelineCap() throws {
        var limits = HTTPServerLimits()
        limits.pipelinedRequestsMax = 2
        limits.unansweredRequestsMax = 2
        try withServer(limits: limits) { port, responder, _ in
            let client = try LoopbackConnection(port: port)
            try client.send(get("/hold") + get("/hold") + get("/third"))
            #expect(ConditionWait.until { responder.heldCount == 2 })
            #expect(!responder.seenTargets.contains("/third"))
            responder.releaseHeld()
            #expect(try client.readResponse().bodyText == "held")
            #expect(try client.readResponse().bodyText == "held")
            #expect(try client.readResponse().bodyText == "GET /third 0")
        }
    }

    @Test("a client sending half a head, half a body, or nothing on keep-alive is closed at its timeout")
    func timeouts() throws {
        var limits = HTTPServerLimits()
        limits.headerReadTimeout = .milliseconds(200)
        limits.bodyReadTimeout = .milliseconds(200)
        limits.keepAliveIdleTimeout = .milliseconds(200)
        try withServer(limits: limits) { port, _, _ in
            let halfHead = try LoopbackConnection(port: port)
            try halfHead.send("GET / HTTP/1.1\r\nHo")
            let halfBody = try LoopbackConnection(port: port)
            try halfBody.send("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc")
            let idle = try LoopbackConnection(port: port)
            try idle.send(get("/once"))
            #expect(try idle.readResponse().status == 200)
            let start = ContinuousClock.now
            #expect(halfHead.isClosedByPeer(timeout: .seconds(2)))
            #expect(halfBody.isClosedByPeer(timeout: .seconds(2)))
            #expect(idle.isClosedByPeer(timeout: .seconds(2)))
            let elapsed = ContinuousClock.now - start
            #expect(elapsed >= .milliseconds(100) && elapsed < .seconds(1), "closed after \(elapsed)")
        }
    }

    @Test("with 300 idle connections and one stalled body, a GET elsewhere answers well under 100 ms")
    func slowClientsCostOnlyTheirConnection() throws {
        try withServer { port, _, _ in
            var idle: [LoopbackConnection] = []
            for _ in 0..<300 { idle.append(try LoopbackConnection(port: port)) }
            let stalled = try LoopbackConnection(port: port)
            try stalled.send(
                "POST /import HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n" + String(repeating: "x", count: 500))
            let client = try LoopbackConnection(port: port)
            try client.send(get("/warm"))
            _ = try client.readResponse()
            let start = ContinuousClock.now
            try client.send(get("/healthz"))
            let response = try client.readResponse()
            let elapsed = ContinuousClock.now - start
            #expect(response.status == 200)
            #expect(elapsed < .milliseconds(100), "GET took \(elapsed)")
            #expect(idle.count == 300)
        }
    }

    @Test("at connectionsMax a newcomer takes the place of the idlest connection, silent ones first")
    func connectionLimitEvictsIdlest() throws {
        var limits = HTTPServerLimits()
        limits.connectionsMax = 4
        try withServer(limits: limits) { port, _, server in
            // Two keep-alive clients, idle between requests (the older first)...
            var served: [LoopbackConnection] = []
            for index in 0..<2 {
                let client = try LoopbackConnection(port: port)
                try client.send(get("/open\(index)"))
                #expect(try client.readResponse().status == 200)
                served.append(client)
            }
            // ...then two that never send a byte: they go first although younger.
            var silent: [LoopbackConnection] = []
            for _ in 0..<2 { silent.append(try LoopbackConnection(port: port)) }
            #expect(ConditionWait.until { server.openConnections == 4 })
            // Counted at the accept, but silent for eviction only once the loop
            // it was handed to has taken it (until then a newcomer evicts the
            // idlest connection that spoke: docs/http.md, "Abusive clients").
            #expect(ConditionWait.until { server.silentConnections == 2 })
            var newcomers: [LoopbackConnection] = []
            for index in 0..<2 {
                let newcomer = try LoopbackConnection(port: port)
                try newcomer.send(get("/new\(index)"))
                #expect(try newcomer.readResponse().bodyText == "GET /new\(index) 0")
                newcomers.append(newcomer)
            }
            // Each took the place of a silent connection; the clients that spoke stay.
            #expect(silent[0].isClosedByPeer(timeout: .seconds(2)))
            #expect(silent[1].isClosedByPeer(timeout: .seconds(2)))
            #expect(server.openConnections == 4)
            for client in served + newcomers {
                try client.send(get("/still"))
                #expect(try client.readResponse().bodyText == "GET /still 0")
            }
            // With only clients that spoke left, one of them (idle longest on
            // the accepting loop) makes room.
            let last = try LoopbackConnection(port: port)
            try last.send(get("/last"))
            #expect(try last.readResponse().bodyText == "GET /last 0")
            #expect(ConditionWait.until { server.openConnections == 4 })
        }
    }

    @Test("at connectionsMax with nothing idle, a probe is served from the reserve, anything else is closed")
    func connectionLimitReserve() throws {
        var limits = HTTPServerLimits()
        limits.connectionsMax = 2
        limits.reservedConnections = 1
        try withServer(limits: limits) { port, responder, server in
            // Both places busy: each waits for a held answer.
            var busy: [LoopbackConnection] = []
            for _ in 0..<2 {
                let client = try LoopbackConnection(port: port)
                try client.send(get("/hold"))
                busy.append(client)
            }
            #expect(ConditionWait.until { responder.heldCount == 2 })
            let other = try LoopbackConnection(port: port)
            try other.send(get("/work"))
            #expect(other.isClosedByPeer(timeout: .seconds(2)), "a non-probe was served beyond the cap")
            #expect(!responder.seenTargets.contains("/work"))
            for _ in 0..<3 {
                let probe = try LoopbackConnection(port: port)
                try probe.send(get("/healthz"))
                let answer = try probe.readResponse()
                #expect(answer.bodyText == "GET /healthz 0")
                #expect(answer.header("Connection") == "close")
                #expect(probe.isClosedByPeer())
                // The client may see the close before the loop gives the
                // reserved place back: wait for it before the next probe.
                #expect(ConditionWait.until { server.openConnections == 2 })
            }
            // The reserve holds one: while a reserved connection waits, another probe is refused.
            let waiting = try LoopbackConnection(port: port)
            #expect(ConditionWait.until { server.openConnections == 3 })
            let refused = try LoopbackConnection(port: port)
            try refused.send(get("/healthz"))
            #expect(refused.isClosedByPeer(timeout: .seconds(2)))
            try waiting.send(get("/readyz"))
            #expect(try waiting.readResponse().bodyText == "GET /readyz 0")
            responder.releaseHeld()
            for client in busy { #expect(try client.readResponse().bodyText == "held") }
            #expect(ConditionWait.until { server.openConnections == 2 })
        }
    }

    @Test(
        "graceful shutdown answers an in-flight request; idle connections stay open while it runs, each for one last request; then it stops"
    )
    func gracefulShutdown() throws {
        let responder = TestResponder()
        let configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0, eventLoopCount: 2)
        let server = try HTTPServer(configuration: configuration, responder: responder)
        let port = try server.start()
        // Connections go to the two loops in turn: idle and busy to one, poller to the other.
        let idle = try LoopbackConnection(port: port)
        try idle.send(get("/first"))
        _ = try idle.readResponse()
        let poller = try LoopbackConnection(port: port)
        try poller.send(get("/first"))
        _ = try poller.readResponse()
        let busy = try LoopbackConnection(port: port)
        // Answered after /hold was dispatched (one unanswered request per connection).
        try busy.send(get("/now") + get("/hold"))
        #expect(try busy.readResponse().bodyText == "GET /now 0")
        server.beginShutdown()
        // The poller's loop owes nothing, the other loop drains /hold: the
        // poller is still served. Until its loop has begun the drain an
        // answer keeps the connection alive: ask again.
        var last = LoopbackResponse(status: 0, headers: [], body: [])
        for _ in 0..<1000 where last.header("Connection") != "close" {
            try poller.send(get("/poll"))
            last = try poller.readResponse()
        }
        #expect(last.header("Connection") == "close")
        #expect(last.bodyText == "GET /poll 0")
        #expect(poller.isClosedByPeer(timeout: .seconds(2)))
        responder.releaseHeld()
        let answer = try busy.readResponse()
        #expect(answer.bodyText == "held")
        #expect(answer.header("Connection") == "close")
        busy.close()  // as a client does on Connection: close; the server stops lingering
        // Drained: the connection that sent nothing more is closed.
        #expect(idle.isClosedByPeer(timeout: .seconds(5)))
        server.waitUntilStopped()
        #expect(server.openConnections == 0)
        #expect(throws: LoopbackError.self) { _ = try LoopbackConnection(port: port) }
    }

    @Test(
        "an answer that reaches a loop in the round it learns of the shutdown already says Connection: close"
    )
    func answerInTheRoundTheDrainBegins() throws {
        // One loop: `/block` holds its thread inside `respond` while the test
        // begins the shutdown and answers `/hold`, so the loop's next look at
        // its mailbox finds the answer and the shutdown together.
        let responder = BlockingResponder()
        try withResponderServer(responder, loops: 1) { port, server in
            let busy = try LoopbackConnection(port: port)
            try busy.send(get("/hold"))
            #expect(ConditionWait.until { responder.inner.heldCount == 1 })
            let blocker = try LoopbackConnection(port: port)
            try blocker.send(get("/block"))
            #expect(ConditionWait.until { responder.isBlocking })
            server.beginShutdown()
            responder.inner.releaseHeld()
            responder.unblock()
            #expect(try blocker.readResponse().bodyText == "GET /block 0")
            let answer = try busy.readResponse()
            #expect(answer.bodyText == "held")
            #expect(answer.header("Connection") == "close")
        }
    }

    @Test("an invalid configuration is refused before anything binds")
    func invalidConfiguration() {
        var limits = HTTPServerLimits()
        limits.connectionsMax = 0
        let configuration = HTTPServerConfiguration(port: 0, eventLoopCount: 1, limits: limits)
        #expect(throws: HTTPServerConfigurationError.self) {
            _ = try HTTPServer(configuration: configuration, responder: TestResponder())
        }
    }
}

/// `TestResponder`, with `/block`: `respond` does not return (the loop's
/// thread waits in it) until `unblock` is called.
final class BlockingResponder: HTTPResponder {
    let inner = TestResponder()
    private let blocking = Atomic<Bool>(false)
    private let released = Atomic<Bool>(false)

    var isBlocking: Bool { blocking.load(ordering: .acquiring) }

    func unblock() { released.store(true, ordering: .releasing) }

    func bodyLimitBytes(for head: HTTPRequestHead) -> Int { inner.bodyLimitBytes(for: head) }

    func respond(to request: HTTPRequest, sink: any HTTPReplySink) -> HTTPResponderResult {
        if request.head.target == "/block" {
            blocking.store(true, ordering: .releasing)
            #expect(ConditionWait.until { self.released.load(ordering: .acquiring) })
        }
        return inner.respond(to: request, sink: sink)
    }

    func response(for failure: HTTPRequestFailure) -> HTTPResponse { inner.response(for: failure) }
}
