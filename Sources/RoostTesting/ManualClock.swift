import RoostPlatform
import Synchronization

/// A clock for tests that moves only when told: it hands out
/// `ContinuousClock.Instant`s (the instant type the HTTP connection machine
/// and the event loop use) from a fixed origin, advanced by `advance(by:)`.
/// Code under test takes `now` from it instead of reading a real clock, so a
/// timeout test states the time it means and never sleeps.
package struct ManualClock: Sendable {
    /// The instant the clock started at; only differences from it mean anything.
    package let origin: ContinuousClock.Instant
    /// The current instant.
    package private(set) var now: ContinuousClock.Instant

    /// Creates a clock standing at `origin` (by default an instant read once
    /// from `ContinuousClock`; tests should only compare instants of this clock).
    package init(origin: ContinuousClock.Instant = ContinuousClock.now) {
        self.origin = origin
        now = origin
    }

    /// Time passed since the origin.
    package var elapsed: Duration { now - origin }

    /// Moves the clock forward by `duration` and returns the new instant.
    @discardableResult
    package mutating func advance(by duration: Duration) -> ContinuousClock.Instant {
        precondition(duration >= .zero, "a manual clock cannot go back (advance by \(duration))")
        now += duration
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
