import Dispatch
import Glibc
import RoostCluster
import RoostEngine
import RoostModel
import RoostPlatform
import RoostStorage
import RoostTelemetry
import Synchronization

/// How one node of a cluster runs (spec §13.8): the replication machine's
/// configuration, etcd's endpoints and the read gate.
package struct ClusterNodeConfiguration: Sendable {
    /// The replication thread's tick: timers (keep-alives, retries, the
    /// candidate's delay) are this precise.
    package static let tickMilliseconds: Int64 = 10
    /// Threads (each with one etcd connection) that send the machine's requests.
    package static let etcdRequestThreads = 3
    /// `--read-lag-ms` default and bounds (spec §13.3).
    package static let readLagMillisecondsDefault: Int64 = 2_000
    package static let readLagMillisecondsMax: Int64 = 3_600_000
    /// The most payload bytes one submit to the machine takes from the
    /// outbox: about one batch (`ReplicationBatch.encodedBytesMax`).
    package static let submitBytesMax = 1_000_000

    package var replication: ReplicationConfiguration
    package var endpoints: [EtcdEndpoint]
    package var readLagMilliseconds: Int64 = readLagMillisecondsDefault
    /// `--log-retain-bytes` default (spec §13.6): the most group-log bytes a
    /// leader keeps beyond what every live member checkpointed.
    package static let logRetainBytesDefault = 512 * 1024 * 1024
    package var logRetainBytes = logRetainBytesDefault

    package init(replication: ReplicationConfiguration, endpoints: [EtcdEndpoint]) {
        precondition(!endpoints.isEmpty, "a cluster node needs an etcd endpoint")
        self.replication = replication
        self.endpoints = endpoints
    }

    /// The etcd client's options: `--etcd-timeout-ms` per request.
    var etcdOptions: EtcdClientOptions {
        EtcdClientOptions(requestTimeout: .milliseconds(replication.etcdTimeoutMilliseconds))
    }
}

/// Why a node's replication ended (the process exits or starts over).
package enum ClusterNodeEnding: Sendable, Equatable {
    /// At start, the local log holds records after this LSN that the group
    /// log does not (never acknowledged): cut them, then open again.
    case cutNeeded(after: LogSequenceNumber)
    /// The node lost its epoch or stepped down (spec §13.5): exit 75.
    case deposed(String)
    /// etcd no longer holds the node's next position.
    case reseedNeeded(groupLogStart: LogSequenceNumber)
    /// The node cannot go on (its log failed, or a record cannot be read).
    case failed(String)
    /// `stop` was called.
    case stopped
}

