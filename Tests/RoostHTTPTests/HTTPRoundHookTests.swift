import Synchronization
import Testing

@testable import RoostHTTP
@testable import RoostPlatform
@testable import RoostTesting

/// Defers every request and answers one per loop round, from
/// `willFinishRound`, waking the loop for the rest: a responder that spreads
/// its answers over rounds, as `RoostService` does with the engine's answers
/// under its rendering budget. `/now` is answered at once.
final class OneAnswerPerRoundResponder: HTTPResponder {
    private struct LoopState {
        var waiting: [(target: String, sink: any HTTPReplySink)] = []
        var rounds = 0
        var lastStart: LoopInstant?
        var problems: [String] = []
    }

    private let loops: Mutex<[LoopState]>
    let executors: [LoopExecutor]

    init(loops: Int) throws {
        executors = try (0..<loops).map { try LoopExecutor(index: $0) }
        self.loops = Mutex(Array(repeating: LoopState(), count: loops))
    }

    /// Rounds each loop told the responder about.
    var rounds: [Int] { loops.withLock { $0.map(\.rounds) } }

    /// What the hook saw that breaks its contract (wrong thread, a start in
    /// the future or before the last one).
    var problems: [String] { loops.withLock { $0.flatMap(\.problems) } }

    func bodyLimitBytes(for head: HTTPRequestHead) -> Int { 1024 }

    func respond(to request: HTTPRequest, sink: any HTTPReplySink) -> HTTPResponderResult {
        let target = request.head.target
        if target == "/now" { return .respond(HTTPResponse(status: 200, body: Array("now".utf8))) }
        loops.withLock { $0[sink.loopIndex].waiting.append((target, sink)) }
        return .deferred(nil)
    }

    func willFinishRound(loop: Int, startedAt start: LoopInstant, clock: LoopClock) {
        let now = clock.now
        let onLoop = executors[loop].isCurrent
        let next = loops.withLock { all -> (target: String, sink: any HTTPReplySink)? in
            var state = all[loop]
            defer { all[loop] = state }
            state.rounds += 1
            if !onLoop { state.problems.append("loop \(loop): hook called off its thread") }
            if start > now { state.problems.append("loop \(loop): round starts in the future") }
            if let last = state.lastStart, start < last { state.problems.append("loop \(loop): start went back") }
            state.lastStart = start
            return state.waiting.isEmpty ? nil : state.waiting.removeFirst()
        }
        guard let (target, sink) = next else { return }
        sink.send(HTTPResponse(status: 200, body: Array("round \(target)".utf8)))
        if loops.withLock({ !$0[loop].waiting.isEmpty }) { executors[loop].wake() }
    }

    func response(for failure: HTTPRequestFailure) -> HTTPResponse {
        HTTPResponse(status: failure.status, body: Array("refused".utf8))
    }
}

extension HTTPServerTests {
    @Suite("HTTP round hook (willFinishRound)")
    struct HTTPRoundHookTests {
        @Test(
            "the loop tells the responder of every round, on its thread; answers spread one per round keep each connection's order"
        )
        func answersSpreadOverRoundsKeepOrder() throws {
            let responder = try OneAnswerPerRoundResponder(loops: 2)
            try withResponderServer(responder, executors: responder.executors) { port, _ in
                var clients: [LoopbackConnection] = []
                for _ in 0..<4 { clients.append(try LoopbackConnection(port: port)) }
                for (index, client) in clients.enumerated() {
                    try client.send((0..<10).map { get("/c\(index)/r\($0)") }.joined())
                }
                // Answered at once, whatever waits for later rounds.
                let other = try LoopbackConnection(port: port)
                try other.send(get("/now"))
                #expect(try other.readResponse().bodyText == "now")
                for (index, client) in clients.enumerated() {
                    for request in 0..<10 {
                        #expect(try client.readResponse().bodyText == "round /c\(index)/r\(request)")
                    }
                }
                // 40 answers, one per round: the loops woke themselves for them.
                #expect(responder.rounds.reduce(0, +) >= 40, "rounds per loop: \(responder.rounds)")
                #expect(responder.problems.isEmpty, "\(responder.problems)")
            }
        }
    }
}
