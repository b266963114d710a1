import RoostModel
import RoostPlatform
import RoostStorage

/// A shard: the indexes of the apps hashed to it. Every job runs in one turn
/// of this actor, so each identity rule is checked and applied with no lock
/// and no other shard involved.
package actor Shard {
    /// Devices (or people) per snapshot slice: one batch the snapshot thread
    /// encodes from a frozen view, or, past the pinned-memory limit, one short
    /// actor turn (about a millisecond), so requests keep flowing between slices.
    package static let snapshotSliceDevices = 256
    /// Registrations of one token (per app, mode and platform) a shard
    /// admits: a burst of 10, then one every 6 s. An app re-registers at
    /// launch and when its token is refreshed; only a client that loops on
    /// the call comes near it. Over it: 429 `rate_limited` with
    /// `Retry-After`, and nothing reaches the log (docs/limits.md).
    package static let tokenRegistrationRate = RateLimit(burst: 10, intervalNanoseconds: 6_000_000_000)
    /// Tokens whose recent registrations one shard remembers: 16 bytes each,
    /// 1 MiB a shard. Beyond it the least indebted tokens are forgotten
    /// (`RateLimiter`); a first registration is never refused.
    package static let tokenLimiterEntries = 65_536
    /// `GET /v1/changes` requests one shard holds back waiting for a change
    /// (`wait_ms`): ~100 bytes each. Past it a request that would wait is
    /// answered at once with its empty page (docs/api.md "Change feed").
    package static let changeWaitersMax = 4_096
    /// Of those, what one app (both modes) may hold: a quarter, so that one
    /// app's consumers cannot take every place and turn another app's long
    /// polls into busy polls (issue 24 L-3). Past it, that app's request is
    /// answered at once with its empty page, as at the shard's cap.
    package static let changeWaitersPerAppMax = 1_024

    /// A `GET /v1/changes` held back until its index changes or its time is up.
    private struct ChangeWaiter {
        var origin: CommandOrigin
        var after: UInt64?
        var limit: Int
        /// When its time is up, in the shard clock's nanoseconds.
        var deadline: UInt64
    }

    package let number: Int
    /// The loop whose thread runs this shard: its executor is this actor's.
    package nonisolated let executor: LoopExecutor
    private var table: IndexTable
    private let log: any MutationLog
    /// The LSN of the last append that held records of each index (kept after
    /// an app's removal): the newest change a read of that index can show.
    /// One entry per index ever written in this process.
    private var loggedThrough: [IndexKey: LogSequenceNumber] = [:]
    /// Indexes whose memory may hold a change the log never acknowledged: its
    /// append was refused, or the log failed before acknowledging it. Their
    /// commands answer 503 until a restart rebuilds them from disk, so that no
    /// answer shows a write that was answered 503 (spec §2).
    private var unacknowledged: Set<IndexKey> = []
    /// Recent registrations per token: all of one token's registrations meet
    /// here, since the app decides the shard.
    private var tokenLimiter: RateLimiter
    /// The secret keys of the limiter's key hash (a token of an index): a
    /// client that chooses tokens cannot aim them at another token's entry.
    private let tokenLimiterKeys = SlotHashKeys()
    private let clock: any MonotonicClock
    /// Stamps change-feed entries (spec §9 `at`).
    private let wallClock: any WallClock
    /// Where each app's settings come from (the catalog owns them).
    private let catalog: CatalogLink
    /// Waiting `GET /v1/changes` requests, by index.
    private var changeWaiters: [IndexKey: [ChangeWaiter]] = [:]
    /// The earliest deadline among `changeWaiters` (shard clock's
    /// nanoseconds), nil without waiters: the loop that runs this shard
    /// wakes for it (`ShardLoop`, a timer of the loop), and the turn it then
    /// runs answers the waiters whose time is up.
    package private(set) var earliestWaiterDeadline: UInt64?
    /// The buffers of the last turn, emptied, for the next one: a turn
    /// allocates none of its per-turn arrays once the shard is warm
    /// (issue 25's allocation budget).
    private var turnBuffers = ShardTurn()
    /// Record buffers of earlier turns are kept, emptied, for the next
    /// turn's records in `ShardTurn.spareRecords` (`EngineRecord.encodeMutation`):
    /// a log that copies what it is given (the local WAL) lets go of them,
    /// and a record costs no allocation (2.2 a registration before, issue
    /// 25). One a log still holds (a cluster leader's outbox) is copied on
    /// its next use, as before. At most `spareRecordBuffersMax`, each of at
    /// most `recordBufferRetainedBytesMax`.
    static let spareRecordBuffersMax = 4 * ShardLoop.commandsPerTurnMax
    static let recordBufferRetainedBytesMax = 4096
    /// The one array a command's mutations are appended to
    /// (`AppIndex.executeRegistration` and `execute(_:appendingMutationsTo:)`), emptied before each
    /// command: a registration allocates no list of its mutations (issue 25).
    /// Emptied between runs too, so that it holds no device.
    private var mutationScratch: [Mutation] = []

    /// In cluster mode, where the shard publishes its indexes' positions
    /// (`Roost-Position`, `Roost-Min-Position`); nil on a single node.
    private let positionBoard: PositionBoard?

    package init(
        number: Int, executor: LoopExecutor, log: any MutationLog, table: IndexTable = IndexTable(),
        tokenRate: RateLimit = Shard.tokenRegistrationRate, clock: any MonotonicClock = SystemMonotonicClock(),
        wallClock: any WallClock = SystemWallClock(), catalog: CatalogLink = CatalogLink()
    ) {
        self.number = number
        self.catalog = catalog
        self.wallClock = wallClock
        self.executor = executor
        self.log = log
        self.table = table
        self.tokenLimiter = RateLimiter(rate: tokenRate, capacity: Shard.tokenLimiterEntries)
        self.clock = clock
        positionBoard = (log as? ClusterLog)?.positions
        if let positionBoard {
            for (key, index) in table.indexes { positionBoard.publish(key, index.position) }
        }
    }

    package nonisolated var unownedExecutor: UnownedSerialExecutor {
        executor.asUnownedSerialExecutor()
    }

    /// Runs a turn from the loop thread that owns this shard (asserted, the
    /// assertion stays on) and returns its earliest change-waiter deadline:
    /// `execute` entered as `assumeIsolated` enters it — the isolated
    /// function called as a plain one, which it is at run time — without
    /// the runtime's generic isolation check, which allocated twice per turn
    /// (issue 25's allocation budget). The loop's own check is the
    /// executor's thread, which is what isolation to this actor means here.
    package nonisolated func executeOnOwnLoop(
        _ commands: [ShardCommand], into outcomes: inout [ShardOutcome]
    ) -> UInt64? {
        executor.preconditionOnLoop("Shard.executeOnOwnLoop")
        typealias Isolated = (isolated Shard, [ShardCommand], inout [ShardOutcome]) -> UInt64?
        typealias Plain = (Shard, [ShardCommand], inout [ShardOutcome]) -> UInt64?
        let turn: Isolated = { shard, commands, outcomes in
            shard.execute(commands, into: &outcomes)
            return shard.earliestWaiterDeadline
        }
        return unsafeBitCast(turn, to: Plain.self)(self, commands, &outcomes)
    }

    /// Runs commands in order and appends their records to the log in one
    /// append, so one fsync covers the whole batch; returns each outcome with
    /// the LSN it waits for. Mutations are applied in memory before their
    /// records are appended, within this turn (what a fuzzy snapshot needs).
    /// Once the log has failed, nothing changes in memory any more
    /// (`executeWithoutLog`). Runs on the owning loop's thread, called there
    /// with `assumeIsolated`. The outcomes are appended to `outcomes` (the
    /// loop's buffer, kept from turn to turn).
    package func execute(_ commands: [ShardCommand], into outcomes: inout [ShardOutcome]) {
        if !log.acceptsWrites {
            // No change will be recorded any more: waiting requests are answered 503 now.
            outcomes.append(contentsOf: executeWithoutLog(commands))
            for waiter in changeWaiters.values.joined() { outcomes.append(.unavailable(waiter.origin)) }
            changeWaiters = [:]
            earliestWaiterDeadline = nil
            return
        }
        // The last turn's buffers, taken (so that they are not shared) and given back emptied.
        var turn = turnBuffers
        turnBuffers = ShardTurn()
        defer {
            keepRecordBuffers(of: &turn)
            turn.empty()
            turnBuffers = turn
        }
        turn.answers.reserveCapacity(commands.count)
        if !changeWaiters.isEmpty { releaseExpiredWaiters(into: &turn.released) }
        var position = commands.startIndex
        while position < commands.endIndex {
            let origin = commands[position].origin
            switch commands[position].work {
            case .index(let key, let carried, _):
                position = runCommands(commands, from: position, on: key, carried: carried, into: &turn)
            case .removeApp(let app):
                if log.takesLocalWrites {
                    removeApp(app, origin: origin, into: &turn)
                } else {
                    turn.refuse(origin, on: IndexKey(app: app, mode: .live))
                }
                position += 1
            case .replicate(let app, let records):
                applyReplicated(records, of: app, origin: origin, into: &turn)
                position += 1
            case .awaitLog:
                preconditionFailure("awaitLog reached shard \(number): loops answer it themselves")
            }
        }
        let appended = appendRecords(of: &turn)
        appendOutcomes(of: &turn, appended: appended, to: &outcomes)
    }

    /// Runs the run of consecutive commands on `key`'s index that starts at
    /// `start`, in one lookup of the index: each command's outcome and
    /// records go into `turn`. Returns where the run ends.
    private func runCommands(
        _ commands: [ShardCommand], from start: Int, on key: IndexKey, carried: AppSettings,
        into turn: inout ShardTurn
    ) -> Int {
        var end = start + 1
        while end < commands.endIndex, case .index(key, _, _) = commands[end].work { end += 1 }
        guard !unacknowledged.contains(key) else {
            for command in commands[start..<end] { turn.refuse(command.origin, on: key) }
            return end
        }
        // The catalog owns the settings: the index adopts its current ones, unlogged
        // (a recovered index adopts them again at its first turn).
        let settings = catalog.settings(of: key.app) ?? carried
        if !log.takesLocalWrites {
            runAsFollower(commands[start..<end], on: key, settings: settings, into: &turn)
            return end
        }
        _ = table.ensure(key, settings: settings)
        var mutations = mutationScratch
        mutationScratch = []
        defer {
            mutations.removeAll(keepingCapacity: true)
            mutationScratch = mutations
        }
        let found: Void? = table.withIndex(key) { index in
            if index.settings != settings { index.adoptSettings(settings) }
            // By position, not `for command in commands[…]`: that copied each command
            // (every reference of its request retained, then released).
            for position in start..<end {
                let origin = commands[position].origin
                mutations.removeAll(keepingCapacity: true)
                let outcome: Outcome
                if case .index(_, _, .register(let request, let now)) = commands[position].work {
                    // A registration, the hot path's write, read straight out of its command:
                    // a copy of the request alone, no look at its traits (it has no feed work).
                    if let refusal = tokenRefusal(request.token, on: key, now: &turn.now) {
                        outcome = .rejected(refusal)
                    } else {
                        outcome = index.executeRegistration(request, at: now, appendingMutationsTo: &mutations)
                    }
                } else {
                    guard case .index(_, _, let work) = commands[position].work else { continue }
                    // One look at the command's case (a multi-payload enum: each look is a runtime call).
                    let traits = Self.traits(of: work)
                    if let refusal = tokenRefusal(traits.token, on: key, now: &turn.now) {
                        outcome = .rejected(refusal)
                    } else {
                        outcome = index.execute(work, appendingMutationsTo: &mutations)
                    }
                    switch traits.feed {
                    case .none: break
                    case .changes(let after, let limit, let wait):
                        if case .changes(.success(let page)) = outcome, page.changes.isEmpty,
                            mayHoldChangeWaiter(of: key.app)
                        {
                            // Nothing after the cursor yet: held back until a change or its time is up.
                            hold(ChangeWaiter(origin: origin, after: after, limit: limit, deadline: 0), wait, key)
                            continue
                        }
                    case .export:
                        turn.exports.append(
                            ShardTurn.Export(answer: turn.answers.count, key: key, recordsBefore: turn.records.count))
                    }
                }
                let changed = !mutations.isEmpty
                record(&mutations, of: key, into: &turn)
                turn.answer(origin, outcome, on: key, changed: changed)
            }
        }
        if found == nil { preconditionFailure("index \(key) vanished") }
        return end
    }

    /// Runs commands on a cluster follower's index (spec §13.4): each on a
    /// copy (copy-on-write: a read copies nothing, and no index is created
    /// for one), a command that would change the index refused (503) before
    /// anything changes — the state changes only by the leader's records
    /// (`applyReplicated`). A change-feed long poll waits as on the leader;
    /// replicated changes release it.
    private func runAsFollower(
        _ commands: ArraySlice<ShardCommand>, on key: IndexKey, settings: AppSettings, into turn: inout ShardTurn
    ) {
        func pristine() -> AppIndex {
            table.indexes[key] ?? AppIndex(appID: key.app, mode: key.mode, settings: settings)
        }
        var trial = pristine()
        for command in commands {
            guard case .index(_, _, let work) = command.work else { continue }
            let traits = Self.traits(of: work)
            let (outcome, mutations) = trial.execute(work)
            guard mutations.isEmpty else {
                turn.refuse(command.origin, on: key)
                trial = pristine()
                continue
            }
            if case .changes(let after, let limit, let wait) = traits.feed,
                case .changes(.success(let page)) = outcome, page.changes.isEmpty,
                mayHoldChangeWaiter(of: key.app)
            {
                hold(ChangeWaiter(origin: command.origin, after: after, limit: limit, deadline: 0), wait, key)
                continue
            }
            turn.answer(command.origin, outcome, on: key, changed: false)
        }
    }

    /// Encodes `mutations` of `key` as the turn's records; a device change
    /// also enters the turn's feed changes, after the index's one change-time
    /// record of the turn (the clock read once per turn, when needed). Each
    /// mutation is moved out of `mutations` (left empty): a copy retained
    /// every reference of its device, and the list released them again.
    private func record(_ mutations: inout [Mutation], of key: IndexKey, into turn: inout ShardTurn) {
        if !mutations.isEmpty { turn.noteWritten(key) }
        mutations.moveEach { mutation in
            var record = turn.spareRecords.popLast() ?? []
            EngineRecord.encodeMutation(mutation, of: key, into: &record)
            if let change = EngineRecord.deviceChange(inEncoded: record) {
                if !turn.timedKeys.contains(key) {
                    let at = turn.changeTime ?? Timestamp(millisecondsSinceEpoch: wallClock.wallMilliseconds())
                    turn.changeTime = at
                    var timeRecord = turn.spareRecords.popLast() ?? []
                    EngineRecord.encodeMutation(.changeTime(at), of: key, into: &timeRecord)
                    turn.records.append(timeRecord)
                    turn.timedKeys.append(key)
                }
                turn.feedChanges.append((key, turn.records.count, change))
            }
            turn.records.append(record)
        }
    }

    /// Removes both modes of `app`: its record, and the answers of its long polls (their index is gone).
    private func removeApp(_ app: AppID, origin: CommandOrigin, into turn: inout ShardTurn) {
        let removed = table.removeApp(app)
        turn.records.append(EngineRecord.appRemoved(app).encoded())
        for mode in AppMode.allCases { turn.noteWritten(IndexKey(app: app, mode: mode)) }
        turn.answer(origin, .appRemoved(devices: removed), on: IndexKey(app: app, mode: .live), changed: true)
        for mode in AppMode.allCases {
            // Answered now, with the removal's append to wait for.
            release(IndexKey(app: app, mode: mode), into: &turn.released) { Self.emptyPage(for: $0) }
        }
    }

    /// Applies records the leader logged (`ShardWork.replicate`) through the
    /// replayer's one function, at their LSNs, and answers the change-feed
    /// waiters they wake. A record that does not apply means this copy is not
    /// the leader's: loud, never a silent divergence.
    private func applyReplicated(
        _ records: [ReplicatedRecord], of app: AppID, origin: CommandOrigin, into turn: inout ShardTurn
    ) {
        for record in records {
            record.payload.withUnsafeBytes { payload in
                do throws(EngineRecoveryError) {
                    try Replayer.apply(payload, from: .log(record.lsn), to: &table) {
                        "replicated record LSN \(record.lsn.rawValue)"
                    }
                } catch {
                    preconditionFailure("this node's state is not the leader's: \(error)")
                }
            }
        }
        let keys = AppMode.allCases.map { IndexKey(app: app, mode: $0) }
        if let last = records.last {
            for key in keys {
                guard let position = table.withIndex(key, { $0.position }) else { continue }
                loggedThrough[key] = last.lsn
                positionBoard?.publish(key, position)
            }
        }
        releaseWaiters(of: keys, into: &turn.released)
        turn.answer(origin, .logAcknowledged, on: keys[0], changed: false)
    }

    /// Keeps the turn's record buffers for the next turns (the log took their bytes).
    private func keepRecordBuffers(of turn: inout ShardTurn) {
        for index in turn.records.indices where turn.spareRecords.count < Self.spareRecordBuffersMax {
            var buffer: [UInt8] = []
            swap(&buffer, &turn.records[index])
            guard buffer.capacity <= Self.recordBufferRetainedBytesMax else { continue }
            buffer.removeAll(keepingCapacity: true)
            turn.spareRecords.append(buffer)
        }
    }

    /// Appends the turn's records in one append and, once they have LSNs,
    /// counts them in their indexes' positions, gives the feed changes
    /// their positions, answers the long polls they wake and sets the
    /// cursor of exports frozen after a record of the turn. A refused append
    /// leaves the written indexes unacknowledged. Returns the last LSN
    /// appended (nil: nothing appended, or refused).
    private func appendRecords(of turn: inout ShardTurn) -> LogSequenceNumber? {
        guard !turn.records.isEmpty else { return nil }
        // Held: the loop running this turn writes the round's records once, at its end.
        guard let appended = log.appendHeld(turn.records) else {
            // Refused: these changes are in memory and nowhere else.
            unacknowledged.formUnion(turn.written)
            return nil
        }
        for key in turn.written { loggedThrough[key] = appended }
        countRecords(of: &turn, firstLSN: appended.rawValue - UInt64(turn.records.count) + 1)
        if !turn.feedChanges.isEmpty { releaseWaiters(of: turn.timedKeys, into: &turn.released) }
        for export in turn.exports {
            guard let cursor = export.cursor, case .exportView(let view) = turn.answers[export.answer].outcome
            else { continue }
            turn.answers[export.answer].outcome = .exportView(view.at(cursor: cursor))
        }
        return appended
    }

    /// Counts each mutation record of the turn in its index at its LSN (spec
    /// §13.1: a position counts the app's own records, `firstLSN` is the
    /// turn's first record's), enters the device changes in the change feed
    /// at their records' positions, and gives each export frozen after a
    /// record of its index that record's position. One index lookup per run
    /// of records of one index; no allocation.
    private func countRecords(of turn: inout ShardTurn, firstLSN: UInt64) {
        var change = 0
        var start = 0
        while start < turn.records.count {
            guard let key = EngineRecord.mutationKey(inEncoded: turn.records[start]) else {
                start += 1  // an app's removal: its indexes are gone
                continue
            }
            var end = start + 1
            while end < turn.records.count && EngineRecord.mutationKey(inEncoded: turn.records[end]) == key { end += 1 }
            let found: UInt64? = table.withIndex(key) { index in
                for record in start..<end {
                    guard let position = index.countRecord(lsn: firstLSN + UInt64(record)) else {
                        preconditionFailure("index \(key) counted LSN \(firstLSN + UInt64(record)) already")
                    }
                    guard change < turn.feedChanges.count && turn.feedChanges[change].record == record else {
                        continue
                    }
                    guard let at = turn.changeTime else {
                        preconditionFailure("device changes logged without a change time")
                    }
                    index.recordChange(turn.feedChanges[change].change, at: at, position: position)
                    change += 1
                    for export in turn.exports.indices
                    where turn.exports[export].key == key && record < turn.exports[export].recordsBefore {
                        turn.exports[export].cursor = position
                    }
                }
                return index.position
            }
            if let positionBoard, let found { positionBoard.publish(key, found) }
            precondition(
                found != nil || change == turn.feedChanges.count || turn.feedChanges[change].record >= end,
                "index \(key) vanished before its changes were recorded")
            start = end
        }
        precondition(change == turn.feedChanges.count, "\(turn.feedChanges.count - change) feed changes not recorded")
    }

    /// The turn's outcomes with what each waits for: a write its own
    /// append, a read every append so far (of any shard), and nothing (503
    /// now) for an index that may hold a change the log never acknowledged.
    /// Moves the turn's answers and released waiters into `outcomes` (a copy
    /// retained each outcome and its origin, and emptying the turn released
    /// them again; issue 25), leaving both lists empty.
    private func appendOutcomes(
        of turn: inout ShardTurn, appended: LogSequenceNumber?, to outcomes: inout [ShardOutcome]
    ) {
        let readsWaitFor = appended ?? log.appendedThrough
        outcomes.reserveCapacity(outcomes.count + turn.answers.count + turn.released.count)
        // The answer's index was hashed twice an answer (SipHash each): the set
        // is asked only when it holds something, and the map once per run of
        // answers of one index (neither changes here).
        let anyUnacknowledged = !unacknowledged.isEmpty
        var runKey: IndexKey?
        var runDependsOn = LogSequenceNumber(0)
        turn.answers.moveEach { answer in
            guard !answer.refused, !(anyUnacknowledged && unacknowledged.contains(answer.key)) else {
                // A write the log refused, or a read that may show one: 503.
                outcomes.append(.unavailable(answer.origin))
                return
            }
            if runKey != answer.key {
                runKey = answer.key
                runDependsOn = loggedThrough[answer.key] ?? LogSequenceNumber(0)
            }
            let dependsOn = runDependsOn
            let waitsFor = answer.changed ? dependsOn : readsWaitFor
            outcomes.append(
                ShardOutcome(origin: answer.origin, outcome: answer.outcome, waitsFor: waitsFor, dependsOn: dependsOn))
        }
        turn.released.moveEach { released in
            var waiter = released.outcome
            // A read: it shows what every earlier append holds (and nothing of a refused one).
            if unacknowledged.contains(released.key) {
                outcomes.append(.unavailable(waiter.origin))
                return
            }
            waiter.waitsFor = readsWaitFor
            waiter.dependsOn = loggedThrough[released.key] ?? LogSequenceNumber(0)
            outcomes.append(waiter)
        }
    }

    /// What the shard itself needs of a command, read with one switch: the
    /// token a registration counts against, and the change-feed work.
    private struct CommandTraits {
        enum Feed {
            case none
            /// A long poll: `wait` is above zero.
            case changes(after: UInt64?, limit: Int, wait: Duration)
            case export
        }

        var token: PushToken?
        var feed: Feed = .none
    }

    private static func traits(of command: Command) -> CommandTraits {
        switch command {
        case .register(let request, _):
            return CommandTraits(token: request.token)
        case .registerForPrincipal(let request, _, _, _):
            return CommandTraits(token: request.token)
        case .idempotent(_, let inner):
            // A keyed registration counts as one; so does a retry that will be
            // answered from memory (the budget's burst absorbs retries).
            return traits(of: inner)
        case .changes(let after, let limit, let wait) where wait > .zero:
            return CommandTraits(token: nil, feed: .changes(after: after, limit: limit, wait: wait))
        case .beginExport:
            return CommandTraits(token: nil, feed: .export)
        case .getDevice, .patchDevice, .deviceHistory, .exportPerson, .deleteDevice, .listDevices, .listPeople,
            .changes, .importRows,
            .registerBatch,
            .reportFeedback, .stats, .previewInactive, .invalidateInactive, .updateSettings, .putPerson, .getPerson,
            .erasePerson, .putCredential, .deleteCredential, .deleteDeviceByToken, .deregisterInstallation,
            .deletePrincipalDevice, .answer, .lookUpAnswer, .custom:
            // A batch is a secret key's bulk write, as the CSV import: bounded by
            // the key's rate limit, not per token (docs/api.md, "Rate limits").
            return CommandTraits(token: nil)
        }
    }

    /// Answers the waiters of `keys` whose page is no longer empty.
    private func releaseWaiters(of keys: [IndexKey], into released: inout [(key: IndexKey, outcome: ShardOutcome)]) {
        var any = false
        for key in keys where changeWaiters[key] != nil {
            any = true
            release(key, into: &released) { waiter in
                changesOutcome(key, waiter).flatMap { Self.isEmptyPage($0) ? nil : $0 }
            }
        }
        if any { recomputeEarliestWaiterDeadline() }
    }

    /// Holds `waiter` back for `wait` from now on the shard's clock.
    private func hold(_ waiter: ChangeWaiter, _ wait: Duration, _ key: IndexKey) {
        var waiter = waiter
        waiter.deadline = clock.monotonicNanoseconds() &+ UInt64(wait.wholeNanoseconds)
        changeWaiters[key, default: []].append(waiter)
        earliestWaiterDeadline = min(earliestWaiterDeadline ?? .max, waiter.deadline)
    }

    /// Answers every waiter whose time is up, with its page as it is now.
    private func releaseExpiredWaiters(into released: inout [(key: IndexKey, outcome: ShardOutcome)]) {
        let now = clock.monotonicNanoseconds()
        guard let earliest = earliestWaiterDeadline, earliest <= now else { return }
        for key in Array(changeWaiters.keys) {
            release(key, into: &released) { waiter in
                guard waiter.deadline <= now else { return nil }
                return changesOutcome(key, waiter) ?? Self.emptyPage(for: waiter)
            }
        }
        recomputeEarliestWaiterDeadline()
    }

    /// Answers the waiters of `key` for which `answer` gives an outcome
    /// (their waitsFor is set by the caller); keeps the others.
    private func release(
        _ key: IndexKey, into released: inout [(key: IndexKey, outcome: ShardOutcome)],
        answer: (ChangeWaiter) -> Outcome?
    ) {
        guard let waiters = changeWaiters[key] else { return }
        var still: [ChangeWaiter] = []
        for waiter in waiters {
            guard let outcome = answer(waiter) else {
                still.append(waiter)
                continue
            }
            released.append(
                (
                    key,
                    ShardOutcome(
                        origin: waiter.origin, outcome: outcome, waitsFor: nil, dependsOn: LogSequenceNumber(0))
                ))
        }
        changeWaiters[key] = still.isEmpty ? nil : still
    }

    /// Finds the earliest deadline again after waiters left. O(waiters).
    private func recomputeEarliestWaiterDeadline() {
        earliestWaiterDeadline = changeWaiters.values.joined().lazy.map(\.deadline).min()
    }

    /// The page a waiter would get now (nil when its index is gone).
    private func changesOutcome(_ key: IndexKey, _ waiter: ChangeWaiter) -> Outcome? {
        table.indexes[key].map { .changes($0.changesPage(after: waiter.after, limit: waiter.limit)) }
    }

    /// Whether one more change waiter of `app` may be held: under the
    /// shard's cap and under the app's share of it. O(indexes with waiters):
    /// asked only when a request would wait.
    private func mayHoldChangeWaiter(of app: AppID) -> Bool {
        var held = 0
        var heldByApp = 0
        for (key, waiters) in changeWaiters {
            held += waiters.count
            if key.app == app { heldByApp += waiters.count }
        }
        return held < Shard.changeWaitersMax && heldByApp < Shard.changeWaitersPerAppMax
    }

    /// The change waiters held now for each app (tests, metrics).
    package func changeWaiterCounts() -> [AppID: Int] {
        var counts: [AppID: Int] = [:]
        for (key, waiters) in changeWaiters { counts[key.app, default: 0] += waiters.count }
        return counts
    }

    /// A waiter's answer when nothing came: no changes, its own cursor back.
    private static func emptyPage(for waiter: ChangeWaiter) -> Outcome {
        .changes(.success(ChangesPage(changes: [], next: waiter.after ?? 0)))
    }

    private static func isEmptyPage(_ outcome: Outcome) -> Bool {
        if case .changes(.success(let page)) = outcome { return page.changes.isEmpty }
        return false
    }

    /// Returns the refusal of a registration whose token is over
    /// `tokenRegistrationRate` (nil for any other command, or one within the
    /// rate). Every registration of the token counts, refused or not by the
    /// model; one refused here is not counted and reaches neither the index
    /// nor the log. O(1).
    private func tokenRefusal(_ token: PushToken?, on key: IndexKey, now: inout UInt64?) -> RegistryRejection? {
        guard let token else { return nil }
        // The keyed multiply-fold of the token tables (about a tenth of `Hasher`'s instructions for a token).
        let hash = token.withBytes { bytes in
            tokenLimiterKeys.hash64(
                domain: key.mode.rawValue &+ token.platform.rawValue &* 16, context: key.app.rawValue, bytes: bytes)
        }
        let time = now ?? clock.monotonicNanoseconds()
        now = time
        switch tokenLimiter.admit(hash, now: time) {
        case .allowed: return nil
        case .refused(let seconds): return .tokenRateLimited(retryAfterSeconds: seconds)
        }
    }

    /// Requests refused and tokens forgotten early by this shard's per-token
    /// limit, since start (metrics).
    package func tokenLimiterCounts() -> (refusals: Int, evictions: Int) {
        (tokenLimiter.refusals, tokenLimiter.evictions)
    }

    /// The log has failed: nothing may change in memory any more. First every
    /// index whose last logged change the log did not acknowledge is marked;
    /// then each command runs on a copy of its index (copy-on-write: a read
    /// copies nothing): one that would change it is refused (503) and the
    /// copy dropped; a read is answered unless its index is marked.
    private func executeWithoutLog(_ commands: [ShardCommand]) -> [ShardOutcome] {
        // Published before the failure flag and frozen after it.
        let acknowledged = log.acknowledgedThrough
        for (key, lsn) in loggedThrough where lsn > acknowledged { unacknowledged.insert(key) }
        return commands.map { command -> ShardOutcome in
            switch command.work {
            case .index(let key, let settings, let work):
                guard !unacknowledged.contains(key) else { return .unavailable(command.origin) }
                var trial = table.indexes[key] ?? AppIndex(appID: key.app, mode: key.mode, settings: settings)
                let (outcome, mutations) = trial.execute(work)
                guard mutations.isEmpty else { return .unavailable(command.origin) }
                return ShardOutcome(
                    origin: command.origin, outcome: outcome, waitsFor: LogSequenceNumber(0),
                    dependsOn: loggedThrough[key] ?? LogSequenceNumber(0))
            case .removeApp, .replicate:
                return .unavailable(command.origin)
            case .awaitLog:
                preconditionFailure("awaitLog reached shard \(number): loops answer it themselves")
            }
        }
    }

    // MARK: - Snapshot slices (read-only, not logged)

    /// Returns the keys this shard holds data for, sorted.
    package func keys() -> [IndexKey] { table.sortedKeys }

    /// Returns the settings and credentials of one index, or nothing when the
    /// app is gone.
    package func snapshotHeader(_ key: IndexKey) -> [[UInt8]] {
        table.withIndex(key) { index in
            index.snapshotSettingsAndCredentials().map { EngineRecord.mutation(key, $0).encoded() }
        } ?? []
    }

    /// Returns one slice of an index's people and where to continue (nil: done).
    package func snapshotPeople(_ key: IndexKey, fromSlot: UInt32) -> (records: [[UInt8]], next: UInt32?) {
        table.withIndex(key) { index in
            let slice = index.snapshotPeople(fromSlot: fromSlot, limit: Shard.snapshotSliceDevices)
            return (slice.mutations.map { EngineRecord.mutation(key, $0).encoded() }, slice.next)
        } ?? ([], nil)
    }

    /// Returns one slice of an index's devices and where to continue (nil: done).
    package func snapshotDevices(_ key: IndexKey, afterSequence: UInt64) -> (records: [[UInt8]], next: UInt64?) {
        table.withIndex(key) { index in
            let slice = index.snapshotDevices(afterSequence: afterSequence, limit: Shard.snapshotSliceDevices)
            return (slice.mutations.map { EngineRecord.mutation(key, $0).encoded() }, slice.next)
        } ?? ([], nil)
    }

    /// Returns a frozen view of one index for a snapshot encoded off this
    /// shard's turns (nil when the app is gone); writes then count the
    /// chunks they copy in `pin`. One turn, O(chunks). Decision 0054.
    package func freezeForSnapshot(_ key: IndexKey, pin: SnapshotPin) -> IndexSnapshotView? {
        table.withIndex(key) { $0.freezeForSnapshot(pin: pin) }
    }

    /// Forgets an index's snapshot sharing marks once its view is dropped.
    package func endSnapshotSharing(_ key: IndexKey) {
        _ = table.withIndex(key) { $0.endSnapshotSharing() }
    }

    /// Returns a copy of one index's change feed as snapshot slices (none
    /// when the app is gone). One turn, O(retained changes): the copy is
    /// encoded off the shard. Any turn after the snapshot's start LSN gives
    /// an exact result, since replay adds every later change (decision 0062).
    package func snapshotChangeFeed(_ key: IndexKey) -> [ChangeFeedSlice] {
        table.indexes[key]?.changes.snapshotSlices() ?? []
    }

    /// Returns the record that keeps deleted device ids from being reused.
    package func snapshotSequenceFloor(_ key: IndexKey) -> [[UInt8]] {
        table.withIndex(key) { index in
            [EngineRecord.mutation(key, .deviceSequenceFloor(index.nextDeviceSequence)).encoded()]
        } ?? []
    }

    /// Returns the number of devices this shard holds (snapshot pre-sizing).
    package func deviceCount() -> Int {
        table.indexes.values.reduce(0) { $0 + $1.stats().devices }
    }

    /// Returns the devices and people of every index this shard holds, in
    /// no order (metrics). O(indexes) in one turn: indexes are bounded by
    /// the catalog's apps (two modes each).
    package func census() -> [IndexCensus] {
        table.indexes.map { key, index in
            let stats = index.stats()
            return IndexCensus(key: key, devices: stats.devices, people: stats.people)
        }
    }

    /// Runs a read-only closure over one index (tests and tools).
    package func read<Result: Sendable>(_ key: IndexKey, _ body: (AppIndex) -> Result) -> Result? {
        table.indexes[key].map(body)
    }
}

