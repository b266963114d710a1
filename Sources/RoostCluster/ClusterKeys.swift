import RoostStorage

/// Where a cluster keeps its state in etcd (decision 0077): every key under
/// `/roost/<cluster>/`.
///
/// - `cluster`: the cluster's record, written once by `roost cluster init`.
/// - `g0/leader`: the leader of partition group 0 (`LeaderRecord`), attached
///   to the leader's lease; its create revision is the epoch.
/// - `g0/log/<first LSN, 20 decimal digits>`: one `ReplicationBatch`. The
///   zero padding makes key order LSN order.
/// - `g0/members/<node id>`: a node's `MemberRecord`, on the node's own lease.
package struct ClusterKeys: Hashable, Sendable {
    /// The digits of an LSN in a log key: enough for every `UInt64`.
    package static let lsnDigits = 20

    package let cluster: ClusterName
    /// `/roost/<cluster>/`: every key of the cluster.
    package let prefix: [UInt8]

    /// The cluster's record.
    package let clusterRecord: [UInt8]
    /// Every key of group 0 (what a node watches).
    package let group: [UInt8]
    /// The leader key of group 0.
    package let leader: [UInt8]
    /// The prefix of group 0's log batches.
    package let logPrefix: [UInt8]
    /// The prefix of group 0's member records.
    package let membersPrefix: [UInt8]

    package init(cluster: ClusterName) {
        self.cluster = cluster
        prefix = Array("/roost/\(cluster.rawValue)/".utf8)
        clusterRecord = prefix + Array("cluster".utf8)
        group = prefix + Array("g0/".utf8)
        leader = group + Array("leader".utf8)
        logPrefix = group + Array("log/".utf8)
        membersPrefix = group + Array("members/".utf8)
    }

    /// The key of the batch that starts at `firstLSN`.
    package func logKey(firstLSN: LogSequenceNumber) -> [UInt8] {
        let digits = Array(String(firstLSN.rawValue).utf8)
        precondition(digits.count <= Self.lsnDigits, "LSN \(firstLSN) has more than \(Self.lsnDigits) digits")
        return logPrefix + [UInt8](repeating: 0x30, count: Self.lsnDigits - digits.count) + digits
    }

    /// Returns the first LSN a log key names, or nil when `key` is not a log key.
    package func firstLSN(ofLogKey key: [UInt8]) -> LogSequenceNumber? {
        guard key.count == logPrefix.count + Self.lsnDigits else { return nil }
        for index in 0..<logPrefix.count where key[index] != logPrefix[index] { return nil }
        var value: UInt64 = 0
        for index in logPrefix.count..<key.count {
            let digit = key[index]
            guard digit >= 0x30, digit <= 0x39 else { return nil }
            let (times, overflow) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflowSum) = times.addingReportingOverflow(UInt64(digit - 0x30))
            guard !overflow, !overflowSum else { return nil }
            value = sum
        }
        return value == 0 ? nil : LogSequenceNumber(value)
    }

    /// The node id and record of each member key in `keyValues` (a range of
    /// `membersPrefix`); values that are not a member record are left out.
    package func members(in keyValues: [EtcdKeyValue]) -> [(node: String, record: MemberRecord)] {
        keyValues.compactMap { keyValue in
            guard keyValue.key.starts(with: membersPrefix), let record = MemberRecord.decode(keyValue.value) else {
                return nil
            }
            return (String(decoding: keyValue.key.dropFirst(membersPrefix.count), as: UTF8.self), record)
        }
    }

    /// The member key of `node`.
    package func memberKey(_ node: NodeID) -> [UInt8] {
        membersPrefix + Array(node.rawValue.utf8)
    }
}

/// The value of the leader key: who leads and where to reach it, as
/// `<node id> <advertise URL>`.
package struct LeaderRecord: Hashable, Sendable {
    /// The longest advertise URL.
    package static let urlBytesMax = 512

    package let node: NodeID
    package let url: String

    package init(node: NodeID, url: String) {
        precondition(url.utf8.count <= Self.urlBytesMax, "advertise URL of \(url.utf8.count) bytes")
        precondition(!url.utf8.contains(0x20), "an advertise URL has no space: \(url)")
        self.node = node
        self.url = url
    }

    /// The key's value.
    package func encoded() -> [UInt8] {
        Array("\(node.rawValue) \(url)".utf8)
    }

    /// Returns the record in a leader key's value, or nil when it is not one.
    package static func decode(_ bytes: [UInt8]) -> LeaderRecord? {
        guard let space = bytes.firstIndex(of: 0x20), bytes.count - space - 1 <= urlBytesMax,
            let node = NodeID(String(decoding: bytes[..<space], as: UTF8.self))
        else { return nil }
        let url = String(decoding: bytes[(space + 1)...], as: UTF8.self)
        guard !url.utf8.contains(0x20) else { return nil }
        return LeaderRecord(node: node, url: url)
    }
}

/// The value of a member key: `<url> <role> <applied LSN> <checkpoint LSN>`.
package struct MemberRecord: Hashable, Sendable {
    package let url: String
    package let role: ReplicationRole
    package let appliedLSN: LogSequenceNumber
    package let checkpointLSN: LogSequenceNumber

    package init(url: String, role: ReplicationRole, appliedLSN: LogSequenceNumber, checkpointLSN: LogSequenceNumber) {
        precondition(url.utf8.count <= LeaderRecord.urlBytesMax, "URL of \(url.utf8.count) bytes")
        precondition(!url.utf8.contains(0x20), "a URL has no space: \(url)")
        self.url = url
        self.role = role
        self.appliedLSN = appliedLSN
        self.checkpointLSN = checkpointLSN
    }

    /// The key's value.
    package func encoded() -> [UInt8] {
        Array("\(url) \(role.rawValue) \(appliedLSN.rawValue) \(checkpointLSN.rawValue)".utf8)
    }

    /// Returns the record in a member key's value, or nil when it is not one.
    package static func decode(_ bytes: [UInt8]) -> MemberRecord? {
        let fields = bytes.split(separator: 0x20, omittingEmptySubsequences: false)
        guard fields.count == 4, fields[0].count <= LeaderRecord.urlBytesMax,
            let role = ReplicationRole(rawValue: String(decoding: fields[1], as: UTF8.self)),
            let applied = UInt64(String(decoding: fields[2], as: UTF8.self)),
            let checkpoint = UInt64(String(decoding: fields[3], as: UTF8.self))
        else { return nil }
        return MemberRecord(
            url: String(decoding: fields[0], as: UTF8.self), role: role, appliedLSN: LogSequenceNumber(applied),
            checkpointLSN: LogSequenceNumber(checkpoint))
    }
}
