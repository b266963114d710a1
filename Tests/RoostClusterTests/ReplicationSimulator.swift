import RoostCluster
import RoostStorage
import RoostTesting

/// A node's local log in the simulation: a durable prefix and a volatile
/// suffix that a crash loses. Index i holds LSN i + 1.
struct SimulatedDisk {
    var records: [[UInt8]] = []
    var durableCount = 0
    /// The newest snapshot's LSN: records through it were applied (durable, survives a crash).
    var checkpoint = 0
    /// Raised by every truncation, so that an fsync of records cut since completes nothing.
    var generation = 0

    var end: LogSequenceNumber { LogSequenceNumber(UInt64(records.count)) }

    mutating func append(firstLSN: LogSequenceNumber, _ newRecords: [[UInt8]]) {
        precondition(firstLSN.rawValue == UInt64(records.count) + 1, "append at \(firstLSN) after \(records.count)")
        records.append(contentsOf: newRecords)
    }

    mutating func truncate(after lsn: LogSequenceNumber) {
        let keep = Int(lsn.rawValue)
        precondition(keep <= records.count, "truncate after \(lsn) beyond \(records.count)")
        precondition(keep >= checkpoint, "truncate after \(lsn) below the checkpoint \(checkpoint)")
        records.removeSubrange(keep...)
        durableCount = min(durableCount, keep)
        generation += 1
    }

    mutating func fsynced(through lsn: LogSequenceNumber, generation: Int) {
        guard generation == self.generation else { return }
        durableCount = max(durableCount, min(Int(lsn.rawValue), records.count))
    }

    /// A crash: the volatile suffix is gone.
    mutating func crash() {
        truncate(after: LogSequenceNumber(UInt64(durableCount)))
    }
}

/// The knobs of one schedule (`run` draws the chaos phase's length from the seed).
struct SimulationPlan {
    /// Faults and client writes happen in this first phase...
    var chaosMilliseconds: Int64 = 2_500
    /// ... then none: the nodes must converge within this long.
    var quietMillisecondsMax: Int64 = 12_000
    var submitEveryMillisecondsMax: Int64 = 30
    var faultEveryMillisecondsMax: Int64 = 400
    var etcdLatencyMillisecondsMax: Int64 = 12
    var fsyncLatencyMillisecondsMax: Int64 = 15
    var tickMillisecondsMax: Int64 = 60
    var watchPollMillisecondsMax: Int64 = 60
    var answerLossPercent = 1
    var leaseTTLSeconds: Int64 = 1
}

/// A deterministic simulation of three nodes' `ReplicationMachine`s against
/// one `FakeEtcd` (HOUSE_STYLE 21): a seeded scheduler orders etcd answers,
/// watch deliveries, fsyncs, ticks, client writes and faults (crashes,
/// pauses past the TTL, watch faults, keep-alives after revoke, etcd
/// unavailable, purges with compaction). It checks the invariants as it
/// goes and after a quiet period; `violations` lists what broke.
struct ReplicationSimulator {
    enum Event {
        case tick(Int, incarnation: Int)
        case watchPoll(Int, incarnation: Int)
        case etcdArrives(Int, incarnation: Int, EtcdRequestID, EtcdRequest)
        case answerArrives(Int, incarnation: Int, EtcdRequestID, EtcdResponse)
        case deliver(Int, incarnation: Int, ReplicationEvent)
        case fsync(Int, incarnation: Int, generation: Int, through: LogSequenceNumber)
        case submit
        case fault
        case etcdBack
        case restart(Int)
        case quiet
        case convergenceCheck
    }

    struct Scheduled {
        var time: Int64
        var sequence: Int
        var event: Event
    }

    struct Node {
        var id: NodeID
        var machine: ReplicationMachine?
        var disk = SimulatedDisk()
        var incarnation = 0
        var pausedUntil: Int64 = 0
        var watch: (fakeID: Int, token: WatchToken)?
        var appliedThrough = LogSequenceNumber(0)
        var restartPending = false
        /// The node's clock runs at this rate (per mille of the simulation's): a
        /// slow clock checks its lease deadline late, which only the fence covers.
        var clockRatePermille: Int64 = 1_000
        /// The simulation's time at the machine's start, and the node's clock then.
        var clockOrigin: Int64 = 0
        var clockAtOrigin: Int64 = 0
        /// The longest wait between two watch deliveries: some watch streams lag.
        var watchLagMillisecondsMax: Int64 = 60
    }

