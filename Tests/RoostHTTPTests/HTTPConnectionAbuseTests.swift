import RoostPlatform
import Testing

@testable import RoostHTTP
@testable import RoostTesting

/// The machine's rules against clients that do not read and connections that
/// never speak (Roost issue 9, findings 2 and 3), step by step on a manual
/// clock: the output budget in bytes, one unanswered request at a time, the
/// buffers an idle connection keeps, the first-byte timeout, the eviction
/// rank, and the reserved connections for probes.
@Suite("HTTP connection machine: output budget, first byte, eviction rank, reserve")
struct HTTPConnectionAbuseTests {
    /// The smallest budget the limits allow, so that a few answers cross it.
    static var smallBudget: HTTPServerLimits {
        var limits = HTTPServerLimits()
        limits.writeBufferBytesMax = 4096
        limits.streamBufferBytesMax = 4096
        limits.bufferBytesRetainedMax = 1024
        return limits
    }

    static func body(_ count: Int) -> String { String(repeating: "x", count: count) }

    @Test("a pipelined request is dispatched only once the one before it is answered (unansweredRequestsMax 1)")
    func oneUnansweredRequestAtATime() {
        var harness = MachineHarness()
        harness.receive(get("/a") + get("/b") + get("/c"))
        // Reading goes on (up to one read buffer), parsing waits for the answer.
        #expect(harness.run() == [.dispatch("/a", sequence: 0), .wait(read: true, write: false)])
        #expect(harness.state == .awaitingAnswers(continueOwed: false))
        harness.answer(0, body: "a")
        let steps = harness.run()
        #expect(steps.first == .dispatch("/b", sequence: 1), "\(steps)")
        #expect(steps.count == 3, "\(steps)")
        #expect(steps.last == .wait(read: true, write: false))
        harness.answer(1, body: "b")
        #expect(harness.run().first == .dispatch("/c", sequence: 2))
        harness.answer(2, body: "c")
        #expect(harness.run().last == .wait(read: true, write: false))
        #expect(wireResponses(harness.wireText).map(\.body) == ["a", "b", "c"])
        #expect(harness.state == .awaitingRequest(since: harness.now))
    }

    @Test("a peer that reads nothing: dispatching stops once queued output reaches the budget, one answer may pass it")
    func outputBudgetStopsDispatch() {
        let limits = Self.smallBudget
        var harness = MachineHarness(limits: limits)
        harness.socketTakes = 0  // the peer reads nothing
        harness.receive(get("/1") + get("/2") + get("/3") + get("/4"))
        #expect(harness.run() == [.dispatch("/1", sequence: 0), .wait(read: true, write: false)])
        harness.answer(0, body: Self.body(3000))
        let first = harness.run()
        #expect(first.first == .dispatch("/2", sequence: 1), "below the budget the next request starts: \(first)")
        #expect(first.last == .wait(read: false, write: true))
        harness.answer(1, body: Self.body(3000))
        #expect(harness.machine.pendingOutputBytes >= limits.writeBufferBytesMax)
        #expect(harness.run() == [.wait(read: false, write: true)], "a request started over the budget")
        // A single answer may take the output past the budget; nothing starts after it.
        #expect(harness.machine.pendingOutputBytes < limits.writeBufferBytesMax + 3000 + 200)
        #expect(harness.machine.pendingAnswers == 0)

        // The peer takes 3000 bytes: below the budget again, the next request starts.
        harness.advance(by: .milliseconds(10))
        harness.machine.writable(now: harness.now)
        harness.socketTakes = 3000
        let resumed = harness.run()
        #expect(resumed.dropFirst().first == .dispatch("/3", sequence: 2), "\(resumed)")
        #expect(harness.machine.pendingOutputBytes < limits.writeBufferBytesMax)
        harness.answer(2, body: Self.body(10_000))  // one answer larger than the whole budget
        harness.socketTakes = 0
        #expect(harness.run().last == .wait(read: false, write: true))
        #expect(harness.machine.pendingOutputBytes > limits.writeBufferBytesMax)
        #expect(harness.machine.pendingAnswers == 0, "/4 started over the budget")
        // Everything written at last: /4 runs, all four answers arrive in order.
        harness.socketTakes = nil
        harness.machine.writable(now: harness.now)
        #expect(harness.run().contains(.dispatch("/4", sequence: 3)))
        harness.answer(3, body: "4")
        #expect(harness.run().last == .wait(read: true, write: false))
        #expect(wireResponses(harness.wireText).map(\.body.count) == [3000, 3000, 10_000, 1])
    }

