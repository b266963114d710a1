import Glibc
import Synchronization
import Testing

@testable import RoostHTTP
@testable import RoostPlatform
@testable import RoostTesting

extension HTTPServerTests {
    @Suite("HTTP reliability: 100-continue, header injection, slow clients")
    struct HTTPReliabilityTests {
        @Test("Expect: 100-continue within the limit gets 100 Continue before the body is sent")
        func continueWithinLimit() throws {
            try withServer { port, _, _ in
                let client = try LoopbackConnection(port: port)
                try client.send("POST /p HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
                let interim = try client.readResponse()
                #expect(interim.status == 100)
                try client.send("hello")
                let final = try client.readResponse()
                #expect(final.status == 200)
                #expect(final.bodyText == "POST /p 5")
            }
        }

        @Test("Expect: 100-continue with a declared length over the limit gets 413 at once, without a 100")
        func continueOverLimit() throws {
            try withServer { port, _, _ in
                let client = try LoopbackConnection(port: port)
                try client.send("POST /p HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n")
                let response = try client.readResponse()
                #expect(response.status == 413)
                #expect(response.header("Connection") == "close")
                #expect(client.isClosedByPeer())
            }
        }

        @Test("an Expect other than 100-continue gets 417 and nothing after it runs")
        func unknownExpectation() throws {
            try withServer { port, responder, _ in
                let client = try LoopbackConnection(port: port)
                try client.send(
                    "POST /p HTTP/1.1\r\nHost: t\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\nhi" + get("/after"))
                let response = try client.readResponse()
                #expect(response.status == 417)
                #expect(response.bodyText == "refused")
                #expect(try client.readUntilClosed().isEmpty)
                #expect(!responder.seenTargets.contains("/after"))
            }
        }

        @Test("a 100 Continue owed behind an unanswered request goes out after that answer")
        func continueWaitsForEarlierAnswers() throws {
            let start = ManualClock().now
            var machine = HTTPConnectionMachine(limits: HTTPServerLimits(), now: start)
            let requests =
                get("/slow") + "POST /p HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
            Array(requests.utf8).withUnsafeBytes { machine.received($0, now: start) }
            var written: [UInt8] = []
            let held = drive(&machine, now: start, hold: ["/slow"], written: &written)
            #expect(written.isEmpty, "100 Continue went out before the answer to /slow")
            machine.answer(
                HTTPResponse(status: 200, body: Array("slow".utf8)), to: try #require(held["/slow"]), now: start)
            _ = drive(&machine, now: start, written: &written)
            let text = String(decoding: written, as: UTF8.self)
            #expect(text.hasSuffix("slow" + "HTTP/1.1 100 Continue\r\n\r\n"), "\(text.debugDescription)")
            Array("ok".utf8).withUnsafeBytes { machine.received($0, now: start) }
            written = []
            _ = drive(&machine, now: start, written: &written)
            #expect(String(decoding: written, as: UTF8.self).hasSuffix("/p"))
        }

        @Test("a response header value holding CR stops the process instead of splitting the response")
        func headerValueWithCRIsRefused() async {
            await #expect(processExitsWith: .failure) {
                var out: [UInt8] = []
                let response = HTTPResponse(status: 200, headers: [("Location", "/a\rSet-Cookie: x=1")])
                HTTPResponseWriter.append(response, keepAlive: true, isHead: false, to: &out)
            }
        }

        @Test("a response header value holding LF stops the process instead of splitting the response")
        func headerValueWithLFIsRefused() async {
            await #expect(processExitsWith: .failure) {
                var out: [UInt8] = []
                HTTPResponseWriter.appendStreamHead(
                    status: 200, headers: [("X-Name", "a\nSet-Cookie: x=1")], keepAlive: true, chunked: true, to: &out)
            }
        }

        @Test("a client that pipelines large answers and reads none is counted write-blocked until it reads or goes")
        func writeBlockedConnectionsAreCounted() throws {
            try withServer { port, _, server in
                let pipeline = String(repeating: get("/large"), count: 64)  // 16 MiB of answers
                let reader = try LoopbackConnection(port: port)
                try reader.send(pipeline)
                #expect(ConditionWait.until { server.statistics.writeBlockedConnections == 1 })
                for _ in 0..<64 { #expect(try reader.readResponse().body.count == 256 << 10) }
                #expect(ConditionWait.until { server.statistics.writeBlockedConnections == 0 })
                let leaver = try LoopbackConnection(port: port)
                try leaver.send(pipeline)
                #expect(ConditionWait.until { server.statistics.writeBlockedConnections == 1 })
                leaver.reset()
                #expect(ConditionWait.until { server.statistics.writeBlockedConnections == 0 })
                #expect(ConditionWait.until { server.openConnections == 1 })
            }
        }

        @Test(
            "1,000 connections trickling headers are closed past the header timeout of the server's clock; a normal client is answered throughout"
        )
        func tricklingClientsAreClosed() throws {
            let connectionCount = 1000
            var limits = HTTPServerLimits()
            limits.headerReadTimeout = .milliseconds(300)
            let clock = ManualMonotonicClock()
            try withResponderServer(TestResponder(), limits: limits, clock: clock) { port, server in
                try Self.runTrickling(connectionCount, port: port, time: ServerTime(server: server, clock: clock))
            }
        }

        /// The trickling test's body, on a server on a manual clock.
        static func runTrickling(_ connectionCount: Int, port: UInt16, time: ServerTime) throws {
            let server = time.server
            let client = try LoopbackConnection(port: port)
            var latencies: [Duration] = []
            func askFast() throws {
                for _ in 0..<10 {
                    let sent = ContinuousClock.now
                    try client.send(get("/fast"))
                    #expect(try client.readResponse().status == 200)
                    latencies.append(ContinuousClock.now - sent)
                }
            }
            try askFast()
            let tricklers = try (0..<connectionCount).map { _ in try LoopbackConnection(port: port) }
            let head = Array("GET /slow HTTP/1.1\r\nHost: t\r\nX-Slow: ".utf8)
            func trickle(_ offset: Int) throws {
                let byte = offset < head.count ? head[offset] : UInt8(ascii: "a")
                for trickler in tricklers { try trickler.send([byte]) }
            }
            // Every head starts at the clock's origin: each loop has read a byte of each.
            try trickle(0)
            #expect(
                ConditionWait.until {
                    server.openConnections == connectionCount + 1 && server.silentConnections == 0
                }, "\(server.openConnections) open, \(server.silentConnections) silent")
            // 50 ms of the server's time per step, a byte from every trickler
            // and ten requests of the normal client each: through 300 ms (the
            // timeout is "more than"), every connection stays open.
            for step in 1...6 {
                time.advance(by: .milliseconds(50))
                try trickle(step)
                try askFast()
            }
            #expect(server.openConnections == connectionCount + 1, "closed before the header timeout")
            // The loops look for timed-out connections every quarter of the
            // shortest timeout (75 ms here): by 400 ms, each has looked.
            for _ in 1...2 {
                time.advance(by: .milliseconds(50))
                try askFast()
            }
            #expect(
                ConditionWait.until { server.openConnections == 1 }, "\(server.openConnections) open past the timeout")
            #expect(server.statistics.refusals[.headerTimeout] == UInt64(connectionCount))
            for trickler in tricklers { #expect(trickler.isClosedByPeer()) }
            try askFast()
            latencies.sort()
            let p99 = latencies[latencies.count * 99 / 100]
            #expect(p99 < .milliseconds(100), "p99 \(p99) over \(latencies.count) requests")
        }
    }
}
