import Testing

@testable import RoostHTTP

/// Runs the machine until it waits, answering dispatched requests whose
/// target is not in `hold`; returns the held sequence numbers by target.
func drive(
    _ machine: inout HTTPConnectionMachine, now: ContinuousClock.Instant, hold: Set<String> = [],
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

@Suite("HTTP connection state machine")
struct HTTPConnectionMachineTests {
    @Test("an answer ready early waits for the one before it")
    func answersInOrder() throws {
        let start = ContinuousClock.now
        var machine = HTTPConnectionMachine(limits: HTTPServerLimits(), now: start)
        let requests = "GET /slow HTTP/1.1\r\nHost: a\r\n\r\nGET /fast HTTP/1.1\r\nHost: a\r\n\r\n"
        Array(requests.utf8).withUnsafeBytes { machine.received($0, now: start) }
        var written: [UInt8] = []
        let held = drive(&machine, now: start, hold: ["/slow"], written: &written)
        #expect(written.isEmpty, "the /fast answer went out before /slow")
        #expect(machine.pendingAnswers == 2)
        let slow = try #require(held["/slow"])
        machine.answer(HTTPResponse(status: 200, body: Array("/slow".utf8)), to: slow, now: start)
        _ = drive(&machine, now: start, written: &written)
        let text = String(decoding: written, as: UTF8.self)
        let slowIndex = try #require(text.firstRange(of: "/slow")).lowerBound
        let fastIndex = try #require(text.firstRange(of: "/fast")).lowerBound
        #expect(slowIndex < fastIndex)
        #expect(machine.isIdle)
    }

    @Test("timeouts follow the phase: head, body, idle; none while the server owes an answer")
    func timeoutsByPhase() {
        var limits = HTTPServerLimits()
        limits.headerReadTimeout = .seconds(1)
        limits.bodyReadTimeout = .seconds(2)
        limits.keepAliveIdleTimeout = .seconds(3)
        let start = ContinuousClock.now
        var machine = HTTPConnectionMachine(limits: limits, now: start)
        #expect(!machine.hasTimedOut(now: start + .milliseconds(2900)))
        #expect(machine.hasTimedOut(now: start + .milliseconds(3100)))
        var written: [UInt8] = []
        Array("GET /h".utf8).withUnsafeBytes { machine.received($0, now: start) }
        _ = drive(&machine, now: start, written: &written)
        #expect(machine.hasTimedOut(now: start + .milliseconds(1100)))
        let body = " HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nab"
        let later = start + .milliseconds(500)
        Array(body.utf8).withUnsafeBytes { machine.received($0, now: later) }
        _ = drive(&machine, now: later, written: &written)
        #expect(!machine.hasTimedOut(now: later + .milliseconds(1900)))
        #expect(machine.hasTimedOut(now: later + .milliseconds(2100)))
        Array("cd".utf8).withUnsafeBytes { machine.received($0, now: later) }
        _ = drive(&machine, now: later, hold: ["/h"], written: &written)
        #expect(!machine.hasTimedOut(now: later + .seconds(100)), "timed out while the server owed the answer")
    }
}
