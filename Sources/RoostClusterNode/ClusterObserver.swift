import Dispatch
import RoostCluster
import RoostEngine
import RoostPlatform
import RoostStorage
import RoostTelemetry
import Synchronization

/// Reads what `GET /v1/cluster` shows beyond this node's own state, once a
/// second on a thread of its own: the member records of every node and
/// etcd's status (health, database size). Never on the replication path: a
/// slow etcd delays this page, not a write.
///
/// While this node leads, it also purges the group log (spec §13.6): every
/// `purgeIntervalMilliseconds`, the batches that every live member's
/// checkpointed snapshot holds are deleted — in one transaction fenced on
/// the leader key, so a deposed leader deletes nothing — and etcd's history
/// is compacted at that revision, so that etcd's size stays bounded. While
/// the group log holds more than `--log-retain-bytes`, the purge goes as far
/// as the furthest live member's checkpoint (`GroupLogRetention`): a member
/// behind it re-seeds from that member's snapshot.
final class ClusterObserver: Sendable {
    /// How often the members and etcd's status are read.
    static let intervalMilliseconds = 1_000
    /// How often a leader purges what every live member has checkpointed.
    static let purgeIntervalMilliseconds: Int64 = 5_000

    /// What a purge did (for the log and the tests).
    struct Purge: Sendable, Equatable {
        var batchesDeleted: Int
        var firstKeptLSN: LogSequenceNumber
        var compactedAt: EtcdRevision
    }

    struct Observation: Sendable {
        var members: [(node: String, record: MemberRecord, seenAt: ContinuousClock.Instant)] = []
        var etcdHealthy = false
        var databaseBytes: Int64 = 0
        /// The first LSN the group log kept at this node's last purge (0: none).
        var firstKeptLSN = LogSequenceNumber(0)
    }

    private let state = Mutex(Observation())
    /// The epoch this node leads in and takes writes (0: it does not).
    private let leadingEpoch = Atomic<Int64>(0)
    /// The group log's bytes as this node's machine counts them.
    private let groupLogBytes = Atomic<Int>(0)
    /// The first LSN the group log kept at this node's last purge (0: none).
    private let keptFrom = Atomic<UInt64>(0)
    /// `--log-retain-bytes`.
    let retainBytes: Int
    private let stopping = Atomic<Bool>(false)
    private let stopped = DispatchSemaphore(value: 0)

    init(
        endpoints: [EtcdEndpoint], options: EtcdClientOptions, keys: ClusterKeys, retainBytes: Int, logger: Logger
    ) throws(SystemCallError) {
        precondition(retainBytes > 0, "--log-retain-bytes \(retainBytes)")
        self.retainBytes = retainBytes
        let thread = try PlatformThread.spawn(name: "roost-observe") { [self] in
            let client = EtcdClient(endpoints: endpoints, options: options)
            var nextPurgeAt = ContinuousClock.now + .milliseconds(Self.purgeIntervalMilliseconds)
            while !self.stopping.load(ordering: .acquiring) {
                self.observe(client, keys)
                let epoch = self.leadingEpoch.load(ordering: .acquiring)
                if epoch > 0, ContinuousClock.now >= nextPurgeAt {
                    nextPurgeAt = ContinuousClock.now + .milliseconds(Self.purgeIntervalMilliseconds)
                    let through = GroupLogRetention.purgeThrough(
                        checkpoints: self.observation.members.map(\.record.checkpointLSN),
                        groupLogBytes: self.groupLogBytes.load(ordering: .acquiring), retainBytes: retainBytes)
                    if let through, let purge = Self.purge(client, keys, epoch: epoch, through: through) {
                        self.state.withLock { $0.firstKeptLSN = max($0.firstKeptLSN, purge.firstKeptLSN) }
                        self.keptFrom.store(
                            max(self.keptFrom.load(ordering: .acquiring), purge.firstKeptLSN.rawValue),
                            ordering: .releasing)
                        logger.info("cluster.purged") { line in
                            line.field("batches", purge.batchesDeleted)
                            line.field("first_kept_lsn", purge.firstKeptLSN.rawValue)
                            line.field("compacted_revision", Int(purge.compactedAt.rawValue))
                        }
                    }
                }
                _ = self.stopped.wait(timeout: .now() + .milliseconds(Self.intervalMilliseconds))
            }
            client.close()
        }
        thread.detach()
    }

    /// This node leads in `epoch` and takes writes (nil: it does not): it
    /// purges while so; its machine counts `groupLogBytes` in the group log.
    func noteLeading(epoch: Int64?, groupLogBytes bytes: Int) {
        leadingEpoch.store(epoch ?? 0, ordering: .releasing)
        groupLogBytes.store(bytes, ordering: .releasing)
    }

    /// The first LSN the group log kept at this node's last purge (0: none).
    var firstKeptLSN: LogSequenceNumber { LogSequenceNumber(keptFrom.load(ordering: .acquiring)) }

    /// Deletes the batches before the one holding the LSN after `through`,
    /// fenced on `epoch`'s leader key, then compacts etcd at the deletion's
    /// revision. Nil when there was nothing to delete or etcd refused (the
    /// next round tries again).
    static func purge(_ client: EtcdClient, _ keys: ClusterKeys, epoch: Int64, through: LogSequenceNumber) -> Purge? {
        let keep = through.advanced(by: 1)
        let holding = client.perform(
            .transaction(
                compares: [],
                success: [.rangeLast(.span(from: keys.logPrefix, to: keys.logKey(firstLSN: keep.advanced(by: 1))))],
                failure: []))
        guard case .transaction(_, _, let results) = holding, case .range(let found)? = results.first,
            let first = found.first.flatMap({ keys.firstLSN(ofLogKey: $0.key) }), first.rawValue > 1
        else { return nil }
        let deletion = client.perform(
            .transaction(
                compares: [EtcdCompare(key: keys.leader, .equal, .createRevision(EtcdRevision(epoch)))],
                success: [.delete(.span(from: keys.logPrefix, to: keys.logKey(firstLSN: first)))], failure: []))
        guard case .transaction(true, let revision, let deleted) = deletion, case .deleted(let count)? = deleted.first,
            count > 0
        else { return nil }
        _ = client.perform(.compact(revision))
        return Purge(batchesDeleted: count, firstKeptLSN: first, compactedAt: revision)
    }

    /// The last observation.
    var observation: Observation { state.withLock { $0 } }

    func stop() {
        stopping.store(true, ordering: .releasing)
        stopped.signal()
    }

    private func observe(_ client: EtcdClient, _ keys: ClusterKeys) {
        let now = ContinuousClock.now
        var members: [(node: String, record: MemberRecord, seenAt: ContinuousClock.Instant)] = []
        var healthy = true
        do {
            let found = try client.range(.prefix(keys.membersPrefix))
            members = keys.members(in: found.keyValues).map { ($0.node, $0.record, now) }
        } catch {
            healthy = false
        }
        let status = try? client.status()
        state.withLock { observation in
            if healthy {
                observation.members = members
            }
            observation.etcdHealthy = healthy && status != nil && status?.leader != nil
            if let status { observation.databaseBytes = status.databaseBytes }
        }
    }
}
