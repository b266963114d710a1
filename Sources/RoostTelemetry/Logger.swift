import Dispatch
import Glibc
import RoostPlatform
import Synchronization

/// The structured logger: one JSON object a line (`LogLine`), written to
/// stderr by a thread of its own (`roost-log`), so that no event loop, the
/// log's I/O thread or anyone else ever blocks on a slow or stuck stderr.
///
/// A line is queued in one of `lanes` bounded byte buffers (chosen by the
/// calling thread, so that loops rarely meet on a lock); a full lane drops
/// the line and counts it, and the writer says how many it lost
/// (`log.dropped`) once it catches up. Warnings and errors are rate-limited
/// per event name: a burst of `errorLinesBurstMax`, then
/// `errorLinesPerSecond`; the next line written for that event carries
/// `log.suppressed`. Lines are lazy: the fields are built only when the line
/// will be written. No key, token or secret is ever given to a logger
/// (docs/metrics-and-logs.md).
package final class Logger: Sendable {
    /// Lanes of queued lines; a thread always uses the same one.
    package static let lanes = 8
    /// Bytes queued per lane before lines are dropped (2 MiB over all lanes).
    package static let laneBytesMax = 256 * 1024
    /// Warning and error lines of one event written at once before the rate applies.
    package static let errorLinesBurstMax = 20
    /// Warning and error lines of one event written per second after a burst.
    package static let errorLinesPerSecond = 2
    /// Distinct event names rate-limited; further names share one budget.
    package static let rateLimitedEventsMax = 256
    /// Lines a memory logger keeps (tests); older ones are dropped.
    package static let memoryLinesMax = 100_000

    /// Where lines go.
    package enum Output: Sendable {
        /// A file descriptor (stderr: 2), written by the logger's thread.
        case fileDescriptor(Int32)
        /// Kept in memory, for tests (`lines`).
        case memory
    }

    /// The process's logger: stderr.
    package static let standard = Logger(output: .fileDescriptor(2))

    private struct Lane {
        var bytes: [UInt8] = []
        var dropped: UInt64 = 0
    }

    /// One lane's lock and bytes, allocated apart from the others.
    private final class LaneBox: Sendable {
        let lane = Mutex(Lane())
    }

    private struct Budget {
        var tokens: Double
        /// `clock`'s reading at the last refill, in nanoseconds.
        var refilledAt: UInt64
        var suppressed: UInt64 = 0
    }

    private let output: Output
    private let queued: [LaneBox]
    private let writeLock = Mutex<Void>(())
    private let budgets = Mutex<[String: Budget]>([:])
    private let memory = Mutex<[String]>([])
    private let wakeOwed = Atomic<Bool>(false)
    private let wake = DispatchSemaphore(value: 0)
    private let writerState = Atomic<Int>(0)  // 0 not started, 1 running, 2 could not start
    private let droppedLines = Atomic<UInt64>(0)
    private let suppressedLines = Atomic<UInt64>(0)
    /// The time the rate limit refills by: the machine's monotonic clock, or
    /// a test's manual one (so that a test of the limit need not wait for it).
    private let clock: any MonotonicClock

    package init(output: Output, clock: any MonotonicClock = SystemMonotonicClock()) {
        self.output = output
        self.clock = clock
        queued = (0..<Self.lanes).map { _ in LaneBox() }
    }

    /// Lines dropped because their lane was full (stderr too slow), since start.
    package var droppedLineCount: UInt64 { droppedLines.load(ordering: .relaxed) }
    /// Warning and error lines not written because of the rate limit, since start.
    package var suppressedLineCount: UInt64 { suppressedLines.load(ordering: .relaxed) }

    /// The lines a memory logger kept, oldest first, without their newline.
    package var lines: [String] { memory.withLock { $0 } }

    /// Logs one line: `fields` runs only if the line is written (not rate-limited).
    /// `wallMilliseconds` is the line's time when the caller already read the
    /// clock (a request's one wall-clock read), else now.
    package func log(
        _ level: LogLevel, _ event: String, wallMilliseconds: Int64? = nil, _ fields: (inout LogLine) -> Void = { _ in }
    ) {
        var suppressedBefore: UInt64 = 0
        if level >= .warning {
            guard let earlier = admit(event) else { return }
            suppressedBefore = earlier
        }
        var line = LogLine(level: level, event: event, wallMilliseconds: wallMilliseconds ?? Logger.wallMilliseconds())
        fields(&line)
        if suppressedBefore > 0 { line.field("log.suppressed", suppressedBefore) }
        enqueue(line.finished())
    }

    /// An information line.
    package func info(_ event: String, _ fields: (inout LogLine) -> Void = { _ in }) { log(.info, event, fields) }
    /// A warning line (rate-limited).
    package func warning(_ event: String, _ fields: (inout LogLine) -> Void = { _ in }) { log(.warning, event, fields) }
    /// An error line (rate-limited).
    package func error(_ event: String, _ fields: (inout LogLine) -> Void = { _ in }) { log(.error, event, fields) }

    /// Writes every line queued before the call, on the calling thread, and
    /// returns once they are written (start-up before `listening on`, exit).
    package func flush() {
        guard case .fileDescriptor(let descriptor) = output else { return }
        writeLock.withLock { _ in writeQueued(to: descriptor) }
    }

    // MARK: - Rate limit

    /// Returns nil when the line must not be written, else the lines of this
    /// event suppressed since the last one written.
    private func admit(_ event: String) -> UInt64? {
        let now = clock.monotonicNanoseconds()
        let burst = Double(Self.errorLinesBurstMax)
        let verdict: UInt64? = budgets.withLock { budgets in
            let name = budgets[event] != nil || budgets.count < Self.rateLimitedEventsMax ? event : "log.other"
            var budget = budgets[name] ?? Budget(tokens: burst, refilledAt: now)
            // Signed: another thread may have refilled with a later reading
            // between this one and the lock (a slightly negative time).
            let elapsedSeconds = Double(Int64(bitPattern: now &- budget.refilledAt)) / 1e9
            budget.tokens = min(burst, budget.tokens + elapsedSeconds * Double(Self.errorLinesPerSecond))
            budget.refilledAt = now
            defer { budgets[name] = budget }
            guard budget.tokens >= 1 else {
                budget.suppressed += 1
                return nil
            }
            budget.tokens -= 1
            let suppressed = budget.suppressed
            budget.suppressed = 0
            return suppressed
        }
        if verdict == nil { suppressedLines.wrappingAdd(1, ordering: .relaxed) }
        return verdict
    }

    // MARK: - Queue and writer

    private func enqueue(_ line: [UInt8]) {
        switch output {
        case .memory:
            memory.withLock { kept in
                if kept.count >= Self.memoryLinesMax { kept.removeFirst(kept.count / 2) }
                kept.append(String(decoding: line.dropLast(), as: UTF8.self))
            }
        case .fileDescriptor(let descriptor):
            guard startWriterIfNeeded() else {
                // No thread could be had: write here, as before the logger existed.
                writeLock.withLock { _ in try? DurableFile.writeAll(fd: descriptor, bytes: line, subject: "log") }
                return
            }
            let lane = Self.laneOfCurrentThread()
            let accepted = queued[lane].lane.withLock { lane in
                guard lane.bytes.count + line.count <= Self.laneBytesMax else {
                    lane.dropped += 1
                    return false
                }
                lane.bytes.append(contentsOf: line)
                return true
            }
            if !accepted { droppedLines.wrappingAdd(1, ordering: .relaxed) }
            // One wake-up per batch the writer takes, not per line.
            if !wakeOwed.load(ordering: .relaxed) && !wakeOwed.exchange(true, ordering: .acquiringAndReleasing) {
                wake.signal()
            }
        }
    }

    /// Starts the writer thread on first use; false when none could be started.
    private func startWriterIfNeeded() -> Bool {
        switch writerState.load(ordering: .acquiring) {
        case 1: return true
        case 2: return false
        default: break
        }
        guard writerState.compareExchange(expected: 0, desired: 1, ordering: .acquiringAndReleasing).exchanged else {
            return writerState.load(ordering: .acquiring) == 1
        }
        guard case .fileDescriptor(let descriptor) = output else { return true }
        do {
            let thread = try PlatformThread.spawn(name: "roost-log") { [self] in
                while true {
                    wake.wait()
                    // Reset before taking: a line queued after this owes a new wake-up.
                    wakeOwed.store(false, ordering: .releasing)
                    writeLock.withLock { _ in writeQueued(to: descriptor) }
                }
            }
            thread.detach()
            return true
        } catch {
            writerState.store(2, ordering: .releasing)
            return false
        }
    }

    /// Takes every lane's bytes and writes them, then a `log.dropped` line if
    /// lines were lost. Runs under `writeLock`.
    private func writeQueued(to descriptor: Int32) {
        var dropped: UInt64 = 0
        for lane in queued {
            let (bytes, lost) = lane.lane.withLock { lane -> ([UInt8], UInt64) in
                var taken: [UInt8] = []
                swap(&taken, &lane.bytes)
                defer { lane.dropped = 0 }
                return (taken, lane.dropped)
            }
            dropped += lost
            if !bytes.isEmpty { try? DurableFile.writeAll(fd: descriptor, bytes: bytes, subject: "log") }
        }
        if dropped > 0 {
            var line = LogLine(level: .warning, event: "log.dropped", wallMilliseconds: Logger.wallMilliseconds())
            line.field("log.lines", dropped)
            line.field("log.lane_bytes_max", Self.laneBytesMax)
            try? DurableFile.writeAll(fd: descriptor, bytes: line.finished(), subject: "log")
        }
    }

    private static func laneOfCurrentThread() -> Int {
        var hash = UInt64(UInt(bitPattern: Int(bitPattern: UInt(pthread_self()))))
        hash = (hash ^ (hash >> 29)) &* 0xBF58_476D_1CE4_E5B9
        hash ^= hash >> 32
        return Int(hash % UInt64(lanes))
    }

    /// Milliseconds since the Unix epoch (CLOCK_REALTIME).
    package static func wallMilliseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }
}
