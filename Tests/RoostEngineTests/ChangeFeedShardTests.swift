import RoostModel
import RoostTesting
import Synchronization
import Testing

@testable import RoostEngine

/// The shard's side of the change feed (spec §9, decision 0062): positions
/// from the append, the export's cursor within a batch, waiters.
@Suite("Change feed in the shard (spec §9)")
struct ChangeFeedShardTests {
    static func registration(_ seed: Int) throws -> ShardWork {
        .index(liveKey, settings: .defaults, .register(RegisterRequest(token: try apnsToken(seed)), at: now))
    }

    static let export = ShardWork.index(liveKey, settings: .defaults, .beginExport)

    @Test("each device change takes the LSN of its record; a change-time record precedes a batch's changes")
    func positionsAreLSNs() async throws {
        let log = CountingLog()
        let registry = Registry(shardCount: 1, log: log)
        _ = await registry.shardSet.perform(batch: [try Self.registration(1), try Self.registration(2)])
        // One batch: the change time, then one upsert each (no history for a new device).
        let page = try #require(
            await registry.execute(liveKey, .changes(after: nil, limit: 10, wait: .zero)))
        guard case .changes(.success(let changes)) = page else { Issue.record("\(page)"); return }
        let positions = changes.changes.map(\.position)
        #expect(positions.count == 2)
        #expect(
            positions == positions.sorted()
                && positions.allSatisfy { $0 >= 2 && $0 <= UInt64(log.records.withLock { $0 }) })
    }

    @Test("an export frozen after a write of the same batch holds it, and its cursor is that write's position")
    func exportCursorWithinABatch() async throws {
        let registry = Registry(shardCount: 1, log: VolatileLog())
        _ = await registry.shardSet.perform(batch: [try Self.registration(1)])
        let outcomes = await registry.shardSet.perform(batch: [
            try Self.registration(2), Self.export, try Self.registration(3),
        ])
        guard case .exportView(let view)? = outcomes[1] else { Issue.record("\(outcomes[1] as Any)"); return }
        #expect(view.deviceCount == 2, "the write before the freeze is in the view, the one after is not")
        let after = try #require(
            await registry.execute(liveKey, .changes(after: view.cursor, limit: 10, wait: .zero)))
        guard case .changes(.success(let page)) = after else { Issue.record("\(after)"); return }
        #expect(page.changes.count == 1, "following from the cursor gives exactly the write after the freeze")
        guard case .upsert(_, _, let device)? = page.changes.first else { Issue.record("\(page)"); return }
        #expect(device.token == (try apnsToken(3)))
    }

    @Test("one app holds at most its share of a shard's change waiters: another app's long poll still waits")
    func waiterShareOfOneApp() async throws {
        let registry = Registry(shardCount: 1, log: VolatileLog())
        let flooding = IndexKey(app: AppID(1), mode: .live)
        let quiet = IndexKey(app: AppID(2), mode: .live)
        func waiter(_ key: IndexKey) -> ShardWork {
            .index(key, settings: .defaults, .changes(after: nil, limit: 10, wait: .seconds(3_600)))
        }
        let shardSet = registry.shardSet
        let shard = shardSet.shards[0]
        // One app's consumers ask for as many long polls as the whole shard holds.
        let flood = Task {
            await shardSet.perform(batch: Array(repeating: waiter(flooding), count: Shard.changeWaitersMax))
        }
        // Once some of the flood is held, it was all posted; an app's commands run in
        // order, so once this later command answers, the shard has seen every one of the flood.
        let deadline = ContinuousClock.now + .seconds(30)
        while await shard.changeWaiterCounts()[flooding.app] == nil && ContinuousClock.now < deadline {
            await Task.yield()
        }
        _ = await registry.execute(flooding, .stats)
        #expect(await shard.changeWaiterCounts() == [flooding.app: Shard.changeWaitersPerAppMax])
        // Then another app's consumer long-polls: it waits (before: answered at once, a busy poll).
        let answered = Mutex(false)
        let poll = Task {
            let outcomes = await shardSet.perform(batch: [waiter(quiet)])
            answered.withLock { $0 = true }
            return outcomes
        }
        var counts: [AppID: Int] = [:]
        while ContinuousClock.now < deadline && !answered.withLock({ $0 }) {
            counts = await shard.changeWaiterCounts()
            if counts[quiet.app] == 1 { break }
            await Task.yield()
        }
        #expect(counts[quiet.app] == 1, "the quiet app's long poll was answered at once instead of waiting")
        // A change in each index answers its waiters.
        _ = await shardSet.perform(batch: [
            .index(flooding, settings: .defaults, .register(RegisterRequest(token: try apnsToken(1)), at: now)),
            .index(quiet, settings: .defaults, .register(RegisterRequest(token: try apnsToken(2)), at: now)),
        ])
        #expect(await flood.value.count == Shard.changeWaitersMax)
        #expect(await poll.value.count == 1)
        #expect(await shard.changeWaiterCounts().isEmpty)
    }

    @Test("a long poll is answered when its time is up on the shard's clock: a timer of its loop, no task, no sleep")
    func longPollTimerOnTheLoop() async throws {
        let clock = ManualMonotonicClock()
        let registry = Registry(shardCount: 2, loopCount: 1, log: VolatileLog(), clock: clock)
        let shardSet = registry.shardSet
        let key = IndexKey(app: AppID(1), mode: .live)
        let shard = shardSet.shards[shardSet.shardNumber(for: key.app)]
        let answered = Mutex(false)
        let poll = Task {
            let outcomes = await shardSet.perform(batch: [
                .index(key, settings: .defaults, .changes(after: nil, limit: 10, wait: .seconds(30)))
            ])
            answered.withLock { $0 = true }
            return outcomes
        }
        #expect(await ConditionWait.until { await shard.changeWaiterCounts()[key.app] == 1 })
        // A second short of its time: a round of the loop (woken by hand) keeps it.
        clock.advance(by: .seconds(29))
        for executor in shardSet.executors { executor.wake() }
        _ = await registry.execute(IndexKey(app: AppID(2), mode: .live), .stats)  // a round passed
        #expect(await shard.changeWaiterCounts()[key.app] == 1 && !answered.withLock { $0 })
        // Its time is up: the loop's next round answers it, an empty page at its own cursor.
        clock.advance(by: .seconds(1))
        for executor in shardSet.executors { executor.wake() }
        let outcomes = await poll.value
        guard case .changes(.success(let page))?? = outcomes.first else { Issue.record("\(outcomes)"); return }
        #expect(page.changes.isEmpty && page.next == 0)
        #expect(await shard.changeWaiterCounts().isEmpty)
    }
}