/// The size of one index at one moment (metrics).
package struct IndexCensus: Sendable, Equatable {
    package var key: IndexKey
    package var devices: Int
    package var people: Int
}

/// What one turn of `Shard.execute` gathers before its one append: the
/// records, and per command its answer and the index it touched; what each
/// answer waits for is known only after the append (`Shard.outcomes`).
private struct ShardTurn {
    /// One command's answer, before the append.
    struct Answer {
        var origin: CommandOrigin
        var outcome: Outcome
        /// The index it read or changed.
        var key: IndexKey
        /// Whether it logged records.
        var changed: Bool
        /// Answered 503 now (its index holds a change the log never acknowledged).
        var refused: Bool
    }

    var records: [[UInt8]] = []
    /// Emptied record buffers of earlier turns (`Shard.keepRecordBuffers`),
    /// kept by `empty()`: in the turn, a value on the stack, so that taking
    /// one is no access to the shard's state (a dynamic exclusivity check
    /// each, four a registration when the shard held them; issue 25).
    var spareRecords: [[UInt8]] = []
    var answers: [Answer] = []
    /// The indexes this turn logs records of, each once. A list: a turn
    /// writes few indexes, most often one (a set hashed the key for every
    /// change, issue 25).
    var written: [IndexKey] = []
    /// The clock, read once per turn and only when a registration needs it.
    var now: UInt64?
    /// The device changes of this turn, for the change feed once the append
    /// has given their records LSNs and positions (`record`: index in `records`).
    var feedChanges: [(key: IndexKey, record: Int, change: ChangedDevice)] = []
    /// The indexes of this turn that logged their `changeTime` record, and the time.
    var timedKeys: [IndexKey] = []
    var changeTime: Timestamp?
    /// Answers of waiting `GET /v1/changes` requests released in this turn.
    var released: [(key: IndexKey, outcome: ShardOutcome)] = []
    /// An export frozen in this turn: its answer, and how many of the turn's
    /// records came before (its view holds those, whose positions the append
    /// gives: `cursor`, set after it, is the position of the last device
    /// change of its index among them).
    struct Export {
        var answer: Int
        var key: IndexKey
        var recordsBefore: Int
        var cursor: UInt64? = nil
    }

    var exports: [Export] = []

    /// Notes that the turn logs records of `key`. O(indexes written in the turn).
    mutating func noteWritten(_ key: IndexKey) {
        if written.last != key && !written.contains(key) { written.append(key) }
    }

    mutating func answer(_ origin: CommandOrigin, _ outcome: Outcome, on key: IndexKey, changed: Bool) {
        answers.append(Answer(origin: origin, outcome: outcome, key: key, changed: changed, refused: false))
    }

    mutating func refuse(_ origin: CommandOrigin, on key: IndexKey) {
        answers.append(Answer(origin: origin, outcome: .logAcknowledged, key: key, changed: false, refused: true))
    }

    /// Empties the turn for the next one, keeping the buffers' capacity.
    mutating func empty() {
        records.removeAll(keepingCapacity: true)
        answers.removeAll(keepingCapacity: true)
        written.removeAll(keepingCapacity: true)
        now = nil
        feedChanges.removeAll(keepingCapacity: true)
        timedKeys.removeAll(keepingCapacity: true)
        changeTime = nil
        released.removeAll(keepingCapacity: true)
        exports.removeAll(keepingCapacity: true)
    }
}