/// One node of a cluster (spec §13): runs the `ReplicationMachine` on a
/// thread of its own against etcd and drives the engine with its actions.
///
/// Threads: the replication thread owns the machine (no other thread
/// touches it); `EtcdRequestWorkers` send its etcd requests; `WatchRunner`
/// runs its watch; an apply task applies the leader's records through the
/// engine's `FollowerApplier` and promotes the log; `ClusterObserver` reads
/// the members for `GET /v1/cluster`. They talk to the replication thread
/// through `NodeMailbox` values only. The API reads the published
/// `ClusterNodeStatus` (`ClusterControl`).
///
/// - Follower: the machine's `appendLocal` records (committed in etcd) go
///   to the applier, which applies them and writes them at the same LSNs.
/// - Leader: the machine's epoch record goes the same way; once it is
///   committed (`becameLeader`) the applier promotes the `ClusterLog`, and
///   from then on the replication thread takes the outbox's records (the
///   shards' and catalog's appends, already in the local log at their LSNs)
///   and submits them; the machine's LSNs must be the same (asserted). An
///   `acknowledge` becomes `ClusterLog.commit`, which releases the answers
///   the local log also acknowledged.
package final class ClusterNode: ClusterControl, Sendable {
    package let configuration: ClusterNodeConfiguration
    private let engine: DurableEngine
    private let clusterLog: ClusterLog
    private let logger: Logger
    private let mailbox: NodeMailbox
    private let workers: EtcdRequestWorkers
    private let watches: WatchRunner
    private let observer: ClusterObserver
    private let published: Mutex<ClusterNodeStatus>
    private let endingState = Mutex<ClusterNodeEnding?>(nil)
    private let stopRequested = Atomic<Bool>(false)
    /// Signalled once when the node first serves (caught up, or leading) or ends.
    private let servingOrEnded = DispatchSemaphore(value: 0)
    private let threadEnded = DispatchSemaphore(value: 0)
    /// Raised to this process when the node ends on its own (the serve's main thread takes it with sigwait).
    private let endSignal: Int32?
    private let applyJobs: AsyncStream<ApplyJob>.Continuation
    private let elections = Atomic<UInt64>(0)
    /// The node served (`waitUntilServing` returned nil).
    private let served = Atomic<Bool>(false)
    private let positionWaiters = PositionWaiters()
    /// The histograms of `/metrics`, written by the replication thread.
    private let figures = Mutex(ClusterMetrics())

    /// What the apply task does, in order.
    fileprivate enum ApplyJob: Sendable {
        /// `awaitDurable`: a new leader's own epoch record (acknowledged only once durable here).
        case append(firstLSN: LogSequenceNumber, records: [[UInt8]], awaitDurable: Bool)
        case promote
    }

    /// A node over `engine` (opened with `cluster: true`, not serving yet).
    /// `endSignal` is raised to this process when replication ends on its own.
    package init(
        configuration: ClusterNodeConfiguration, engine: DurableEngine, logger: Logger, endSignal: Int32?
    ) throws(SystemCallError) {
        guard let clusterLog = engine.clusterLog else {
            preconditionFailure("a cluster node over a single-node engine")
        }
        self.configuration = configuration
        self.engine = engine
        self.clusterLog = clusterLog
        self.logger = logger
        self.endSignal = endSignal
        let mailbox = try NodeMailbox()
        self.mailbox = mailbox
        let options = configuration.etcdOptions
        workers = try EtcdRequestWorkers(
            count: ClusterNodeConfiguration.etcdRequestThreads, endpoints: configuration.endpoints, options: options,
            mailbox: mailbox)
        watches = WatchRunner(endpoints: configuration.endpoints, options: options, mailbox: mailbox)
        observer = try ClusterObserver(
            endpoints: configuration.endpoints, options: options, keys: configuration.replication.keys,
            retainBytes: configuration.logRetainBytes, logger: logger)
        published = Mutex(
            ClusterNodeStatus(
                cluster: configuration.replication.keys.cluster.rawValue,
                node: configuration.replication.node.rawValue,
                endpoints: configuration.endpoints.map(\.description)))
        clusterLog.wakeOnAppend(mailbox.wakeup)
        let (jobs, continuation) = AsyncStream<ApplyJob>.makeStream()
        applyJobs = continuation
        let applier = FollowerApplier(registry: engine.registry, catalog: engine.catalog, log: clusterLog)
        Task.detached { [mailbox, engine, clusterLog] in
            await Self.runApplyJobs(jobs, applier: applier, engine: engine, log: clusterLog, mailbox: mailbox)
        }
    }

    /// Starts the replication thread.
    package func start() throws(SystemCallError) {
        let localEnd = engine.log.appendedThrough
        let snapshotLSN = engine.log.wal.checkpointSnapshotLSN
        // The snapshot holds every record before its start LSN, and a
        // checkpointed snapshot holds only committed records (decision 0080).
        let checkpoint = LogSequenceNumber(min(max(snapshotLSN?.rawValue ?? 1, 1) - 1, localEnd.rawValue))
        let thread = try PlatformThread.spawn(name: "roost-replicate") { [self] in
            var driver = ReplicationDriver(node: self, localEnd: localEnd, checkpoint: checkpoint)
            driver.run()
            threadEnded.signal()
        }
        thread.detach()
    }

    // MARK: - ClusterControl

    package var status: ClusterNodeStatus {
        var status = published.withLock { $0 }
        let observation = observer.observation
        let now = ContinuousClock.now
        status.members = observation.members.map { member in
            ClusterNodeStatus.Member(
                node: member.node, url: member.record.url, role: member.record.role.rawValue,
                appliedLSN: member.record.appliedLSN, checkpointLSN: member.record.checkpointLSN,
                seenMillisecondsAgo: Self.milliseconds(now - member.seenAt))
        }
        status.groupLog.firstLSN = max(status.groupLog.firstLSN, observation.firstKeptLSN)
        status.etcd.healthy = observation.etcdHealthy
        status.etcd.databaseBytes = observation.databaseBytes
        return status
    }

    package var localStatus: ClusterNodeStatus { published.withLock { $0 } }

    package var readLagMillisecondsMax: Int64 { configuration.readLagMilliseconds }

    package var newestSnapshot: (checkpoint: Checkpoint, path: String)? { engine.log.wal.newestCheckpoint }

    package var metrics: ClusterMetrics {
        var metrics = figures.withLock { $0 }
        let status = localStatus
        metrics.role = status.role
        metrics.epoch = status.epoch
        metrics.elections = electionsWon
        metrics.etcdErrors = etcdErrors
        return metrics
    }

    package func stepDown() -> StepDownOutcome {
        let status = published.withLock { $0 }
        guard status.role == .leader, status.takesWrites else { return .notLeader }
        mailbox.post(.stepDown)
        return .steppedDown(epoch: status.epoch)
    }

    package var positions: PositionBoard { clusterLog.positions }

    package func waitUntilApplied(_ lsn: LogSequenceNumber, timeout: Duration) async -> Bool {
        if localStatus.appliedLSN >= lsn { return true }
        return await positionWaiters.wait(for: lsn, timeout: timeout) { [self] in localStatus.appliedLSN }
    }

    // MARK: - The serve's side

    /// Blocks until the node serves (a leader taking writes, or a node that
    /// applied the group log within its read lag) or ends; returns the
    /// ending, nil when it serves.
    package func waitUntilServing() -> ClusterNodeEnding? {
        servingOrEnded.wait()
        servingOrEnded.signal()  // for any later caller
        return ending
    }

    /// Why replication ended (nil while it runs).
    package var ending: ClusterNodeEnding? { endingState.withLock { $0 } }

    /// A snapshot was checkpointed at `snapshotLSN` (published in the member record).
    package func noteCheckpoint(snapshotLSN: LogSequenceNumber) {
        mailbox.post(.checkpointed(snapshotLSN: snapshotLSN))
    }

    /// Elections this node won (`roost_cluster_elections_total`).
    package var electionsWon: UInt64 { elections.load(ordering: .relaxed) }

    /// etcd requests that failed (`roost_cluster_etcd_errors_total`).
    package var etcdErrors: UInt64 { workers.failureCount }

    /// Stops replication (the serve drains): the thread ends, etcd requests
    /// already queued (a lease revocation) are sent within `graceMilliseconds`.
    package func stop(graceMilliseconds: Int = 500) {
        stopRequested.store(true, ordering: .releasing)
        mailbox.wakeup.signal()
        _ = threadEnded.wait(timeout: .now() + .milliseconds(graceMilliseconds))
        threadEnded.signal()
        drainRequests(graceMilliseconds: graceMilliseconds)
        workers.stop()
        observer.stop()
        applyJobs.finish()
    }

    /// Waits up to `graceMilliseconds` for queued etcd requests to be sent.
    package func drainRequests(graceMilliseconds: Int) {
        let deadline = ContinuousClock.now + .milliseconds(graceMilliseconds)
        while workers.outstanding > 0, ContinuousClock.now < deadline {
            _ = threadEnded.wait(timeout: .now() + .milliseconds(5))
            threadEnded.signal()
        }
    }

    // MARK: - Used by the replication thread

    /// Where this node's last purge left the group log starting (0: none).
    fileprivate var groupLogKeptFrom: LogSequenceNumber { observer.firstKeptLSN }

    fileprivate func publish(_ status: ClusterNodeStatus) {
        published.withLock { $0 = status }
        observer.noteLeading(epoch: status.takesWrites ? status.epoch : nil, groupLogBytes: status.groupLog.bytes)
        positionWaiters.reached(status.appliedLSN)
    }

    /// The replication thread's timer for `Roost-Min-Position` waits.
    fileprivate func expirePositionWaits() {
        positionWaiters.expire()
    }

    fileprivate func record(_ change: (inout ClusterMetrics) -> Void) {
        figures.withLock { change(&$0) }
    }

    fileprivate func markServing() {
        served.store(true, ordering: .releasing)
        servingOrEnded.signal()
    }

    fileprivate func end(_ ending: ClusterNodeEnding) {
        let first = endingState.withLock { state -> Bool in
            guard state == nil else { return false }
            state = ending
            return true
        }
        guard first else { return }
        servingOrEnded.signal()
        // Before it serves, `waitUntilServing` hands the ending to start-up; after, the main thread takes the signal.
        if ending != .stopped, served.load(ordering: .acquiring), let endSignal { kill(getpid(), endSignal) }
    }

    fileprivate var isStopRequested: Bool { stopRequested.load(ordering: .acquiring) }
    fileprivate var nodeMailbox: NodeMailbox { mailbox }
    fileprivate var etcdWorkers: EtcdRequestWorkers { workers }
    fileprivate var watchRunner: WatchRunner { watches }
    fileprivate var log: ClusterLog { clusterLog }
    fileprivate var nodeLogger: Logger { logger }
    fileprivate var dataDirectory: String { engine.log.wal.layout.directory }
    fileprivate func enqueueApply(_ job: ApplyJob) { applyJobs.yield(job) }
    fileprivate func countElection() { elections.add(1, ordering: .relaxed) }

    static func milliseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000 + attoseconds / 1_000_000_000_000_000
    }

    // MARK: - The apply task

    private static func runApplyJobs(
        _ jobs: AsyncStream<ApplyJob>, applier: FollowerApplier, engine: DurableEngine, log: ClusterLog,
        mailbox: NodeMailbox
    ) async {
        for await job in jobs {
            switch job {
            case .append(let first, let payloads, let awaitDurable):
                let records = payloads.enumerated().map { offset, payload in
                    ReplicatedRecord(lsn: first.advanced(by: UInt64(offset)), payload: payload)
                }
                do {
                    let through = try await applier.apply(records, awaitDurable: awaitDurable)
                    mailbox.post(.applied(through: through))
                } catch {
                    mailbox.post(.applyFailed(error.description))
                    return
                }
            case .promote:
                log.promote()
                // A new cluster's first leader mints its first identity signing key (the
                // followers replicate it); an older key is kept.
                if engine.catalog.read({ $0.identityKeys.keys.isEmpty }) {
                    var now = timespec()
                    clock_gettime(CLOCK_REALTIME, &now)
                    let key = IdentitySigningKey.mint(at: Int64(now.tv_sec) * 1_000 + Int64(now.tv_nsec) / 1_000_000)
                    do {
                        _ = try engine.catalog.importRecords([.identityKey(key, current: true)])
                    } catch {
                        mailbox.post(.applyFailed("the first identity signing key could not be logged: \(error)"))
                        return
                    }
                }
                mailbox.post(.promoted)
            }
        }
    }
}

