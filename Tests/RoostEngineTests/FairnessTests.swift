import RoostModel
import RoostStorage
import Synchronization
import Testing

@testable import RoostEngine
@testable import RoostTesting

/// The (app, number) of each probe in the order the shard ran them.
final class ExecutionOrder: Sendable {
    let seen = Mutex<[(app: UInt32, number: Int)]>([])
}

@Suite("Fairness between apps (shard turns)")
struct FairnessTests {
    /// Work that records which app ran it, in execution order.
    static func probe(_ app: UInt32, _ number: Int, into order: ExecutionOrder) -> ShardWork {
        .index(
            IndexKey(app: AppID(app), mode: .live), settings: .defaults,
            .custom(
                CustomWork { _ in
                    order.seen.withLock { $0.append((app, number)) }
                    return (number, [])
                }))
    }

    @Test("another app's command behind 2,000 of one app's runs in the first turn; each app keeps its own order")
    func floodDoesNotDelayOtherApps() async throws {
        let registry = Registry(shardCount: 1, log: VolatileLog())
        let seen = ExecutionOrder()
        let flood = (0..<2_000).map { FairnessTests.probe(1, $0, into: seen) }
        let others = [FairnessTests.probe(2, 0, into: seen), FairnessTests.probe(3, 0, into: seen)]
        let outcomes = await registry.shardSet.perform(batch: flood + others)
        #expect(outcomes.count == 2_002)
        let order = seen.seen.withLock { $0 }
        let positionOfTwo = try #require(order.firstIndex { $0.app == 2 })
        let positionOfThree = try #require(order.firstIndex { $0.app == 3 })
        #expect(positionOfTwo < ShardLoop.commandsPerTurnMax)
        #expect(positionOfThree < ShardLoop.commandsPerTurnMax)
        #expect(order.filter { $0.app == 1 }.map(\.number) == Array(0..<2_000))
    }

    @Test("a turn takes up to the quantum of each app in turn, and the next turn starts after the last app served")
    func roundRobin() {
        var queue = FairQueue()
        let command = { (app: UInt32, number: Int) in
            ShardCommand(
                .index(IndexKey(app: AppID(app), mode: .live), settings: .defaults, .stats),
                origin: .loop(0, ticket: UInt64(app) << 32 | UInt64(number)))
        }
        for number in 0..<10 { queue.append(command(1, number), app: AppID(1)) }
        for number in 0..<3 { queue.append(command(2, number), app: AppID(2)) }
        for number in 0..<5 { queue.append(command(3, number), app: AppID(3)) }
        // One buffer for every turn, as the loop keeps it: each turn empties it first.
        var turn: [ShardCommand] = [command(9, 9)]
        func tickets(_ max: Int) -> [String] {
            queue.takeTurn(max: max, perApp: 2, into: &turn)
            return turn.map { command in
                guard case .loop(_, let ticket) = command.origin else { return "?" }
                return "\(ticket >> 32).\(ticket & 0xFFFF_FFFF)"
            }
        }
        #expect(tickets(7) == ["1.0", "1.1", "2.0", "2.1", "3.0", "3.1", "1.2"])
        // App 2 is next: it was not served after app 1's second share.
        #expect(tickets(5) == ["2.2", "3.2", "3.3", "1.3", "1.4"])
        #expect(queue.count == 6)
        #expect(tickets(100) == ["3.4", "1.5", "1.6", "1.7", "1.8", "1.9"])
        #expect(queue.isEmpty)
    }

