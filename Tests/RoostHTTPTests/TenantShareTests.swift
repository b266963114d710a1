import Glibc
import RoostPlatform
import Synchronization
import Testing

@testable import RoostHTTP
@testable import RoostTesting

@Suite("Tenant share state machine")
struct TenantShareTests {
    static var limits: HTTPServerLimits {
        var limits = HTTPServerLimits()
        limits.tenantRequestsInProgressMax = 2
        limits.tenantShareBusyBelowIdleFraction = 0.1
        limits.tenantShareIdleAboveIdleFraction = 0.5
        return limits
    }
    let start = LoopInstant(nanoseconds: 1_000_000_000)
    let flood = HTTPTenant(1)
    let quiet = HTTPTenant(2)

    @Test("a tenant at its share may not start while the loops hold back; another tenant may")
    func shareBound() {
        var share = TenantShare(limits: Self.limits, now: start)
        let switched1 = share.started(flood)
        #expect(!switched1)
        let switched2 = share.started(flood)
        #expect(!switched2)
        #expect(share.requestsInProgress(of: flood) == 2)
        #expect(!share.mayStart(flood))
        #expect(share.mayStart(quiet))
        let waiting = share.finished(flood)
        #expect(!waiting, "no connection waits")
        #expect(share.mayStart(flood))
    }

    @Test("counts per tenant agree with a dictionary over 20,000 random changes, the last tenant's kept outside it")
    func tenantCountsMatchADictionary() {
        var generator = SeededRandom(seed: 20_261_207)
        var counts = TenantCounts()
        var model: [HTTPTenant: Int] = [:]
        for step in 0..<20_000 {
            // Mostly one tenant (an app busy alone), sometimes one of five.
            let tenant = HTTPTenant(Bool.random(using: &generator) ? 1 : UInt64.random(in: 1...5, using: &generator))
            let held = model[tenant, default: 0]
            let delta = held > 0 && Bool.random(using: &generator) ? -1 : 1
            counts.add(delta, to: tenant)
            model[tenant] = held + delta == 0 ? nil : held + delta
            for known in 1...6 {
                let id = HTTPTenant(UInt64(known))
                #expect(counts[id] == model[id, default: 0], "step \(step), \(id)")
            }
            #expect(counts.tenantCount == model.count, "step \(step)")
        }
    }

    @Test("a start after another tenant's is a switch; the same tenant's again is not")
    func switches() {
        var share = TenantShare(limits: Self.limits, now: start)
        let switched3 = share.started(flood)
        #expect(!switched3)
        let switched4 = share.started(flood)
        #expect(!switched4)
        let switched5 = share.started(quiet)
        #expect(switched5)
        let switched6 = share.started(flood)
        #expect(switched6)
        let switched7 = share.started(flood)
        #expect(!switched7)
    }

    @Test("waiting connections are woken oldest first, only while their tenant may start")
    func queueOrder() {
        var share = TenantShare(limits: Self.limits, now: start)
        _ = share.started(flood)
        _ = share.started(flood)
        for key in [UInt64(10), 11, 12, 13] { share.wait(key, for: flood) }
        share.wait(20, for: quiet)
        #expect(share.waitingCount(of: flood) == 4)
        let woken1 = share.nextToWake(for: flood)
        #expect(woken1 == nil)
        share.finished(flood)
        let woken2 = share.nextToWake(for: flood)
        #expect(woken2 == 10)
        // Woken and not started yet, it counts toward the share.
        #expect(!share.mayStart(flood))
        _ = share.started(flood)
        share.wokenStarted(flood)
        let woken3 = share.nextToWake(for: flood)
        #expect(woken3 == nil)
        share.stopWaiting(12, for: flood)
        let waitingAfterFirst = share.finished(flood)
        #expect(waitingAfterFirst, "11 and 13 still wait for the flood's turn")
        share.finished(flood)
        let woken4 = share.nextToWake(for: flood)
        #expect(woken4 == 11)
        let woken5 = share.nextToWake(for: flood)
        #expect(woken5 == 13)
        let woken6 = share.nextToWake(for: flood)
        #expect(woken6 == nil)
        #expect(share.waitingCount(of: flood) == 0)
        // Read with nothing to start: their places come free.
        #expect(!share.mayStart(flood))
        share.wokenStarted(flood)
        share.wokenStarted(flood)
        #expect(share.mayStart(flood))
        #expect(share.hasWaiting)
        let allWaiting1 = share.takeAllWaiting()
        #expect(allWaiting1 == [20])
        #expect(!share.hasWaiting)
    }