/// The replication thread's state: the machine and what the node did with
/// its actions. Lives on that thread only.
private struct ReplicationDriver {
    let node: ClusterNode
    var machine: ReplicationMachine
    let origin = ContinuousClock.now
    let checkpoint: LogSequenceNumber
    /// The applier applied and wrote the log through this LSN (a leader: its own appends too).
    var appliedThrough: LogSequenceNumber
    /// The log was promoted: the outbox's records go to the machine.
    var promoted = false
    /// The first LSN of the records submitted last and not yet handed to an append.
    var expectedAppendLSN: LogSequenceNumber?
    var lastCaughtUpAt: Int64?
    var servingReported = false
    var ended = false
    /// The local log refused a write and the machine was told (once).
    var localLogFailureReported = false
    var nextTickAt: Int64 = 0
    /// The leader's batches handed to etcd and not yet committed: their last LSN and when.
    var appendsInFlight: [(last: LogSequenceNumber, at: ContinuousClock.Instant)] = []
    var nextLagSampleAt: Int64 = 0
    var nextProgressLogAt: Int64 = 2_000
    /// While it does not serve yet, the node logs how far it got this often.
    static let progressLogMilliseconds: Int64 = 2_000
    /// How often the lag histogram is sampled.
    static let lagSampleMilliseconds: Int64 = 1_000
    /// Events the node tells the machine before the next input (answers to its own actions).
    var ownEvents: [ReplicationEvent] = []
    /// etcd's answers since the last start-up progress line: none means
    /// etcd is out of reach (`cluster.etcd_waiting`), some that the node is
    /// reconciling its log with the group log (`cluster.reconciling`).
    var etcdAnswersSinceWaitLog = 0
    /// Replicated records the machine handed to the log (`appendLocal`) and
    /// not yet given to the apply task: they go as one job once it has none
    /// (one hop to the shards and one log append for all of them, however
    /// many batches they came in: a node catching up on small batches
    /// applied one job a batch and fell behind a steady leader).
    var applyWaiting: (firstLSN: LogSequenceNumber, records: [[UInt8]])?
    /// Jobs given to the apply task and not yet answered (`applied`).
    var appliesInFlight = 0
    /// Compares the local log with the group log's pages at start
    /// (`verifyLocalLog`); nil once the machine has reconciled the two (it
    /// holds a segment's records).
    var localLog: LocalLogComparison?

