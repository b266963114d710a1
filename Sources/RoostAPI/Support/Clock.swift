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

    package func wallMilliseconds() -> Int64 { SystemWallClock().wallMilliseconds() }

    package func monotonicNanoseconds() -> UInt64 { SystemMonotonicClock().monotonicNanoseconds() }
}
