import RoostPlatform
import Synchronization
import Testing

@testable import RoostHTTP
@testable import RoostTesting

/// Runs the machine until it waits, answering dispatched requests whose
/// target is not in `hold`; returns the held sequence numbers by target.
func drive(
    _ machine: inout HTTPConnectionMachine, now: LoopInstant, hold: Set<String> = [],
    written: inout [UInt8]
) -> [String: UInt64] {
    var held: [String: UInt64] = [:]
    while true {
        switch machine.nextAction(now: now, bodyLimit: { _ in 1024 }) {
        case .dispatch(let request, let sequence):
            if hold.contains(request.head.target) {
                held[request.head.target] = sequence
            } else {
                machine.answer(HTTPResponse(status: 200, body: Array(request.head.target.utf8)), to: sequence, now: now)
            }
        case .refuse(let failure, let sequence):
            machine.answer(HTTPResponse(status: failure.status), to: sequence, now: now)
        case .write:
            let bytes = machine.withOutput { Array($0) }
            written += bytes
            machine.wrote(bytes.count, now: now)
        case .shutdownWrite, .close, .wait:
            return held
        }
    }
}

/// One action of the machine as a test compares it: a dispatched request by
/// target, a refusal by status, the text a write put on the wire ("" when the
/// socket took nothing).
enum MachineStep: Equatable {
    case dispatch(String, sequence: UInt64)
    case refuse(status: Int, sequence: UInt64)
    case write(String)
    case shutdownWrite
    case close
    case wait(read: Bool, write: Bool)
}

/// One connection machine driven the way `EventLoop.drive` drives it, on a
/// manual clock and a pretend socket. It answers nothing by itself except
/// refusals (as the loop does, at once); tests answer dispatched requests
/// with `answer`, move time with `advance`, then `run` again.
struct MachineHarness {
    var machine: HTTPConnectionMachine
    var clock = ManualClock()
    /// Bytes the pretend socket takes per write; nil takes everything, 0 is EAGAIN.
    var socketTakes: Int?
    /// Every byte the socket took, in order.
    var wire: [UInt8] = []
    /// The responder's body limit for every head.
    var bodyLimit = 1024

    init(limits: HTTPServerLimits = HTTPServerLimits()) {
        machine = HTTPConnectionMachine(limits: limits, now: clock.now)
    }

    var now: LoopInstant { clock.now }
    var state: HTTPConnectionState { machine.state }
    var wireText: String { String(decoding: wire, as: UTF8.self) }

    mutating func advance(by duration: Duration) {
        clock.advance(by: duration)
    }

    mutating func receive(_ text: String) {
        Array(text.utf8).withUnsafeBytes { machine.received($0, now: clock.now) }
    }

    mutating func answer(_ sequence: UInt64, body: String, status: Int = 200) {
        machine.answer(HTTPResponse(status: status, body: Array(body.utf8)), to: sequence, now: clock.now)
    }

    func hasTimedOut(after duration: Duration) -> Bool {
        machine.hasTimedOut(now: clock.now + duration)
    }

    /// Runs the machine until it waits or closes and returns its actions in order.
    mutating func run() -> [MachineStep] {
        var steps: [MachineStep] = []
        for _ in 0..<1000 {
            let limit = bodyLimit
            switch machine.nextAction(now: clock.now, bodyLimit: { _ in limit }) {
            case .dispatch(let request, let sequence):
                steps.append(.dispatch(request.head.target, sequence: sequence))
            case .refuse(let failure, let sequence):
                steps.append(.refuse(status: failure.status, sequence: sequence))
                machine.answer(
                    HTTPResponse(status: failure.status, body: Array("refused".utf8)), to: sequence, now: now)
            case .write:
                let bytes = machine.withOutput { Array($0) }
                let count = min(bytes.count, socketTakes ?? bytes.count)
                steps.append(.write(String(decoding: bytes.prefix(count), as: UTF8.self)))
                if count == 0 {
                    machine.writeWouldBlock()
                } else {
                    wire += bytes.prefix(count)
                    machine.wrote(count, now: clock.now)
                }
            case .shutdownWrite:
                steps.append(.shutdownWrite)
            case .close:
                steps.append(.close)
                return steps
            case .wait(let read, let write):
                steps.append(.wait(read: read, write: write))
                return steps
            }
        }
        Issue.record("the machine did not wait within 1000 actions: \(steps.suffix(5))")
        return steps
    }

