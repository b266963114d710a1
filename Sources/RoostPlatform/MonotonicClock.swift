import Glibc

/// A monotonic time source in nanoseconds, injected so that tests move time
/// by hand.
package protocol MonotonicClock: Sendable {
    /// Nanoseconds from an arbitrary fixed origin; never goes backwards.
    func monotonicNanoseconds() -> UInt64
}

/// `CLOCK_MONOTONIC`.
package struct SystemMonotonicClock: MonotonicClock {
    package init() {}

    package func monotonicNanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }
}