    @Test("answers waiting behind a stream count toward the budget")
    func answersBehindAStreamCount() throws {
        var limits = Self.smallBudget
        limits.unansweredRequestsMax = 1
        var harness = MachineHarness(limits: limits)
        let mailbox = LoopMailbox(executor: try LoopExecutor(index: 0), streamBufferBytesMax: 4096)
        let stream = LoopBodyStream(mailbox: mailbox, connectionKey: 1, sequence: 0, bufferBytesMax: 4096)
        harness.receive(get("/export") + get("/b") + get("/c"))
        #expect(harness.run() == [.dispatch("/export", sequence: 0), .wait(read: true, write: false)])
        let started = harness.machine.answerStream(status: 200, headers: [], stream: stream, to: 0, now: harness.now)
        #expect(started)
        let afterStart = harness.run()
        #expect(afterStart.first == .dispatch("/b", sequence: 1), "the stream is an answer: \(afterStart)")
        harness.answer(1, body: Self.body(5000))  // held in its slot until the stream ends
        #expect(harness.machine.pendingOutputBytes < 1000, "the held answer went out before the stream's body")
        #expect(harness.run() == [.wait(read: false, write: false)], "/c started with 5000 bytes held")
        stream.finish()
        _ = harness.pump()
        let steps = harness.run()
        #expect(steps.contains(.dispatch("/c", sequence: 2)), "\(steps)")
    }

    @Test("an emptied buffer keeps at most bufferBytesRetainedMax of capacity once a large exchange is done")
    func buffersReleasedWhenIdle() {
        let limits = HTTPServerLimits()  // a 1 MiB budget, 16 KiB retained
        var harness = MachineHarness(limits: limits)
        harness.receive(get("/big"))
        _ = harness.run()
        harness.answer(0, body: Self.body(200_000))
        #expect(harness.run().last == .wait(read: true, write: false))
        #expect(wireResponses(harness.wireText).first?.body.count == 200_000)
        #expect(harness.machine.bufferCapacityBytes <= 2 * limits.bufferBytesRetainedMax)

        // The input side: 40 KB of pipelined requests in one read, consumed, the buffer freed.
        var reader = MachineHarness(limits: limits)
        let count = 40
        reader.receive(String(repeating: get("/x", "X-Pad: \(Self.body(1000))\r\n"), count: count))
        for sequence in 0..<UInt64(count) {
            #expect(reader.run().first == .dispatch("/x", sequence: sequence))
            reader.answer(sequence, body: "x")
        }
        #expect(reader.run().last == .wait(read: true, write: false))
        #expect(reader.machine.isIdle)
        #expect(reader.machine.bufferCapacityBytes <= 2 * limits.bufferBytesRetainedMax)
    }

