import RoostPlatform

/// The server's clock: the instants its loops, connection machines and
/// tenant share reason in (`ContinuousClock.Instant`), read from the
/// monotonic clock the configuration injects (`HTTPServerConfiguration.clock`).
/// A test injects a manual clock and moves time by hand (then wakes the
/// loops, `HTTPServer.wakeLoops`): timeouts, windows and evictions happen at
/// the time it states, with no sleep. A value: one per server, copied to
/// each loop and handed to the responder each round
/// (`HTTPResponder.willFinishRound`); only differences between its
/// instants mean anything.
public struct LoopClock: Sendable {
    private let source: any MonotonicClock
    private let originNanoseconds: UInt64
    private let originInstant: ContinuousClock.Instant

    package init(_ source: any MonotonicClock) {
        self.source = source
        originNanoseconds = source.monotonicNanoseconds()
        originInstant = ContinuousClock.now
    }

    /// The current instant: the origin moved by what the source counted since.
    public var now: ContinuousClock.Instant {
        let elapsed = source.monotonicNanoseconds() &- originNanoseconds
        return originInstant + .nanoseconds(Int64(clamping: elapsed))
    }
}
