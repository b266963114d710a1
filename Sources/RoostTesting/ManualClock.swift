import RoostPlatform
import Synchronization

/// A clock for tests that moves only when told: it hands out `LoopInstant`s
/// (the instant type the HTTP connection machine and the event loop use)
/// from a fixed origin, advanced by `advance(by:)`.
/// Code under test takes `now` from it instead of reading a real clock, so a
/// timeout test states the time it means and never sleeps.
package struct ManualClock: Sendable {
    /// The instant the clock started at; only differences from it mean anything.
    package let origin: LoopInstant
    /// The current instant.
    package private(set) var now: LoopInstant

    /// Creates a clock standing at `origin` (by default one second after the
    /// source's zero; tests should only compare instants of this clock).
    package init(origin: LoopInstant = LoopInstant(nanoseconds: 1_000_000_000)) {
        self.origin = origin
        now = origin
    }

    /// Time passed since the origin.
    package var elapsed: Duration { now - origin }

    /// Moves the clock forward by `duration` and returns the new instant.
    @discardableResult
    package mutating func advance(by duration: Duration) -> LoopInstant {
        precondition(duration >= .zero, "a manual clock cannot go back (advance by \(duration))")
        now = now + duration
        return now
    }
}

/// A monotonic clock for tests that moves only when told (rate limits:
/// `RateLimiter`, the shards' per-token limit, the API's per-address limit).
package final class ManualMonotonicClock: MonotonicClock {
    private let nanoseconds: Mutex<UInt64>

    /// Creates a clock standing at `start` nanoseconds (any origin: only
    /// differences mean anything).
    package init(start: UInt64 = 1_000_000_000) {
        nanoseconds = Mutex(start)
    }

    package func monotonicNanoseconds() -> UInt64 {
        nanoseconds.withLock { $0 }
    }

    /// Moves the clock forward by `duration`.
    package func advance(by duration: Duration) {
        precondition(duration >= .zero, "a manual clock cannot go back (advance by \(duration))")
        nanoseconds.withLock { $0 += UInt64(duration.wholeNanoseconds) }
    }
}

/// A `Clock` for tests whose `sleep` returns only when the test moves the
/// clock past the sleeper's deadline (`advance(by:)`), for code that waits
/// through a `Clock` it is given (the inactivity sweeper's period): the test
/// states the time it means, and nothing sleeps for real.
package final class SteppedClock: Clock, Sendable {
    package struct Instant: InstantProtocol {
        /// Time since the clock's origin.
        let offset: Duration

        package func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        package func duration(to other: Instant) -> Duration { other.offset - offset }
        package static func < (left: Instant, right: Instant) -> Bool { left.offset < right.offset }
    }

    private struct Sleeper {
        let id: UInt64
        let deadline: Instant
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now = Instant(offset: .zero)
        var sleepers: [Sleeper] = []
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())

    package init() {}

    package var now: Instant { state.withLock { $0.now } }
    package var minimumResolution: Duration { .nanoseconds(1) }

    /// Tasks sleeping on the clock now (a test waits for this before moving it).
    package var sleeperCount: Int { state.withLock { $0.sleepers.count } }

    package func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        let id = state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let dueNow = state.withLock { state -> Bool in
                    if deadline <= state.now || Task.isCancelled { return true }
                    state.sleepers.append(Sleeper(id: id, deadline: deadline, continuation: continuation))
                    return false
                }
                if dueNow {
                    if Task.isCancelled {
                        continuation.resume(throwing: CancellationError())
                    } else {
                        continuation.resume()
                    }
                }
            }
        } onCancel: {
            let cancelled = state.withLock { state -> Sleeper? in
                guard let index = state.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return state.sleepers.remove(at: index)
            }
            cancelled?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves the clock forward by `duration` and wakes every sleeper whose deadline it reached.
    package func advance(by duration: Duration) {
        precondition(duration >= .zero, "a stepped clock cannot go back (advance by \(duration))")
        let due = state.withLock { state -> [Sleeper] in
            state.now = state.now.advanced(by: duration)
            let now = state.now
            let due = state.sleepers.filter { $0.deadline <= now }
            state.sleepers.removeAll { $0.deadline <= now }
            return due
        }
        for sleeper in due { sleeper.continuation.resume() }
    }
}
