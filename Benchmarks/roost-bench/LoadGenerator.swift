import CBenchShims
import Glibc
import RoostPlatform
import RoostTesting

/// What one load thread runs: where, over how many connections, and when it
/// stops. A value; every thread of a run gets its own with the same `start`.
struct LoadSchedule: Sendable {
    var host = "127.0.0.1"
    var port: UInt16 = 0
    var connections = 64
    /// Requests a connection may have out at once (1: no pipelining). Answers
    /// come back in order, so a slow one delays those behind it on its connection.
    var pipelineDepth = 1
    /// CLOCK_MONOTONIC nanoseconds of the first send (shared by the threads).
    var start: UInt64 = 0
    /// This thread's requests per second (open loop); nil: closed loop.
    var rate: Double? = nil
    /// Open loop: this thread's sends are offset by `phase` intervals (0..<1),
    /// so that several threads interleave rather than send together.
    var phase = 0.0
    /// Sending stops this long after `start`; nil: no time limit.
    var sendNanoseconds: UInt64? = nil
    /// Sending stops after this many requests; nil: no count limit.
    var requestLimit: Int? = nil
    /// How long answers are waited for after sending stopped, and the longest
    /// stretch without any answer while requests are out before the run is cut.
    var drainNanoseconds: UInt64 = 5_000_000_000
    /// Open loop: wake for due sends at most once per tick (0: at every due time).
    var tickNanoseconds: UInt64 = 0
    var thread = 0
    /// Where per-second samples go; nil: none kept.
    var series: SeriesCollector? = nil
}

/// A run that cannot start or go on (bad option, refused connection).
struct LoadError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// One status an operation was not expected to get, with the error code of
/// its body (`{"error":{"code":…}}`) when it has one.
struct UnexpectedAnswer: Hashable, Sendable {
    var operation: Int
    var status: Int
    var code: String
}

/// What one run (or one thread of it) measured.
struct LoadReport: Sendable {
    var operationNames: [String]
    var scheduled = 0
    var sent = 0
    var sentByOperation: [Int]
    /// Answers by operation, then by status.
    var statuses: [[Int: Int]]
    var expectedAnswers = 0
    var unexpected: [UnexpectedAnswer: Int] = [:]
    /// Requests whose connection failed or closed before the answer.
    var connectionFailures = 0
    /// Requests scheduled but not answered when the run ended.
    var unanswered = 0
    var malformed = 0
    /// The most requests one connection had out at once (the pipelining reached).
    var inFlightPerConnectionMax = 0
    /// From the intended send time to the whole answer read (open loop);
    /// from the send in closed loop.
    var latency = LatencyHistogram()
    /// From the intended send time to the actual send: waiting for a free
    /// connection (or a free device), plus the generator's own lateness.
    var sendDelay = LatencyHistogram()
    /// From the actual send to the whole answer read.
    var service = LatencyHistogram()
    /// First scheduled send to the last answer read, or to the end of the
    /// schedule if that is later.
    var elapsedNanoseconds: UInt64 = 0
    var userCPUSeconds = 0.0
    var systemCPUSeconds = 0.0

    init(operationNames: [String]) {
        self.operationNames = operationNames
        sentByOperation = Array(repeating: 0, count: operationNames.count)
        statuses = Array(repeating: [:], count: operationNames.count)
    }

    var answered: Int { Int(latency.count) }
    var unexpectedCount: Int { unexpected.values.reduce(0, +) }
    /// Unexpected answers, malformed answers, failed connections and unanswered requests.
    var failures: Int { unexpectedCount + connectionFailures + unanswered + malformed }

    /// Adds another thread's counts (the elapsed time is the longest of the two).
    mutating func merge(_ other: LoadReport) {
        precondition(operationNames == other.operationNames, "merging reports of different workloads")
        scheduled += other.scheduled
        sent += other.sent
        for index in 0..<operationNames.count {
            sentByOperation[index] += other.sentByOperation[index]
            statuses[index].merge(other.statuses[index], uniquingKeysWith: +)
        }
        expectedAnswers += other.expectedAnswers
        unexpected.merge(other.unexpected, uniquingKeysWith: +)
        connectionFailures += other.connectionFailures
        unanswered += other.unanswered
        malformed += other.malformed
        inFlightPerConnectionMax = Swift.max(inFlightPerConnectionMax, other.inFlightPerConnectionMax)
        latency.merge(other.latency)
        sendDelay.merge(other.sendDelay)
        service.merge(other.service)
        elapsedNanoseconds = Swift.max(elapsedNanoseconds, other.elapsedNanoseconds)
    }
}

