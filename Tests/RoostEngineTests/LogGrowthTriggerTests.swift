import RoostTesting
import Synchronization
import Testing

@testable import RoostEngine

/// Whether a task got past its wait (shared with the test's thread).
private final class Woken: Sendable {
    private let flag = Atomic<Bool>(false)
    var value: Bool { flag.load(ordering: .acquiring) }
    func set() { flag.store(true, ordering: .releasing) }
}

@Suite("The log's growth trigger wakes the snapshot scheduler, without polling")
struct LogGrowthTriggerTests {
    @Test("the waiter wakes when the appends cross its trigger, not before; reset starts the count again")
    func wakesAtTheTrigger() async {
        let trigger = LogGrowthTrigger()
        let woken = Woken()
        trigger.appended(40)
        let waiting = Task {
            await trigger.waitUntilGrown(by: 100)
            woken.set()
        }
        trigger.appended(59)
        #expect(!woken.value)
        trigger.appended(1)
        await waiting.value
        #expect(woken.value)
        #expect(trigger.bytesSinceReset == 100)
        trigger.reset()
        #expect(trigger.bytesSinceReset == 0)
    }

    @Test("a trigger already crossed when the wait begins returns at once")
    func alreadyCrossed() async {
        let trigger = LogGrowthTrigger()
        trigger.appended(500)
        await trigger.waitUntilGrown(by: 100)
        #expect(trigger.bytesSinceReset == 500)
    }

    @Test("cancelling the waiting task ends the wait; the trigger then waits for the next waiter")
    func cancellationEndsTheWait() async {
        let trigger = LogGrowthTrigger()
        let waiting = Task { await trigger.waitUntilGrown(by: 1_000) }
        waiting.cancel()
        await waiting.value
        let next = Task { await trigger.waitUntilGrown(by: 10) }
        trigger.appended(10)
        await next.value
    }
}
