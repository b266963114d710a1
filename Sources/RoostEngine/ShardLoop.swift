import RoostModel
import RoostPlatform
import RoostStorage
import Synchronization

/// The engine's side of one loop thread (an HTTP event loop, or an engine
/// thread in tools): the commands its requests submitted in the current
/// round, the shards it runs, and the outcomes waiting for the log.
///
/// At the end of every round (`endOfRound`, on the loop's thread) it hands
/// each shard the round's commands in one hop: a shard this loop runs
/// executes them at once, with no thread switch; another loop's shard gets
/// them as one message. Outcomes come back as values and are released to
/// the receiver once the log has acknowledged what they depend on; the log's
/// I/O thread wakes the loop once per group commit for that.
package final class ShardLoop: LoopRoundHandler, @unchecked Sendable {
    // @unchecked: `outgoing`, the per-round buffers and `waiting` are confined
    // to the loop's thread (asserted in `submit` and `endOfRound`); `receiver`
    // and `set` are written once before the loop runs; `inbox` is behind its
    // mutex.

    /// The most commands one shard runs in one turn, so one turn stays short.
    package static let commandsPerTurnMax = 1024

    private struct Inbox {
        var commands: [ShardCommand] = []
        var outcomes: [ShardOutcome] = []
    }

    package let index: Int
    package let executor: LoopExecutor
    private weak var set: ShardSet?
    private let log: any MutationLog
    private let inbox = Mutex(Inbox())
    /// Per-round buffers, kept between rounds (no allocation per round):
    /// commands submitted on this loop in this round, by shard; commands for
    /// the shards this loop runs, by shard; commands for other loops' shards
    /// and outcomes for other loops' requests, by loop.
    private var outgoing: Buckets<ShardCommand>
    private var mine: Buckets<ShardCommand>
    private var remote: Buckets<ShardCommand>
    private var elsewhere: Buckets<ShardOutcome>
    private var waiting: [ShardOutcome] = []
    private var receiver: (any OutcomeReceiver)?

    init(index: Int, executor: LoopExecutor, shardCount: Int, loopCount: Int, log: any MutationLog) {
        self.index = index
        self.executor = executor
        self.log = log
        outgoing = Buckets(count: shardCount)
        mine = Buckets(count: shardCount)
        remote = Buckets(count: loopCount)
        elsewhere = Buckets(count: loopCount)
    }

    func attach(to set: ShardSet) {
        self.set = set
    }

    /// Sets who renders this loop's outcomes. Once, before requests arrive.
    package func setReceiver(_ receiver: any OutcomeReceiver) {
        precondition(self.receiver == nil, "loop \(index) already has a receiver")
        self.receiver = receiver
    }

    /// Queues `work` for the end of this round; its outcome reaches the
    /// receiver with `ticket`. Loop thread only.
    package func submit(_ work: ShardWork, ticket: UInt64) {
        executor.preconditionOnLoop("ShardLoop.submit")
        guard let set else { return }
        guard let app = work.app else {
            awaitLog(ShardCommand(work, origin: .loop(index, ticket: ticket)))
            return
        }
        outgoing.append(ShardCommand(work, origin: .loop(index, ticket: ticket)), to: set.shardNumber(for: app))
    }

    /// Hands commands to this loop's shards from any thread (another loop's
    /// round, or a caller outside the loops) and wakes the loop.
    func post(commands: [ShardCommand]) {
        let wasEmpty = inbox.withLock { inbox in
            let wasEmpty = inbox.commands.isEmpty && inbox.outcomes.isEmpty
            inbox.commands.append(contentsOf: commands)
            return wasEmpty
        }
        if wasEmpty { executor.wake() }
    }

    /// Hands outcomes of this loop's requests back from the loop that ran
    /// them. When none of them can be released yet (the log has not
    /// acknowledged them), the loop is not woken now: the log wakes it once
    /// the earliest is acknowledged (one wake-up instead of two).
    func post(outcomes: [ShardOutcome]) {
        let acknowledged = log.acknowledgedThrough
        var earliest = LogSequenceNumber(UInt64.max)
        var releasableNow = log.acceptsWrites == false
        for outcome in outcomes {
            guard let waitsFor = outcome.waitsFor, waitsFor > acknowledged else {
                releasableNow = true
                break
            }
            earliest = min(earliest, waitsFor)
        }
        let wasEmpty = inbox.withLock { inbox in
            let wasEmpty = inbox.commands.isEmpty && inbox.outcomes.isEmpty
            inbox.outcomes.append(contentsOf: outcomes)
            return wasEmpty
        }
        if releasableNow {
            if wasEmpty { executor.wake() }
        } else {
            log.wakeWhenAcknowledged(earliest, executor)
        }
    }

    // MARK: - The round (loop thread)

    package func endOfRound() {
        executor.preconditionOnLoop("ShardLoop.endOfRound")
        guard let set else { return }
        let arrived = inbox.withLock { inbox -> Inbox in
            var taken = Inbox()
            swap(&taken, &inbox)
            return taken
        }
        waiting.append(contentsOf: arrived.outcomes)
        // Commands for shards this loop runs: from other loops first (they
        // were submitted in an earlier round), then this round's own.
        for command in arrived.commands {
            guard let app = command.work.app else {
                awaitLog(command)
                continue
            }
            mine.append(command, to: set.shardNumber(for: app))
        }
        outgoing.drain { shard, commands in
            let owner = set.loopNumber(forShard: shard)
            if owner == index {
                mine.append(contentsOf: commands, to: shard)
            } else {
                remote.append(contentsOf: commands, to: owner)
            }
        }
        remote.drain { owner, commands in set.loops[owner].post(commands: commands) }
        mine.drain { shard, commands in run(commands, on: set.shards[shard]) }
        elsewhere.drain { loop, outcomes in set.loops[loop].post(outcomes: outcomes) }
        release()
    }

    /// Waits, on this loop, for the LSN of an `awaitLog` command.
    private func awaitLog(_ command: ShardCommand) {
        guard case .awaitLog(let lsn) = command.work else { preconditionFailure("\(command.work) needs a shard") }
        waiting.append(ShardOutcome(origin: command.origin, outcome: .logAcknowledged, waitsFor: lsn, dependsOn: lsn))
    }

    /// Runs commands on a shard this loop owns, in turns of at most
    /// `commandsPerTurnMax`, and routes each outcome to its origin.
    private func run(_ commands: [ShardCommand], on shard: Shard) {
        precondition(shard.executor === executor, "shard \(shard.number) is not run by loop \(index)")
        var start = 0
        while start < commands.count {
            let end = min(start + ShardLoop.commandsPerTurnMax, commands.count)
            let turn = start == 0 && end == commands.count ? commands : Array(commands[start..<end])
            let outcomes = shard.assumeIsolated { shard in shard.execute(turn) }
            for outcome in outcomes {
                switch outcome.origin {
                case .loop(let loop, _) where loop != index: elsewhere.append(outcome, to: loop)
                case .loop, .caller: waiting.append(outcome)
                }
            }
            start = end
        }
    }

    /// Releases every waiting outcome the log has acknowledged (or refused)
    /// and asks the log to wake this loop for the rest.
    private func release() {
        guard !waiting.isEmpty else { return }
        let acknowledged = log.acknowledgedThrough
        let failed = !log.acceptsWrites
        var delivered: [(ticket: UInt64, outcome: Acknowledged)] = []
        var earliest = LogSequenceNumber(UInt64.max)
        var kept = 0
        for position in waiting.indices {
            let outcome = waiting[position]
            let answer: Acknowledged?
            if let waitsFor = outcome.waitsFor {
                if waitsFor <= acknowledged {
                    answer = .some(outcome.outcome)
                } else if failed {
                    // Served only if it shows nothing the log did not acknowledge.
                    answer = .some(outcome.dependsOn <= acknowledged ? outcome.outcome : nil)
                } else {
                    answer = nil
                    earliest = min(earliest, waitsFor)
                }
            } else {
                answer = .some(nil)
            }
            guard let answer else {
                waiting[kept] = outcome
                kept += 1
                continue
            }
            switch outcome.origin {
            case .loop(_, let ticket): delivered.append((ticket, answer))
            case .caller(let waiter, let position): waiter.deliver(position, answer)
            }
        }
        waiting.removeSubrange(kept...)
        if kept > 0 { log.wakeWhenAcknowledged(earliest, executor) }
        if !delivered.isEmpty {
            guard let receiver else { preconditionFailure("loop \(index) has outcomes but no receiver") }
            receiver.receive(delivered)
        }
    }
}

/// Arrays by number (shard or loop) and which of them hold something, kept
/// from round to round so that gathering a round's work allocates nothing.
private struct Buckets<Element> {
    private var items: [[Element]]
    private var used: [Int] = []

    init(count: Int) {
        items = Array(repeating: [], count: count)
    }

    mutating func append(_ element: Element, to bucket: Int) {
        if items[bucket].isEmpty { used.append(bucket) }
        items[bucket].append(element)
    }

    mutating func append(contentsOf elements: [Element], to bucket: Int) {
        guard !elements.isEmpty else { return }
        if items[bucket].isEmpty { used.append(bucket) }
        items[bucket].append(contentsOf: elements)
    }

    /// Hands each bucket that holds something to `body`, in the order they
    /// were first filled, and empties them (capacity kept).
    mutating func drain(_ body: (_ bucket: Int, _ elements: [Element]) -> Void) {
        for bucket in used {
            body(bucket, items[bucket])
            items[bucket].removeAll(keepingCapacity: true)
        }
        used.removeAll(keepingCapacity: true)
    }
}
