/// An instant of a `LoopClock`: nanoseconds of its monotonic source. Our
/// own value of fixed layout rather than `ContinuousClock.Instant`, whose
/// library is built for evolution: every enum that carried one (the
/// connection machine's states) was switched through run-time calls
/// (`swift_getEnumCaseMultiPayload`, about 0.5 % of a registration's CPU in
/// the profile; issue 25) and copied through value witnesses. Arithmetic
/// with `Duration` saturates instead of trapping: a limit of "forever" added
/// to now is the farthest instant.
public struct LoopInstant: Comparable, Hashable, Sendable, CustomStringConvertible {
    /// Nanoseconds on the clock's source (only differences mean anything).
    public let nanoseconds: Int64

    public init(nanoseconds: Int64) {
        self.nanoseconds = nanoseconds
    }

    public static func < (lhs: LoopInstant, rhs: LoopInstant) -> Bool { lhs.nanoseconds < rhs.nanoseconds }

    /// The time from `rhs` to `lhs` (negative when `lhs` is earlier).
    public static func - (lhs: LoopInstant, rhs: LoopInstant) -> Duration {
        .nanoseconds(lhs.nanoseconds.subtractingSaturating(rhs.nanoseconds))
    }

    public static func + (lhs: LoopInstant, rhs: Duration) -> LoopInstant {
        LoopInstant(nanoseconds: lhs.nanoseconds.addingSaturating(rhs.wholeNanoseconds))
    }

    public static func += (lhs: inout LoopInstant, rhs: Duration) { lhs = lhs + rhs }

    public static func - (lhs: LoopInstant, rhs: Duration) -> LoopInstant {
        LoopInstant(nanoseconds: lhs.nanoseconds.subtractingSaturating(rhs.wholeNanoseconds))
    }

    /// The time from this instant to `other`.
    public func duration(to other: LoopInstant) -> Duration { other - self }

    public func advanced(by duration: Duration) -> LoopInstant { self + duration }

    public var description: String { "LoopInstant(\(nanoseconds) ns)" }
}

extension Int64 {
    fileprivate func addingSaturating(_ other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other < 0 ? .min : .max) : sum
    }

    fileprivate func subtractingSaturating(_ other: Int64) -> Int64 {
        let (difference, overflow) = subtractingReportingOverflow(other)
        return overflow ? (other < 0 ? .max : .min) : difference
    }
}
