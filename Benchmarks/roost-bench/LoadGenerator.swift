import CBenchShims
import Glibc
import RoostPlatform
import RoostTesting

/// What `roost-bench load` is asked to do.
struct LoadOptions {
    var host = "127.0.0.1"
    var port: UInt16 = 0
    var key = ""
    /// Requests per second to schedule (open loop); nil: closed loop, each
    /// connection sends its next request as soon as the answer is in.
    var rate: Double? = nil
    var seconds: Double = 10
    var connections = 64
    var tokens = 1_000_000
    var people = 200_000
    var seed: UInt64 = 1
    /// How long, after the last scheduled send, answers are waited for.
    var drainSeconds: Double = 5
    /// Open loop: the generator wakes for due sends at most once per tick
    /// (0: at every due time). A send is then up to one tick late, and its
    /// latency still counts from when it was due; fewer wake-ups cost less CPU.
    var tickMicroseconds = 0
    /// Unanswered or unexpected answers above this fraction fail the run.
    var errorFractionMax = 0.001

    /// The largest connection count accepted.
    static let connectionsMax = 4096
    /// The most requests one run may schedule (bounds the queue of intended
    /// sends: 8 bytes each, 80 MB if the server answers nothing at all).
    static let requestsMax = 10_000_000

    /// Parses `--url http://HOST:PORT --key KEY [--rate R] [--seconds S]
    /// [--connections N] [--tokens N] [--people N] [--seed N] [--drain S] [--tick-us N]`.
    static func parse(_ arguments: ArraySlice<String>) throws(LoadError) -> LoadOptions {
        var options = LoadOptions()
        var rest = arguments
        while let name = rest.popFirst() {
            guard let value = rest.popFirst() else { throw LoadError("\(name) needs a value") }
            switch name {
            case "--url": (options.host, options.port) = try parseURL(value)
            case "--key": options.key = value
            case "--rate": options.rate = try number(name, value, Double(value), above: 0)
            case "--seconds": options.seconds = try number(name, value, Double(value), above: 0)
            case "--connections": options.connections = try number(name, value, Int(value), above: 0)
            case "--tokens": options.tokens = try number(name, value, Int(value), above: 0)
            case "--people": options.people = try number(name, value, Int(value), above: 0)
            case "--seed": options.seed = try number(name, value, UInt64(value), above: 0)
            case "--drain": options.drainSeconds = try number(name, value, Double(value), above: 0)
            case "--tick-us": options.tickMicroseconds = try number(name, value, Int(value), above: -1)
            default: throw LoadError("unknown option \(name)")
            }
        }
        guard options.port != 0 else { throw LoadError("--url http://HOST:PORT is required") }
        guard !options.key.isEmpty else { throw LoadError("--key is required") }
        guard options.connections <= connectionsMax else {
            throw LoadError("--connections \(options.connections) above \(connectionsMax)")
        }
        guard options.tokens < Int(UInt32.max) else { throw LoadError("--tokens must be below 2^32") }
        if let rate = options.rate, rate * options.seconds > Double(requestsMax) {
            throw LoadError("--rate × --seconds above \(requestsMax) requests")
        }
        return options
    }

    private static func number<Value: Comparable>(
        _ name: String, _ text: String, _ value: Value?, above floor: Value
    ) throws(LoadError) -> Value {
        guard let value, value > floor else { throw LoadError("\(name) \(text): expected a number above \(floor)") }
        return value
    }

    private static func parseURL(_ url: String) throws(LoadError) -> (String, UInt16) {
        guard url.hasPrefix("http://") else { throw LoadError("--url \(url): only http://HOST:PORT") }
        var authority = url.dropFirst("http://".count)
        if authority.hasSuffix("/") { authority = authority.dropLast() }
        let parts = authority.split(separator: ":")
        guard parts.count == 2, let port = UInt16(parts[1]), port != 0 else {
            throw LoadError("--url \(url): expected http://IPV4:PORT")
        }
        return (String(parts[0]), port)
    }
}

