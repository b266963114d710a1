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

        @Test(
            "1,000 connections trickling headers are closed at the header timeout; a normal client keeps p99 < 100 ms")
        func tricklingClientsAreClosed() throws {
            let connectionCount = 1000
            var limits = HTTPServerLimits()
            limits.headerReadTimeout = .milliseconds(300)
            try withServer(limits: limits) { port, _, server in
                let connected = Atomic<Int>(0)
                let closedSeen = Atomic<Int>(0)
                let trickler = try PlatformThread.spawn {
                    var clients: [LoopbackConnection] = []
                    for _ in 0..<connectionCount {
                        if let client = try? LoopbackConnection(port: port) { clients.append(client) }
                    }
                    connected.store(clients.count, ordering: .releasing)
                    let head = Array("GET /slow HTTP/1.1\r\nHost: t\r\nX-Slow: ".utf8)
                    var open = Array(repeating: true, count: clients.count)
                    let stop = ContinuousClock.now + .seconds(3)
                    var offset = 0
                    while ContinuousClock.now < stop && open.contains(true) {
                        let byte = offset < head.count ? head[offset] : UInt8(ascii: "a")
                        for index in clients.indices where open[index] {
                            do {
                                try clients[index].send([byte])
                            } catch {
                                open[index] = false
                                closedSeen.add(1, ordering: .relaxed)
                            }
                        }
                        offset += 1
                        var pause = timespec(tv_sec: 0, tv_nsec: 50_000_000)
                        _ = nanosleep(&pause, nil)
                    }
                }
                #expect(ConditionWait.until { connected.load(ordering: .acquiring) > 0 })
                #expect(connected.load(ordering: .acquiring) == connectionCount)
                let start = ContinuousClock.now
                let client = try LoopbackConnection(port: port)
                var latencies: [Duration] = []
                var allClosedAfter: Duration?
                while ContinuousClock.now - start < .milliseconds(1200) {
                    if allClosedAfter == nil && server.openConnections <= 1 {
                        allClosedAfter = ContinuousClock.now - start
                    }
                    let sent = ContinuousClock.now
                    try client.send(get("/fast"))
                    #expect(try client.readResponse().status == 200)
                    latencies.append(ContinuousClock.now - sent)
                    var pause = timespec(tv_sec: 0, tv_nsec: 5_000_000)
                    _ = nanosleep(&pause, nil)
                }
                #expect(
                    ConditionWait.until(within: .seconds(1)) { server.openConnections <= 1 },
                    "\(server.openConnections) open")
                if let allClosedAfter {
                    #expect(allClosedAfter >= .milliseconds(250), "closed before the header timeout: \(allClosedAfter)")
                }
                latencies.sort()
                let p99 = latencies[min(latencies.count - 1, latencies.count * 99 / 100)]
                #expect(latencies.count > 50)
                #expect(p99 < .milliseconds(100), "p99 \(p99) over \(latencies.count) requests")
                trickler.join()
                #expect(closedSeen.load(ordering: .relaxed) > connectionCount / 2, "trickling clients were not closed")
            }
        }
    }
}
