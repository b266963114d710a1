import RoostPlatform

/// The server's clock: the instants its loops, connection machines and
/// tenant share reason in (`LoopInstant`), read from the monotonic clock the
/// configuration injects (`HTTPServerConfiguration.clock`). A test injects a
/// manual clock and moves time by hand (then wakes the loops,
/// `HTTPServer.wakeLoops`): timeouts, windows and evictions happen at the
/// time it states, with no sleep. A value: one per server, copied to each
/// loop and handed to the responder each round
/// (`HTTPResponder.willFinishRound`); only differences between its instants
/// mean anything.
public struct LoopClock: Sendable {
    private let source: any MonotonicClock

    package init(_ source: any MonotonicClock) {
        self.source = source
    }

    /// The current instant: the source's monotonic nanoseconds.
    public var now: LoopInstant { LoopInstant(nanoseconds: Int64(clamping: source.monotonicNanoseconds())) }
}