/// A load run that cannot start or go on (bad option, refused connection).
struct LoadError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// What one run measured.
struct LoadReport {
    var scheduled = 0
    var sent = 0
    /// Answers with an expected status (200 or 201).
    var succeeded = 0
    /// Answers by status, expected or not.
    var statuses: [Int: Int] = [:]
    /// Requests whose connection failed or closed before the answer.
    var connectionFailures = 0
    /// Requests scheduled but not answered when the drain time ran out.
    var unanswered = 0
    var malformed = 0
    /// From the intended send time to the whole answer read (open loop);
    /// from the send in closed loop.
    var latency = LatencyHistogram()
    /// From the intended send time to the actual send: waiting for a free
    /// connection, plus the generator's own lateness.
    var sendDelay = LatencyHistogram()
    /// From the actual send to the whole answer read (what a closed-loop
    /// tool would report; hides queueing behind a stalled connection).
    var service = LatencyHistogram()
    /// First scheduled send to the last answer read, or to the end of the
    /// schedule if that is later.
    var elapsedNanoseconds: UInt64 = 0
    var userCPUSeconds = 0.0
    var systemCPUSeconds = 0.0

    /// Answers with a status other than 200/201, malformed answers, failed
    /// connections and unanswered requests.
    var failures: Int {
        statuses.filter { $0.key != 200 && $0.key != 201 }.values.reduce(0, +) + connectionFailures + unanswered
            + malformed
    }
}

/// `roost-bench load`: registrations (`RegistrationWorkload`) over keep-alive
/// HTTP/1.1 connections, one request in flight per connection, driven by one
/// thread over epoll.
///
/// Open loop (`--rate`): request k is due at start + k/rate, whatever happened
/// before. Due requests queue in order and go out on the next free connection;
/// a request's latency counts from when it was due, not from when a
/// connection took it, so a server stall shows in full (no coordinated
/// omission). The loop sleeps on a timerfd armed at the next due time (timer
/// slack 1 ns), so it is not late by the millisecond granularity of
/// epoll_wait. Closed loop (no `--rate`): every connection sends again as
/// soon as its answer is in; latency counts from the send.
final class LoadGenerator {
    private struct Connection {
        var descriptor: FileDescriptor
        var reader = HTTPResponseReader()
        var request: [UInt8] = []
        /// Bytes of `request` already sent.
        var requestSent = 0
        /// When the in-flight request was due; nil when the connection is free.
        var intendedAt: UInt64? = nil
        /// When it was sent.
        var sentAt: UInt64 = 0
    }

    private let options: LoadOptions
    private let workload: RegistrationWorkload
    private let epoll: Epoll
    private let timer: FileDescriptor
    private var connections: [Connection] = []
    private var free: [Int] = []
    /// Intended send times of due requests that no connection has taken yet, oldest first.
    private var queue: [UInt64] = []
    private var queueHead = 0
    private var random: SeededRandom
    private var report = LoadReport()
    private var readBuffer: UnsafeMutableRawBufferPointer
    private var armedDeadline: UInt64 = 0

    private static let timerToken = UInt64.max
    private static let readBufferBytes = 64 * 1024

    init(options: LoadOptions) throws {
        self.options = options
        workload = RegistrationWorkload(
            host: options.host, port: options.port, key: options.key, tokens: options.tokens, people: options.people)
        random = SeededRandom(seed: options.seed)
        epoll = try Epoll()
        let timerFD = try retryingSyscall("timerfd_create") { roost_bench_timerfd_create() }
        timer = FileDescriptor(rawValue: timerFD)
        readBuffer = .allocate(byteCount: Self.readBufferBytes, alignment: 16)
        try epoll.add(timer, events: .readable, token: Self.timerToken)
        _ = roost_bench_minimal_timer_slack()
        for index in 0..<options.connections {
            connections.append(Connection(descriptor: try connect(token: index)))
            free.append(index)
        }
    }