    init(node: ClusterNode, localEnd: LogSequenceNumber, checkpoint: LogSequenceNumber) {
        self.node = node
        machine = ReplicationMachine(configuration: node.configuration.replication)
        self.checkpoint = checkpoint
        appliedThrough = localEnd
        ownEvents = [.start(localLogEnd: localEnd, checkpoint: checkpoint)]
        localLog = LocalLogComparison(directory: node.dataDirectory)
    }

    var now: Int64 { ClusterNode.milliseconds(ContinuousClock.now - origin) }

    mutating func run() {
        let logger = node.nodeLogger
        logger.info("cluster.starting") { line in
            line.field("node", node.configuration.replication.node.rawValue)
            line.field("cluster", node.configuration.replication.keys.cluster.rawValue)
            line.field("etcd", node.configuration.endpoints.map(\.description).joined(separator: ","))
        }
        var lastUnreachableLog: Int64 = -10_000
        while !ended {
            // Inputs first: a step-down posted before the stop is carried out (the lease revoked).
            for input in node.nodeMailbox.take() { take(input) }
            runOwnEvents()
            if !ended, node.isStopRequested {
                node.end(.stopped)
                break
            }
            feedOutbox()
            if !ended, !localLogFailureReported, !node.log.local.acceptsWrites {
                // The leader's writes stop here (503); revoking its lease lets another node take them.
                localLogFailureReported = true
                logger.error("cluster.log_failed") { line in
                    line.field("role", "\(machine.role)")
                    line.field("message", "this node's log refused a write; a leader gives up its lease")
                }
                handle(.localLogFailed)
                runOwnEvents()
            }
            if !ended, now >= nextTickAt {
                nextTickAt = now + ClusterNodeConfiguration.tickMilliseconds
                handle(.tick)
                runOwnEvents()
            }
            publish()
            node.expirePositionWaits()
            if !machine.isReconciled, now - lastUnreachableLog >= 5_000, now >= 2_000 {
                lastUnreachableLog = now
                if etcdAnswersSinceWaitLog > 0 {
                    // etcd answers: the node is comparing its log with the group log, page by page.
                    logger.info("cluster.reconciling") { line in
                        line.field("local_end_lsn", machine.localEnd.rawValue)
                        line.field("group_end_lsn", machine.groupEnd.rawValue)
                        line.field("etcd_answers", etcdAnswersSinceWaitLog)
                    }
                } else {
                    logger.warning("cluster.etcd_waiting") { line in
                        line.field("etcd", node.configuration.endpoints.map(\.description).joined(separator: ","))
                        line.field("message", "cannot read the group log from etcd yet; retrying")
                    }
                }
                etcdAnswersSinceWaitLog = 0
            }
            if ended { break }
            node.nodeMailbox.wait(milliseconds: max(1, nextTickAt - now))
        }
        logger.flush()
    }