    @Test("a long queue keeps its order across the compaction of its storage")
    func longQueue() {
        var share = TenantShare(limits: Self.limits, now: start)
        for key in UInt64(0)..<500 { share.wait(key, for: flood) }
        var woken: [UInt64] = []
        while let key = share.nextToWake(for: flood) {
            share.wokenStarted(flood)
            woken.append(key)
            if key % 7 == 0 { share.wait(1000 + key, for: flood) }
        }
        let requeued = (UInt64(0)..<500).filter { $0 % 7 == 0 }.map { 1000 + $0 }
        #expect(woken == Array(UInt64(0)..<500) + requeued)
    }

    @Test("the loop turns busy below the busy fraction and idle only above the idle fraction")
    func busyHysteresis() {
        var share = TenantShare(limits: Self.limits, now: start)
        let window = TenantShare.loadWindow
        // Less than a window: nothing decided yet.
        let busyChanged1 = share.noteIdle(.milliseconds(1), now: start + window / 2)
        #expect(!busyChanged1)
        #expect(!share.loopIsBusy)
        // A window 4% idle: busy.
        let busyChanged2 = share.noteIdle(.milliseconds(1), now: start + window)
        #expect(busyChanged2)
        #expect(share.loopIsBusy)
        // 30% idle: between the bounds, still busy.
        let busyChanged3 = share.noteIdle(window * 0.3, now: start + window * 2)
        #expect(!busyChanged3)
        #expect(share.loopIsBusy)
        // 80% idle: no longer busy.
        let busyChanged4 = share.noteIdle(window * 0.8, now: start + window * 3)
        #expect(busyChanged4)
        #expect(!share.loopIsBusy)
        // 30% again: stays idle.
        let busyChanged5 = share.noteIdle(window * 0.3, now: start + window * 4)
        #expect(!busyChanged5)
        #expect(!share.loopIsBusy)
    }
}

/// Targets `/t/<tenant>` (answered at once through the sink) and
/// `/t/<tenant>/hold` (kept until released); both name the tenant.
final class TenantResponder: HTTPResponder {
    private let held = Mutex<[(tenant: UInt64, sink: any HTTPReplySink)]>([])
    private let holdsSeen = Mutex<Int>(0)

    func heldCount(of tenant: UInt64) -> Int { held.withLock { $0.filter { $0.tenant == tenant }.count } }

    /// `/hold` requests that reached the responder.
    var holdsReceived: Int { holdsSeen.withLock { $0 } }

    /// Answers the oldest held request of `tenant`; returns whether there was one.
    @discardableResult
    func releaseOldest(of tenant: UInt64) -> Bool {
        let sink = held.withLock { held -> (any HTTPReplySink)? in
            guard let index = held.firstIndex(where: { $0.tenant == tenant }) else { return nil }
            return held.remove(at: index).sink
        }
        sink?.send(HTTPResponse(status: 200, body: Array("released".utf8)))
        return sink != nil
    }

    func bodyLimitBytes(for head: HTTPRequestHead) -> Int { 1024 }

    func respond(to request: HTTPRequest, sink: any HTTPReplySink) -> HTTPResponderResult {
        let parts = request.head.path.split(separator: "/")
        guard parts.count >= 2, parts[0] == "t", let tenant = UInt64(parts[1]) else {
            return .respond(HTTPResponse(status: 404, body: []))
        }
        if parts.count == 3 && parts[2] == "hold" {
            held.withLock { $0.append((tenant, sink)) }
            holdsSeen.withLock { $0 += 1 }
        } else {
            sink.send(HTTPResponse(status: 200, body: Array("tenant \(tenant)".utf8)))
        }
        return .deferred(HTTPTenant(tenant))
    }