    /// Moves chunks of the active stream into the output as `EventLoop.pump`
    /// does and calls the producer back; returns what was taken.
    mutating func pump() -> LoopBodyStream.Taken? {
        guard let stream = machine.activeStream else { return nil }
        let taken = stream.take(outputBytes: machine.pendingOutputBytes)
        if !taken.chunks.isEmpty || taken.finished {
            machine.appendStreamBody(taken.chunks, finished: taken.finished, now: clock.now)
        }
        taken.waiter?(.writable)
        return taken
    }
}

/// One response read back from the wire text: status, `Connection` header and body.
struct WireResponse: Equatable {
    var status: Int
    var connection: String?
    var body: String
}

/// Splits wire bytes into responses (Content-Length, chunked, interim 1xx, or
/// close-delimited when neither is given). Works on bytes: in a `String`,
/// CR LF is one `Character`.
func wireResponses(_ text: String) -> [WireResponse] {
    var rest = ArraySlice(Array(text.utf8))
    let crlf = Array("\r\n".utf8)
    func line() -> String? {
        guard let end = rest.firstRange(of: crlf) else { return nil }
        defer { rest = rest[end.upperBound...] }
        return String(decoding: rest[..<end.lowerBound], as: UTF8.self)
    }
    func take(_ count: Int) -> String {
        defer { rest = rest.dropFirst(count) }
        return String(decoding: rest.prefix(count), as: UTF8.self)
    }
    var responses: [WireResponse] = []
    while let statusLine = line() {
        let status = statusLine.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? -1
        var headers: [String: String] = [:]
        while let header = line(), !header.isEmpty {
            guard let colon = header.firstIndex(of: ":") else { continue }
            headers[header[..<colon].lowercased()] = String(header[header.index(after: colon)...].drop { $0 == " " })
        }
        var body = ""
        if status >= 200 {
            if let length = headers["content-length"].flatMap({ Int($0) }) {
                body = take(length)
            } else if headers["transfer-encoding"] == "chunked" {
                while let sizeLine = line(), let size = Int(sizeLine, radix: 16) {
                    body += take(size)
                    _ = take(2)
                    if size == 0 { break }
                }
            } else {
                body = take(rest.count)
            }
        }
        responses.append(WireResponse(status: status, connection: headers["connection"], body: body))
    }
    return responses
}

@Suite("HTTP connection state machine, step by step on a manual clock")
struct HTTPConnectionMachineTests {
    static var shortTimeouts: HTTPServerLimits {
        var limits = HTTPServerLimits()
        limits.headerReadTimeout = .seconds(1)
        limits.bodyReadTimeout = .seconds(2)
        limits.keepAliveIdleTimeout = .seconds(3)
        limits.writeStallTimeout = .seconds(4)
        return limits
    }

    /// `limits` with every pipelined request dispatched at once (the default
    /// dispatches one at a time, `unansweredRequestsMax` 1), so that answers
    /// can arrive out of order.
    static func dispatchingAhead(_ limits: HTTPServerLimits = HTTPServerLimits()) -> HTTPServerLimits {
        var ahead = limits
        ahead.unansweredRequestsMax = ahead.pipelinedRequestsMax
        return ahead
    }

    @Test("an answer ready early waits for the one before it")
    func answersInOrder() throws {
        let clock = ManualClock()
        var machine = HTTPConnectionMachine(limits: Self.dispatchingAhead(), now: clock.now)
        let requests = "GET /slow HTTP/1.1\r\nHost: a\r\n\r\nGET /fast HTTP/1.1\r\nHost: a\r\n\r\n"
        Array(requests.utf8).withUnsafeBytes { machine.received($0, now: clock.now) }
        var written: [UInt8] = []
        let held = drive(&machine, now: clock.now, hold: ["/slow"], written: &written)
        #expect(written.isEmpty, "the /fast answer went out before /slow")
        #expect(machine.pendingAnswers == 2)
        let slow = try #require(held["/slow"])
        machine.answer(HTTPResponse(status: 200, body: Array("/slow".utf8)), to: slow, now: clock.now)
        _ = drive(&machine, now: clock.now, written: &written)
        let text = String(decoding: written, as: UTF8.self)
        let slowIndex = try #require(text.firstRange(of: "/slow")).lowerBound
        let fastIndex = try #require(text.firstRange(of: "/fast")).lowerBound
        #expect(slowIndex < fastIndex)
        #expect(machine.isIdle)
    }

