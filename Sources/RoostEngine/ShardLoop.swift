import RoostModel
import RoostPlatform
import RoostStorage
import Synchronization

/// The engine's side of one loop thread (an HTTP event loop, or an engine
/// thread in tools): the commands its requests submitted in the current
/// round, the shards it runs, and the outcomes waiting for the log.
///
/// At the end of every round (`endOfRound`, on the loop's thread) it hands
/// each shard the round's commands in one hop: another loop's shard gets
/// them as one message; a shard this loop runs queues them by app and runs
/// one turn of at most `commandsPerTurnMax`, taken in turn from the apps
/// with commands waiting, with no thread switch (the rest run in the next
/// rounds, so one app's flood cannot make every round long). Outcomes come back as values and are released to
/// the receiver once the log has acknowledged what they depend on; the log's
/// I/O thread wakes the loop once per group commit for that.
package final class ShardLoop: LoopRoundHandler, @unchecked Sendable {
    // @unchecked: `outgoing`, the per-round buffers and `waiting` are confined
    // to the loop's thread (asserted in `submit` and `endOfRound`); `receiver`
    // and `set` are written once before the loop runs; `inbox` is behind its
    // mutex.

    /// The most commands one shard runs in one round (one turn, one log
    /// append), taken in turn from the apps that have commands waiting; the
    /// rest wait for the next round, which the loop starts at once. A round's
    /// requests finish together, so a turn that ran every waiting command
    /// would make one app's flood the latency of every other app on the loop
    /// (docs/performance.md, "Fairness between apps").
    package static let commandsPerTurnMax = 64
    /// Commands of one app a turn takes before it serves the next app with
    /// commands waiting (round robin; an app's own commands keep their order).
    package static let commandsPerAppPerPass = 8

    private struct Inbox {
        var commands: [ShardCommand] = []
        var outcomes: [ShardOutcome] = []
    }

    package let index: Int
    package let executor: LoopExecutor
    private weak var set: ShardSet?
    private let log: any MutationLog
    private let inbox = Mutex(Inbox())
    /// The inbox's lists between two takes, emptied with their capacity kept:
    /// each take swaps them in, so that posts fill lists that already have
    /// room (an inbox left with new empty lists regrew from nothing after
    /// every take, doubling up to the size of each post under the lock).
    /// Loop thread only.
    private var spareInbox = Inbox()
    /// Per-round buffers, kept between rounds (no allocation per round):
    /// commands submitted on this loop in this round, by shard; commands for
    /// the shards this loop runs, by shard; commands for other loops' shards
    /// and outcomes for other loops' requests, by loop.
    private var outgoing: Buckets<ShardCommand>
    /// Commands waiting for the shards this loop runs, by shard, served
    /// fairly across apps (`commandsPerTurnMax` per shard per round).
    private var pending: [FairQueue]
    /// The shards with commands in `pending`, in the order they got them.
    private var pendingShards: [Int] = []
    private var remote: Buckets<ShardCommand>
    private var elsewhere: Buckets<ShardOutcome>
    private var waiting: [ShardOutcome] = []
    /// `waiting` while a release goes through it (empty otherwise, its
    /// capacity kept): the outcomes it keeps go back to `waiting`.
    private var releasing: [ShardOutcome] = []
    /// The commands of the turn being run, its outcomes, and the answers a
    /// release hands over, kept from turn to turn (no allocation per turn).
    private var turnCommands: [ShardCommand] = []
    private var turnOutcomes: [ShardOutcome] = []
    private var delivered: [(ticket: UInt64, outcome: Acknowledged)] = []
    private var receiver: (any OutcomeReceiver)?
    /// The shards' clock: the deadlines of their change-feed waiters are its readings.
    private let clock: any MonotonicClock
    /// The timers of this loop: the earliest change-waiter deadline of each
    /// shard it runs that holds waiters (`Shard.earliestWaiterDeadline`, by
    /// shard number, read after each of the shard's turns). When one is due,
    /// the round runs the shard's turn, which answers the waiters whose time
    /// is up; the loop thread sleeps no longer than the earliest
    /// (`timeUntilNextDeadline`). No task, no sleep. `UInt64.max`: none.
    private var waiterDeadlines: [UInt64]
    /// The entries of `waiterDeadlines` that are set.
    private var timersSet = 0

    init(
        index: Int, executor: LoopExecutor, shardCount: Int, loopCount: Int, log: any MutationLog,
        clock: any MonotonicClock
    ) {
        self.index = index
        self.executor = executor
        self.log = log
        self.clock = clock
        waiterDeadlines = Array(repeating: .max, count: shardCount)
        outgoing = Buckets(count: shardCount)
        pending = Array(repeating: FairQueue(), count: shardCount)
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
    package func submit(_ work: consuming ShardWork, ticket: UInt64) {
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
    /// `commands` are moved (it is left empty, with its capacity).
    func post(commands: inout [ShardCommand]) {
        let wasEmpty = inbox.withLock { inbox in
            let wasEmpty = inbox.commands.isEmpty && inbox.outcomes.isEmpty
            commands.moveEach { inbox.commands.append($0) }
            return wasEmpty
        }
        if wasEmpty { executor.wake() }
    }

    /// Hands outcomes of this loop's requests back from the loop that ran
    /// them. When none of them can be released yet (the log has not
    /// acknowledged them), the loop is not woken now: the log wakes it once
    /// the earliest is acknowledged (one wake-up instead of two).
    /// `outcomes` are moved (it is left empty, with its capacity).
    func post(outcomes: inout [ShardOutcome]) {
        let acknowledged = log.acknowledgedThrough
        var earliest = LogSequenceNumber(UInt64.max)
        var releasableNow = log.acceptsWrites == false
        let unconfirmed = log.unconfirmedThrough
        for outcome in outcomes {
            guard let waitsFor = outcome.waitsFor, waitsFor > acknowledged, waitsFor > unconfirmed else {
                releasableNow = true
                break
            }
            earliest = min(earliest, waitsFor)
        }
        let wasEmpty = inbox.withLock { inbox in
            let wasEmpty = inbox.commands.isEmpty && inbox.outcomes.isEmpty
            outcomes.moveEach { inbox.outcomes.append($0) }
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
        var arrived = Inbox()
        swap(&arrived, &spareInbox)
        inbox.withLock { inbox in swap(&arrived, &inbox) }
        defer {
            // Both lists were moved from (empty); their capacity serves the next take.
            precondition(arrived.commands.isEmpty && arrived.outcomes.isEmpty, "the round left arrivals unhandled")
            spareInbox = arrived
        }
        // Commands and outcomes are moved from list to list on their way, never
        // copied: a copy retained every reference of a request, and the list it
        // came from released them again (issue 25).
        arrived.outcomes.moveEach { waiting.append($0) }
        // Commands for shards this loop runs: from other loops first (they
        // were submitted in an earlier round), then this round's own.
        arrived.commands.moveEach { (command: consuming ShardCommand) in
            guard let app = command.work.app else { return awaitLog(command) }
            queue(consume command, app: app, shard: set.shardNumber(for: app))
        }
        outgoing.drain { shard, commands in
            let owner = set.loopNumber(forShard: shard)
            if owner == index {
                commands.moveEach { (command: consuming ShardCommand) in
                    guard let app = command.work.app else { preconditionFailure("\(command.work) needs no shard") }
                    queue(consume command, app: app, shard: shard)
                }
            } else {
                remote.append(moving: &commands, to: owner)
            }
        }
        remote.drain { owner, commands in set.loops[owner].post(commands: &commands) }
        let ranTurns = !pendingShards.isEmpty || timersSet > 0
        runTurns(set)
        if timersSet > 0 { runDueTimers(set) }
        // The turns' records, held by the log, written (or handed to its
        // writer) now: before this loop releases answers, and before other
        // loops are handed theirs.
        if ranTurns { log.writeHeld() }
        elsewhere.drain { loop, outcomes in set.loops[loop].post(outcomes: &outcomes) }
        release()
    }

    /// Queues a command for a shard this loop runs.
    private func queue(_ command: consuming ShardCommand, app: AppID, shard: Int) {
        if pending[shard].isEmpty { pendingShards.append(shard) }
        pending[shard].append(command, app: app)
    }

    /// Runs one turn on every shard with commands waiting: at most
    /// `commandsPerTurnMax`, taken fairly across apps. Commands left over
    /// wait for the next round, and the loop wakes itself for it.
    private func runTurns(_ set: ShardSet) {
        guard !pendingShards.isEmpty else { return }
        for shard in pendingShards {
            pending[shard].takeTurn(
                max: ShardLoop.commandsPerTurnMax, perApp: ShardLoop.commandsPerAppPerPass, into: &turnCommands)
            run(turnCommands, on: set.shards[shard])
            turnCommands.removeAll(keepingCapacity: true)
        }
        // In place: the list keeps its storage from round to round (a new
        // list of the shards still pending cost an allocation per round, issue 25).
        pendingShards.removeAll { pending[$0].isEmpty }
        if !pendingShards.isEmpty { executor.wake() }
    }

    /// Runs a turn (with no commands) on each shard whose earliest change
    /// waiter's time is up and that had no turn this round: it answers them.
    private func runDueTimers(_ set: ShardSet) {
        let now = clock.monotonicNanoseconds()
        for (shard, deadline) in waiterDeadlines.enumerated() where deadline <= now && pending[shard].isEmpty {
            run([], on: set.shards[shard])
        }
    }

    /// How long the loop thread may sleep before a timer of this loop is
    /// due (zero: due now), nil without timers. Loop thread only.
    package func timeUntilNextDeadline() -> Duration? {
        guard timersSet > 0, let earliest = waiterDeadlines.min() else { return nil }
        let now = clock.monotonicNanoseconds()
        return earliest <= now ? .zero : .nanoseconds(earliest - now)
    }

    /// Waits, on this loop, for the LSN of an `awaitLog` command.
    private func awaitLog(_ command: ShardCommand) {
        guard case .awaitLog(let lsn) = command.work else { preconditionFailure("\(command.work) needs a shard") }
        waiting.append(ShardOutcome(origin: command.origin, outcome: .logAcknowledged, waitsFor: lsn, dependsOn: lsn))
    }

    /// Runs one turn on a shard this loop owns and routes each outcome to its origin.
    private func run(_ turn: [ShardCommand], on shard: Shard) {
        precondition(shard.executor === executor, "shard \(shard.number) is not run by loop \(index)")
        precondition(turn.count <= ShardLoop.commandsPerTurnMax, "a turn of \(turn.count) commands")
        turnOutcomes.removeAll(keepingCapacity: true)
        let deadline = shard.executeOnOwnLoop(turn, into: &turnOutcomes)
        let previous = waiterDeadlines[shard.number]
        let next = deadline ?? .max
        if (previous == .max) != (next == .max) { timersSet += next == .max ? -1 : 1 }
        waiterDeadlines[shard.number] = next
        turnOutcomes.moveEach { outcome in
            switch outcome.origin {
            case .loop(let loop, _) where loop != index: elsewhere.append(outcome, to: loop)
            case .loop, .caller: waiting.append(outcome)
            }
        }
    }

    /// Releases every waiting outcome the log has acknowledged (or refused)
    /// and asks the log to wake this loop for the rest.
    private func release() {
        guard !waiting.isEmpty else { return }
        let acknowledged = log.acknowledgedThrough
        let failed = !log.acceptsWrites
        let unconfirmed = log.unconfirmedThrough
        delivered.removeAll(keepingCapacity: true)
        var earliest = LogSequenceNumber(UInt64.max)
        // Each outcome moved out of the list and then delivered or moved back
        // (in order): a copy of it, and of its answer, retained its outcome and
        // origin and released them again (~10 retains a registration, issue 25).
        swap(&waiting, &releasing)
        releasing.moveEach { outcome in
            let answer: Acknowledged?
            if let waitsFor = outcome.waitsFor {
                if waitsFor <= acknowledged {
                    answer = .some(outcome.outcome)
                } else if failed || waitsFor <= unconfirmed {
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
                waiting.append(outcome)
                return
            }
            switch outcome.origin {
            case .loop(_, let ticket): delivered.append((ticket, answer))
            case .caller(let waiter, let position): waiter.deliver(position, answer)
            }
        }
        if !waiting.isEmpty { log.wakeWhenAcknowledged(earliest, executor) }
        if !delivered.isEmpty {
            guard let receiver else { preconditionFailure("loop \(index) has outcomes but no receiver") }
            receiver.receive(&delivered)
            precondition(delivered.isEmpty, "the receiver left \(delivered.count) outcomes")
        }
    }
}

/// The commands waiting for one shard: a queue per app, in arrival order,
/// and the apps with commands waiting, served in turn. Bounded by what the
/// loops' requests may have in flight (connections × pipelined requests) and
/// the callers' batches.
struct FairQueue {
    /// One app's commands in arrival order: a ring over `slots` (a power of
    /// two), so taking from the front moves nothing (a list with a moving head
    /// shifted its rest to the front now and then: a copy of each command
    /// again when the queue stayed deep).
    private struct AppQueue {
        /// Empty and taken slots are nil: a turn moves each command out
        /// (`Optional.take`), where a copy retained every reference of its
        /// request and the queue released them again when it dropped them.
        var slots: [ShardCommand?]
        /// The slot of the oldest command.
        var head = 0
        private(set) var count = 0

        /// A queue over `slots`, all nil (a spare queue's, or none).
        init(slots: [ShardCommand?] = []) {
            precondition(slots.isEmpty || slots.count & (slots.count - 1) == 0, "a ring of \(slots.count) slots")
            self.slots = slots
        }

        mutating func append(_ command: consuming ShardCommand) {
            if count == slots.count { grow() }
            slots[(head + count) & (slots.count - 1)] = command
            count += 1
        }

        mutating func takeFirst() -> ShardCommand {
            precondition(count > 0, "took from an empty fair queue")
            guard let command = slots[head].take() else { preconditionFailure("fair queue slot \(head) empty") }
            head = (head + 1) & (slots.count - 1)
            count -= 1
            return command
        }

        /// Doubles the ring, the commands moved to its start in order.
        private mutating func grow() {
            var grown = [ShardCommand?](repeating: nil, count: max(FairQueue.slotsMin, slots.count * 2))
            for offset in 0..<count { grown[offset] = slots[(head + offset) & (slots.count - 1)].take() }
            slots = grown
            head = 0
        }
    }

    /// The fewest slots of an app's ring.
    static let slotsMin = 16

    private var queues: [AppID: AppQueue] = [:]
    /// Apps with commands waiting; the next turn starts with the first.
    private var order: [AppID] = []
    private(set) var count = 0
    /// Emptied queues' storage, for the next app that gets commands (no
    /// allocation per app per turn once warm); at most `spareQueuesMax`.
    private var spareQueues: [[ShardCommand?]] = []
    static let spareQueuesMax = 8

    var isEmpty: Bool { count == 0 }

    /// One hash of `app` when its queue exists (it was three: a look-up, a
    /// set and a modify), two when it is new. Issue 25.
    mutating func append(_ command: consuming ShardCommand, app: AppID) {
        if let index = queues.index(forKey: app) {
            queues.values[index].append(command)
        } else {
            var queue = AppQueue(slots: spareQueues.popLast() ?? [])
            queue.append(command)
            queues[app] = queue
            order.append(app)
        }
        count += 1
    }

    /// Takes up to `budget` commands into `turn` (emptied first): up to
    /// `quantum` of each app in turn, pass after pass, each app's in its own
    /// order. The app after the last one served comes first next time.
    /// O(taken + apps).
    mutating func takeTurn(max budget: Int, perApp quantum: Int, into turn: inout [ShardCommand]) {
        precondition(budget >= 1 && quantum >= 1, "a turn of \(budget), \(quantum) per app")
        turn.removeAll(keepingCapacity: true)
        turn.reserveCapacity(min(budget, count))
        var position = 0
        while turn.count < budget && !order.isEmpty {
            if position >= order.count { position = 0 }
            let app = order[position]
            // Out of the dictionary by its index and back the same way: one
            // hash of `app` a turn (a removal and a set were two).
            guard let place = queues.index(forKey: app) else { preconditionFailure("app \(app) has no queue") }
            var queue = AppQueue()
            swap(&queue, &queues.values[place])
            for _ in 0..<min(queue.count, quantum, budget - turn.count) { turn.append(queue.takeFirst()) }
            if queue.count == 0 {
                queues.remove(at: place)
                order.remove(at: position)
                // Every slot is nil again: the ring serves the next app as it is.
                if spareQueues.count < Self.spareQueuesMax { spareQueues.append(queue.slots) }
            } else {
                swap(&queue, &queues.values[place])
                position += 1
            }
        }
        if position > 0 && position < order.count { order = Array(order[position...] + order[..<position]) }
        count -= turn.count
        precondition(count >= 0 && (count == 0) == order.isEmpty, "fair queue count \(count), \(order.count) apps")
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

    mutating func append(_ element: consuming Element, to bucket: Int) {
        if items[bucket].isEmpty { used.append(bucket) }
        items[bucket].append(element)
    }

    /// Moves `elements` to the end of `bucket`, in order; `elements` is left empty, with its capacity.
    mutating func append(moving elements: inout [Element], to bucket: Int) {
        guard !elements.isEmpty else { return }
        if items[bucket].isEmpty { used.append(bucket) }
        elements.moveEach { items[bucket].append($0) }
    }

    /// Hands each bucket that holds something to `body`, in the order they
    /// were first filled (`body` may move its elements out), and empties
    /// them (capacity kept).
    mutating func drain(_ body: (_ bucket: Int, _ elements: inout [Element]) -> Void) {
        for bucket in used {
            body(bucket, &items[bucket])
            items[bucket].removeAll(keepingCapacity: true)
        }
        used.removeAll(keepingCapacity: true)
    }
}