    @Test("a connection that sends nothing waits firstByteTimeout, or the idle timeout when shorter")
    func firstByteTimeout() {
        var limits = HTTPConnectionMachineTests.shortTimeouts  // header 1 s, idle 3 s
        limits.firstByteTimeout = .milliseconds(500)
        var harness = MachineHarness(limits: limits)
        let accepted = harness.now
        #expect(harness.state == .awaitingFirstByte(since: accepted))
        #expect(harness.run() == [.wait(read: true, write: false)])
        #expect(!harness.hasTimedOut(after: .milliseconds(500)))
        #expect(harness.hasTimedOut(after: .milliseconds(501)))
        // Blank lines before a request line are skipped; they do not start a request or the timer again.
        harness.advance(by: .milliseconds(300))
        harness.receive("\r\n")
        #expect(harness.run() == [.wait(read: true, write: false)])
        #expect(harness.state == .awaitingFirstByte(since: accepted))
        // The first byte of a head: the header timeout takes over.
        harness.receive("GET /a HTTP/1.1\r\n")
        _ = harness.run()
        #expect(harness.state == .readingHead(request: 0, since: harness.now))
        #expect(!harness.hasTimedOut(after: .milliseconds(1000)))
        harness.receive("Host: a\r\n\r\n")
        _ = harness.run()
        harness.answer(0, body: "a")
        _ = harness.run()
        // Between requests: the keep-alive idle timeout, not the first-byte one.
        #expect(harness.state == .awaitingRequest(since: harness.now))
        #expect(!harness.hasTimedOut(after: .seconds(3)))
        #expect(harness.hasTimedOut(after: .milliseconds(3001)))

        limits.firstByteTimeout = .seconds(10)
        let longer = MachineHarness(limits: limits)
        #expect(!longer.hasTimedOut(after: .seconds(3)))
        #expect(longer.hasTimedOut(after: .milliseconds(3001)), "the idle timeout is shorter and applies")
    }

    @Test("the eviction rank: never spoke before idle between requests, longest idle first; busy ones have none")
    func evictionRank() throws {
        var silent = MachineHarness()
        let silentRank = try #require(silent.machine.evictionRank(now: silent.now))
        #expect(silentRank == HTTPEvictionRank(kind: .neverSpoke, since: silent.now))

        var idle = MachineHarness()
        idle.advance(by: .seconds(1))
        idle.receive(get("/a"))
        _ = idle.run()
        #expect(idle.machine.evictionRank(now: idle.now) == nil, "evictable while its answer is owed")
        idle.answer(0, body: "a")
        _ = idle.run()
        let idleRank = try #require(idle.machine.evictionRank(now: idle.now))
        #expect(idleRank == HTTPEvictionRank(kind: .idle, since: idle.now))
        // A connection that never spoke goes first, even when younger.
        let youngSilent = HTTPEvictionRank(kind: .neverSpoke, since: idle.now + .seconds(5))
        #expect(youngSilent < idleRank)
        #expect(silentRank < youngSilent, "the older of two silent connections goes first")
        #expect(idleRank < HTTPEvictionRank(kind: .idle, since: idle.now + .milliseconds(1)))

        var reading = MachineHarness()
        reading.receive("GET /a HTTP/1.1\r\nHo")
        _ = reading.run()
        #expect(reading.machine.evictionRank(now: reading.now) == nil, "a head began just now")

        var blocked = MachineHarness()
        blocked.socketTakes = 0
        blocked.receive(get("/a"))
        _ = blocked.run()
        blocked.answer(0, body: "a")
        _ = blocked.run()
        #expect(blocked.machine.pendingOutputBytes > 0)
        #expect(blocked.machine.evictionRank(now: blocked.now) == nil, "its answer is still queued")

        silent.machine.beginDrain()
        #expect(silent.machine.evictionRank(now: silent.now) == nil)
    }

    /// A machine accepted at `now` that has received `text` and was driven
    /// until it waits, its requests answered except those in `hold`.
    static func machine(
        _ limits: HTTPServerLimits, at now: LoopInstant, received text: String = "", hold: Set<String> = []
    ) -> HTTPConnectionMachine {
        var machine = HTTPConnectionMachine(limits: limits, now: now)
        receive(text, into: &machine, at: now, hold: hold)
        return machine
    }

    static func receive(
        _ text: String, into machine: inout HTTPConnectionMachine, at now: LoopInstant,
        hold: Set<String> = []
    ) {
        if !text.isEmpty { Array(text.utf8).withUnsafeBytes { machine.received($0, now: now) } }
        var written: [UInt8] = []
        _ = drive(&machine, now: now, hold: hold, written: &written)
    }

    /// Issue 24 M-2's flood: a request head and nothing more.
    static let floodHead = "GET /v1/stats HTTP/1.1\r\nHost: x\r\n"

