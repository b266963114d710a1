import RoostStorage
import RoostTelemetry

/// What a cluster node (spec §13) says of itself: published by the node's
/// replication thread after each of its turns, read by the API (`GET
/// /v1/cluster`, `/readyz`, the read gate, the answer headers). A value: the
/// API never reaches into the replication thread's state.
package struct ClusterNodeStatus: Sendable, Equatable {
    /// The role as spec §13.9 names it.
    package enum Role: String, Sendable, Equatable {
        case leader
        case follower
        case candidate
        case seeding
    }

    /// The leader as this node knows it.
    package struct Leader: Sendable, Equatable {
        package var node: String
        package var url: String

        package init(node: String, url: String) {
            self.node = node
            self.url = url
        }
    }

    /// Another node (or this one) as its member record in etcd says.
    package struct Member: Sendable, Equatable {
        package var node: String
        package var url: String
        package var role: String
        package var appliedLSN: LogSequenceNumber
        package var checkpointLSN: LogSequenceNumber
        /// Milliseconds since this node read the record (members are read every second).
        package var seenMillisecondsAgo: Int64

        package init(
            node: String, url: String, role: String, appliedLSN: LogSequenceNumber, checkpointLSN: LogSequenceNumber,
            seenMillisecondsAgo: Int64
        ) {
            self.node = node
            self.url = url
            self.role = role
            self.appliedLSN = appliedLSN
            self.checkpointLSN = checkpointLSN
            self.seenMillisecondsAgo = seenMillisecondsAgo
        }
    }

    /// What etcd holds of the group log.
    package struct GroupLog: Sendable, Equatable {
        package var firstLSN: LogSequenceNumber
        package var lastLSN: LogSequenceNumber
        package var bytes: Int

        package init(firstLSN: LogSequenceNumber, lastLSN: LogSequenceNumber, bytes: Int) {
            self.firstLSN = firstLSN
            self.lastLSN = lastLSN
            self.bytes = bytes
        }
    }

    /// etcd as this node last saw it.
    package struct Etcd: Sendable, Equatable {
        package var endpoints: [String]
        package var healthy: Bool
        package var databaseBytes: Int64

        package init(endpoints: [String], healthy: Bool, databaseBytes: Int64) {
            self.endpoints = endpoints
            self.healthy = healthy
            self.databaseBytes = databaseBytes
        }
    }

    package var cluster: String
    package var node: String
    package var role: Role
    /// The epoch of the leader this node last saw (0: none yet).
    package var epoch: Int64
    package var leader: Leader?
    /// The last LSN applied here.
    package var appliedLSN: LogSequenceNumber
    /// The last LSN known committed in the group log.
    package var committedLSN: LogSequenceNumber
    /// How far behind the group log this node's state may be (spec §13.3):
    /// it applied everything the group log held this many milliseconds ago.
    /// 0 on a leader that takes writes.
    package var lagMilliseconds: Int64
    /// The leader takes writes (its epoch record is committed and it was promoted).
    package var takesWrites: Bool
    /// The node applied the group log as it stood when it started (it serves from then on).
    package var caughtUp: Bool
    package var members: [Member]
    package var groupLog: GroupLog
    package var etcd: Etcd

    package init(cluster: String, node: String, endpoints: [String]) {
        self.cluster = cluster
        self.node = node
        role = .follower
        epoch = 0
        leader = nil
        appliedLSN = LogSequenceNumber(0)
        committedLSN = LogSequenceNumber(0)
        lagMilliseconds = Int64.max
        takesWrites = false
        caughtUp = false
        members = []
        groupLog = GroupLog(firstLSN: LogSequenceNumber(0), lastLSN: LogSequenceNumber(0), bytes: 0)
        etcd = Etcd(endpoints: endpoints, healthy: false, databaseBytes: 0)
    }
}

/// The figures `/metrics` adds in cluster mode (spec §13.9).
package struct ClusterMetrics: Sendable {
    /// Bytes of one group-log batch: powers of four from 256 B to 4 MiB.
    package static let batchBytesBuckets = HistogramBuckets(
        upperBounds: [256, 1_024, 4_096, 16_384, 65_536, 262_144, 1_048_576, 4_194_304], decimalExponent: 0)

    package var role: ClusterNodeStatus.Role = .follower
    package var epoch: Int64 = 0
    /// The node's lag, sampled once a second (nanoseconds).
    package var lag = Histogram(.latencyNanoseconds)
    /// From a batch's first send to etcd's commit, on the leader (nanoseconds).
    package var commit = Histogram(.latencyNanoseconds)
    /// The payload bytes of each batch appended (leader) or received (follower).
    package var batchBytes = Histogram(ClusterMetrics.batchBytesBuckets)
    /// Elections this node won.
    package var elections: UInt64 = 0
    /// etcd requests that failed (unreachable, timed out, refused).
    package var etcdErrors: UInt64 = 0

    package init() {}
}

/// What `POST /v1/cluster/step-down` got (spec §13.9).
package enum StepDownOutcome: Sendable, Equatable {
    /// This node led in `epoch` and lets go: it stops taking writes and exits 75.
    case steppedDown(epoch: Int64)
    /// This node does not lead (409 `not_leader`).
    case notLeader
}

/// The API's handle on a cluster node: its status and the operator's actions.
/// Implemented by the node's replication driver (`ClusterNode`); the API
/// depends on this protocol only, not on etcd. A class: the handle is a
/// node, and every request reads it (`(any ClusterControl)?` in the service,
/// the observer, the metrics), so a copy of it must be one reference count —
/// a value-type existential was copied and destroyed through the runtime's
/// generic witnesses, seven times a request on one node (issue 25).
package protocol ClusterControl: AnyObject, Sendable {
    /// The node's status as its replication thread last published it, with
    /// the members and etcd's health as last read (`GET /v1/cluster`).
    var status: ClusterNodeStatus { get }
    /// The same without members and etcd's health: cheap enough for every request.
    var localStatus: ClusterNodeStatus { get }
    /// `--read-lag-ms`: the most lag a follower serves reads with (spec §13.3).
    var readLagMillisecondsMax: Int64 { get }
    /// The figures of `/metrics`.
    var metrics: ClusterMetrics { get }
    /// This node's newest checkpoint and its snapshot file (`GET
    /// /v1/cluster/snapshot`, spec §13.9); nil while it has none.
    var newestSnapshot: (checkpoint: Checkpoint, path: String)? { get }
    /// Asks the leader to step down; answers at once.
    func stepDown() -> StepDownOutcome
    /// Returns true once this node applied `lsn` (at once when it has), false
    /// when `timeout` passed first (`Roost-Min-Position`, spec §13.3).
    func waitUntilApplied(_ lsn: LogSequenceNumber, timeout: Duration) async -> Bool
    /// Each index's position (spec §13.1) as this node's shards published it.
    var positions: PositionBoard { get }
}
