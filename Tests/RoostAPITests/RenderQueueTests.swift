import RoostPlatform
import RoostTesting
import Testing

@testable import RoostAPI

/// `RenderQueue`: the engine answers a loop renders per round (docs/http.md,
/// "A round's rendering budget"), driven with a manual clock.
@Suite("Render queue: a round's budget for engine answers")
struct RenderQueueTests {
    /// Takes what the queue lets the current round render, advancing the
    /// clock by `cost` after each entry (the time its rendering took).
    static func drain(_ queue: inout RenderQueue<Int>, _ clock: inout ManualClock, cost: Duration) -> [Int] {
        var taken: [Int] = []
        while let entry = queue.next(now: clock.now) {
            taken.append(entry)
            clock.advance(by: cost)
        }
        return taken
    }

    @Test("a round renders while it is younger than the budget, then leaves the rest in order for the next rounds")
    func budgetSplitsRounds() {
        var clock = ManualClock()
        var queue = RenderQueue<Int>(budget: .milliseconds(5))
        for entry in 0..<10 { queue.append(entry) }
        queue.beginRound(at: clock.now)
        // 2 ms each: at 0, 2 and 4 ms the round is younger than 5 ms; at 6 ms it is not.
        #expect(Self.drain(&queue, &clock, cost: .milliseconds(2)) == [0, 1, 2])
        #expect(queue.count == 7)
        #expect(queue.renderedInThisRound == 3)
        queue.beginRound(at: clock.now)
        #expect(Self.drain(&queue, &clock, cost: .milliseconds(2)) == [3, 4, 5])
        queue.beginRound(at: clock.now)
        #expect(Self.drain(&queue, &clock, cost: .milliseconds(2)) == [6, 7, 8])
        queue.beginRound(at: clock.now)
        #expect(Self.drain(&queue, &clock, cost: .milliseconds(2)) == [9])
        #expect(queue.isEmpty)
        #expect(queue.next(now: clock.now) == nil)
    }

    @Test("the budget runs from the round's start to the millisecond: at its end nothing more is rendered")
    func budgetBoundary() {
        var clock = ManualClock()
        var queue = RenderQueue<Int>(budget: .milliseconds(5))
        for entry in 0..<3 { queue.append(entry) }
        let start = clock.now
        clock.advance(by: .milliseconds(1))  // the round's reads
        queue.beginRound(at: start)
        #expect(queue.next(now: clock.now) == 0)
        #expect(queue.next(now: start + .milliseconds(5) - .nanoseconds(1)) == 1)
        #expect(queue.next(now: start + .milliseconds(5)) == nil)
        #expect(queue.count == 1)
    }

    @Test("every round renders at least one entry, even one that began past its budget or costs more than it")
    func atLeastOnePerRound() {
        var clock = ManualClock()
        var queue = RenderQueue<Int>(budget: .milliseconds(5))
        for entry in 0..<3 { queue.append(entry) }
        queue.beginRound(at: clock.now)
        clock.advance(by: .milliseconds(20))  // reads took longer than the budget
        #expect(Self.drain(&queue, &clock, cost: .milliseconds(30)) == [0])
        queue.beginRound(at: clock.now)
        #expect(Self.drain(&queue, &clock, cost: .milliseconds(30)) == [1])
        var zero = RenderQueue<Int>(budget: .zero)
        zero.append(7)
        zero.append(8)
        zero.beginRound(at: clock.now)
        #expect(zero.next(now: clock.now) == 7)
        #expect(zero.next(now: clock.now) == nil)
    }

    @Test("entries that arrive while the budget is spent wait behind the older ones: FIFO across rounds")
    func fifoAcrossRounds() {
        var clock = ManualClock()
        var queue = RenderQueue<Int>(budget: .milliseconds(3))
        var next = 0
        var rendered: [Int] = []
        for _ in 0..<50 {
            // Each round, three new entries become complete, in the middle of
            // the round; the round renders two (4 ms each) of whatever waits.
            queue.beginRound(at: clock.now)
            if let entry = queue.next(now: clock.now) { rendered.append(entry) }
            for _ in 0..<3 {
                queue.append(next)
                next += 1
            }
            clock.advance(by: .milliseconds(1))
            rendered += Self.drain(&queue, &clock, cost: .milliseconds(4))
            clock.advance(by: .milliseconds(1))
        }
        #expect(rendered == Array(0..<rendered.count), "out of order: \(rendered.prefix(20))")
        #expect(rendered.count + queue.count == next)
        // Everything left is rendered in later rounds, still in order.
        while !queue.isEmpty {
            queue.beginRound(at: clock.now)
            rendered += Self.drain(&queue, &clock, cost: .milliseconds(4))
        }
        #expect(rendered == Array(0..<next))
    }

    @Test("before the first round there is no budget (a loop outside an HTTP server renders at once)")
    func noBudgetBeforeTheFirstRound() {
        var clock = ManualClock()
        var queue = RenderQueue<Int>(budget: .milliseconds(1))
        for entry in 0..<5 { queue.append(entry) }
        #expect(Self.drain(&queue, &clock, cost: .milliseconds(10)) == [0, 1, 2, 3, 4])
    }

    @Test("a queue that never empties is compacted: what was taken is not kept, the order holds")
    func compactsAQueueThatNeverEmpties() {
        var clock = ManualClock()
        var queue = RenderQueue<[Int]>(budget: .zero)
        var next = 0
        var expected = 0
        for _ in 0..<5000 {
            queue.append([next])
            queue.append([next + 1])
            next += 2
            queue.beginRound(at: clock.now)
            let entry = queue.next(now: clock.now)
            #expect(entry == [expected])
            expected += 1
            clock.advance(by: .microseconds(10))
        }
        #expect(queue.count == next - expected)
        #expect(queue.storedSlots <= 2 * queue.count + 1024, "\(queue.storedSlots) slots for \(queue.count) entries")
    }
}
