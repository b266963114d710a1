import RoostStorage

/// The values the replication state machine (`ReplicationMachine`) is told
/// and answers: its configuration, events and actions (HOUSE_STYLE 6, 16).

/// What a node is in its group.
package enum ReplicationRole: String, Hashable, Sendable {
    /// Copies the group log; answers reads, refuses writes.
    case follower
    /// Saw the leader key go and will try to take it.
    case candidate
    /// Holds the leader key: appends to the group log.
    case leader
    /// Lost its epoch (or stepped down): it must exit with status 75 and start again.
    case deposed
    /// etcd no longer holds its next position: it must install a live node's snapshot and start again.
    case seeding
}

/// Names one etcd request of one machine, so that its answer finds it.
package struct EtcdRequestID: Hashable, Comparable, Sendable, CustomStringConvertible {
    package let rawValue: UInt64

    package init(_ rawValue: UInt64) { self.rawValue = rawValue }
    package static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
    package var description: String { "etcd#\(rawValue)" }
}

/// Names one watch a machine asked for, so that the events of a watch it
/// already cancelled are told apart and ignored.
package struct WatchToken: Hashable, Sendable, CustomStringConvertible {
    package let rawValue: UInt64

    package init(_ rawValue: UInt64) { self.rawValue = rawValue }
    package var description: String { "watch#\(rawValue)" }
}

/// How one node replicates: its identity and every limit and delay, named.
package struct ReplicationConfiguration: Sendable {
    /// The shortest lease (spec §13.8).
    package static let leaseTTLSecondsMin: Int64 = 1

    package var node: NodeID
    package var advertiseURL: String
    package var keys: ClusterKeys
    /// `--lease-ttl-s`: the leader's lease; it renews it every third of it.
    package var leaseTTLSeconds: Int64 = 2
    /// `--etcd-timeout-ms`: an etcd request not answered by then counts as
    /// failed, and a write not confirmed by then is answered 503.
    package var etcdTimeoutMilliseconds: Int64 = 1_000
    /// The wait before an append, a read or a keep-alive that failed is sent again.
    package var retryMilliseconds: Int64 = 100
    /// A follower reads the leader key and the log this often even when its
    /// watch is quiet (a lost watch event cannot leave it behind for longer).
    package var periodicReadMilliseconds: Int64 = 1_000
    /// A candidate waits this long before it tries the leader key...
    package var candidateDelayBaseMilliseconds: Int64 = 20
    /// ... plus this much per record it is behind the group log's end (the
    /// most caught-up follower tries first) ...
    package var candidateDelayPerRecordBehindMilliseconds: Int64 = 5
    /// ... and at most this long.
    package var candidateDelayMaxMilliseconds: Int64 = 2_000
    /// Records submitted but not yet in a batch in flight; more are refused.
    package var queuedRecordsMax = 10_000
    /// A node writes its member record again, when it changed, at most this often.
    package var memberUpdateMilliseconds: Int64 = 1_000

    package init(node: NodeID, advertiseURL: String, keys: ClusterKeys) {
        self.node = node
        self.advertiseURL = advertiseURL
        self.keys = keys
    }

    /// The interval of the leader's keep-alives: a third of the lease.
    package var keepAliveIntervalMilliseconds: Int64 { leaseTTLSeconds * 1_000 / 3 }

    /// Checks the relations between the values (called by the machine at start).
    package func validate() {
        precondition(leaseTTLSeconds >= Self.leaseTTLSecondsMin, "lease TTL \(leaseTTLSeconds) s < 1 s")
        precondition(etcdTimeoutMilliseconds > 0, "etcd timeout \(etcdTimeoutMilliseconds) ms")
        precondition(retryMilliseconds > 0, "retry \(retryMilliseconds) ms")
        precondition(periodicReadMilliseconds > 0, "periodic read \(periodicReadMilliseconds) ms")
        precondition(
            candidateDelayBaseMilliseconds >= 0 && candidateDelayPerRecordBehindMilliseconds >= 0
                && candidateDelayMaxMilliseconds >= candidateDelayBaseMilliseconds,
            "candidate delays \(candidateDelayBaseMilliseconds)/\(candidateDelayPerRecordBehindMilliseconds)/"
                + "\(candidateDelayMaxMilliseconds) ms")
        precondition(queuedRecordsMax > 0, "queued records max \(queuedRecordsMax)")
        precondition(memberUpdateMilliseconds > 0, "member update \(memberUpdateMilliseconds) ms")
    }
}