    @Test(
        "random appends of five apps between turns of random sizes: every command comes out once, each app's in order")
    func randomAppendsAndTurns() {
        var generator = SeededRandom(seed: 20_261_207)
        var queue = FairQueue()
        var turn: [ShardCommand] = []
        var appended = [Int](repeating: 0, count: 6)
        var taken = [Int](repeating: 0, count: 6)
        for step in 0..<2_000 {
            for _ in 0..<Int.random(in: 0...12, using: &generator) {
                // One app most of the time, as an app busy alone.
                let app = Bool.random(using: &generator) ? 1 : Int.random(in: 1...5, using: &generator)
                queue.append(
                    ShardCommand(
                        .index(IndexKey(app: AppID(UInt32(app)), mode: .live), settings: .defaults, .stats),
                        origin: .loop(0, ticket: UInt64(app) << 32 | UInt64(appended[app]))),
                    app: AppID(UInt32(app)))
                appended[app] += 1
            }
            queue.takeTurn(
                max: Int.random(in: 1...16, using: &generator), perApp: Int.random(in: 1...4, using: &generator),
                into: &turn)
            for command in turn {
                guard case .loop(_, let ticket) = command.origin else { continue }
                let app = Int(ticket >> 32)
                #expect(Int(ticket & 0xFFFF_FFFF) == taken[app], "step \(step): app \(app) out of order")
                taken[app] += 1
            }
            #expect(queue.count == appended.reduce(0, +) - taken.reduce(0, +), "step \(step)")
        }
        while !queue.isEmpty {
            queue.takeTurn(max: 64, perApp: 4, into: &turn)
            for command in turn {
                guard case .loop(_, let ticket) = command.origin else { continue }
                let app = Int(ticket >> 32)
                #expect(Int(ticket & 0xFFFF_FFFF) == taken[app], "app \(app) out of order at the end")
                taken[app] += 1
            }
        }
        #expect(taken == appended)
    }

    @Test("a deep queue taken from while it grows keeps its order through the ring's wrap and doublings")
    func deepQueueWrapsAndGrows() {
        var queue = FairQueue()
        var turn: [ShardCommand] = []
        var appended = 0
        var taken = 0
        func append(_ count: Int) {
            for _ in 0..<count {
                queue.append(
                    ShardCommand(
                        .index(IndexKey(app: AppID(3), mode: .live), settings: .defaults, .stats),
                        origin: .loop(0, ticket: UInt64(appended))),
                    app: AppID(3))
                appended += 1
            }
        }
        func take(_ count: Int) {
            queue.takeTurn(max: count, perApp: count, into: &turn)
            for command in turn {
                guard case .loop(_, let ticket) = command.origin else { continue }
                #expect(Int(ticket) == taken, "command \(taken) out of order")
                taken += 1
            }
        }
        // Fill past the smallest ring, take part of it (the head moves), then append
        // enough that the ring doubles while its commands wrap around its end.
        append(FairQueue.slotsMin + 5)
        take(9)
        for round in 0..<40 {
            append(7 + round * 3)
            take(5 + round)
        }
        #expect(queue.count == appended - taken)
        while !queue.isEmpty { take(64) }
        #expect(taken == appended && appended > 1_000)
    }

    @Test("an app's whole queue taken as the turn's start keeps every command, in order, turn after turn")
    func wholeQueueTaken() {
        var queue = FairQueue()
        func command(_ app: UInt32, _ number: Int) -> ShardCommand {
            ShardCommand(
                .index(IndexKey(app: AppID(app), mode: .live), settings: .defaults, .stats),
                origin: .loop(0, ticket: UInt64(app) << 32 | UInt64(number)))
        }
        var turn: [ShardCommand] = [command(9, 9)]
        func tickets(_ max: Int, perApp: Int = 100) -> [String] {
            queue.takeTurn(max: max, perApp: perApp, into: &turn)
            return turn.map { command in
                guard case .loop(_, let ticket) = command.origin else { return "?" }
                return "\(ticket >> 32).\(ticket & 0xFFFF_FFFF)"
            }
        }
        for number in 0..<4 { queue.append(command(1, number), app: AppID(1)) }
        #expect(tickets(100) == ["1.0", "1.1", "1.2", "1.3"], "one app's whole queue")
        #expect(queue.isEmpty)
        // The arrays traded last turn serve again: nothing of the last turn comes back.
        for number in 4..<6 { queue.append(command(1, number), app: AppID(1)) }
        for number in 0..<2 { queue.append(command(2, number), app: AppID(2)) }
        #expect(tickets(100) == ["1.4", "1.5", "2.0", "2.1"], "a whole queue, then the next app's after it")
        for number in 6..<9 { queue.append(command(1, number), app: AppID(1)) }
        #expect(tickets(2) == ["1.6", "1.7"], "part of a queue is copied, the rest waits")
        #expect(tickets(100) == ["1.8"])
        #expect(queue.isEmpty && turn.count == 1)
    }
}