    private mutating func take(_ input: NodeInput) {
        switch input {
        case .etcdAnswered(let id, let response):
            etcdAnswersSinceWaitLog += 1
            handle(.etcdAnswered(id, response))
        case .watchDelivered(let token, let events): handle(.watchDelivered(token, events))
        case .watchFailed(let token, let failure): handle(.watchFailed(token, failure))
        case .applied(let through):
            appliesInFlight -= 1
            precondition(appliesInFlight >= 0, "an apply answered that was not asked for")
            appliedThrough = max(appliedThrough, through)
            handle(.localDurable(through: through))  // which gives the apply task what waits
        case .promoted:
            promoted = true
            node.nodeLogger.info("cluster.leading") { line in
                line.field("epoch", Int(machine.ownEpoch?.rawValue ?? 0))
                line.field("position", Int(truncatingIfNeeded: appliedThrough.rawValue))
            }
        case .applyFailed(let reason):
            node.nodeLogger.error("cluster.apply_failed") { $0.field("message", reason) }
            finish(.failed(reason))
        case .stepDown:
            handle(.stepDown)
        case .checkpointed(let snapshotLSN):
            let through = LogSequenceNumber(min(max(snapshotLSN.rawValue, 1) - 1, machine.applied.rawValue))
            handle(.checkpointed(through: through))
        }
        runOwnEvents()
    }