/// What happened, as the machine is told it.
package enum ReplicationEvent: Sendable {
    /// The node recovered its directory: its local log ends at `localLogEnd`
    /// (LSN 0 when empty), all of it durable, and its records through
    /// `checkpoint` are known committed (its newest snapshot's LSN: a node
    /// applies only committed records). Only the records after it are
    /// compared with the group log.
    case start(localLogEnd: LogSequenceNumber, checkpoint: LogSequenceNumber)
    /// Time passed (the time is the `now` passed with every event).
    case tick
    /// etcd answered request `id` (or the transport failed: `.failed(.unavailable)`).
    case etcdAnswered(EtcdRequestID, EtcdResponse)
    /// A watch delivered events.
    case watchDelivered(WatchToken, [EtcdEvent])
    /// A watch ended (compacted past it, or etcd unreachable).
    case watchFailed(WatchToken, EtcdFailure)
    /// The answer to `.verifyLocalLog`: the first LSN where the local log
    /// differs from the batches, or nil when it holds them (as far as it reaches).
    case localLogVerified(firstDifference: LogSequenceNumber?)
    /// The local log is durable (fsynced) through this LSN.
    case localDurable(through: LogSequenceNumber)
    /// A client write's records, to the leader.
    case submit([[UInt8]])
    /// `POST /v1/cluster/step-down`.
    case stepDown
    /// The node's own log refused a write (disk full or failing): it cannot
    /// hold what it would acknowledge, so a leader lets go at once.
    case localLogFailed
    /// The node took a snapshot through this LSN (at most what it applied):
    /// published in its member record, and its next start trusts the log through it.
    case checkpointed(through: LogSequenceNumber)
}

/// Why writes were refused at once.
package enum WriteRefusal: Hashable, Sendable {
    /// Not the leader, or a leader not taking writes yet (503 `not_leader`).
    case notLeader
    /// `queuedRecordsMax` records wait already (503 `unavailable`).
    case queueFull
}

/// Why a leader lost its epoch.
package enum DeposedReason: Hashable, Sendable {
    /// Its lease was not confirmed before its deadline (clock).
    case leaseNotConfirmed
    /// etcd said its lease is gone (not found, or a TTL of 0).
    case leaseLost
    /// The leader key is gone or another node's (a confirm or a watch said so).
    case leaderKeyLost
    /// An append's compare on the leader key failed.
    case fenced
    /// A batch of a later epoch appeared in the group log.
    case newerEpochSeen
    /// Asked to step down.
    case steppedDown
    /// Its own log failed (`ReplicationEvent.localLogFailed`).
    case localLogFailed
}

/// Why a batch from etcd was not taken.
package enum BatchRefusal: Hashable, Sendable {
    /// Its bytes are not a batch (CRC, bounds...).
    case undecodable(ReplicationBatchError)
    /// Its key names another first LSN than its bytes.
    case keyMismatch
    /// Its epoch is older than the epoch of a batch before it.
    case olderEpoch(ClusterEpoch, after: ClusterEpoch)
}

/// What the node must do, in order.
package enum ReplicationAction: Hashable, Sendable {
    /// Send a request to etcd; answer with `.etcdAnswered(id, …)`.
    case sendEtcd(EtcdRequestID, EtcdRequest)
    /// Watch `range` from revision `from` (the previous watch, if any, was cancelled).
    case startWatch(WatchToken, EtcdKeyRange, from: EtcdRevision)
    /// End this watch.
    case cancelWatch(WatchToken)
    /// Compare the local log with these batches of the group log (at the
    /// LSNs after the checkpoint that it holds) and answer `.localLogVerified`.
    case verifyLocalLog(against: [ReplicationBatch])
    /// Drop every local record after this LSN: the group log does not hold them.
    case truncateLocalLog(after: LogSequenceNumber)
    /// Write these records to the local log at `firstLSN`... (not durable yet:
    /// answer `.localDurable` once fsynced).
    case appendLocal(firstLSN: LogSequenceNumber, records: [[UInt8]])
    /// Apply the local log's records through this LSN (every one committed in etcd).
    case apply(through: LogSequenceNumber)
    /// Answer the writes through this LSN: committed in etcd and durable here.
    case acknowledge(through: LogSequenceNumber, epoch: ClusterEpoch)
    /// A submit's records take these LSNs.
    case writesAccepted(firstLSN: LogSequenceNumber, count: Int)
    /// A submit's records were refused.
    case writesRefused(count: Int, WriteRefusal)
    /// Writes through this LSN not acknowledged within the etcd timeout: answer
    /// them 503 `unavailable` (they may still commit; a retry with the same
    /// idempotency key tells).
    case writesUnconfirmed(through: LogSequenceNumber)
    /// The node takes writes, in this epoch (its epoch record committed).
    case becameLeader(ClusterEpoch)
    /// The node follows this leader (nil: none known).
    case becameFollower(leader: LeaderRecord?)
    /// The leader key is gone: the node will try to take it.
    case becameCandidate
    /// The node lost its epoch: exit 75 (spec §13.5).
    case deposed(DeposedReason)
    /// etcd no longer holds the node's next position (the group log starts
    /// at `groupLogStart`): re-seed from a live node's snapshot.
    case reseedNeeded(groupLogStart: LogSequenceNumber)
    /// A batch was refused (logged).
    case refusedBatch(key: [UInt8], BatchRefusal)
}
