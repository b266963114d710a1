import RoostStorage
import RoostTesting
import Synchronization
import Testing

@testable import RoostClusterNode

/// `Roost-Min-Position` waits (spec §13.3) on a manual clock: the replication
/// thread's publish resumes them, its timer ends them when their time is up.
@Suite("Position waiters")
struct PositionWaitersTests {
    /// The applied LSN as the replication thread publishes it.
    final class Applied: Sendable {
        let lsn = Mutex(LogSequenceNumber(5))
        var current: LogSequenceNumber { lsn.withLock { $0 } }
    }

    @Test("a wait ends reached when the position is applied, not reached when its time is up on the clock")
    func reachedOrTimedOut() async throws {
        let clock = ManualMonotonicClock()
        let waiters = PositionWaiters(clock: clock)
        let applied = Applied()
        let reaching = Task {
            await waiters.wait(for: LogSequenceNumber(10), timeout: .seconds(1)) { applied.current }
        }
        let timingOut = Task {
            await waiters.wait(for: LogSequenceNumber(20), timeout: .seconds(1)) { applied.current }
        }
        // The suspending wait: the two waits' tasks need a thread of the cooperative pool.
        #expect(await ConditionWait.until { () async in waiters.count == 2 })
        // Short of their time, the timer ends nothing; a publish short of 10 resumes nobody.
        clock.advance(by: .milliseconds(999))
        waiters.expire()
        waiters.reached(LogSequenceNumber(9))
        #expect(waiters.count == 2)
        // 10 applied: the first is reached; the second's time then comes.
        applied.lsn.withLock { $0 = LogSequenceNumber(10) }
        waiters.reached(LogSequenceNumber(10))
        #expect(await reaching.value)
        clock.advance(by: .milliseconds(1))
        waiters.expire()
        #expect(await timingOut.value == false)
        #expect(waiters.count == 0)
    }

    @Test("a position applied before the waiter registers is not missed")
    func alreadyApplied() async {
        let waiters = PositionWaiters(clock: ManualMonotonicClock())
        #expect(await waiters.wait(for: LogSequenceNumber(3), timeout: .seconds(1)) { LogSequenceNumber(3) })
        #expect(waiters.count == 0)
    }
}