    private mutating func runOwnEvents() {
        while !ownEvents.isEmpty, !ended {
            let event = ownEvents.removeFirst()
            handle(event)
        }
    }

    private mutating func handle(_ event: ReplicationEvent) {
        guard !ended else { return }
        let wasReconciled = machine.isReconciled
        for action in machine.handle(event, now: now) {
            perform(action)
            if ended { return }
        }
        giveWaitingApply(unlessBusy: true)
        if !wasReconciled, machine.isReconciled, !promoted, machine.role != .leader {
            // What the local log held at start and kept is committed (a cut ends the node first).
            node.log.markCommitted(through: node.log.appendedThrough)
        }
    }

    /// Takes the outbox's records into the machine when it has none queued
    /// (the group commit: what arrives while an append is in flight goes in
    /// the next one).
    private mutating func feedOutbox() {
        guard promoted, !ended, machine.isTakingWrites, machine.queuedRecordCount == 0 else { return }
        let records = node.log.takeBatch(
            bytesMax: ClusterNodeConfiguration.submitBytesMax,
            recordsMax: min(node.configuration.replication.queuedRecordsMax, ReplicationBatch.recordsPerBatchMax))
        guard let first = records.first else { return }
        expectedAppendLSN = first.lsn
        for action in machine.handle(.submit(records.map(\.payload)), now: now) {
            if case .writesAccepted(let firstLSN, let count) = action {
                precondition(
                    firstLSN == first.lsn && count == records.count,
                    "the machine took \(count) records at \(firstLSN), the log holds \(records.count) at \(first.lsn)")
            }
            perform(action)
            if ended { return }
        }
        runOwnEvents()
    }

