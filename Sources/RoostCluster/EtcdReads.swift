/// What the cluster reads from etcd outside a transaction (the group log at
/// start-up and catch-up, the health on `GET /v1/cluster`), as values beside
/// those of `EtcdModel.swift`. The client answers them; `FakeEtcd` need not.

/// An etcd member's id (`member_id`, `leader`): an unsigned 64-bit number, never 0.
package struct EtcdMemberID: Hashable, Sendable, CustomStringConvertible {
    package let rawValue: UInt64

    package init(_ rawValue: UInt64) {
        precondition(rawValue != 0, "an etcd member id is never 0")
        self.rawValue = rawValue
    }

    package var description: String { "member \(String(rawValue, radix: 16))" }
}

/// The answer to a plain range read (`/v3/kv/range`).
package struct EtcdRangeResult: Hashable, Sendable {
    /// The store's revision the read saw.
    package var revision: EtcdRevision
    /// The keys found, in key order (at most the limit asked for).
    package var keyValues: [EtcdKeyValue]
    /// Whether more keys of the range exist beyond the limit.
    package var more: Bool
    /// How many keys the whole range holds (limit or not).
    package var count: Int64

    package init(revision: EtcdRevision, keyValues: [EtcdKeyValue], more: Bool, count: Int64) {
        self.revision = revision
        self.keyValues = keyValues
        self.more = more
        self.count = count
    }
}

/// One member's view of itself and of its cluster (`/v3/maintenance/status`).
package struct EtcdStatus: Hashable, Sendable {
    /// The member that answered.
    package var member: EtcdMemberID
    /// The member it follows as leader; nil while the cluster has no leader.
    package var leader: EtcdMemberID?
    /// etcd's version, e.g. `3.4.23`.
    package var version: String
    /// The database file's size (what the space quota counts).
    package var databaseBytes: Int64
    /// The part of the database file in use (the rest is freed space a defragmentation returns).
    package var databaseBytesInUse: Int64
    /// The last Raft index the member has.
    package var raftIndex: UInt64
    /// The last Raft index it applied.
    package var raftAppliedIndex: UInt64
    /// The Raft term.
    package var raftTerm: UInt64
    /// The store's revision.
    package var revision: EtcdRevision
    /// Alarms and errors the member reports (such as `NOSPACE`); empty when healthy.
    package var errors: [String]

    package init(
        member: EtcdMemberID, leader: EtcdMemberID?, version: String, databaseBytes: Int64, databaseBytesInUse: Int64,
        raftIndex: UInt64, raftAppliedIndex: UInt64, raftTerm: UInt64, revision: EtcdRevision, errors: [String]
    ) {
        self.member = member
        self.leader = leader
        self.version = version
        self.databaseBytes = databaseBytes
        self.databaseBytesInUse = databaseBytesInUse
        self.raftIndex = raftIndex
        self.raftAppliedIndex = raftAppliedIndex
        self.raftTerm = raftTerm
        self.revision = revision
        self.errors = errors
    }
}