/// One load thread: keep-alive HTTP/1.1 connections, up to `pipelineDepth`
/// requests in flight per connection (answered in order, FIFO), driven over
/// epoll, requests and expectations from `Source`.
///
/// Open loop (`rate`): request k is due at start + (k + phase)/rate, whatever
/// happened before. Due requests queue in order and go out on the next free
/// connection; a request's latency counts from when it was due, not from when
/// a connection took it, so a server stall shows in full (no coordinated
/// omission). The loop sleeps on a timerfd armed at the next due time (timer
/// slack 1 ns), not on epoll_wait's milliseconds. Closed loop: every
/// connection sends again as soon as its answer is in; latency counts from
/// the send. With pipelining, the requests that become sendable in one turn
/// of the loop leave in one `send` per connection.
final class LoadEngine<Source: LoadSource> {
    /// A request written to a connection and not yet answered.
    private struct Outstanding {
        /// When it was due (open loop) or sent (closed loop).
        var intendedAt: UInt64
        /// When it was written to the connection.
        var sentAt: UInt64
        var ticket: LoadTicket
    }

    private struct Connection {
        var descriptor: FileDescriptor
        var reader = HTTPResponseReader()
        /// Requests written and not yet wholly sent, back to back.
        var output: [UInt8] = []
        /// Bytes of `output` already sent.
        var outputSent = 0
        /// Whether epoll watches the connection for writability (a short send).
        var watchingWritable = false
        /// Requests out on this connection, oldest first: answers come in this order.
        var outstanding: [Outstanding] = []
    }

    /// Counts of the second being measured, published when it ends.
    private struct SecondCounts {
        var answers = 0
        var unexpected = 0
        var failed = 0
        var latency = LatencyHistogram()
    }

    private let schedule: LoadSchedule
    private(set) var source: Source
    private let epoll: Epoll
    private let timer: FileDescriptor
    private var connections: [Connection] = []
    /// One entry per request a connection can still take (a connection
    /// appears up to `pipelineDepth` times).
    private var free: [Int] = []
    /// Connections with requests written this turn and not yet flushed.
    private var unflushed: [Int] = []
    /// Where `Source` writes the next request before it joins a connection's output.
    private var scratch: [UInt8] = []
    /// Intended send times of due requests that no connection has taken yet, oldest first.
    private var queue: [UInt64] = []
    private var queueHead = 0
    private var random: SeededRandom
    private var report: LoadReport
    private var readBuffer: UnsafeMutableRawBufferPointer
    private var armedDeadline: UInt64 = 0
    private var second = 0
    private var secondCounts = SecondCounts()

    private static var timerToken: UInt64 { UInt64.max }
    private static var readBufferBytes: Int { 64 * 1024 }
    /// The deepest pipeline accepted: Roost reads at most 64 pipelined requests
    /// ahead (`pipelinedRequestsMax`), so more would wait in the socket.
    static var pipelineDepthMax: Int { 64 }

    init(schedule: LoadSchedule, source: Source, seed: UInt64) throws {
        precondition(schedule.connections >= 1, "at least one connection")
        precondition(
            (1...Self.pipelineDepthMax).contains(schedule.pipelineDepth),
            "pipeline depth \(schedule.pipelineDepth) outside 1...\(Self.pipelineDepthMax)")
        self.schedule = schedule
        self.source = source
        report = LoadReport(operationNames: source.operationNames)
        random = SeededRandom(seed: seed)
        epoll = try Epoll()
        let timerFD = try retryingSyscall("timerfd_create") { roost_bench_timerfd_create() }
        timer = FileDescriptor(rawValue: timerFD)
        readBuffer = .allocate(byteCount: Self.readBufferBytes, alignment: 16)
        try epoll.add(timer, events: .readable, token: Self.timerToken)
        _ = roost_bench_minimal_timer_slack()
        for index in 0..<schedule.connections {
            connections.append(Connection(descriptor: try connect(token: index)))
        }
        // Round by round, so that a closed loop spreads over every connection first.
        for _ in 0..<schedule.pipelineDepth { free.append(contentsOf: 0..<schedule.connections) }
        free.reverse()
    }

    deinit {
        for connection in connections { connection.descriptor.close() }
        timer.close()
        readBuffer.deallocate()
    }

    private func connect(token: Int) throws -> FileDescriptor {
        let descriptor: FileDescriptor
        do {
            descriptor = try TCPSocket.connect(host: schedule.host, port: schedule.port)
        } catch {
            throw LoadError("cannot connect to \(schedule.host):\(schedule.port): \(error)")
        }
        try epoll.add(descriptor, events: .readable, token: UInt64(token))
        return descriptor
    }