    private mutating func perform(_ action: ReplicationAction) {
        let logger = node.nodeLogger
        switch action {
        case .sendEtcd(let id, let request):
            node.etcdWorkers.submit(id, request)
        case .startWatch(let token, let range, let revision):
            node.watchRunner.start(token, range, from: revision)
        case .cancelWatch(let token):
            node.watchRunner.cancel(token)
        case .verifyLocalLog(let batches):
            do {
                var comparison = localLog ?? LocalLogComparison(directory: node.dataDirectory)
                let difference = try comparison.firstDifference(
                    after: checkpoint, through: node.log.appendedThrough, batches: batches)
                localLog = comparison
                ownEvents.append(.localLogVerified(firstDifference: difference))
            } catch {
                logger.error("cluster.verify_failed") { $0.field("error", "\(error)") }
                finish(.failed("the local log cannot be read to compare it with the group log: \(error)"))
            }
        case .truncateLocalLog(let after):
            precondition(!servingReported, "a cut of the local log after \(after) while serving")
            finish(.cutNeeded(after: after))
        case .appendLocal(let firstLSN, let records):
            let last = firstLSN.advanced(by: UInt64(records.count - 1))
            let bytes = records.reduce(0) { $0 + $1.count }
            node.record { $0.batchBytes.observe(UInt64(bytes)) }
            if promoted || machine.role == .leader { appendsInFlight.append((last, ContinuousClock.now)) }
            if promoted {
                // The leader's own records: in the local log already, at these LSNs.
                precondition(
                    firstLSN == expectedAppendLSN,
                    "the machine appends at \(firstLSN), the outbox's records start at \(String(describing: expectedAppendLSN))"
                )
                expectedAppendLSN = last.advanced(by: 1)
                appliedThrough = max(appliedThrough, last)
                // ClusterLog acknowledges an answer once the local log has it too.
                ownEvents.append(.localDurable(through: last))
            } else if machine.role == .leader {
                // A new leader's epoch record: acknowledged once durable here, so not held back.
                giveWaitingApply(unlessBusy: false)
                giveApply(.append(firstLSN: firstLSN, records: records, awaitDurable: true))
            } else if var waiting = applyWaiting {
                precondition(
                    firstLSN.rawValue == waiting.firstLSN.rawValue + UInt64(waiting.records.count),
                    "records at \(firstLSN) after \(waiting.records.count) waiting from \(waiting.firstLSN)")
                applyWaiting = nil  // one owner of the array while it grows
                waiting.records.append(contentsOf: records)
                applyWaiting = waiting
            } else {
                applyWaiting = (firstLSN, records)
            }
        case .apply:
            break  // the applier applies what it writes
        case .acknowledge(let through, _):
            let now = ContinuousClock.now
            let committed = appendsInFlight.prefix { $0.last <= through }
            if !committed.isEmpty {
                node.record { metrics in
                    for append in committed {
                        let (seconds, attoseconds) = (now - append.at).components
                        metrics.commit.observe(UInt64(max(0, seconds * 1_000_000_000 + attoseconds / 1_000_000_000)))
                    }
                }
                appendsInFlight.removeFirst(committed.count)
            }
            // Before the promotion the epoch record is all there is, and the promotion commits it.
            if promoted, through > node.log.committedThrough { node.log.commit(through: through) }
        case .writesAccepted:
            break
        case .writesRefused(let count, let refusal):
            precondition(
                machine.role == .deposed, "\(count) records refused (\(refusal)) by a machine in role \(machine.role)")
        case .writesUnconfirmed(let through):
            if promoted { node.log.markUnconfirmed(through: min(through, node.log.appendedThrough)) }
            logger.warning("cluster.writes_unconfirmed") { line in
                line.field("through", Int(truncatingIfNeeded: through.rawValue))
                line.field("message", "etcd has not confirmed these writes within --etcd-timeout-ms")
            }
        case .becameLeader(let epoch):
            node.countElection()
            logger.info("cluster.elected") { $0.field("epoch", Int(epoch.rawValue)) }
            giveWaitingApply(unlessBusy: false)
            giveApply(.promote)
        case .becameFollower(let leader):
            node.log.noteLeader(url: leader?.url)
            logger.info("cluster.following") { line in
                line.field("leader", leader?.node.rawValue ?? "")
                line.field("url", leader?.url ?? "")
                line.field("epoch", Int(machine.epoch?.rawValue ?? 0))
            }
        case .becameCandidate:
            node.log.noteLeader(url: nil)
            logger.info("cluster.candidate") { $0.field("message", "the leader key is gone; this node may take it") }
        case .deposed(let reason):
            node.log.close()
            logger.error("cluster.deposed") { line in
                line.field("reason", "\(reason)")
                line.field("epoch", Int(machine.ownEpoch?.rawValue ?? 0))
            }
            // A node whose log failed cannot serve as a follower either: it needs a person (exit 1).
            finish(reason == .localLogFailed ? .failed("its log failed; its lease was revoked") : .deposed("\(reason)"))
        case .reseedNeeded(let start):
            logger.error("cluster.reseed_needed") { line in
                line.field("group_log_start", Int(truncatingIfNeeded: start.rawValue))
                line.field("local_end", Int(truncatingIfNeeded: node.log.appendedThrough.rawValue))
            }
            finish(.reseedNeeded(groupLogStart: start))
        case .refusedBatch(let key, let refusal):
            logger.error("cluster.batch_refused") { line in
                line.field("key", String(decoding: key, as: UTF8.self))
                line.field("reason", "\(refusal)")
            }
        }
    }