    /// What happened, for the test's summary.
    struct Statistics: Sendable {
        var events = 0
        var acknowledged = 0
        var epochs = 0
        var crashes = 0
        var pauses = 0
        var deposed = 0
        /// Depositions by a failed fence: a deposed leader's append refused by etcd.
        var fenced = 0
        var reseeds = 0
        var purges = 0
        var unavailableWindows = 0
        var refusedBatches = 0
        /// Leaders whose own log failed (decision 0090).
        var logFailures = 0
        /// Reads whose answer was over the client's limit (the machine fell back to its smallest page).
        var answersTooLarge = 0

        mutating func add(_ other: Statistics) {
            events += other.events
            acknowledged += other.acknowledged
            epochs += other.epochs
            crashes += other.crashes
            pauses += other.pauses
            deposed += other.deposed
            fenced += other.fenced
            reseeds += other.reseeds
            purges += other.purges
            unavailableWindows += other.unavailableWindows
            refusedBatches += other.refusedBatches
            logFailures += other.logFailures
            answersTooLarge += other.answersTooLarge
        }
    }

    let seed: UInt64
    var plan = SimulationPlan()
    var random: SeededRandom
    var etcd: FakeEtcd
    var nodes: [Node] = []
    let keys = ClusterKeys(cluster: ClusterName("sim")!)
    var now: Int64 = 0
    var queue: [Scheduled] = []
    var sequence = 0
    var quiet = false
    var finished = false
    var writeCounter = 0
    /// Every batch etcd committed, by LSN: (bytes, epoch). Purges do not remove from it.
    var groupLog: [UInt64: (record: [UInt8], epoch: ClusterEpoch)] = [:]
    /// Every acknowledged LSN: (bytes, epoch).
    var acknowledgements: [UInt64: (record: [UInt8], epoch: ClusterEpoch)] = [:]
    /// Which node appended in which epoch.
    var appenders: [ClusterEpoch: NodeID] = [:]
    var violations: [String] = []
    /// Prints every event and action of every node (`ROOST_SIM_TRACE=1` with one seed).
    var trace = false
    var statistics = Statistics()

    init(seed: UInt64, nodeCount: Int = 3) {
        self.seed = seed
        random = SeededRandom(seed: seed)
        etcd = FakeEtcd(seed: seed &* 31 &+ 7)
        for index in 0..<nodeCount { nodes.append(Node(id: NodeID("n\(index)")!)) }
    }

    // MARK: - Running

    /// Runs the schedule to its end; returns whether every invariant held.
    mutating func run() -> Bool {
        plan.chaosMilliseconds = 800 + draw(1_400)
        etcd.faults.duplicateEventPercent = Int(draw(6))
        etcd.faults.dropEventPercent = Int(draw(4))
        etcd.faults.rewindPercent = Int(draw(6))
        etcd.faults.keepAliveAfterRevokePercent = Int(draw(50))
        // A third of the schedules: an answer limit small enough that pages sized after
        // small batches fail when larger ones follow (the machine falls back to the smallest page).
        if draw(3) == 0 { etcd.faults.answerBytesMax = 2_000 + Int(draw(30_000)) }
        for index in nodes.indices { restart(index) }
        schedule(.submit, after: 1 + draw(plan.submitEveryMillisecondsMax))
        schedule(.fault, after: 1 + draw(plan.faultEveryMillisecondsMax))
        schedule(.quiet, after: plan.chaosMilliseconds)
        while !finished, violations.isEmpty, let next = popNext() {
            precondition(next.time >= now, "the simulation's clock went back")
            etcd.advance(byMilliseconds: next.time - now)
            now = next.time
            statistics.events += 1
            perform(next.event)
        }
        if violations.isEmpty { checkFinal() }
        return violations.isEmpty
    }

    mutating func draw(_ bound: Int64) -> Int64 {
        precondition(bound > 0, "draw from \(bound)")
        return Int64(random.next() % UInt64(bound))
    }

    mutating func chance(_ percent: Int) -> Bool {
        Int(random.next() % 100) < percent
    }