    /// Runs the schedule to its end (plus the drain time) and returns what it
    /// measured (CPU time is the caller's: it is per process).
    func run() throws -> LoadReport {
        let openLoop = schedule.rate != nil
        let interval = schedule.rate.map { 1e9 / $0 } ?? 0
        let start = schedule.start
        var total = Int.max
        if let rate = schedule.rate {
            total = schedule.requestLimit ?? Int((rate * Double(schedule.sendNanoseconds ?? 0) / 1e9).rounded())
        } else if let limit = schedule.requestLimit {
            total = limit
        }
        report.scheduled = openLoop ? total : 0
        let sendEnd = schedule.sendNanoseconds.map { start + $0 } ?? UInt64.max
        let tick = schedule.tickNanoseconds
        var nextIndex = 0
        var lastAnswer = start
        /// The last send or answer: a run with requests out and no progress for the drain time is cut.
        var lastProgress = start
        var drainEnd = UInt64.max
        func due(_ index: Int) -> UInt64 { start + UInt64(((Double(index) + schedule.phase) * interval).rounded()) }

        while true {
            let now = roost_bench_monotonic_ns()
            advanceSeconds(to: now)
            let sending = now >= start && now < sendEnd && report.sent < total && !source.exhausted
            if openLoop {
                while nextIndex < total && due(nextIndex) <= now && due(nextIndex) < sendEnd {
                    queue.append(due(nextIndex))
                    nextIndex += 1
                }
            } else if sending {
                // Closed loop: every free connection sends now (within the count).
                for _ in 0..<Swift.min(free.count, total - report.sent) { queue.append(now) }
            }
            while queueHead < queue.count, let index = free.popLast() {
                guard write(on: index, intendedAt: queue[queueHead], now: now) else {
                    free.append(index)  // nothing to send now (every device busy): wait for an answer
                    break
                }
                queueHead += 1
                lastProgress = now
            }
            try flushWritten()
            if !openLoop {
                queue.removeAll(keepingCapacity: true)
                queueHead = 0
            }
            compactQueue()
            let inFlight = connections.count * schedule.pipelineDepth - free.count
            let scheduleDone =
                openLoop
                ? nextIndex == total || due(nextIndex) >= sendEnd || source.exhausted
                : now >= sendEnd || report.sent >= total || source.exhausted
            if scheduleDone && queueHead == queue.count && inFlight == 0 { break }
            if scheduleDone && drainEnd == .max { drainEnd = now + schedule.drainNanoseconds }
            if now >= drainEnd { break }
            if inFlight > 0 && now > lastProgress && now - lastProgress > schedule.drainNanoseconds {
                StandardStreams.error(
                    "roost-bench load: no answer for \(schedule.drainNanoseconds / 1_000_000_000) s "
                        + "with \(inFlight) requests out; stopping")
                break
            }

            var wakeAt = drainEnd
            if openLoop && nextIndex < total && queueHead == queue.count && due(nextIndex) < sendEnd {
                let next = due(nextIndex)
                // Round up to the tick grid, so sends due within one tick share a wake-up.
                wakeAt = tick == 0 ? next : start + (next - start + tick - 1) / tick * tick
            } else if now < start {
                wakeAt = start
            } else if now < sendEnd {
                wakeAt = Swift.min(sendEnd, drainEnd)
            }
            if schedule.series != nil { wakeAt = Swift.min(wakeAt, start + UInt64(second + 1) * 1_000_000_000) }
            if wakeAt <= now { wakeAt = now + 1 }
            // Nothing timed to wait for (a count-limited run): epoll's timeout wakes the loop each second.
            if wakeAt == .max { wakeAt = 0 }
            try arm(wakeAt)
            let ready = try epoll.wait(timeoutMs: 1000)
            for slot in 0..<ready {
                let event = epoll.event(at: slot)
                if event.token == Self.timerToken {
                    // No read: the next iteration re-arms the timer, and
                    // timerfd_settime clears the expiry (one syscall less a wake-up).
                    armedDeadline = 0
                    continue
                }
                if try receive(on: Int(event.token)) {
                    lastAnswer = roost_bench_monotonic_ns()
                    lastProgress = lastAnswer
                }
            }
        }
        for index in connections.indices {
            for request in connections[index].outstanding { source.abandoned(request.ticket) }
            report.unanswered += connections[index].outstanding.count
            connections[index].outstanding.removeAll()
        }
        if !openLoop { report.scheduled = report.sent }
        report.unanswered += queue.count - queueHead
        if openLoop && total != Int.max { report.unanswered += Swift.max(0, total - nextIndex) }
        let end = Swift.max(lastAnswer, Swift.min(sendEnd, roost_bench_monotonic_ns()))
        report.elapsedNanoseconds = end > start ? end - start : 0
        publishSecond(endingAt: roost_bench_monotonic_ns())
        return report
    }

