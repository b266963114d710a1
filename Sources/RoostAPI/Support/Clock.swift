import Glibc
import RoostPlatform

/// The time source of the API: wall-clock milliseconds for timestamps and a
/// monotonic reading (`MonotonicClock`) for rate limits. Injected so that
/// tests can move time.
package protocol APIClock: MonotonicClock {
    /// Milliseconds since the Unix epoch (one read per request).
    func wallMilliseconds() -> Int64
}

/// The real clocks of the machine.
package struct SystemClock: APIClock {
    package init() {}

    package func wallMilliseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }

    package func monotonicNanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }
}