    mutating func schedule(_ event: Event, after delay: Int64) {
        precondition(delay >= 0, "delay \(delay)")
        sequence += 1
        queue.append(Scheduled(time: now + delay, sequence: sequence, event: event))
        var child = queue.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard Self.earlier(queue[child], queue[parent]) else { break }
            queue.swapAt(child, parent)
            child = parent
        }
    }

    static func earlier(_ lhs: Scheduled, _ rhs: Scheduled) -> Bool {
        (lhs.time, lhs.sequence) < (rhs.time, rhs.sequence)
    }

    mutating func popNext() -> Scheduled? {
        guard !queue.isEmpty else { return nil }
        queue.swapAt(0, queue.count - 1)
        let top = queue.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < queue.count, Self.earlier(queue[left], queue[smallest]) { smallest = left }
            if right < queue.count, Self.earlier(queue[right], queue[smallest]) { smallest = right }
            guard smallest != parent else { break }
            queue.swapAt(parent, smallest)
            parent = smallest
        }
        return top
    }

    mutating func violation(_ text: String) {
        violations.append("t=\(now) ms: \(text)")
    }

    mutating func perform(_ event: Event) {
        switch event {
        case .tick(let index, let incarnation):
            guard nodes[index].machine != nil, nodes[index].incarnation == incarnation else { return }
            let delay = (isPaused(index) ? nodes[index].pausedUntil - now : 0) + 1 + draw(plan.tickMillisecondsMax)
            schedule(.tick(index, incarnation: incarnation), after: delay)
            if !isPaused(index) { handle(index, .tick) }
        case .watchPoll(let index, let incarnation):
            guard nodes[index].machine != nil, nodes[index].incarnation == incarnation else { return }
            schedule(.watchPoll(index, incarnation: incarnation), after: 1 + draw(nodes[index].watchLagMillisecondsMax))
            guard !isPaused(index), let watch = nodes[index].watch else { return }
            switch etcd.takeEvents(watch.fakeID) {
            case .success(let events):
                if !events.isEmpty { handle(index, .watchDelivered(watch.token, events)) }
            case .failure(let failure):
                nodes[index].watch = nil
                handle(index, .watchFailed(watch.token, failure))
            }
        case .etcdArrives(let index, let incarnation, let id, let request):
            let response = etcd.handle(request)
            if response == .failed(.answerTooLarge) { statistics.answersTooLarge += 1 }
            observe(request, response, from: index)
            if !quiet, chance(plan.answerLossPercent) { return }  // the answer is lost: the node times out
            schedule(
                .answerArrives(index, incarnation: incarnation, id, response),
                after: 1 + draw(plan.etcdLatencyMillisecondsMax))
        case .answerArrives(let index, let incarnation, let id, let response):
            deliver(index, incarnation: incarnation, .etcdAnswered(id, response))
        case .deliver(let index, let incarnation, let event):
            deliver(index, incarnation: incarnation, event)
        case .fsync(let index, let incarnation, let generation, let through):
            guard nodes[index].incarnation == incarnation else { return }
            nodes[index].disk.fsynced(through: through, generation: generation)
            guard generation == nodes[index].disk.generation else { return }
            deliver(index, incarnation: incarnation, .localDurable(through: through))
        case .submit:
            guard !quiet else { return }
            submitWrite()
            schedule(.submit, after: 1 + draw(plan.submitEveryMillisecondsMax))
        case .fault:
            guard !quiet else { return }
            injectFault()
            schedule(.fault, after: 1 + draw(plan.faultEveryMillisecondsMax))
        case .etcdBack:
            etcd.unavailable = false
        case .restart(let index):
            nodes[index].restartPending = false
            guard nodes[index].machine == nil else { return }
            restart(index)
        case .quiet:
            beginQuiet()
        case .convergenceCheck:
            if converged() {
                finished = true
            } else if now >= plan.chaosMilliseconds + plan.quietMillisecondsMax {
                violation("no convergence \(plan.quietMillisecondsMax) ms after the faults stopped")
            } else {
                schedule(.convergenceCheck, after: 200)
            }
        }
    }

    func isPaused(_ index: Int) -> Bool { nodes[index].pausedUntil > now }

    /// Hands an event to a node's machine, unless it crashed since (incarnation) or is paused (later).
    mutating func deliver(_ index: Int, incarnation: Int, _ event: ReplicationEvent) {
        guard nodes[index].incarnation == incarnation, nodes[index].machine != nil else { return }
        if isPaused(index) {
            return schedule(
                .deliver(index, incarnation: incarnation, event), after: nodes[index].pausedUntil - now + draw(3))
        }
        handle(index, event)
    }

    mutating func handle(_ index: Int, _ event: ReplicationEvent) {
        guard var machine = nodes[index].machine else { return }
        nodes[index].machine = nil  // one owner: the machine's state is not copied on write
        let acknowledgedBefore = machine.acknowledged
        let node = nodes[index]
        let local = node.clockAtOrigin + (now - node.clockOrigin) * node.clockRatePermille / 1_000
        let actions = machine.handle(event, now: local)
        if trace {
            print("t=\(now) \(node.id) \(machine.role) <- \(Self.brief(event))")
            for action in actions { print("t=\(now) \(node.id)    -> \(Self.brief(action))") }
        }
        nodes[index].machine = machine
        for action in actions { perform(action, of: index, acknowledgedBefore: acknowledgedBefore) }
    }

    // MARK: - Actions

    mutating func perform(_ action: ReplicationAction, of index: Int, acknowledgedBefore: LogSequenceNumber) {
        let incarnation = nodes[index].incarnation
        switch action {
        case .sendEtcd(let id, let request):
            noteAppend(request, from: index)
            schedule(
                .etcdArrives(index, incarnation: incarnation, id, request),
                after: 1 + draw(plan.etcdLatencyMillisecondsMax))
        case .startWatch(let token, let range, let from):
            if let old = nodes[index].watch { etcd.cancelWatch(old.fakeID) }
            nodes[index].watch = nil
            switch etcd.watch(range, from: from) {
            case .success(let fakeID): nodes[index].watch = (fakeID, token)
            case .failure(let failure):
                schedule(.deliver(index, incarnation: incarnation, .watchFailed(token, failure)), after: 1)
            }
        case .cancelWatch(let token):
            if let watch = nodes[index].watch, watch.token == token {
                etcd.cancelWatch(watch.fakeID)
                nodes[index].watch = nil
            }
        case .verifyLocalLog(let batches):
            let difference = firstDifference(nodes[index].disk, batches)
            schedule(
                .deliver(index, incarnation: incarnation, .localLogVerified(firstDifference: difference)), after: 0)
        case .truncateLocalLog(let after):
            nodes[index].disk.truncate(after: after)
        case .appendLocal(let first, let records):
            guard first.rawValue == UInt64(nodes[index].disk.records.count) + 1 else {
                return violation("\(nodes[index].id) appends at \(first) after \(nodes[index].disk.records.count)")
            }
            nodes[index].disk.append(firstLSN: first, records)
            let through = first.advanced(by: UInt64(records.count - 1))
            schedule(
                .fsync(index, incarnation: incarnation, generation: nodes[index].disk.generation, through: through),
                after: 1 + draw(plan.fsyncLatencyMillisecondsMax))
        case .apply(let through):
            checkApply(index, through: through)
        case .acknowledge(let through, let epoch):
            checkAcknowledge(index, from: acknowledgedBefore, through: through, epoch: epoch)
        case .writesAccepted, .writesRefused, .writesUnconfirmed, .becameFollower, .becameCandidate:
            break
        case .becameLeader:
            statistics.epochs += 1
        case .deposed(let reason):
            statistics.deposed += 1
            if reason == .fenced { statistics.fenced += 1 }
            crash(index, restartAfter: 20 + draw(200))  // exit 75; the supervisor starts it again
        case .reseedNeeded(let start):
            reseed(index, groupLogStart: start)
        case .refusedBatch:
            statistics.refusedBatches += 1
        }
    }

    /// Returns the first LSN where `disk` differs from `batches` (as far as it reaches).
    func firstDifference(_ disk: SimulatedDisk, _ batches: [ReplicationBatch]) -> LogSequenceNumber? {
        for batch in batches {
            for (offset, record) in batch.records.enumerated() {
                let lsn = batch.firstLSN.rawValue + UInt64(offset)
                guard lsn <= UInt64(disk.records.count) else { return nil }
                if disk.records[Int(lsn) - 1] != record { return LogSequenceNumber(lsn) }
            }
        }
        return nil
    }

    // MARK: - Invariants

    /// (a, second half) No two nodes append in one epoch.
    mutating func noteAppend(_ request: EtcdRequest, from index: Int) {
        guard case .transaction(_, let success, _) = request else { return }
        for case .put(let key, let value, _) in success where keys.firstLSN(ofLogKey: key) != nil {
            // The epoch from the header (bytes 8..<16), without decoding the batch.
            guard value.count > 16 else { return violation("an append of \(value.count) bytes") }
            let epoch = ClusterEpoch(Int64(Bytes.read(UInt64.self, value[...], at: 8)))
            if let other = appenders[epoch], other != nodes[index].id {
                violation("\(nodes[index].id) and \(other) both append in epoch \(epoch)")
            }
            appenders[epoch] = nodes[index].id
        }
    }

    /// Records what etcd committed; (a) a batch commits only while its epoch
    /// holds the leader key (no append from a deposed leader), and epochs
    /// never decrease along the log.
    mutating func observe(_ request: EtcdRequest, _ response: EtcdResponse, from index: Int) {
        guard case .transaction(true, _, _) = response, case .transaction(_, let success, _) = request else { return }
        for case .put(let key, let value, _) in success where key.starts(with: keys.membersPrefix) {
            guard let member = MemberRecord.decode(value) else { return violation("an undecodable member record") }
            let end = groupLog.keys.max() ?? 0
            if member.checkpointLSN > member.appliedLSN || member.appliedLSN.rawValue > end {
                violation("\(nodes[index].id) publishes \(member) beyond the group log's end \(end)")
            }
        }
        for case .put(let key, let value, _) in success where keys.firstLSN(ofLogKey: key) != nil {
            guard let batch = try? ReplicationBatch.decode(value) else { return violation("an undecodable batch") }
            let holder = etcd.value(of: keys.leader)?.createRevision
            if holder != batch.epoch.createRevision {
                violation(
                    "\(nodes[index].id) committed a batch of \(batch.epoch) at \(batch.firstLSN) while the leader key "
                        + "is \(holder.map { "of epoch \($0.rawValue)" } ?? "absent")")
            }
            if let before = groupLog[batch.firstLSN.rawValue - 1], before.epoch > batch.epoch {
                violation("a batch of \(batch.epoch) at \(batch.firstLSN) after one of \(before.epoch)")
            }
            for (offset, record) in batch.records.enumerated() {
                let lsn = batch.firstLSN.rawValue + UInt64(offset)
                if let held = groupLog[lsn], held.record != record {
                    violation("etcd committed two records at LSN \(lsn) (epochs \(held.epoch), \(batch.epoch))")
                }
                groupLog[lsn] = (record, batch.epoch)
            }
        }
    }

    /// (d) A node applies only what etcd committed, at its LSN.
    mutating func checkApply(_ index: Int, through: LogSequenceNumber) {
        let disk = nodes[index].disk
        let from = nodes[index].appliedThrough.rawValue + 1
        guard through.rawValue <= UInt64(disk.records.count) else {
            return violation("\(nodes[index].id) applies through \(through) beyond its log (\(disk.records.count))")
        }
        if from <= through.rawValue {
            for lsn in from...through.rawValue {
                guard let held = groupLog[lsn], held.record == disk.records[Int(lsn) - 1] else {
                    return violation("\(nodes[index].id) applies LSN \(lsn), which etcd did not commit")
                }
            }
        }
        nodes[index].appliedThrough = max(nodes[index].appliedThrough, through)
        // Now and then a snapshot: what is applied and durable becomes the checkpoint.
        if chance(25) {
            let checkpoint = max(disk.checkpoint, min(Int(through.rawValue), disk.durableCount))
            nodes[index].disk.checkpoint = checkpoint
            let event = ReplicationEvent.checkpointed(through: LogSequenceNumber(UInt64(checkpoint)))
            schedule(.deliver(index, incarnation: nodes[index].incarnation, event), after: 0)
        }
    }

    /// (a) No LSN acknowledged in two epochs (nor with two contents); (b, as it happens) acknowledged = committed.
    mutating func checkAcknowledge(
        _ index: Int, from before: LogSequenceNumber, through: LogSequenceNumber, epoch: ClusterEpoch
    ) {
        let disk = nodes[index].disk
        guard through.rawValue <= UInt64(disk.durableCount) else {
            return violation("\(nodes[index].id) acknowledges \(through), durable only to \(disk.durableCount)")
        }
        for lsn in (before.rawValue + 1)...through.rawValue {
            let record = disk.records[Int(lsn) - 1]
            if let earlier = acknowledgements[lsn], earlier.epoch != epoch || earlier.record != record {
                return violation("LSN \(lsn) acknowledged in epochs \(earlier.epoch) and \(epoch)")
            }
            guard let held = groupLog[lsn], held.record == record else {
                return violation("\(nodes[index].id) acknowledges LSN \(lsn), which etcd did not commit")
            }
            acknowledgements[lsn] = (record, epoch)
            statistics.acknowledged += 1
        }
    }

    /// (b) Every acknowledged record is in the final group log, and etcd's keys agree with what it committed.
    mutating func checkFinal() {
        for (lsn, acknowledged) in acknowledgements where groupLog[lsn]?.record != acknowledged.record {
            violation("acknowledged LSN \(lsn) is not in the final group log")
        }
        for keyValue in etcd.values(in: .prefix(keys.logPrefix)) {
            guard let batch = try? ReplicationBatch.decode(keyValue.value) else {
                return violation("etcd holds an undecodable batch")
            }
            for (offset, record) in batch.records.enumerated()
            where groupLog[batch.firstLSN.rawValue + UInt64(offset)]?.record != record {
                violation("etcd's batch at \(batch.firstLSN) differs from what it committed")
            }
        }
    }

    /// (c) Quiet: one leader takes writes, and every node's log is the group log, byte for byte.
    func converged() -> Bool {
        guard nodes.allSatisfy({ $0.machine != nil && !$0.restartPending }) else { return false }
        let leaders = nodes.filter { $0.machine?.isTakingWrites == true }
        guard leaders.count == 1 else { return false }
        let end = UInt64(groupLog.count)
        guard groupLog.keys.max() ?? 0 == end else { return false }
        for node in nodes {
            guard node.disk.records.count == Int(end), node.appliedThrough.rawValue == end else { return false }
            for lsn in stride(from: end, to: 0, by: -1) where groupLog[lsn]?.record != node.disk.records[Int(lsn) - 1] {
                return false
            }
        }
        return true
    }

    /// A short line for a trace (records and batches by count, not bytes).
    static func brief(_ value: Any) -> String {
        let text = "\(value)"
        return text.count > 240 ? String(text.prefix(240)) + "…" : text
    }

    func summary() -> String {
        let group = groupLog.keys.max() ?? 0
        let states = nodes.map { node in
            guard let machine = node.machine else { return "\(node.id): down" }
            return "\(node.id): \(machine.role) log \(node.disk.records.count) applied \(node.appliedThrough) "
                + "committed \(machine.committed) epoch \(machine.epoch.map(\.description) ?? "-")"
        }
        return "group log \(group); " + states.joined(separator: "; ")
    }

    // MARK: - Clients and faults

    mutating func submitWrite() {
        // A paused leader gets writes too: they wait in its socket until it resumes.
        let leaders = nodes.indices.filter { nodes[$0].machine?.isTakingWrites == true }
        guard !leaders.isEmpty else { return }
        let index = leaders[Int(draw(Int64(leaders.count)))]
        var records: [[UInt8]] = []
        for _ in 0...draw(3) {
            writeCounter += 1
            let padding = [UInt8](repeating: UInt8(0x61 + writeCounter % 26), count: Int(draw(160)))
            records.append(Array("s\(seed)-w\(writeCounter)-".utf8) + padding)
        }
        deliver(index, incarnation: nodes[index].incarnation, .submit(records))
    }

    mutating func injectFault() {
        let index = Int(draw(Int64(nodes.count)))
        switch draw(100) {
        case 0..<25:
            guard nodes[index].machine != nil else { return }
            statistics.crashes += 1
            crash(index, restartAfter: 20 + draw(600))
        case 25..<40:
            guard nodes[index].machine != nil, !isPaused(index) else { return }
            statistics.pauses += 1
            nodes[index].pausedUntil = now + plan.leaseTTLSeconds * 1_000 + 100 + draw(600)
        case 40..<50:
            guard !etcd.unavailable else { return }
            statistics.unavailableWindows += 1
            etcd.unavailable = true
            schedule(.etcdBack, after: 50 + draw(1_500))
        case 50..<56:
            purge()
        case 56..<62:
            guard let machine = nodes[index].machine, machine.role == .leader else { return }
            handle(index, .stepDown)
        case 62..<65:
            // The leader's own log fails: it lets go of its lease and the node
            // stops (exit 1); a person frees the disk and starts it again.
            guard let machine = nodes[index].machine, machine.role == .leader else { return }
            statistics.logFailures += 1
            handle(index, .localLogFailed)
            crash(index, restartAfter: 200 + draw(800))
        default:
            break  // a quiet spell
        }
    }

    mutating func crash(_ index: Int, restartAfter delay: Int64) {
        if let watch = nodes[index].watch { etcd.cancelWatch(watch.fakeID) }
        nodes[index].watch = nil
        nodes[index].machine = nil
        nodes[index].incarnation += 1
        nodes[index].pausedUntil = 0
        nodes[index].disk.crash()
        nodes[index].appliedThrough = LogSequenceNumber(0)
        nodes[index].restartPending = true
        schedule(.restart(index), after: delay)
    }

    mutating func restart(_ index: Int) {
        var configuration = ReplicationConfiguration(
            node: nodes[index].id, advertiseURL: "http://\(nodes[index].id):8080", keys: keys)
        configuration.leaseTTLSeconds = plan.leaseTTLSeconds
        configuration.etcdTimeoutMilliseconds = 200
        configuration.memberUpdateMilliseconds = 200
        nodes[index].machine = ReplicationMachine(configuration: configuration)
        // Most clocks keep time; some run slow, down to a quarter speed (a
        // stalled timer thread is the same): keep-alives then come too late.
        nodes[index].clockRatePermille = chance(70) ? 1_000 : 250 + draw(750)
        nodes[index].clockOrigin = now
        nodes[index].clockAtOrigin = draw(1_000_000)
        nodes[index].watchLagMillisecondsMax = chance(70) ? plan.watchPollMillisecondsMax : 100 + draw(400)
        nodes[index].appliedThrough = LogSequenceNumber(0)
        let disk = nodes[index].disk
        handle(index, .start(localLogEnd: disk.end, checkpoint: LogSequenceNumber(UInt64(disk.checkpoint))))
        let incarnation = nodes[index].incarnation
        schedule(.tick(index, incarnation: incarnation), after: 1 + draw(plan.tickMillisecondsMax))
        schedule(.watchPoll(index, incarnation: incarnation), after: 1 + draw(plan.watchPollMillisecondsMax))
    }

    /// The leader's purge of checkpointed batches, and compaction: deletes
    /// the batches that the most advanced checkpoint published in the member
    /// records holds (as `--log-retain-bytes` would: nodes further behind
    /// re-seed; the last batch stays), then compacts etcd's history. The node
    /// of that checkpoint can always start again without etcd's older
    /// batches (its disk keeps the checkpoint), so the cluster never loses them all.
    mutating func purge() {
        let members = etcd.values(in: .prefix(keys.membersPrefix)).compactMap { MemberRecord.decode($0.value) }
        let through = members.map(\.checkpointLSN.rawValue).max() ?? 0
        let batches = etcd.values(in: .prefix(keys.logPrefix)).compactMap { try? ReplicationBatch.decode($0.value) }
        let doomed = batches.dropLast().filter { $0.lastLSN.rawValue <= through }
        guard !doomed.isEmpty, !etcd.unavailable else { return }
        statistics.purges += 1
        _ = etcd.handle(
            .transaction(
                compares: [], success: doomed.map { .delete(.key(keys.logKey(firstLSN: $0.firstLSN))) }, failure: []))
        _ = etcd.handle(.compact(etcd.revision))
    }

    /// Re-seeds a node from the most advanced live node's applied state (its snapshot), then starts it again.
    mutating func reseed(_ index: Int, groupLogStart: LogSequenceNumber) {
        crash(index, restartAfter: 10 + draw(100))
        let donors = nodes.indices.filter {
            $0 != index && nodes[$0].machine != nil && nodes[$0].appliedThrough.rawValue + 1 >= groupLogStart.rawValue
        }
        guard let donor = donors.max(by: { nodes[$0].appliedThrough < nodes[$1].appliedThrough }) else { return }
        statistics.reseeds += 1
        let count = Int(nodes[donor].appliedThrough.rawValue)
        nodes[index].disk = SimulatedDisk(
            records: Array(nodes[donor].disk.records.prefix(count)), durableCount: count, checkpoint: count,
            generation: nodes[index].disk.generation + 1)
    }

    mutating func beginQuiet() {
        quiet = true
        etcd.faults = FakeEtcd.Faults()
        etcd.unavailable = false
        // A pause under way runs out (a deposed leader's resumption is the point of it).
        schedule(.convergenceCheck, after: 100)
    }
}