    deinit {
        for connection in connections { connection.descriptor.close() }
        timer.close()
        readBuffer.deallocate()
    }

    private func connect(token: Int) throws -> FileDescriptor {
        let descriptor = try TCPSocket.connect(host: options.host, port: options.port)
        try epoll.add(descriptor, events: .readable, token: UInt64(token))
        return descriptor
    }

    /// Runs the schedule to its end (plus the drain time) and returns what it measured.
    func run() throws -> LoadReport {
        let cpuBefore = Self.cpuSeconds()
        let openLoop = options.rate != nil
        let interval = options.rate.map { 1e9 / $0 } ?? 0
        let total = options.rate.map { Int(($0 * options.seconds).rounded()) } ?? Int.max
        report.scheduled = openLoop ? total : 0
        let start = roost_bench_monotonic_ns() + 10_000_000
        let sendEnd = start + UInt64(options.seconds * 1e9)
        let drainEnd = sendEnd + UInt64(options.drainSeconds * 1e9)
        let tick = UInt64(options.tickMicroseconds) * 1000
        var nextIndex = 0
        var lastAnswer = start
        func due(_ index: Int) -> UInt64 { start + UInt64((Double(index) * interval).rounded()) }

        while true {
            let now = roost_bench_monotonic_ns()
            if openLoop {
                while nextIndex < total && due(nextIndex) <= now {
                    queue.append(due(nextIndex))
                    nextIndex += 1
                }
            } else if now >= start && now < sendEnd {
                // Closed loop: every free connection sends now.
                for _ in 0..<free.count { queue.append(now) }
            }
            while queueHead < queue.count, let index = free.popLast() {
                try send(on: index, intendedAt: queue[queueHead], now: now)
                queueHead += 1
            }
            compactQueue()
            let inFlight = connections.count - free.count
            let scheduleDone = openLoop ? nextIndex == total : now >= sendEnd
            if scheduleDone && queueHead == queue.count && inFlight == 0 { break }
            if now >= drainEnd { break }

            let wakeAt: UInt64
            if openLoop && nextIndex < total && queueHead == queue.count {
                let next = due(nextIndex)
                // Round up to the tick grid, so sends due within one tick share a wake-up.
                wakeAt = tick == 0 ? next : start + (next - start + tick - 1) / tick * tick
            } else if !openLoop && now < start {
                wakeAt = start
            } else {
                wakeAt = !openLoop && now < sendEnd ? sendEnd : drainEnd
            }
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
                if try receive(on: Int(event.token)) { lastAnswer = roost_bench_monotonic_ns() }
            }
        }
        if !openLoop { report.scheduled = report.sent }
        report.unanswered = (connections.count - free.count) + (queue.count - queueHead)
        if openLoop { report.unanswered += total - nextIndex }
        // The schedule spans `seconds`; answers after it (a backlog) stretch the span.
        report.elapsedNanoseconds = Swift.max(lastAnswer, sendEnd) - start
        let cpuAfter = Self.cpuSeconds()
        report.userCPUSeconds = cpuAfter.user - cpuBefore.user
        report.systemCPUSeconds = cpuAfter.system - cpuBefore.system
        return report
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

    private func arm(_ deadline: UInt64) throws {
        guard deadline != armedDeadline else { return }
        _ = try retryingSyscall("timerfd_settime") { roost_bench_timerfd_arm(timer.rawValue, deadline) }
        armedDeadline = deadline
    }

    /// Builds the next request and sends it on connection `index`, which is free.
    private func send(on index: Int, intendedAt: UInt64, now: UInt64) throws {
        precondition(connections[index].intendedAt == nil, "connection \(index) already has a request in flight")
        let device = Int(random.next() % UInt64(options.tokens))
        workload.write(index: device, into: &connections[index].request)
        connections[index].requestSent = 0
        connections[index].intendedAt = intendedAt
        connections[index].sentAt = now
        report.sent += 1
        report.sendDelay.record(now > intendedAt ? now - intendedAt : 0)
        do { try flush(index) } catch { _ = try fail(index) }
    }

