import Glibc
import RoostPlatform
import Synchronization
import Testing

@testable import RoostHTTP
@testable import RoostTesting

/// Counts the requests dispatched between two engine rounds of a loop.
final class RoundProbe: HTTPResponder, LoopRoundHandler {
    private let counts = Mutex((sinceRound: 0, most: 0, answered: 0))
    /// Opened by `/block` once it holds the loop.
    let blocking = Latch()
    /// Opened by the test once the other requests are sent: `/block` lets the loop go.
    let unblock = Latch()

    /// The most requests one round dispatched.
    var mostPerRound: Int { counts.withLock { $0.most } }
    var answered: Int { counts.withLock { $0.answered } }

    func bodyLimitBytes(for head: HTTPRequestHead) -> Int { 1024 }

    func respond(to request: HTTPRequest, sink: any HTTPReplySink) -> HTTPResponderResult {
        if request.head.target == "/block" {
            // Holds the loop while the other requests arrive: they are all
            // ready together at its next epoll_wait.
            blocking.open()
            unblock.wait()
        }
        counts.withLock { counts in
            counts.sinceRound += 1
            counts.most = max(counts.most, counts.sinceRound)
            counts.answered += 1
        }
        return .respond(HTTPResponse(status: 200, body: Array("ok".utf8)))
    }

    func response(for failure: HTTPRequestFailure) -> HTTPResponse {
        HTTPResponse(status: failure.status, body: Array("refused".utf8))
    }

    func endOfRound() {
        counts.withLock { $0.sinceRound = 0 }
    }
}

@Suite("Event-loop rounds")
struct HTTPRoundTests {
    @Test("64 requests ready at once are handed to the engine in rounds of at most requestsPerRoundMax")
    func boundedRounds() throws {
        let probe = RoundProbe()
        let executor = try LoopExecutor(index: 0)
        executor.setRoundHandler(probe)
        let server = try HTTPServer(
            configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, eventLoopCount: 1), responder: probe,
            executors: [executor])
        let port = try server.start()
        defer {
            server.beginShutdown()
            server.waitUntilStopped()
        }
        defer { probe.unblock.open() }  // a test that failed early lets the loop go too
        let blocker = try LoopbackConnection(port: port)
        try blocker.send("GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(probe.blocking.wait(), "the loop took /block")
        let clients = try (0..<64).map { _ in try LoopbackConnection(port: port) }
        for client in clients { try client.send("GET /next HTTP/1.1\r\nHost: x\r\n\r\n") }
        // On loopback a send is in the server's socket when it returns.
        probe.unblock.open()
        #expect(try blocker.readResponse(timeout: .seconds(5)).status == 200)
        for client in clients { #expect(try client.readResponse(timeout: .seconds(5)).status == 200) }
        #expect(probe.answered == 65)
        #expect(probe.mostPerRound <= EventLoop.requestsPerRoundMax, "\(probe.mostPerRound) requests in one round")
    }
}