    func response(for failure: HTTPRequestFailure) -> HTTPResponse {
        HTTPResponse(status: failure.status, body: [])
    }
}

/// A request of tenant `tenant`'s target `path`, with that tenant's key.
func tenantRequest(_ tenant: Int, _ path: String = "") -> String {
    get("/t/\(tenant)\(path)", "Authorization: Bearer key-of-\(tenant)\r\n")
}

extension HTTPServerTests {
    @Suite("Tenants share a busy server's loops")
    struct TenantShareServerTests {
        /// One loop that counts as busy after its first 50 ms window and
        /// never stops, tenants contending for a minute after a switch, two
        /// requests per tenant in progress.
        static var holdingLimits: HTTPServerLimits {
            var limits = HTTPServerLimits()
            limits.tenantRequestsInProgressMax = 2
            limits.tenantShareBusyBelowIdleFraction = 1
            limits.tenantShareIdleAboveIdleFraction = 1
            limits.tenantContentionWindow = .seconds(60)
            return limits
        }

        /// A one-loop server on a manual clock: time passes only when the
        /// test says (`ServerTime.advance`).
        static func withOneLoopServer(
            limits: HTTPServerLimits, _ body: (UInt16, TenantResponder, ServerTime) throws -> Void
        ) throws {
            let responder = TenantResponder()
            let clock = ManualMonotonicClock()
            try withResponderServer(responder, limits: limits, loops: 1, clock: clock) { port, server in
                try body(port, responder, ServerTime(server: server, clock: clock))
            }
        }

        /// `count` connections of tenant `tenant`, each past one answered request.
        static func connections(_ count: Int, of tenant: Int, port: UInt16) throws -> [LoopbackConnection] {
            try (0..<count).map { _ in
                let client = try LoopbackConnection(port: port)
                try client.send(tenantRequest(tenant))
                #expect(try client.readResponse().bodyText == "tenant \(tenant)")
                return client
            }
        }

