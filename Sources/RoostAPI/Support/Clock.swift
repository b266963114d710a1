import Glibc
import RoostPlatform

/// The time source of the API: wall-clock milliseconds for timestamps
/// (`WallClock`, one read per request) and a monotonic reading
/// (`MonotonicClock`) for rate limits. Injected so that tests can move time.
package protocol APIClock: MonotonicClock, WallClock {}

/// The real clocks of the machine.
package struct SystemClock: APIClock {
    package init() {}

    package func wallMilliseconds() -> Int64 { SystemWallClock().wallMilliseconds() }

    package func monotonicNanoseconds() -> UInt64 { SystemMonotonicClock().monotonicNanoseconds() }
}
