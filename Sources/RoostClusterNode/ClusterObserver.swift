import Dispatch
import RoostCluster
import RoostEngine
import RoostPlatform
import RoostStorage
import Synchronization

/// Reads what `GET /v1/cluster` shows beyond this node's own state, once a
/// second on a thread of its own: the member records of every node and
/// etcd's status (health, database size). Never on the replication path: a
/// slow etcd delays this page, not a write.
final class ClusterObserver: Sendable {
    /// How often the members and etcd's status are read.
    static let intervalMilliseconds = 1_000

    struct Observation: Sendable {
        var members: [(node: String, record: MemberRecord, seenAt: ContinuousClock.Instant)] = []
        var etcdHealthy = false
        var databaseBytes: Int64 = 0
    }

    private let state = Mutex(Observation())
    private let stopping = Atomic<Bool>(false)
    private let stopped = DispatchSemaphore(value: 0)

    init(endpoints: [EtcdEndpoint], options: EtcdClientOptions, keys: ClusterKeys) throws(SystemCallError) {
        let thread = try PlatformThread.spawn(name: "roost-observe") { [self] in
            let client = EtcdClient(endpoints: endpoints, options: options)
            while !self.stopping.load(ordering: .acquiring) {
                self.observe(client, keys)
                _ = self.stopped.wait(timeout: .now() + .milliseconds(Self.intervalMilliseconds))
            }
            client.close()
        }
        thread.detach()
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
            for keyValue in found.keyValues {
                let node = String(decoding: keyValue.key.dropFirst(keys.membersPrefix.count), as: UTF8.self)
                if let record = MemberRecord.decode(keyValue.value) { members.append((node, record, now)) }
            }
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