    /// Publishes every second that ended before `now`.
    private func advanceSeconds(to now: UInt64) {
        guard schedule.series != nil, now > schedule.start else { return }
        let current = Int((now - schedule.start) / 1_000_000_000)
        while second < current { publishSecond(endingAt: nil) }
    }

    /// Hands the counts of the current second to the series (a whole second,
    /// or the part up to `endingAt` for the last one) and starts the next.
    private func publishSecond(endingAt end: UInt64?) {
        guard let series = schedule.series else { return }
        var duration = 1.0
        if let end {
            let secondStart = schedule.start + UInt64(second) * 1_000_000_000
            duration = end > secondStart ? Swift.min(1.0, Double(end - secondStart) / 1e9) : 0
            if duration <= 0 && secondCounts.answers == 0 { return }
        }
        series.publish(
            SecondSample(
                second: second, duration: duration, answers: secondCounts.answers,
                unexpected: secondCounts.unexpected, failed: secondCounts.failed, latency: secondCounts.latency),
            final: end != nil, thread: schedule.thread)
        second += 1
        secondCounts.answers = 0
        secondCounts.unexpected = 0
        secondCounts.failed = 0
        secondCounts.latency.reset()
    }

    private func compactQueue() {
        if queueHead == queue.count {
            queue.removeAll(keepingCapacity: true)
            queueHead = 0
        } else if queueHead > 4096 && queueHead * 2 > queue.count {
            queue.removeFirst(queueHead)
            queueHead = 0
        }
    }

    /// Arms the timer at `deadline` (0: disarmed).
    private func arm(_ deadline: UInt64) throws {
        guard deadline != armedDeadline else { return }
        _ = try retryingSyscall("timerfd_settime") { roost_bench_timerfd_arm(timer.rawValue, deadline) }
        armedDeadline = deadline
    }

    /// Asks the source for the next request and writes it to connection
    /// `index`, which can take one more; `flushWritten` sends it. Returns
    /// false when the source had none.
    private func write(on index: Int, intendedAt: UInt64, now: UInt64) -> Bool {
        precondition(
            connections[index].outstanding.count < schedule.pipelineDepth,
            "connection \(index) already has \(schedule.pipelineDepth) requests out")
        guard let ticket = source.next(into: &scratch, random: &random) else { return false }
        if connections[index].output.count == connections[index].outputSent && !connections[index].watchingWritable {
            unflushed.append(index)
        }
        connections[index].output.append(contentsOf: scratch)
        connections[index].outstanding.append(Outstanding(intendedAt: intendedAt, sentAt: now, ticket: ticket))
        report.inFlightPerConnectionMax = Swift.max(
            report.inFlightPerConnectionMax, connections[index].outstanding.count)
        report.sent += 1
        report.sentByOperation[ticket.operation] += 1
        report.sendDelay.record(now > intendedAt ? now - intendedAt : 0)
        return true
    }

    /// Sends what this turn wrote, one `send` per connection when the socket takes it.
    private func flushWritten() throws {
        for index in unflushed {
            do { try flush(index) } catch { try reconnect(index) }
        }
        unflushed.removeAll(keepingCapacity: true)
    }

