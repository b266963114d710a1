/// The identities of cluster mode (spec §13) as own types, so that an epoch,
/// a node id and a cluster name never cross a module boundary as a bare
/// integer or string (HOUSE_STYLE 2).

/// A leader's term: the etcd create revision of the leader key
/// (`ClusterKeys.leader`). Every new leader takes the key anew, so a later
/// leader always has a larger epoch; a batch of the group log carries the
/// epoch of the leader that appended it.
package struct ClusterEpoch: Hashable, Comparable, Sendable, CustomStringConvertible {
    package let rawValue: Int64

    package init(_ rawValue: Int64) {
        precondition(rawValue > 0, "an epoch is an etcd create revision, so positive: \(rawValue)")
        self.rawValue = rawValue
    }

    /// The epoch whose leader key was created at `revision`.
    package init(createRevision revision: EtcdRevision) {
        self.init(revision.rawValue)
    }

    package static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
    package var description: String { "e\(rawValue)" }

    /// The leader key's create revision for this epoch, for a transaction's compare.
    package var createRevision: EtcdRevision { EtcdRevision(rawValue) }
}

/// Checks the spelling shared by node ids and cluster names: 1 to
/// `lengthMax` characters of `a-z0-9-` (spec §13.8).
private func isClusterIdentifier(_ text: String, lengthMax: Int) -> Bool {
    let bytes = Array(text.utf8)
    guard !bytes.isEmpty, bytes.count <= lengthMax else { return false }
    return bytes.allSatisfy { ($0 >= 0x61 && $0 <= 0x7a) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2d }
}

/// A node of the cluster (`--node-id`): 1 to 32 characters of `a-z0-9-`,
/// unique in the cluster.
package struct NodeID: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The longest node id (spec §13.8).
    package static let lengthMax = 32

    package let rawValue: String

    /// A node id, or nil when `rawValue` is not 1 to 32 characters of `a-z0-9-`.
    package init?(_ rawValue: String) {
        guard isClusterIdentifier(rawValue, lengthMax: Self.lengthMax) else { return nil }
        self.rawValue = rawValue
    }

    package static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
    package var description: String { rawValue }
}

/// A cluster's name (`--cluster`): the etcd prefix `/roost/<name>/` holds all of its keys.
package struct ClusterName: Hashable, Sendable, CustomStringConvertible {
    /// The longest cluster name.
    package static let lengthMax = 32

    package let rawValue: String

    /// A cluster name, or nil when `rawValue` is not 1 to 32 characters of `a-z0-9-`.
    package init?(_ rawValue: String) {
        guard isClusterIdentifier(rawValue, lengthMax: Self.lengthMax) else { return nil }
        self.rawValue = rawValue
    }

    package var description: String { rawValue }
}
