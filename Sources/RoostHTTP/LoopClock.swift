import RoostPlatform

/// The server's clock: the instants its loops, connection machines and
/// tenant share reason in (`ContinuousClock.Instant`), read from the
/// monotonic clock the configuration injects (`HTTPServerConfiguration.clock`).
/// A test injects a manual clock and moves time by hand (then wakes the
/// loops, `HTTPServer.wakeLoops`): timeouts, windows and evictions happen at
/// the time it states, with no sleep. A value: one per server, copied to
/// each loop; only differences between its instants mean anything.
struct LoopClock: Sendable {
    private let source: any MonotonicClock
    private let originNanoseconds: UInt64
    private let originInstant: ContinuousClock.Instant

    init(_ source: any MonotonicClock) {
        self.source = source
        originNanoseconds = source.monotonicNanoseconds()
        originInstant = ContinuousClock.now
    }

    /// The current instant: the origin moved by what the source counted since.
    var now: ContinuousClock.Instant {
        let elapsed = source.monotonicNanoseconds() &- originNanoseconds
        return originInstant + .nanoseconds(Int64(clamping: elapsed))
    }
}
