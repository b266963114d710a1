import RoostPlatform
import RoostTesting
import Testing

@testable import RoostHTTP

/// `LoopClock` and its `LoopInstant`: the instants the loops and connection
/// machines reason in.
@Suite("Loop clock: instants of the injected monotonic clock")
struct LoopClockTests {
    @Test("an instant is the source's nanoseconds; differences and sums are durations")
    func instantsFollowTheSource() {
        let source = ManualMonotonicClock()
        let clock = LoopClock(source)
        let start = clock.now
        source.advance(by: .milliseconds(1500))
        let later = clock.now
        #expect(later - start == .milliseconds(1500))
        #expect(start - later == .milliseconds(-1500))
        #expect(start + .milliseconds(1500) == later)
        #expect(later - .milliseconds(1500) == start)
        #expect(start.duration(to: later) == .milliseconds(1500))
        #expect(start.advanced(by: .seconds(1)) < later)
        var moved = start
        moved += .milliseconds(1500)
        #expect(moved == later)
    }

    @Test("a duration too long for 64 bits of nanoseconds saturates instead of trapping")
    func arithmeticSaturates() {
        let now = LoopInstant(nanoseconds: 5_000_000_000)
        #expect((now + .seconds(Int64.max)).nanoseconds == Int64.max)
        // Int64.max seconds is Int64.max nanoseconds once saturated.
        #expect((now - .seconds(Int64.max)).nanoseconds == 5_000_000_000 - Int64.max)
        #expect((now + .seconds(-Int64.max)).nanoseconds == 5_000_000_000 + Int64.min)
        let early = LoopInstant(nanoseconds: -5_000_000_000)
        #expect((early - .seconds(Int64.max)).nanoseconds == Int64.min)
        #expect(LoopInstant(nanoseconds: .max) - LoopInstant(nanoseconds: .min) == .nanoseconds(Int64.max))
        #expect(LoopInstant(nanoseconds: .min) - LoopInstant(nanoseconds: .max) == .nanoseconds(Int64.min))
        // A limit of "forever" after now is later than any instant the clock gives.
        #expect(now + .seconds(Int64.max) > LoopInstant(nanoseconds: Int64.max - 1))
    }

    @Test("durations convert to nanoseconds and to rounded-up milliseconds without trapping")
    func durationConversions() {
        #expect(Duration.milliseconds(1500).wholeNanoseconds == 1_500_000_000)
        #expect(Duration.nanoseconds(-7).wholeNanoseconds == -7)
        #expect(Duration.seconds(Int64.max).wholeNanoseconds == Int64.max)
        #expect(Duration.seconds(Int64.min).wholeNanoseconds == Int64.min)
        #expect(LoopExecutor.wholeMillisecondsRoundedUp(.zero) == 0)
        #expect(LoopExecutor.wholeMillisecondsRoundedUp(.nanoseconds(1)) == 1)
        #expect(LoopExecutor.wholeMillisecondsRoundedUp(.milliseconds(2)) == 2)
        #expect(LoopExecutor.wholeMillisecondsRoundedUp(.nanoseconds(2_000_001)) == 3)
        #expect(LoopExecutor.wholeMillisecondsRoundedUp(.seconds(Int64.max)) == Int32.max)
    }
}
