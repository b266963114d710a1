/// The part of etcd v3's key-value API the cluster uses (spec §13,
/// docs/decisions/0076-etcd-requests-as-values.md), as values: the
/// replication state machine asks for `EtcdRequest`s and is told
/// `EtcdResponse`s, so it never performs I/O itself. The JSON-gateway client
/// maps these to HTTP; `FakeEtcd` (RoostTesting) answers them in memory for
/// the deterministic simulation.

/// An etcd revision: the store's logical clock, raised by one for every
/// transaction that changes something.
package struct EtcdRevision: Hashable, Comparable, Sendable, CustomStringConvertible {
    package let rawValue: Int64

    package init(_ rawValue: Int64) {
        precondition(rawValue >= 0, "an etcd revision cannot be negative: \(rawValue)")
        self.rawValue = rawValue
    }

    package static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
    package var description: String { "r\(rawValue)" }

    /// The revision after this one.
    package var next: EtcdRevision { EtcdRevision(rawValue + 1) }
}

/// An etcd lease: keys attached to it are deleted when it expires or is revoked.
package struct EtcdLeaseID: Hashable, Sendable, CustomStringConvertible {
    package let rawValue: Int64

    package init(_ rawValue: Int64) {
        precondition(rawValue > 0, "an etcd lease id is positive: \(rawValue)")
        self.rawValue = rawValue
    }

    package var description: String { "lease \(rawValue)" }
}

/// One key as etcd holds it.
package struct EtcdKeyValue: Hashable, Sendable {
    package var key: [UInt8]
    package var value: [UInt8]
    /// The revision that created the key (since its last deletion).
    package var createRevision: EtcdRevision
    /// The revision of its last change.
    package var modRevision: EtcdRevision
    /// How many times it was written since it was created (1 at creation).
    package var version: Int64
    /// The lease it is attached to, if any.
    package var lease: EtcdLeaseID?

    package init(
        key: [UInt8], value: [UInt8], createRevision: EtcdRevision, modRevision: EtcdRevision, version: Int64,
        lease: EtcdLeaseID?
    ) {
        self.key = key
        self.value = value
        self.createRevision = createRevision
        self.modRevision = modRevision
        self.version = version
        self.lease = lease
    }
}

/// Which keys an operation reads or deletes: one key, every key with a
/// prefix, or every key from `from` (included) to `to` (excluded) in byte order.
package enum EtcdKeyRange: Hashable, Sendable {
    case key([UInt8])
    case prefix([UInt8])
    case span(from: [UInt8], to: [UInt8])

    /// Returns whether `key` is in the range.
    package func contains(_ key: [UInt8]) -> Bool {
        switch self {
        case .key(let only): key == only
        case .prefix(let prefix): key.count >= prefix.count && key.starts(with: prefix)
        case .span(let from, let to): !key.lexicographicallyPrecedes(from) && key.lexicographicallyPrecedes(to)
        }
    }

    /// The first key of the range (its lower bound).
    package var lowerBound: [UInt8] {
        switch self {
        case .key(let key), .prefix(let key): key
        case .span(let from, _): from
        }
    }
}

/// One condition of a transaction, on one key. A key that does not exist has
/// create revision, mod revision and version 0 and no value (etcd's rule).
package struct EtcdCompare: Hashable, Sendable {
    /// What of the key is compared.
    package enum Target: Hashable, Sendable {
        case createRevision(EtcdRevision)
        case modRevision(EtcdRevision)
        case version(Int64)
        case value([UInt8])
    }

    /// How.
    package enum Relation: Hashable, Sendable {
        case equal
        case notEqual
        case less
        case greater
    }

    package var key: [UInt8]
    package var relation: Relation
    package var target: Target

    package init(key: [UInt8], _ relation: Relation, _ target: Target) {
        self.key = key
        self.relation = relation
        self.target = target
    }
}

/// One operation of a transaction.
package enum EtcdOperation: Hashable, Sendable {
    /// Writes `value` at `key`, attached to `lease` (nil: no lease).
    case put(key: [UInt8], value: [UInt8], lease: EtcdLeaseID?)
    /// Deletes every key of the range.
    case delete(EtcdKeyRange)
    /// Reads every key of the range, in key order, at most `limit` (0: no limit).
    case range(EtcdKeyRange, limit: Int)
    /// Reads the last key of the range (none when it is empty).
    case rangeLast(EtcdKeyRange)
}

/// What the cluster asks of etcd.
package enum EtcdRequest: Hashable, Sendable {
    /// If every compare holds, the success operations, else the failure ones:
    /// atomically, at one new revision when anything is written.
    case transaction(compares: [EtcdCompare], success: [EtcdOperation], failure: [EtcdOperation])
    /// A lease of `ttlSeconds` (etcd rounds a TTL up to its minimum).
    case grantLease(ttlSeconds: Int64)
    /// Renews a lease for its whole TTL.
    case keepAlive(EtcdLeaseID)
    /// Ends a lease now: its keys are deleted.
    case revokeLease(EtcdLeaseID)
    /// Drops the history before `revision`: a watch from an older revision fails.
    case compact(EtcdRevision)
}

/// The result of one operation of a transaction.
package enum EtcdOperationResult: Hashable, Sendable {
    case put
    case deleted(count: Int)
    case range([EtcdKeyValue])
}

/// Why etcd did not do what was asked.
package enum EtcdFailure: Error, Hashable, Sendable {
    /// No quorum, a timeout, a refused connection: nothing is known of the outcome.
    case unavailable
    /// The lease does not exist (expired or revoked).
    case leaseNotFound
    /// The revision asked for was compacted away; the oldest kept is `compactRevision`.
    case compacted(compactRevision: EtcdRevision)
    /// Compacting to a revision that is newer than the store's.
    case futureRevision
    /// A request larger than etcd's `--max-request-bytes` (1.5 MiB by default).
    case requestTooLarge
    /// An answer larger than the client takes (`EtcdClientOptions.answerBytesMax`):
    /// a read of fewer keys fits.
    case answerTooLarge
}

/// What etcd answered.
package enum EtcdResponse: Hashable, Sendable {
    /// A transaction: whether its compares held, the store's revision after
    /// it, and one result per operation of the branch taken.
    case transaction(succeeded: Bool, revision: EtcdRevision, results: [EtcdOperationResult])
    /// A lease granted (`ttlSeconds` as etcd granted it).
    case lease(EtcdLeaseID, ttlSeconds: Int64)
    /// A keep-alive answered: the lease's remaining TTL.
    case keptAlive(EtcdLeaseID, ttlSeconds: Int64)
    /// A lease revoked, at this revision.
    case revoked(revision: EtcdRevision)
    /// History before this revision is gone.
    case compacted(EtcdRevision)
    case failed(EtcdFailure)
}

/// One change a watch reports.
package struct EtcdEvent: Hashable, Sendable {
    package enum Kind: Hashable, Sendable {
        case put
        case delete
    }

    package var kind: Kind
    /// The key after the change (for a delete: the key, at the delete's mod revision, no value).
    package var keyValue: EtcdKeyValue

    package init(kind: Kind, keyValue: EtcdKeyValue) {
        self.kind = kind
        self.keyValue = keyValue
    }

    /// The revision of the change.
    package var revision: EtcdRevision { keyValue.modRevision }
}
