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

/// A source of wall-clock time: milliseconds since the Unix epoch. The
/// engine stamps its change-feed entries with it (spec §9 `at`).
package protocol WallClock: Sendable {
    func wallMilliseconds() -> Int64
}

/// `CLOCK_REALTIME`.
package struct SystemWallClock: WallClock {
    package init() {}

    package func wallMilliseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }
}

extension Duration {
    /// The duration in whole nanoseconds (truncated toward zero), `Int64.min`
    /// or `Int64.max` beyond what 64 bits hold (about 292 years): a limit of
    /// "forever" converts instead of trapping.
    package var wholeNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let (sum, sumOverflow) = whole.addingReportingOverflow(attoseconds / 1_000_000_000)
        return sumOverflow ? (attoseconds < 0 ? .min : .max) : sum
    }
}
