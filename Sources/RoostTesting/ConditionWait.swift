import Glibc

/// Waiting in tests on a condition with a deadline, instead of sleeping for a
/// time and hoping (issue 24 item 8): the wait ends as soon as the condition
/// holds, and the deadline only bounds a failure. Tests that need time to
/// pass drive a manual clock (`ManualClock`, `ManualMonotonicClock`) instead.
package enum ConditionWait {
    /// The longest a condition is waited for by default: far beyond any
    /// expected wait, so that only a real failure reaches it on a loaded machine.
    package static let defaultDeadline: Duration = .seconds(10)
    /// The pause between two checks: the other threads run meanwhile.
    static let checkInterval: Duration = .milliseconds(1)

    /// Returns whether `condition` held within `deadline`, checked again
    /// and again (the first check at once). It blocks its thread between
    /// checks: in an async test, write the condition as an async closure
    /// (`{ () async in … }`) to get the suspending form below, or the
    /// thread of the cooperative pool that the awaited tasks need is held.
    /// (A sync closure picks this form even in async code.)
    package static func until(
        within deadline: Duration = defaultDeadline, _ condition: () throws -> Bool
    ) rethrows -> Bool {
        let clock = ContinuousClock()
        let end = clock.now + deadline
        while true {
            if try condition() { return true }
            if clock.now >= end { return false }
            pause()
        }
    }

    /// `until(within:_:)` for a condition that awaits (an actor's state).
    package static func until(
        within deadline: Duration = defaultDeadline, _ condition: () async throws -> Bool
    ) async rethrows -> Bool {
        let clock = ContinuousClock()
        let end = clock.now + deadline
        while true {
            if try await condition() { return true }
            if clock.now >= end { return false }
            // Suspends instead of blocking: the tasks being waited for may
            // need this thread of the cooperative pool (two on two cores).
            try? await Task.sleep(for: checkInterval)
        }
    }

    /// Gives the processor to the threads being waited for, briefly.
    private static func pause() {
        var interval = timespec(tv_sec: 0, tv_nsec: Int(checkInterval.wholeNanoseconds))
        _ = nanosleep(&interval, nil)
    }
}