    /// Sends what is left of connection `index`'s request; watches for
    /// writability while some is left (a short send).
    private func flush(_ index: Int) throws {
        let descriptor = connections[index].descriptor
        let wasPartial = connections[index].requestSent > 0
        while connections[index].requestSent < connections[index].request.count {
            let sent = connections[index].requestSent
            let result = try connections[index].request.withUnsafeBytes { bytes in
                let rest = UnsafeRawBufferPointer(rebasing: bytes[sent...])
                return try nonBlockingSyscall("send", subject: "fd \(descriptor.rawValue)") {
                    Glibc.send(descriptor.rawValue, rest.baseAddress, rest.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
                }
            }
            switch result {
            case .done(let count): connections[index].requestSent += count
            case .wouldBlock:
                try epoll.modify(descriptor, events: [.readable, .writable], token: UInt64(index))
                return
            }
        }
        if wasPartial { try epoll.modify(descriptor, events: .readable, token: UInt64(index)) }
    }

    /// Reads what connection `index` has and takes out whole answers.
    /// Returns whether an answer completed.
    private func receive(on index: Int) throws -> Bool {
        if connections[index].requestSent < connections[index].request.count && connections[index].intendedAt != nil {
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
                    connections[index].intendedAt = nil
                    try reconnect(index)
                    return answered
                case .response(let status, let closes):
                    guard let intendedAt = connections[index].intendedAt else {
                        report.malformed += 1
                        StandardStreams.error("roost-bench load: connection \(index): an answer nobody asked for")
                        try reconnect(index)
                        return answered
                    }
                    let now = roost_bench_monotonic_ns()
                    report.latency.record(now > intendedAt ? now - intendedAt : 0)
                    let sentAt = connections[index].sentAt
                    report.service.record(now > sentAt ? now - sentAt : 0)
                    report.statuses[status, default: 0] += 1
                    if status == 200 || status == 201 { report.succeeded += 1 }
                    connections[index].intendedAt = nil
                    answered = true
                    if closes {
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

    /// Counts the in-flight request of connection `index` as failed and opens
    /// a new connection in its place. Returns false (no answer completed).
    private func fail(_ index: Int) throws -> Bool {
        if connections[index].intendedAt != nil {
            report.connectionFailures += 1
            connections[index].intendedAt = nil
        }
        try reconnect(index)
        return false
    }

    private func reconnect(_ index: Int) throws {
        epoll.remove(connections[index].descriptor)
        connections[index].descriptor.close()
        connections[index] = Connection(descriptor: try connect(token: index))
        if !free.contains(index) { free.append(index) }
    }

    private static func cpuSeconds() -> (user: Double, system: Double) {
        var usage = rusage()
        getrusage(Int32(RUSAGE_SELF.rawValue), &usage)
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        return (seconds(usage.ru_utime), seconds(usage.ru_stime))
    }
}

/// `roost-bench load …`: runs `LoadGenerator` and prints what it measured;
/// exits 1 when more than 0.1 % of the requests failed.
enum LoadCommand {
    static func run(_ arguments: ArraySlice<String>) -> Int32 {
        let options: LoadOptions
        do {
            options = try LoadOptions.parse(arguments)
        } catch {
            StandardStreams.error("roost-bench load: \(error)")
            StandardStreams.error(
                "usage: roost-bench load --url http://127.0.0.1:PORT --key KEY [--rate R] [--seconds S] "
                    + "[--connections 64] [--tokens 1000000] [--people 200000] [--seed 1] [--drain 5] [--tick-us 0]")
            return 2
        }
        let report: LoadReport
        do {
            report = try LoadGenerator(options: options).run()
        } catch {
            StandardStreams.error("roost-bench load: \(error)")
            return 1
        }
        print(render(report, options: options))
        let requests = max(report.scheduled, 1)
        let failed = Double(report.failures) / Double(requests) > options.errorFractionMax
        if failed {
            StandardStreams.error(
                "roost-bench load: FAILED: \(report.failures) of \(requests) requests failed "
                    + "(more than \(options.errorFractionMax * 100) %)")
        }
        return failed ? 1 : 0
    }

    /// The human lines, then one `result` line of key=value pairs for scripts.
    static func render(_ report: LoadReport, options: LoadOptions) -> String {
        let seconds = Double(report.elapsedNanoseconds) / 1e9
        let achieved = seconds > 0 ? Double(report.latency.count) / seconds : 0
        let cpu = report.userCPUSeconds + report.systemCPUSeconds
        let cpuPercent = seconds > 0 ? cpu / seconds * 100 : 0
        func us(_ nanoseconds: UInt64) -> String { fixed(Double(nanoseconds) / 1000, 1) }
        let mode = options.rate.map { "open loop at \(fixed($0, 0)) req/s" } ?? "closed loop"
        let statuses = report.statuses.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(
            separator: ", ")
        let latency = report.latency
        let tick = options.rate != nil && options.tickMicroseconds > 0 ? ", tick \(options.tickMicroseconds) µs" : ""
        var lines = [
            "load: \(mode)\(tick) for \(fixed(options.seconds, 1)) s over \(options.connections) connections, "
                + "\(options.tokens) tokens, \(options.people) people, seed \(options.seed)",
            "requests: scheduled \(report.scheduled), sent \(report.sent), answered \(latency.count) "
                + "(\(statuses)), failed \(report.failures) (connection \(report.connectionFailures), "
                + "unanswered \(report.unanswered), malformed \(report.malformed))",
            "achieved: \(fixed(achieved, 0)) answers/s over \(fixed(seconds, 3)) s",
            "latency µs (\(options.rate == nil ? "from send" : "from intended send")): p50 \(us(latency.percentile(50))) "
                + "p90 \(us(latency.percentile(90))) p99 \(us(latency.percentile(99))) "
                + "p99.9 \(us(latency.percentile(99.9))) max \(us(latency.max)) mean \(fixed(latency.mean / 1000, 1))",
            "send delay µs (intended → sent): p50 \(us(report.sendDelay.percentile(50))) "
                + "p99 \(us(report.sendDelay.percentile(99))) max \(us(report.sendDelay.max)); "
                + "service µs (sent → answered): p50 \(us(report.service.percentile(50))) "
                + "p99 \(us(report.service.percentile(99))) max \(us(report.service.max))",
            "generator cpu: \(fixed(cpu, 2)) s (user \(fixed(report.userCPUSeconds, 2)), "
                + "sys \(fixed(report.systemCPUSeconds, 2))) = \(fixed(cpuPercent, 0)) % of one core"
                + (cpuPercent > 80 ? " — the generator may be the bottleneck" : ""),
        ]
        lines.append(
            "result rate=\(fixed(achieved, 0)) target=\(fixed(options.rate ?? 0, 0)) answered=\(latency.count) "
                + "failed=\(report.failures) p50_us=\(us(latency.percentile(50))) p90_us=\(us(latency.percentile(90))) "
                + "p99_us=\(us(latency.percentile(99))) p999_us=\(us(latency.percentile(99.9))) "
                + "max_us=\(us(latency.max)) send_delay_p99_us=\(us(report.sendDelay.percentile(99))) "
                + "service_p99_us=\(us(report.service.percentile(99))) "
                + "cpu_pct=\(fixed(cpuPercent, 0))")
        return lines.joined(separator: "\n")
    }

    /// `value` with `digits` decimals, without Foundation.
    static func fixed(_ value: Double, _ digits: Int) -> String {
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        let scaled = Int((value * scale).rounded())
        if digits == 0 { return String(scaled) }
        let sign = scaled < 0 ? "-" : ""
        let magnitude = abs(scaled)
        let whole = magnitude / Int(scale)
        let fraction = String(magnitude % Int(scale))
        return "\(sign)\(whole).\(String(repeating: "0", count: digits - fraction.count))\(fraction)"
    }
}
