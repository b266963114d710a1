import Synchronization

/// One thread's counts for one second of a run.
struct SecondSample: Sendable {
    var second: Int
    /// The part of the second the counts cover (1 except for the last).
    var duration: Double
    var answers: Int
    var unexpected: Int
    var failed: Int
    var latency: LatencyHistogram
}

/// One second of a run over every thread: what the progress line shows and
/// the result file's series holds.
struct SecondSummary: Sendable {
    var second: Int
    var duration: Double
    var answers: Int
    var unexpected: Int
    var failed: Int
    var p50Nanoseconds: UInt64
    var p90Nanoseconds: UInt64
    var p99Nanoseconds: UInt64
    var maxNanoseconds: UInt64

    /// Answers per second over the covered part.
    var rate: Double { duration > 0 ? Double(answers) / duration : 0 }
}

/// Collects the threads' per-second samples (values, under a lock) and merges
/// each second once every thread has reported it, so that a second's
/// percentiles are over all its answers. Holds a histogram only for seconds
/// still waiting for a thread (a few); keeps at most `secondsMax` summaries.
final class SeriesCollector: Sendable {
    /// The longest series kept (an hour of seconds); later seconds are counted
    /// in the totals but not in the series.
    static let secondsMax = 3600

    private struct Pending {
        var reports = 0
        var sample: SecondSample
    }

    private struct State {
        var pending: [Int: Pending] = [:]
        var finished: [SecondSummary] = []
        /// How many of `finished` the progress printer has taken.
        var taken = 0
        /// Threads that published their last second.
        var threadsDone = 0
    }

    let threads: Int
    private let state = Mutex(State())

    init(threads: Int) {
        precondition(threads >= 1, "at least one thread")
        self.threads = threads
    }

    /// Adds one thread's counts for a second; `final`: the thread's last.
    func publish(_ sample: SecondSample, final: Bool, thread: Int) {
        state.withLock { state in
            if final { state.threadsDone += 1 }
            guard sample.second < Self.secondsMax else { return }
            var entry = state.pending[sample.second] ?? Pending(sample: sample)
            if entry.reports > 0 {
                entry.sample.answers += sample.answers
                entry.sample.unexpected += sample.unexpected
                entry.sample.failed += sample.failed
                entry.sample.duration = max(entry.sample.duration, sample.duration)
                entry.sample.latency.merge(sample.latency)
            }
            entry.reports += 1
            state.pending[sample.second] = entry
            Self.finishReady(&state, threads: threads)
        }
    }

    /// Finishes the seconds every thread reported (or, once every thread is
    /// done, all of them), in order.
    private static func finishReady(_ state: inout State, threads: Int) {
        while let next = state.pending.keys.min(),
            let entry = state.pending[next], entry.reports >= threads || state.threadsDone >= threads
        {
            state.pending[next] = nil
            let latency = entry.sample.latency
            state.finished.append(
                SecondSummary(
                    second: next, duration: entry.sample.duration, answers: entry.sample.answers,
                    unexpected: entry.sample.unexpected, failed: entry.sample.failed,
                    p50Nanoseconds: latency.percentile(50), p90Nanoseconds: latency.percentile(90),
                    p99Nanoseconds: latency.percentile(99), maxNanoseconds: latency.max))
        }
    }

    /// Returns the seconds finished since the last call (for the progress line).
    func takeFinished() -> [SecondSummary] {
        state.withLock { state in
            let new = Array(state.finished[state.taken...])
            state.taken = state.finished.count
            return new
        }
    }

    /// Every second finished so far, in order.
    var all: [SecondSummary] {
        state.withLock { state in
            Self.finishReady(&state, threads: threads)
            return state.finished
        }
    }
}