    @Test("timeouts follow the phase: head, body, idle; none while the server owes an answer")
    func timeoutsByPhase() {
        var clock = ManualClock()
        let start = clock.now
        var machine = HTTPConnectionMachine(limits: Self.shortTimeouts, now: start)
        #expect(!machine.hasTimedOut(now: start + .milliseconds(2900)))
        #expect(machine.hasTimedOut(now: start + .milliseconds(3100)))
        var written: [UInt8] = []
        Array("GET /h".utf8).withUnsafeBytes { machine.received($0, now: start) }
        _ = drive(&machine, now: start, written: &written)
        #expect(machine.hasTimedOut(now: start + .milliseconds(1100)))
        let body = " HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nab"
        let later = clock.advance(by: .milliseconds(500))
        Array(body.utf8).withUnsafeBytes { machine.received($0, now: later) }
        _ = drive(&machine, now: later, written: &written)
        #expect(!machine.hasTimedOut(now: later + .milliseconds(1900)))
        #expect(machine.hasTimedOut(now: later + .milliseconds(2100)))
        Array("cd".utf8).withUnsafeBytes { machine.received($0, now: later) }
        _ = drive(&machine, now: later, hold: ["/h"], written: &written)
        #expect(!machine.hasTimedOut(now: later + .seconds(100)), "timed out while the server owed the answer")
    }

    @Test("the header timeout runs from a head's first byte and more bytes do not restart it")
    func headerTimeout() {
        var harness = MachineHarness(limits: Self.shortTimeouts)
        harness.advance(by: .milliseconds(2500))  // idle, within the keep-alive timeout
        #expect(!harness.hasTimedOut(after: .zero))
        let firstByte = harness.now
        harness.receive("GET / HTTP/1.1\r\nHo")
        #expect(harness.run() == [.wait(read: true, write: false)])
        #expect(harness.state == .readingHead(request: 0, since: firstByte))
        harness.advance(by: .milliseconds(600))
        harness.receive("st: a\r\nX-Slow: 1")
        #expect(harness.run() == [.wait(read: true, write: false)])
        #expect(harness.state == .readingHead(request: 0, since: firstByte), "a trickled byte restarted the timer")
        #expect(!harness.hasTimedOut(after: .milliseconds(400)))
        #expect(harness.hasTimedOut(after: .milliseconds(401)))
    }

    @Test("the body timeout runs from the end of the head, for the whole body")
    func bodyTimeout() {
        var harness = MachineHarness(limits: Self.shortTimeouts)
        harness.receive("POST /p HTTP/1.1\r\nHost: a\r\n")
        harness.advance(by: .milliseconds(900))
        let headEnd = harness.now
        harness.receive("Content-Length: 10\r\n\r\nabc")
        #expect(harness.run() == [.wait(read: true, write: false)])
        #expect(harness.state == .readingBody(request: 0, since: headEnd))
        harness.advance(by: .milliseconds(1500))
        harness.receive("defg")
        #expect(harness.run() == [.wait(read: true, write: false)])
        #expect(harness.state == .readingBody(request: 0, since: headEnd), "a body byte restarted the timer")
        #expect(!harness.hasTimedOut(after: .milliseconds(500)))
        #expect(harness.hasTimedOut(after: .milliseconds(501)))
        harness.receive("hij")
        #expect(harness.run() == [.dispatch("/p", sequence: 0), .wait(read: true, write: false)])
        #expect(harness.state == .awaitingAnswers(continueOwed: false))
        #expect(!harness.hasTimedOut(after: .seconds(3600)), "timed out while the server owed the answer")
    }

    @Test("the keep-alive idle timeout runs from the last answer written, not from the connection's start")
    func idleTimeout() {
        var harness = MachineHarness(limits: Self.shortTimeouts)
        harness.receive(get("/once"))
        #expect(harness.run() == [.dispatch("/once", sequence: 0), .wait(read: true, write: false)])
        harness.advance(by: .seconds(10))
        harness.answer(0, body: "done")
        let answered = harness.now
        let steps = harness.run()
        #expect(steps.count == 2)
        #expect(steps.last == .wait(read: true, write: false))
        #expect(wireResponses(harness.wireText) == [WireResponse(status: 200, connection: "keep-alive", body: "done")])
        #expect(harness.state == .awaitingRequest(since: answered))
        #expect(!harness.hasTimedOut(after: .seconds(3)))
        #expect(harness.hasTimedOut(after: .milliseconds(3001)))
    }