    @Test(
        "a partial head becomes evictable once it has been arriving for partialHeadEvictableAfter; after silent connections, before idle ones, slowest first"
    )
    func partialHeadsAreEvictedSlowestFirst() throws {
        let limits = HTTPServerLimits()
        let threshold = limits.partialHeadEvictableAfter
        var clock = ManualClock()
        let start = clock.now
        // Idle between requests since the start (a real client, most likely).
        let idle = Self.machine(limits, at: start, received: get("/a"))
        #expect(idle.state == .awaitingRequest(since: start))
        // The flood's head (33 bytes) since the start.
        let flood = Self.machine(limits, at: start, received: Self.floodHead)
        // A slowloris: one byte, 200 ms later.
        let trickle = Self.machine(limits, at: clock.advance(by: .milliseconds(200)), received: "G")
        // A large head arriving fast (2,000 bytes), 300 ms after the start.
        let largeHead = "GET /a HTTP/1.1\r\nHost: x\r\nX-Pad: " + String(repeating: "p", count: 1_967)
        #expect(largeHead.utf8.count == 2_000)
        let large = Self.machine(limits, at: clock.advance(by: .milliseconds(100)), received: largeHead)
        // Silent, and younger than all of them.
        let silent = Self.machine(limits, at: clock.advance(by: .milliseconds(100)))
        // Never evictable whatever their age: a request with the responder
        // (its answer owed), and a body arriving (its request in progress).
        let owed = Self.machine(limits, at: start, received: get("/hold"), hold: ["/hold"])
        let uploading = Self.machine(
            limits, at: start, received: "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{")
        #expect(owed.pendingAnswers == 1)
        #expect(uploading.state == .readingBody(request: 0, since: start))

        // 400 ms in: no head has been arriving for the threshold yet.
        #expect(clock.now - start == .milliseconds(400))
        for (name, machine) in [("flood", flood), ("trickle", trickle), ("large", large)] {
            #expect(machine.evictionRank(now: clock.now) == nil, "\(name) evictable before the threshold")
        }
        // At exactly the threshold the flood's head is evictable, the younger ones not yet.
        let atThreshold = try #require(flood.evictionRank(now: start + threshold))
        #expect(atThreshold == HTTPEvictionRank(kind: .partialHead, since: start, bytesReceived: 33, age: threshold))
        #expect(flood.evictionRank(now: start + threshold - .nanoseconds(1)) == nil)
        #expect(trickle.evictionRank(now: start + threshold) == nil)

        // A second in: every partial head is past it. Slowest (most time per
        // byte) first: the trickle (0.8 s for 1 byte), the flood (1 s for 33),
        // the large head (0.7 s for 2,000).
        clock.advance(by: .milliseconds(600))
        let now = clock.now
        let candidates: [(String, HTTPConnectionMachine)] = [
            ("idle", idle), ("large", large), ("owed", owed), ("flood", flood), ("uploading", uploading),
            ("silent", silent), ("trickle", trickle),
        ]
        #expect(owed.evictionRank(now: now) == nil, "evictable with its answer owed")
        #expect(uploading.evictionRank(now: now) == nil, "evictable while its body arrives")
        let trickleRank = try #require(trickle.evictionRank(now: now))
        #expect(trickleRank.bytesReceived == 1)
        let largeRank = try #require(large.evictionRank(now: now))
        #expect(largeRank.bytesReceived == 2_000)
        var shortlist = EvictionShortlist<String>(capacity: 64)
        for (name, machine) in candidates {
            if let rank = machine.evictionRank(now: now) { shortlist.offer(rank, name) }
        }
        var order: [String] = []
        while let (_, name) = shortlist.popMostEvictable() { order.append(name) }
        #expect(order == ["silent", "trickle", "flood", "large", "idle"])

        // A scan keeps only the most evictable few.
        var short = EvictionShortlist<String>(capacity: 2)
        for (name, machine) in candidates.reversed() {
            if let rank = machine.evictionRank(now: now) { short.offer(rank, name) }
        }
        #expect(short.count == 2)
        #expect(short.popMostEvictable()?.item == "silent")
        #expect(short.popMostEvictable()?.item == "trickle")
        #expect(short.popMostEvictable() == nil)

        // Of two heads equally slow, the older goes first.
        let older = HTTPEvictionRank(kind: .partialHead, since: start, bytesReceived: 10, age: .seconds(2))
        let younger = HTTPEvictionRank(
            kind: .partialHead, since: start + .seconds(1), bytesReceived: 5, age: .seconds(1))
        #expect(older < younger)
        #expect(!(younger < older))
    }