    /// Gives the apply task the records waiting for it as one job; with
    /// `unlessBusy`, only when it has no job (what arrives meanwhile joins them).
    private mutating func giveWaitingApply(unlessBusy: Bool) {
        guard !ended, let waiting = applyWaiting, !unlessBusy || appliesInFlight == 0 else { return }
        applyWaiting = nil
        giveApply(.append(firstLSN: waiting.firstLSN, records: waiting.records, awaitDurable: false))
    }

    private mutating func giveApply(_ job: ClusterNode.ApplyJob) {
        if case .append = job { appliesInFlight += 1 }
        node.enqueueApply(job)
    }

    private mutating func finish(_ ending: ClusterNodeEnding) {
        ended = true
        publish()
        node.end(ending)
    }

    private mutating func publish() {
        let now = self.now
        var status = ClusterNodeStatus(
            cluster: node.configuration.replication.keys.cluster.rawValue,
            node: node.configuration.replication.node.rawValue,
            endpoints: node.configuration.endpoints.map(\.description))
        status.role =
            switch machine.role {
            case .leader: .leader
            case .candidate: .candidate
            case .seeding: .seeding
            case .follower, .deposed: .follower
            }
        status.epoch = machine.epoch?.rawValue ?? 0
        status.leader = machine.leader.map { ClusterNodeStatus.Leader(node: $0.node.rawValue, url: $0.url) }
        status.appliedLSN = appliedThrough
        status.committedLSN = max(machine.committed, node.log.committedThrough)
        status.takesWrites = promoted && machine.isTakingWrites && !ended
        if machine.isReconciled, machine.hasReadToEnd, appliedThrough >= machine.groupEnd,
            machine.groupEndLearnedAt > 0
        {
            lastCaughtUpAt = max(lastCaughtUpAt ?? 0, machine.groupEndLearnedAt)
        }
        if status.takesWrites {
            status.lagMilliseconds = 0
        } else if let lastCaughtUpAt {
            status.lagMilliseconds = max(0, now - lastCaughtUpAt)
        }
        status.caughtUp =
            status.takesWrites
            || (machine.isReconciled && status.lagMilliseconds <= node.configuration.readLagMilliseconds)
        machine.noteGroupLogStart(node.groupLogKeptFrom)
        status.groupLog = ClusterNodeStatus.GroupLog(
            firstLSN: machine.groupLogFirstLSN ?? LogSequenceNumber(0), lastLSN: machine.groupEnd,
            bytes: machine.groupLogBytes)
        node.publish(status)
        if !servingReported, now >= nextProgressLogAt {
            nextProgressLogAt = now + Self.progressLogMilliseconds
            node.nodeLogger.info("cluster.catching_up") { line in
                line.field("applied_lsn", appliedThrough.rawValue)
                line.field("local_end_lsn", machine.localEnd.rawValue)
                line.field("group_end_lsn", machine.groupEnd.rawValue)
                line.field("reconciled", machine.isReconciled)
                line.field("read_to_end", machine.hasReadToEnd)
            }
        }
        if now >= nextLagSampleAt, status.lagMilliseconds != Int64.max {
            nextLagSampleAt = now + Self.lagSampleMilliseconds
            let lag = UInt64(max(0, status.lagMilliseconds))
            node.record { $0.lag.observe(lag * 1_000_000) }
        }
        // Reconciled: no page will be compared again; the kept segment goes.
        if localLog != nil, machine.isReconciled { localLog = nil }
        if status.caughtUp, !servingReported, !ended {
            servingReported = true
            node.markServing()
        }
    }
}
