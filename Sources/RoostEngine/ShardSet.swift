import RoostModel
import RoostPlatform
import Synchronization

/// The shards, the loops that run them, and how work finds its shard. Shard
/// `n` runs on loop `n % loops`: its actor's executor is that loop's, so a
/// command that arrives on the shard's own loop runs with no thread switch.
package final class ShardSet: Sendable {
    package let shards: [Shard]
    package let loops: [ShardLoop]
    package let log: any MutationLog
    /// The catalog whose settings the shards use, once a service attaches it.
    package let catalog: CatalogLink
    /// Threads that drive the loops while no HTTP server does (start-up,
    /// tools, tests, the final snapshot at shutdown).
    private let ownThreads = Mutex<LoopExecutorThreads?>(nil)

    /// Creates `shardCount` shards over `loopCount` loops, each shard with the
    /// indexes recovery built for it (or none), and starts threads that drive
    /// the loops until `stopOwnThreads` (an HTTP server takes them over).
    /// `tokenRate` is each shard's per-token registration limit, timed by `clock`.
    package init(
        shardCount: Int, loopCount: Int, log: any MutationLog, tables: [IndexTable]? = nil,
        tokenRate: RateLimit = Shard.tokenRegistrationRate, clock: any MonotonicClock = SystemMonotonicClock()
    ) {
        precondition(shardCount >= 1 && shardCount <= 256, "shard count \(shardCount) out of 1...256")
        precondition(loopCount >= 1 && loopCount <= 256, "loop count \(loopCount) out of 1...256")
        precondition(tables == nil || tables?.count == shardCount, "one recovered table per shard")
        self.log = log
        let catalog = CatalogLink()
        self.catalog = catalog
        let executors: [LoopExecutor] = (0..<loopCount).map { index in
            do {
                return try LoopExecutor(index: index)
            } catch {
                preconditionFailure("cannot create loop \(index)'s eventfd: \(error)")
            }
        }
        loops = executors.map {
            ShardLoop(
                index: $0.index, executor: $0, shardCount: shardCount, loopCount: loopCount, log: log, clock: clock)
        }
        shards = (0..<shardCount).map { number in
            Shard(
                number: number, executor: executors[number % loopCount], log: log,
                table: tables?[number] ?? IndexTable(), tokenRate: tokenRate, clock: clock, catalog: catalog)
        }
        for loop in loops {
            loop.attach(to: self)
            loop.executor.setRoundHandler(loop)
        }
        startOwnThreads()
    }

    deinit {
        stopOwnThreads()
    }

    /// The executors of the loops, in loop order: an HTTP server runs them.
    package var executors: [LoopExecutor] { loops.map(\.executor) }

    /// Starts threads that drive the loops (when none do). Idempotent.
    package func startOwnThreads() {
        ownThreads.withLock { threads in
            guard threads == nil else { return }
            do {
                threads = try LoopExecutorThreads(executors, name: "roost-shards")
            } catch {
                preconditionFailure("cannot start the engine's threads: \(error)")
            }
        }
    }

    /// Stops the engine's own threads so that other loop threads (an HTTP
    /// server's) can adopt the executors. Idempotent.
    package func stopOwnThreads() {
        let running = ownThreads.withLock { threads -> LoopExecutorThreads? in
            defer { threads = nil }
            return threads
        }
        running?.stop()
    }

    /// Returns the shard that owns `app`.
    package func shardNumber(for app: AppID) -> Int {
        ShardSet.shardNumber(for: app, shardCount: shards.count)
    }

    /// Returns the loop that runs shard `shard`.
    package func loopNumber(forShard shard: Int) -> Int {
        shard % loops.count
    }

    /// Returns the loop `work` goes to: its shard's; loop 0 for work that
    /// needs no shard (it waits for the log on whichever loop takes it).
    func loopNumber(for work: ShardWork) -> Int {
        work.app.map { loopNumber(forShard: shardNumber(for: $0)) } ?? 0
    }

    /// Returns the shard that owns `app` among `shardCount`: a stable hash, so
    /// the same app lands on the same shard in every run with the same count.
    package static func shardNumber(for app: AppID, shardCount: Int) -> Int {
        var hash = UInt64(app.rawValue) &* 0x9E37_79B9_7F4A_7C15
        hash ^= hash >> 32
        return Int(hash % UInt64(shardCount))
    }

    /// Runs work from outside the loops (tools, tests, start-up, bulk
    /// imports): each loop gets its part in one message; returns every
    /// outcome, in order, once all are acknowledged (nil where the log refused).
    package func perform(batch: [ShardWork]) async -> [Acknowledged] {
        guard !batch.isEmpty else { return [] }
        return await withCheckedContinuation { continuation in
            let waiter = CallerWaiter(count: batch.count, continuation)
            // Each loop's list sized once (grown by doubling, a 1,024-command
            // batch was copied ten times on its way).
            var counts = [Int](repeating: 0, count: loops.count)
            for work in batch { counts[loopNumber(for: work)] += 1 }
            var byLoop = [[ShardCommand]](repeating: [], count: loops.count)
            for loop in byLoop.indices { byLoop[loop].reserveCapacity(counts[loop]) }
            for (position, work) in batch.enumerated() {
                byLoop[loopNumber(for: work)].append(ShardCommand(work, origin: .caller(waiter, position: position)))
            }
            for loop in byLoop.indices where !byLoop[loop].isEmpty { loops[loop].post(commands: &byLoop[loop]) }
        }
    }

    /// Runs one piece of work from outside the loops; its outcome once
    /// acknowledged, or nil when the log could not take it.
    package func perform(_ work: ShardWork) async -> Acknowledged {
        await perform(batch: [work])[0]
    }
}
