import RoostHTTP
import RoostPlatform

/// The connection machine's properties checked on arbitrary client bytes:
/// shared by the libFuzzer target (Fuzz/HTTPConnectionFuzz) and the test that
/// replays committed inputs (docs/testing.md). Drives `HTTPConnectionMachine`
/// through its package API only, as `EventLoop.drive` does, with a pretend
/// socket and responder.
///
/// Input: byte 0 seeds the schedule, byte 1 picks limits and response sizes,
/// the rest is what the client sends (then it closes its side).
///
/// Three runs over the same bytes: the reference (all bytes at once, every
/// request answered at once, the socket takes everything); a schedule run
/// (bytes in random pieces, byte by byte for some inputs; answers late and out
/// of order; short writes and EAGAIN; the client hanging up early, after which
/// its bytes arrive whether or not the machine reads); a disrupted run (as the
/// schedule, plus a drain at a random moment and time jumps that may time the
/// connection out). Checks: the schedule run dispatches and refuses exactly the
/// reference's requests and writes the same bytes (interim `100 Continue`
/// answers aside, which depend on timing by design), and ends the same way;
/// the disrupted run dispatches a prefix of them and, when drained, writes
/// one answer per request; every run ends within a bounded number of steps and
/// never waits with nothing left that could wake it; pipelined answers never
/// exceed `pipelinedRequestsMax`.
package enum HTTPConnectionFuzzCheck {
    /// The client bytes one input may hold (longer inputs are cut).
    static let clientBytesMax = 4096

    /// Returns a description of the first broken property for `input`, or nil.
    /// O(n) steps per run, O(n²) for byte-by-byte feeding of short inputs.
    package static func violation(in input: [UInt8]) -> String? {
        guard input.count >= 2 else { return nil }
        let seed = UInt64(input[0])
        let config = input[1]
        let client = Array(input.dropFirst(2).prefix(clientBytesMax))
        var limits = HTTPServerLimits()
        limits.headBytesMax = 512
        limits.headerFieldsMax = 16
        limits.chunkLineBytesMax = 64
        limits.bodyBytesDefault = 256
        limits.bodyBytesCeiling = 4096
        limits.pipelinedRequestsMax = 1 + Int(config & 3)
        limits.writeBufferBytesMax = 4096
        limits.streamBufferBytesMax = 4096
        let padding = Int(config >> 2 & 3) * 300

        let reference = Run.drive(client, limits: limits, padding: padding, schedule: nil)
        if let problem = reference.problem { return "reference run: \(problem)" }
        let scheduled = Run.drive(
            client, limits: limits, padding: padding,
            schedule: Schedule(seed: seed, byteByByte: client.count <= 512 && seed & 3 == 0, disrupts: false))
        if let problem = scheduled.problem { return "schedule run: \(problem)" }
        if scheduled.requests != reference.requests {
            return "requests \(scheduled.requests) in pieces, \(reference.requests) whole"
        }
        let wire = withoutContinues(scheduled.wire)
        let referenceWire = withoutContinues(reference.wire)
        if wire != referenceWire {
            return "wrote \(text(wire)) in pieces, \(text(referenceWire)) whole"
        }
        if scheduled.ending != reference.ending {
            return "ended \(scheduled.ending) in pieces, \(reference.ending) whole"
        }
        let disrupted = Run.drive(
            client, limits: limits, padding: padding, schedule: Schedule(seed: seed, byteByByte: false, disrupts: true))
        if let problem = disrupted.problem { return "disrupted run: \(problem)" }
        if !reference.requests.starts(with: disrupted.requests) {
            return "requests \(disrupted.requests) disrupted, not a prefix of \(reference.requests)"
        }
        if disrupted.drained && !disrupted.timedOut {
            let answers = countAnswers(disrupted.wire)
            if answers != disrupted.requests.count {
                return "drained: \(answers) answers written for \(disrupted.requests.count) requests"
            }
        } else if !disrupted.drained && !referenceWire.starts(with: withoutContinues(disrupted.wire)) {
            return "wrote \(text(disrupted.wire)) disrupted, not a prefix of \(text(referenceWire))"
        }
        return nil
    }

    /// The pretend peer's and responder's choices; nil in a run means the reference.
    struct Schedule {
        var random: UInt64
        var byteByByte: Bool
        var disrupts: Bool

        init(seed: UInt64, byteByByte: Bool, disrupts: Bool) {
            random = seed &* 0x9E37_79B9_7F4A_7C15 &+ (disrupts ? 0x5EED : 0)
            self.byteByByte = byteByByte
            self.disrupts = disrupts
        }

        /// Returns a number in 0..<bound (SplitMix64).
        mutating func next(_ bound: Int) -> Int {
            precondition(bound > 0, "empty range")
            random &+= 0x9E37_79B9_7F4A_7C15
            var z = random
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return Int((z ^ (z >> 31)) % UInt64(bound))
        }
    }

    /// One drive of a machine over the client's bytes, and what it did.
    struct Run {
        var requests: [String] = []
        var wire: [UInt8] = []
        var ending = ""
        var drained = false
        var timedOut = false
        var problem: String?

        static func drive(_ client: [UInt8], limits: HTTPServerLimits, padding: Int, schedule: Schedule?) -> Run {
            var run = Run()
            var schedule = schedule
            var now = LoopInstant(nanoseconds: 1_000_000_000)
            var machine = HTTPConnectionMachine(limits: limits, now: now)
            var unanswered: [(sequence: UInt64, status: Int)] = []
            var delivered = 0
            var endSent = false
            var hungUp = false
            var blocked = false
            var shutDown = false
            let stepsMax = 64 * (client.count + 16)
            for _ in 0..<stepsMax {
                if machine.pendingAnswers > limits.pipelinedRequestsMax {
                    run.problem = "\(machine.pendingAnswers) answers pending, limit \(limits.pipelinedRequestsMax)"
                    return run
                }
                if schedule?.disrupts == true && machine.hasTimedOut(now: now) {
                    run.timedOut = true
                    run.ending = "timed out"
                    return run
                }
                let action = machine.nextAction(now: now, bodyLimit: { _ in limits.bodyBytesDefault })
                switch action {
                case .dispatch(let request, let sequence):
                    let head = request.head
                    let fields = head.headers.map { "\($0.name)=\($0.value)" }.joined(separator: ",")
                    run.requests.append(
                        "\(sequence) \(head.method.name) \(head.target) \(head.version) \(head.keepAlive) [\(fields)] "
                            + "\(request.body)")
                    unanswered.append((sequence, 200))
                case .refuse(let failure, let sequence):
                    run.requests.append("\(sequence) refused \(failure)")
                    unanswered.append((sequence, failure.status))
                case .write:
                    let pending = machine.withOutput { Array($0) }
                    var count = pending.count
                    if var chooser = schedule {
                        count = chooser.next(4) == 0 ? chooser.next(pending.count + 1) : pending.count
                        schedule = chooser
                    }
                    if count == 0 {
                        machine.writeWouldBlock()
                        blocked = true
                    } else {
                        run.wire += pending[0..<count]
                        machine.wrote(count, now: now)
                        // A short write: the socket is full until it reports writable.
                        if count < pending.count { blocked = true }
                    }
                case .shutdownWrite:
                    if shutDown {
                        run.problem = "shutdownWrite twice"
                        return run
                    }
                    shutDown = true
                case .close:
                    run.ending = shutDown ? "shutdownWrite, close" : "close"
                    return run
                case .wait(let read, let write):
                    // Everything that could happen now; the schedule picks one, the reference the first.
                    var choices: [Int] = []
                    let mayDeliver = read || hungUp
                    if !unanswered.isEmpty { choices.append(0) }
                    if mayDeliver && delivered < client.count { choices.append(1) }
                    if mayDeliver && delivered == client.count && !endSent { choices.append(2) }
                    if write && blocked { choices.append(3) }
                    if schedule != nil && !hungUp { choices.append(4) }
                    if schedule?.disrupts == true {
                        if !run.drained { choices.append(5) }
                        choices.append(6)
                    }
                    guard !choices.isEmpty else {
                        run.problem =
                            "waits (read \(read), write \(write)) in \(machine.state) with nothing that could wake it"
                        return run
                    }
                    var choice = choices[0]
                    if var chooser = schedule {
                        choice = choices[chooser.next(choices.count)]
                        // Drains and hang-ups are rare; time moves in most waits of a disrupted run.
                        if (choice == 5 || choice == 4) && chooser.next(8) != 0 { choice = choices[0] }
                        schedule = chooser
                    }
                    switch choice {
                    case 0:
                        var pick = 0
                        if var chooser = schedule {
                            pick = chooser.next(unanswered.count)
                            schedule = chooser
                        }
                        let (sequence, status) = unanswered.remove(at: pick)
                        let body = Array("b\(sequence);".utf8) + Array(repeating: UInt8(ascii: "x"), count: padding)
                        machine.answer(
                            HTTPResponse(status: status, headers: [("X-Seq", "\(sequence)")], body: body), to: sequence,
                            now: now)
                    case 1:
                        var count = client.count - delivered
                        if var chooser = schedule {
                            count = chooser.byteByByte ? 1 : 1 + chooser.next(count)
                            schedule = chooser
                        }
                        client[delivered..<(delivered + count)].withUnsafeBytes { machine.received($0, now: now) }
                        delivered += count
                    case 2:
                        machine.receivedEndOfStream()
                        endSent = true
                    case 3:
                        machine.writable(now: now)
                        blocked = false
                    case 4:
                        hungUp = true
                    case 5:
                        machine.beginDrain()
                        run.drained = true
                    default:
                        if var chooser = schedule {
                            now += .milliseconds(chooser.next(4) == 0 ? chooser.next(70_000) : chooser.next(50))
                            schedule = chooser
                        }
                    }
                }
            }
            run.problem = "no end after \(stepsMax) steps in \(machine.state)"
            return run
        }
    }

    /// The wire without interim `100 Continue` answers at answer boundaries
    /// (the start, after a head, or after one of the check's bodies), and
    /// without the start of one that ends the wire.
    static func withoutContinues(_ wire: [UInt8]) -> [UInt8] {
        let interim = HTTPResponseWriter.continueResponse
        var out: [UInt8] = []
        var index = 0
        while index < wire.count {
            let atBoundary =
                out.isEmpty || out.last == UInt8(ascii: ";") || out.last == UInt8(ascii: "x")
                || out.suffix(4) == [13, 10, 13, 10]
            if atBoundary && wire[index...].starts(with: interim) {
                index += interim.count
                continue
            }
            // A run cut short (a timeout) may end inside an interim answer.
            if atBoundary && interim.starts(with: wire[index...]) { break }
            out.append(wire[index])
            index += 1
        }
        return out
    }

    /// The number of answers on the wire (each carries the check's `X-Seq` field).
    static func countAnswers(_ wire: [UInt8]) -> Int {
        let marker = Array("\r\nX-Seq: ".utf8)
        var count = 0
        var index = 0
        while index + marker.count <= wire.count {
            if wire[index..<(index + marker.count)].elementsEqual(marker) { count += 1 }
            index += 1
        }
        return count
    }

    private static func text(_ bytes: [UInt8]) -> String {
        String(decoding: bytes.prefix(600), as: UTF8.self).debugDescription
    }
}
