import Glibc
import RoostPlatform
import RoostTelemetry
import Testing

@testable import RoostHTTP
@testable import RoostTesting

/// Starts a two-loop server logging to memory; stops it after `body`.
func withObservedServer(
    limits: HTTPServerLimits = HTTPServerLimits(), _ body: (UInt16, HTTPServer, Logger) throws -> Void
) throws {
    var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0, eventLoopCount: 2, limits: limits)
    let logger = Logger(output: .memory)
    configuration.logger = logger
    let server = try HTTPServer(configuration: configuration, responder: TestResponder())
    let port = try server.start()
    defer {
        server.beginShutdown()
        server.waitUntilStopped()
    }
    try body(port, server, logger)
}

extension HTTPServerTests {
    @Suite("HTTP server statistics (refusals by reason)")
    struct StatisticsTests {
        @Test("accepted connections and refused requests are counted by reason, and each refusal is logged")
        func refusedRequestsByReason() throws {
            try withObservedServer { port, server, logger in
                let before = server.statistics
                #expect(before.refusals.count == HTTPRefusalReason.allCases.count)
                #expect(before.refusals.values.allSatisfy { $0 == 0 })
                for request in [
                    "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                    "GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + String(repeating: "x", count: 20_000) + "\r\n\r\n",
                    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\n\r\n",
                    "GET / HTTP/2.0\r\nHost: a\r\n\r\n",
                ] {
                    let client = try LoopbackConnection(port: port)
                    try client.send(request)
                    _ = try client.readResponse()
                }
                let ok = try LoopbackConnection(port: port)
                try ok.send(get("/fine"))
                #expect(try ok.readResponse().status == 200)
                let after = server.statistics
                #expect(after.refusals[.badRequest] == 1)
                #expect(after.refusals[.headersTooLarge] == 1)
                #expect(after.refusals[.bodyTooLarge] == 1)
                #expect(after.refusals[.unsupportedVersion] == 1)
                #expect(after.refusals[.connectionsMax] == 0)
                #expect(after.acceptedConnections == 5)
                let refusals = logger.lines.filter { $0.contains(#""event":"http.refusal""#) }
                #expect(refusals.count == 4)
                #expect(
                    refusals.contains { $0.contains(#""level":"warning""#) && $0.contains(#""reason":"bad_request""#) })
            }
        }

        @Test(
            "an idle connection evicted at connectionsMax, a silent newcomer, stalled heads and bodies are refusals; idle closes are not"
        )
        func timeoutsAndLimitByReason() throws {
            var limits = HTTPServerLimits()
            limits.connectionsMax = 4
            limits.headerReadTimeout = .milliseconds(200)
            limits.bodyReadTimeout = .milliseconds(200)
            limits.keepAliveIdleTimeout = .milliseconds(200)
            try withObservedServer(limits: limits) { port, server, _ in
                let halfHead = try LoopbackConnection(port: port)
                try halfHead.send("GET / HTTP/1.1\r\nHo")
                let halfBody = try LoopbackConnection(port: port)
                try halfBody.send("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc")
                let idle = try LoopbackConnection(port: port)
                try idle.send(get("/once"))
                #expect(try idle.readResponse().status == 200)
                let fourth = try LoopbackConnection(port: port)
                try fourth.send(get("/four"))
                #expect(try fourth.readResponse().status == 200)
                // At the cap: the newcomer takes the place of the connection
                // idle longest, then is closed for sending nothing.
                let extra = try LoopbackConnection(port: port)
                #expect(idle.isClosedByPeer(timeout: .seconds(2)))
                #expect(extra.isClosedByPeer(timeout: .seconds(2)))
                #expect(halfHead.isClosedByPeer(timeout: .seconds(2)))
                #expect(halfBody.isClosedByPeer(timeout: .seconds(2)))
                #expect(fourth.isClosedByPeer(timeout: .seconds(2)))
                #expect(ConditionWait.until { server.statistics.openConnections == 0 })
                let statistics = server.statistics
                #expect(statistics.refusals[.evictedAtCap] == 1)
                #expect(statistics.refusals[.connectionsMax] == 0)
                #expect(statistics.refusals[.firstByteTimeout] == 1)
                #expect(statistics.refusals[.headerTimeout] == 1)
                #expect(statistics.refusals[.bodyTimeout] == 1)
                #expect(statistics.refusals[.writeStall] == 0)
                #expect(statistics.idleClosedConnections == 1)
                #expect(statistics.acceptedConnections == 5)
            }
        }
    }
}