    /// Sends what is left of connection `index`'s output; watches for
    /// writability while some is left (a short send).
    private func flush(_ index: Int) throws {
        let descriptor = connections[index].descriptor
        while connections[index].outputSent < connections[index].output.count {
            let sent = connections[index].outputSent
            let result = try connections[index].output.withUnsafeBytes { bytes in
                let rest = UnsafeRawBufferPointer(rebasing: bytes[sent...])
                return try nonBlockingSyscall("send", subject: "fd \(descriptor.rawValue)") {
                    Glibc.send(descriptor.rawValue, rest.baseAddress, rest.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
                }
            }
            switch result {
            case .done(let count): connections[index].outputSent += count
            case .wouldBlock:
                if !connections[index].watchingWritable {
                    try epoll.modify(descriptor, events: [.readable, .writable], token: UInt64(index))
                    connections[index].watchingWritable = true
                }
                return
            }
        }
        connections[index].output.removeAll(keepingCapacity: true)
        connections[index].outputSent = 0
        if connections[index].watchingWritable {
            try epoll.modify(descriptor, events: .readable, token: UInt64(index))
            connections[index].watchingWritable = false
        }
    }

    /// Reads what connection `index` has and takes out whole answers.
    /// Returns whether an answer completed.
    private func receive(on index: Int) throws -> Bool {
        if connections[index].watchingWritable {
            do { try flush(index) } catch { return try fail(index) }
        }
        var answered = false
        var drained = false
        while !drained {
            let descriptor = connections[index].descriptor
            let result: NonBlockingResult<Int>
            do {
                result = try nonBlockingSyscall("recv", subject: "fd \(descriptor.rawValue)") {
                    Glibc.recv(descriptor.rawValue, readBuffer.baseAddress, readBuffer.count, Int32(MSG_DONTWAIT))
                }
            } catch {
                return try fail(index) || answered
            }
            switch result {
            case .wouldBlock: return answered
            case .done(0): return try fail(index) || answered
            case .done(let count):
                connections[index].reader.feed(UnsafeRawBufferPointer(rebasing: readBuffer[0..<count]))
                // A short read took everything there was: epoll (level-triggered)
                // reports the rest, which saves a recv that would say EAGAIN.
                if count < readBuffer.count { drained = true }
            }
            while true {
                switch connections[index].reader.next() {
                case .needMore: break
                case .malformed(let reason):
                    StandardStreams.error("roost-bench load: connection \(index): \(reason)")
                    report.malformed += 1
                    secondCounts.failed += 1
                    if !connections[index].outstanding.isEmpty {
                        source.abandoned(connections[index].outstanding.removeFirst().ticket)
                    }
                    try reconnect(index)
                    return answered
                case .response(let status, let closes):
                    guard !connections[index].outstanding.isEmpty else {
                        report.malformed += 1
                        secondCounts.failed += 1
                        StandardStreams.error("roost-bench load: connection \(index): an answer nobody asked for")
                        try reconnect(index)
                        return answered
                    }
                    let request = connections[index].outstanding.removeFirst()
                    let now = roost_bench_monotonic_ns()
                    advanceSeconds(to: now)
                    let latency = now > request.intendedAt ? now - request.intendedAt : 0
                    report.latency.record(latency)
                    secondCounts.latency.record(latency)
                    secondCounts.answers += 1
                    report.service.record(now > request.sentAt ? now - request.sentAt : 0)
                    let ticket = request.ticket
                    report.statuses[ticket.operation][status, default: 0] += 1
                    let expected = connections[index].reader.withLastBody { body in
                        source.answered(ticket, status: status, body: body)
                    }
                    if expected {
                        report.expectedAnswers += 1
                    } else {
                        let code = connections[index].reader.withLastBody { body in
                            RequestBytes.firstStringMember("code", in: body).map { String(decoding: $0, as: UTF8.self) }
                        }
                        report.unexpected[
                            UnexpectedAnswer(operation: ticket.operation, status: status, code: code ?? ""),
                            default: 0] += 1
                        secondCounts.unexpected += 1
                    }
                    answered = true
                    if closes {
                        // The server closes after this answer: what was pipelined behind it is lost.
                        try reconnect(index)
                        return answered
                    }
                    free.append(index)
                    continue
                }
                break
            }
        }
        return answered
    }

    /// Counts the requests out on connection `index` as failed and opens a new
    /// connection in its place. Returns false (no answer completed).
    private func fail(_ index: Int) throws -> Bool {
        try reconnect(index)
        return false
    }

    /// Replaces connection `index` with a new one; the requests still out on
    /// it count as failed (their outcome is unknown to the source).
    private func reconnect(_ index: Int) throws {
        let lost = connections[index].outstanding
        report.connectionFailures += lost.count
        secondCounts.failed += lost.count
        for request in lost { source.abandoned(request.ticket) }
        epoll.remove(connections[index].descriptor)
        connections[index].descriptor.close()
        connections[index] = Connection(descriptor: try connect(token: index))
        unflushed.removeAll { $0 == index }
        // Give the new connection its whole depth back, once.
        free.removeAll { $0 == index }
        for _ in 0..<schedule.pipelineDepth { free.append(index) }
    }
}

/// Process CPU time (every thread), from getrusage.
enum ProcessCPU {
    static func seconds() -> (user: Double, system: Double) {
        var usage = rusage()
        getrusage(Int32(RUSAGE_SELF.rawValue), &usage)
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        return (seconds(usage.ru_utime), seconds(usage.ru_stime))
    }
}