        @Test("while tenants contend on a busy loop, a tenant's requests past its share wait, in turn")
        func floodWaitsForItsTurn() throws {
            try Self.withOneLoopServer(limits: Self.holdingLimits) { port, responder, time in
                let flood = try Self.connections(5, of: 1, port: port)
                let quiet = try Self.connections(1, of: 2, port: port)[0]  // a switch: tenants contend
                time.advance(by: .milliseconds(120))  // past a load window: the loop counts as busy
                try quiet.send(tenantRequest(2))
                #expect(try quiet.readResponse().bodyText == "tenant 2")
                for client in flood { try client.send(tenantRequest(1, "/hold")) }
                #expect(ConditionWait.until { responder.heldCount(of: 1) == 2 })
                #expect(ConditionWait.until { time.server.statistics.tenantWaits == 3 }, "three were read and wait")
                #expect(responder.holdsReceived == 2, "only the share starts; the rest wait")
                // The other tenant is not held back by the flood's queue.
                try quiet.send(tenantRequest(2))
                #expect(try quiet.readResponse().bodyText == "tenant 2")
                // Each answer lets one more start; every request is served.
                for answered in 1...5 {
                    #expect(responder.releaseOldest(of: 1))
                    #expect(ConditionWait.until { responder.heldCount(of: 1) == min(2, 5 - answered) })
                }
                #expect(responder.holdsReceived == 5)
                for client in flood { #expect(try client.readResponse().bodyText == "released") }
            }
        }

        @Test("a waiting connection outlives the peer timeouts; one reset while it waits leaves its queue")
        func waitingConnectionTimeoutsAndReset() throws {
            var limits = Self.holdingLimits
            limits.keepAliveIdleTimeout = .milliseconds(300)
            limits.headerReadTimeout = .milliseconds(300)
            try Self.withOneLoopServer(limits: limits) { port, responder, time in
                let flood = try Self.connections(5, of: 1, port: port)
                let quiet = try Self.connections(1, of: 2, port: port)[0]
                time.advance(by: .milliseconds(120))
                try quiet.send(tenantRequest(2))
                #expect(try quiet.readResponse().bodyText == "tenant 2")
                // 0 and 1 start (the share), then 2 and 3 wait in that order.
                for (index, client) in flood.prefix(2).enumerated() {
                    try client.send(tenantRequest(1, "/hold"))
                    #expect(ConditionWait.until { responder.heldCount(of: 1) == index + 1 })
                }
                try flood[2].send(tenantRequest(1, "/hold"))
                try flood[3].send(tenantRequest(1, "/hold"))
                #expect(ConditionWait.until { time.server.statistics.tenantWaits == 2 }, "2 and 3 were read and wait")
                // Three times the timeouts: the sweep closes the idle fifth; the
                // two waiting connections stay (an answer is owed), their requests waiting.
                time.advance(by: .milliseconds(900))
                #expect(flood[4].isClosedByPeer(timeout: .seconds(5)))
                #expect(!flood[2].isClosedByPeer(timeout: .zero))
                #expect(!flood[3].isClosedByPeer(timeout: .zero))
                #expect(responder.holdsReceived == 2)
                // The sweep also closed the idle quiet connection: the four of the flood are left.
                #expect(ConditionWait.until { time.server.openConnections == 4 })
                // 3 resets while it waits; the first answer lets 2 start.
                flood[3].reset()
                #expect(ConditionWait.until { time.server.openConnections == 3 }, "the reset was seen")
                #expect(responder.releaseOldest(of: 1))
                #expect(try flood[0].readResponse().bodyText == "released")
                #expect(ConditionWait.until { responder.holdsReceived == 3 })
                while responder.releaseOldest(of: 1) {}
                #expect(try flood[1].readResponse().bodyText == "released")
                #expect(try flood[2].readResponse().bodyText == "released")
                #expect(responder.holdsReceived == 3, "the reset connection's request never started")
            }
        }

        @Test(
            "a request is counted by its credential, not its connection: another tenant's on a pooled connection starts"
        )
        func pooledConnection() throws {
            try Self.withOneLoopServer(limits: Self.holdingLimits) { port, responder, time in
                let flood = try Self.connections(3, of: 1, port: port)
                // One connection a proxy would pool: tenant 1 last, then tenant 2.
                let pooled = try Self.connections(1, of: 1, port: port)[0]
                let quiet = try Self.connections(1, of: 2, port: port)[0]
                time.advance(by: .milliseconds(120))
                try quiet.send(tenantRequest(2))
                #expect(try quiet.readResponse().bodyText == "tenant 2")
                for client in flood { try client.send(tenantRequest(1, "/hold")) }
                #expect(ConditionWait.until { responder.heldCount(of: 1) == 2 })
                try pooled.send(tenantRequest(2, "/hold"))
                #expect(ConditionWait.until { responder.heldCount(of: 2) == 1 }, "tenant 2's request starts")
                // And tenant 1's on the connection tenant 2 used last waits.
                #expect(responder.releaseOldest(of: 2))
                #expect(try pooled.readResponse().bodyText == "released")
                let waitsBefore = time.server.statistics.tenantWaits
                try pooled.send(tenantRequest(1, "/hold"))
                #expect(
                    ConditionWait.until { time.server.statistics.tenantWaits == waitsBefore + 1 },
                    "it was read and waits")
                #expect(responder.holdsReceived == 3, "two of tenant 1 and one of tenant 2 started")
                while responder.releaseOldest(of: 1) {}
                #expect(ConditionWait.until { responder.holdsReceived == 5 })
                while responder.releaseOldest(of: 1) {}
                for client in flood + [pooled] { #expect(try client.readResponse().bodyText == "released") }
            }
        }

        @Test("a request without a credential is never held back")
        func noCredential() throws {
            try Self.withOneLoopServer(limits: Self.holdingLimits) { port, responder, time in
                let flood = try Self.connections(4, of: 1, port: port)
                let quiet = try Self.connections(1, of: 2, port: port)[0]
                time.advance(by: .milliseconds(120))
                try quiet.send(tenantRequest(2))
                #expect(try quiet.readResponse().bodyText == "tenant 2")
                for client in flood { try client.send(get("/t/1/hold")) }
                #expect(ConditionWait.until { responder.heldCount(of: 1) == 4 })
                while responder.releaseOldest(of: 1) {}
                for client in flood { #expect(try client.readResponse().bodyText == "released") }
            }
        }

        @Test("a tenant alone is never held back, however busy the loop")
        func loneTenantKeepsEveryRequest() throws {
            try Self.withOneLoopServer(limits: Self.holdingLimits) { port, responder, time in
                let flood = try Self.connections(5, of: 1, port: port)
                time.advance(by: .milliseconds(120))
                for client in flood { try client.send(tenantRequest(1, "/hold")) }
                #expect(ConditionWait.until { responder.heldCount(of: 1) == 5 })
                while responder.releaseOldest(of: 1) {}
                for client in flood { #expect(try client.readResponse().bodyText == "released") }
            }
        }

        @Test("contending tenants on a loop that is not busy are not held back (defaults)")
        func idleLoopHoldsNobody() throws {
            var limits = HTTPServerLimits()
            limits.tenantRequestsInProgressMax = 2
            // The manual clock stands: the loop never completes a busy window (the
            // window's arithmetic is `busyHysteresis`'s), though tenants contend.
            try Self.withOneLoopServer(limits: limits) { port, responder, time in
                let flood = try Self.connections(5, of: 1, port: port)
                let quiet = try Self.connections(1, of: 2, port: port)[0]
                try quiet.send(tenantRequest(2))
                #expect(try quiet.readResponse().bodyText == "tenant 2")
                for client in flood { try client.send(tenantRequest(1, "/hold")) }
                #expect(ConditionWait.until { responder.heldCount(of: 1) == 5 })
                #expect(time.server.statistics.tenantWaits == 0)
                while responder.releaseOldest(of: 1) {}
                for client in flood { #expect(try client.readResponse().bodyText == "released") }
            }
        }
    }
}

/// A server on a manual clock, and the clock.
struct ServerTime {
    let server: HTTPServer
    let clock: ManualMonotonicClock

    /// Moves the clock and wakes the loops so that they see the new time at once.
    func advance(by duration: Duration) {
        clock.advance(by: duration)
        server.wakeLoops()
    }
}

extension TenantShareTests {
    @Test("credentials: the same Authorization value is the same credential, another value or none is not")
    func credentials() throws {
        func head(_ authorization: String?) -> HTTPRequestHead {
            var headers = HTTPHeaders([("Host", "t")])
            if let authorization { headers.append(name: "authorization", value: authorization) }
            return HTTPRequestHead(method: .get, target: "/", version: .http11, headers: headers, keepAlive: true)
        }
        let first = TenantShare.credential(of: head("Bearer a"))
        #expect(first != nil)
        #expect(TenantShare.credential(of: head("Bearer a")) == first)
        #expect(TenantShare.credential(of: head("Bearer b")) != first)
        #expect(TenantShare.credential(of: head(nil)) == nil)
        var share = TenantShare(limits: Self.limits, now: start)
        let credential = try #require(first)
        #expect(share.tenant(of: credential) == nil)
        share.remember(credential, as: flood)
        #expect(share.tenant(of: credential) == flood)
        share.remember(credential, as: quiet)
        #expect(share.tenant(of: credential) == quiet)
        // Full: everything is forgotten, then learnt again.
        for other in 0..<UInt64(TenantShare.credentialsRememberedMax) {
            share.remember(other &+ 1 &+ credential, as: flood)
        }
        #expect(share.tenant(of: credential) == nil)
    }
}