    @Test("a partial head's rank changes as its bytes arrive, and it has none once the head is complete")
    func partialHeadRankFollowsItsBytes() throws {
        let limits = HTTPServerLimits()
        var clock = ManualClock()
        let start = clock.now
        var head = Self.machine(limits, at: start, received: "GET /a HTTP/1.1\r\n")
        clock.advance(by: .seconds(1))
        let before = try #require(head.evictionRank(now: clock.now))
        Self.receive("Host: x\r\n", into: &head, at: clock.now)
        let after = try #require(head.evictionRank(now: clock.now))
        // The loop's cached candidate no longer matches: it ranks again.
        #expect(before != after)
        #expect(after.bytesReceived == before.bytesReceived + 9)
        #expect(before < after, "more bytes in the same time: less slow")
        #expect(after.since == start, "the header timeout still runs from the head's first byte")
        // Complete: dispatched and held, its answer owed.
        Self.receive("\r\n", into: &head, at: clock.now, hold: ["/a"])
        #expect(head.pendingAnswers == 1)
        #expect(head.evictionRank(now: clock.now + .seconds(5)) == nil)
    }

    @Test("a reserved connection serves one GET or HEAD of a reserved path, with Connection: close")
    func reservedServesOneProbe() {
        for probe in ["/healthz", "/readyz", "/metrics", "/healthz?verbose=1"] {
            var harness = MachineHarness()
            harness.machine = HTTPConnectionMachine(limits: HTTPServerLimits(), now: harness.now, admission: .reserved)
            harness.receive(get(probe) + get("/healthz"))
            #expect(harness.run() == [.dispatch(probe, sequence: 0), .wait(read: false, write: false)])
            #expect(harness.state == .finishingLastRequest)
            harness.answer(0, body: "ok")
            let steps = harness.run()
            #expect(steps.dropFirst() == [.shutdownWrite, .wait(read: true, write: false)], "\(steps)")
            #expect(wireResponses(harness.wireText) == [WireResponse(status: 200, connection: "close", body: "ok")])
        }
    }

    @Test("a reserved connection whose first request is anything else is closed unanswered")
    func reservedRefusesOthers() {
        let refused = [
            get("/v1/apps"), get("/healthzz"), get("/"),
            "POST /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
            "DELETE /metrics HTTP/1.1\r\nHost: a\r\n\r\n",
        ]
        for request in refused {
            var harness = MachineHarness()
            harness.machine = HTTPConnectionMachine(limits: HTTPServerLimits(), now: harness.now, admission: .reserved)
            harness.receive(request)
            #expect(harness.run() == [.close], "\(request.debugDescription)")
            #expect(harness.wire.isEmpty)
        }
    }

    @Test("the new limits' relations are checked")
    func limitRelations() {
        var limits = HTTPServerLimits()
        #expect(limits.violations.isEmpty)
        limits.unansweredRequestsMax = 0
        limits.firstByteTimeout = .zero
        limits.bufferBytesRetainedMax = limits.writeBufferBytesMax + 1
        limits.reservedConnections = -1
        limits.reservedPaths = ["healthz"]
        limits.partialHeadEvictableAfter = .zero
        #expect(limits.violations.count == 6, "\(limits.violations)")
        limits = HTTPServerLimits()
        limits.unansweredRequestsMax = limits.pipelinedRequestsMax + 1
        #expect(limits.violations.count == 1, "\(limits.violations)")
    }
}