    @Test("pipelined requests answered out of order are written in request order, in one write")
    func pipelinedOutOfOrder() {
        var harness = MachineHarness(limits: Self.dispatchingAhead())
        harness.receive(get("/a") + get("/b") + get("/c"))
        #expect(
            harness.run() == [
                .dispatch("/a", sequence: 0), .dispatch("/b", sequence: 1), .dispatch("/c", sequence: 2),
                .wait(read: true, write: false),
            ])
        harness.answer(2, body: "c")
        #expect(harness.run() == [.wait(read: true, write: false)])
        harness.answer(1, body: "b")
        #expect(harness.run() == [.wait(read: true, write: false)])
        #expect(harness.wire.isEmpty)
        #expect(harness.machine.pendingAnswers == 3)
        harness.answer(0, body: "a")
        let steps = harness.run()
        #expect(steps.count == 2, "\(steps)")
        #expect(steps.last == .wait(read: true, write: false))
        #expect(wireResponses(harness.wireText).map(\.body) == ["a", "b", "c"])
        #expect(harness.state == .awaitingRequest(since: harness.now))
    }

    @Test("at pipelinedRequestsMax the machine stops reading and parsing until an answer is written")
    func pipelineCap() {
        var limits = HTTPServerLimits()
        limits.pipelinedRequestsMax = 2
        limits.unansweredRequestsMax = 2
        var harness = MachineHarness(limits: limits)
        harness.receive(get("/1") + get("/2") + get("/3"))
        #expect(
            harness.run() == [
                .dispatch("/1", sequence: 0), .dispatch("/2", sequence: 1), .wait(read: false, write: false),
            ])
        harness.answer(1, body: "2")
        #expect(harness.run() == [.wait(read: false, write: false)], "an unwritten answer made room")
        harness.answer(0, body: "1")
        let steps = harness.run()
        #expect(steps.count == 3, "\(steps)")
        #expect(steps.first == .dispatch("/3", sequence: 2), "parsing resumes before the answers are written")
        #expect(steps.last == .wait(read: true, write: false))
    }

    @Test("a refusal mid-pipeline waits for the earlier answer, closes after it, and the follower never runs")
    func refusalMidPipeline() {
        var harness = MachineHarness(limits: Self.dispatchingAhead(Self.shortTimeouts))
        harness.receive(get("/before") + "GET / HTTP/1.1\r\nHost: a\r\nX: one\r\n two\r\n\r\n" + get("/after"))
        #expect(
            harness.run() == [
                .dispatch("/before", sequence: 0), .refuse(status: 400, sequence: 1), .wait(read: false, write: false),
            ])
        #expect(harness.state == .finishingLastRequest)
        #expect(!harness.hasTimedOut(after: .seconds(3600)), "timed out while the server owed the answer")
        harness.receive(get("/late"))  // discarded: nothing after a refusal is parsed
        harness.answer(0, body: "before")
        let steps = harness.run()
        #expect(steps.count == 3, "\(steps)")
        #expect(steps.dropFirst().first == .shutdownWrite)
        #expect(steps.last == .wait(read: true, write: false))
        #expect(
            wireResponses(harness.wireText) == [
                WireResponse(status: 200, connection: "keep-alive", body: "before"),
                WireResponse(status: 400, connection: "close", body: "refused"),
            ])
        let shut = harness.now
        #expect(harness.state == .lingering(since: shut, firstDropped: 2))
        harness.receive(get("/lingering"))
        #expect(harness.run() == [.wait(read: true, write: false)], "a request ran after the refusal")
        #expect(!harness.hasTimedOut(after: HTTPConnectionMachine.lingerTimeout))
        #expect(harness.hasTimedOut(after: HTTPConnectionMachine.lingerTimeout + .milliseconds(1)))
        harness.machine.receivedEndOfStream()
        #expect(harness.run() == [.close])
    }

    @Test("Expect: 100-continue gets 100 Continue at once when nothing is owed, then the body is read")
    func continueAtOnce() {
        var harness = MachineHarness()
        harness.receive("POST /p HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
        #expect(harness.run() == [.write("HTTP/1.1 100 Continue\r\n\r\n"), .wait(read: true, write: false)])
        #expect(harness.state == .readingBody(request: 0, since: harness.now))
        harness.receive("ok")
        #expect(harness.run() == [.dispatch("/p", sequence: 0), .wait(read: true, write: false)])
    }

    @Test("a 100 Continue owed behind an unanswered request waits for it, and is dropped once the body is in")
    func continueOwedBehindAnswer() {
        var harness = MachineHarness(limits: Self.dispatchingAhead())
        let expecting = "POST /p HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
        harness.receive(get("/slow") + expecting)
        #expect(harness.run() == [.dispatch("/slow", sequence: 0), .wait(read: true, write: false)])
        #expect(harness.state == .awaitingAnswers(continueOwed: true))
        harness.answer(0, body: "slow")
        _ = harness.run()
        #expect(harness.wireText.hasSuffix("slow" + "HTTP/1.1 100 Continue\r\n\r\n"))
        #expect(harness.state == .readingBody(request: 1, since: harness.now))

        var early = MachineHarness(limits: Self.dispatchingAhead())
        early.receive(get("/slow") + expecting)
        _ = early.run()
        early.receive("ok")
        #expect(early.run() == [.dispatch("/p", sequence: 1), .wait(read: true, write: false)])
        #expect(early.state == .awaitingAnswers(continueOwed: false))
        early.answer(0, body: "slow")
        early.answer(1, body: "p")
        _ = early.run()
        #expect(!early.wireText.contains("100 Continue"), "a 100 went out after the body arrived")
    }

    @Test("HTTP/1.0 without keep-alive: one request, Connection: close, shut down, linger, close")
    func http10Closes() {
        var harness = MachineHarness()
        harness.receive("GET /old HTTP/1.0\r\n\r\nGET /next HTTP/1.0\r\n\r\n")
        #expect(harness.run() == [.dispatch("/old", sequence: 0), .wait(read: false, write: false)])
        #expect(harness.state == .finishingLastRequest)
        harness.advance(by: .milliseconds(5))
        harness.answer(0, body: "old")
        let steps = harness.run()
        #expect(steps.count == 3, "\(steps)")
        #expect(steps.dropFirst() == [.shutdownWrite, .wait(read: true, write: false)])
        #expect(wireResponses(harness.wireText) == [WireResponse(status: 200, connection: "close", body: "old")])
        #expect(harness.state == .lingering(since: harness.now, firstDropped: 1))
        harness.advance(by: HTTPConnectionMachine.lingerTimeout)
        #expect(!harness.hasTimedOut(after: .zero))
        #expect(harness.hasTimedOut(after: .milliseconds(1)))
    }

    @Test("HTTP/1.0 with keep-alive stays open")
    func http10KeepAlive() {
        var harness = MachineHarness()
        harness.receive("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        #expect(harness.run() == [.dispatch("/a", sequence: 0), .wait(read: true, write: false)])
        harness.answer(0, body: "a")
        #expect(harness.run().last == .wait(read: true, write: false))
        #expect(wireResponses(harness.wireText) == [WireResponse(status: 200, connection: "keep-alive", body: "a")])
        #expect(harness.state == .awaitingRequest(since: harness.now))
    }

    @Test("a streamed response keeps at most streamBufferBytesMax queued; a blocked socket stalls out")
    func streamQueueLimit() throws {
        var limits = Self.dispatchingAhead(Self.shortTimeouts)
        limits.streamBufferBytesMax = 4096
        var harness = MachineHarness(limits: limits)
        let mailbox = LoopMailbox(executor: try LoopExecutor(index: 0), streamBufferBytesMax: 4096)
        let stream = LoopBodyStream(mailbox: mailbox, connectionKey: 1, sequence: 0, bufferBytesMax: 4096)
        harness.receive(get("/export") + get("/after"))
        #expect(
            harness.run() == [
                .dispatch("/export", sequence: 0), .dispatch("/after", sequence: 1), .wait(read: true, write: false),
            ])
        harness.answer(1, body: "after")  // waits behind the stream
        let accepted = harness.machine.answerStream(
            status: 200, headers: [], stream: stream, to: 0, now: harness.now)
        #expect(accepted)
        harness.socketTakes = 0  // the peer stops reading
        #expect(harness.run() == [.write(""), .wait(read: false, write: true)])

        let signals = SignalLog()
        let chunk = [UInt8](repeating: UInt8(ascii: "x"), count: 3000)
        stream.write(chunk) { signals.append($0) }
        let firstTaken = harness.pump()
        let first = try #require(firstTaken)
        #expect(first.chunks.count == 1)
        #expect(signals.all == [.writable], "room left, the producer may write again")
        stream.write(chunk) { signals.append($0) }
        let secondTaken = harness.pump()
        let second = try #require(secondTaken)
        #expect(second.chunks.isEmpty, "taken beyond streamBufferBytesMax")
        #expect(stream.queuedBytes == 3000)
        #expect(signals.all == [.writable], "the producer was let write while the queue is full")
        #expect(harness.machine.pendingOutputBytes <= limits.streamBufferBytesMax)
        #expect(harness.run() == [.wait(read: false, write: true)])
        #expect(harness.state == .awaitingAnswers(continueOwed: false))
        #expect(!harness.hasTimedOut(after: limits.writeStallTimeout))
        #expect(harness.hasTimedOut(after: limits.writeStallTimeout + .milliseconds(1)))

        harness.advance(by: .seconds(1))
        harness.machine.writable(now: harness.now)
        harness.socketTakes = nil
        #expect(harness.run().last == .wait(read: true, write: false))
        _ = harness.pump()
        #expect(signals.all == [.writable, .writable])
        stream.finish()
        let lastTaken = harness.pump()
        let last = try #require(lastTaken)
        #expect(last.finished)
        #expect(harness.machine.activeStream == nil)
        #expect(harness.run().last == .wait(read: true, write: false))
        let responses = wireResponses(harness.wireText)
        #expect(responses.map(\.body) == [String(repeating: "x", count: 6000), "after"])
        #expect(harness.state == .awaitingRequest(since: harness.now))
    }

    @Test("an HTTP/1.0 stream is delimited by the close; the request pipelined behind it is dropped")
    func http10StreamDropsFollower() throws {
        var harness = MachineHarness(limits: Self.dispatchingAhead())
        let mailbox = LoopMailbox(executor: try LoopExecutor(index: 0), streamBufferBytesMax: 4096)
        let stream = LoopBodyStream(mailbox: mailbox, connectionKey: 1, sequence: 0, bufferBytesMax: 4096)
        let follower = LoopBodyStream(mailbox: mailbox, connectionKey: 1, sequence: 1, bufferBytesMax: 4096)
        let keepAlive = "Connection: keep-alive\r\n\r\n"
        harness.receive("GET /s HTTP/1.0\r\n" + keepAlive + "GET /n HTTP/1.0\r\n" + keepAlive)
        #expect(
            harness.run() == [
                .dispatch("/s", sequence: 0), .dispatch("/n", sequence: 1), .wait(read: true, write: false),
            ])
        let started = harness.machine.answerStream(status: 200, headers: [], stream: stream, to: 0, now: harness.now)
        #expect(started)
        #expect(harness.run().last == .wait(read: true, write: false))
        let signals = SignalLog()
        stream.write(Array("abc".utf8)) { signals.append($0) }
        _ = harness.pump()
        stream.finish()
        _ = harness.pump()
        #expect(harness.state == .closing(firstDropped: 1))
        let accepted = harness.machine.answerStream(
            status: 200, headers: [], stream: follower, to: 1, now: harness.now)
        #expect(!accepted, "a stream behind the close-delimited answer would never be sent")
        #expect(harness.run() == [.write("abc"), .shutdownWrite, .wait(read: true, write: false)])
        #expect(wireResponses(harness.wireText) == [WireResponse(status: 200, connection: "close", body: "abc")])
        #expect(signals.all == [.writable])
    }

    @Test("a HEAD request answered with a stream gets the head only and the stream is refused")
    func headOfStream() throws {
        var harness = MachineHarness()
        let mailbox = LoopMailbox(executor: try LoopExecutor(index: 0), streamBufferBytesMax: 4096)
        let stream = LoopBodyStream(mailbox: mailbox, connectionKey: 1, sequence: 0, bufferBytesMax: 4096)
        harness.receive("HEAD /s HTTP/1.1\r\nHost: a\r\n\r\n")
        #expect(harness.run() == [.dispatch("/s", sequence: 0), .wait(read: true, write: false)])
        let started = harness.machine.answerStream(status: 200, headers: [], stream: stream, to: 0, now: harness.now)
        #expect(!started, "a HEAD answer has no body to stream")
        #expect(harness.machine.activeStream == nil)
        #expect(harness.run().last == .wait(read: true, write: false))
        #expect(harness.wireText.hasPrefix("HTTP/1.1 200"))
        #expect(harness.wireText.hasSuffix("\r\n\r\n"), "a body after the head of a HEAD answer")
        #expect(harness.state == .awaitingRequest(since: harness.now))
    }

    @Test("shutdown keeps an idle connection open with its next request its last (Connection: close)")
    func drainKeepsIdleForOneLastRequest() {
        for spoke in [false, true] {
            var idle = MachineHarness()
            if spoke {
                idle.receive(get("/before"))
                _ = idle.run()
                idle.answer(0, body: "before")
                _ = idle.run()
            }
            let before = idle.state
            idle.machine.beginDrain()
            #expect(idle.state == before, "spoke: \(spoke)")
            #expect(idle.machine.isSettled, "spoke: \(spoke)")
            #expect(idle.machine.evictionRank(now: idle.now) == nil, "evicted while the server drains")
            #expect(idle.run() == [.wait(read: true, write: false)], "spoke: \(spoke)")
            idle.receive(get("/readyz") + get("/after"))
            let sequence: UInt64 = spoke ? 1 : 0
            #expect(idle.run() == [.dispatch("/readyz", sequence: sequence), .wait(read: false, write: false)])
            #expect(!idle.machine.isSettled)
            idle.answer(sequence, body: "shutting_down")
            let steps = idle.run()
            #expect(steps.dropFirst() == [.shutdownWrite, .wait(read: true, write: false)], "\(steps)")
            #expect(
                wireResponses(idle.wireText).last
                    == WireResponse(status: 200, connection: "close", body: "shutting_down"))
            #expect(!idle.machine.isSettled, "a closing connection is not settled")
        }
    }

    @Test("shutdown closes a half-received connection at once and discards what arrives after")
    func drainClosesHalfReceived() {
        var half = MachineHarness()
        half.receive("GET /x HTTP/1.1\r\nHo")
        _ = half.run()
        half.machine.beginDrain()
        half.receive("st: a\r\n\r\n")
        #expect(half.run() == [.close], "a half-received request was completed during shutdown")
    }

    @Test("shutdown answers what was dispatched, the last answer with Connection: close, then lingers")
    func drainFinishesDispatched() {
        var harness = MachineHarness(limits: Self.dispatchingAhead())
        harness.receive(get("/a") + get("/b") + "GET /c HT")
        #expect(
            harness.run() == [
                .dispatch("/a", sequence: 0), .dispatch("/b", sequence: 1), .wait(read: true, write: false),
            ])
        harness.machine.beginDrain()
        #expect(harness.run() == [.wait(read: false, write: false)])
        harness.answer(1, body: "b")
        harness.answer(0, body: "a")
        let steps = harness.run()
        #expect(steps.dropFirst() == [.shutdownWrite, .wait(read: true, write: false)], "\(steps)")
        #expect(
            wireResponses(harness.wireText) == [
                WireResponse(status: 200, connection: "keep-alive", body: "a"),
                WireResponse(status: 200, connection: "close", body: "b"),
            ])
        #expect(harness.state == .lingering(since: harness.now, firstDropped: 2))
        harness.machine.receivedEndOfStream()
        #expect(harness.run() == [.close])
    }

    @Test("an answer for a request never dispatched stops the process, also after the last answer")
    func answerNeverDispatchedStops() async {
        await #expect(processExitsWith: .failure) {
            var harness = MachineHarness()
            harness.receive("GET /old HTTP/1.0\r\n\r\n")
            _ = harness.run()
            harness.answer(0, body: "old")
            harness.answer(5, body: "never dispatched")
        }
    }

    @Test("a peer that closes with nothing owed is closed; with an answer owed, the answer goes out first")
    func peerClose() {
        var harness = MachineHarness()
        harness.receive(get("/a"))
        _ = harness.run()
        harness.machine.receivedEndOfStream()
        #expect(harness.run() == [.wait(read: false, write: false)])
        harness.answer(0, body: "a")
        let steps = harness.run()
        #expect(steps.count == 2, "\(steps)")
        #expect(steps.last == .close)
        #expect(wireResponses(harness.wireText).map(\.body) == ["a"])
    }
}

/// The signals a test producer received, in order.
final class SignalLog: Sendable {
    private let signals = Mutex<[HTTPBodyStreamSignal]>([])

    func append(_ signal: HTTPBodyStreamSignal) { signals.withLock { $0.append(signal) } }

    var all: [HTTPBodyStreamSignal] { signals.withLock { $0 } }
}
