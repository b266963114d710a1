import RoostCluster

/// An etcd v3 store in memory for the cluster's deterministic simulation
/// (HOUSE_STYLE 21): revisions, leases on a manual clock, transactions with
/// compares, watches and compaction, answering `EtcdRequest`s as etcd 3.4
/// does. It injects, from a seeded generator, the faults etcd 3.4.23 is
/// known for: watch events delivered twice, lost, or rewound (a batch
/// delivered again from an older revision), a keep-alive answered as if it
/// succeeded after the lease was revoked, and the whole store unavailable (no
/// quorum). A pause longer than a lease's TTL is the simulation's: it
/// advances the clock without keep-alives. Single-threaded: the simulation
/// owns it.
package struct FakeEtcd {
    /// etcd's default `--max-request-bytes`: a larger transaction is refused.
    package static let requestBytesMax = 1_572_864
    /// etcd's smallest TTL: a shorter one is granted as this.
    package static let leaseTTLSecondsMin: Int64 = 1

    /// The faults to inject, each a chance per occasion in percent.
    package struct Faults: Sendable {
        /// A watch event delivered twice in a row.
        package var duplicateEventPercent = 0
        /// A watch event not delivered (the watcher sees a revision gap).
        package var dropEventPercent = 0
        /// A delivery that starts again at an older revision (events seen before, again).
        package var rewindPercent = 0
        /// A keep-alive of a revoked or expired lease answered as a success.
        package var keepAliveAfterRevokePercent = 0
        /// The client's answer limit: a transaction whose ranges found more
        /// key and value bytes fails `answerTooLarge` (after it took effect,
        /// as a real answer lost on the way), unless no range found more than
        /// `answerKeysAlwaysFitting` keys — in etcd, a page of that many of
        /// the largest batches a leader writes fits by construction
        /// (`ReplicationMachine.readBatchesMin`).
        package var answerBytesMax = Int.max
        package var answerKeysAlwaysFitting = 8

        package init() {}
    }

    /// A watch: a range and the next revision to deliver from.
    private struct Watch {
        var range: EtcdKeyRange
        var nextRevision: EtcdRevision
        /// The last events delivered (for a rewind).
        var lastDelivered: [EtcdEvent] = []
    }

    private struct Lease {
        var ttlSeconds: Int64
        var expiresAtMilliseconds: Int64
    }

    /// The store's current revision (1 when empty, as etcd's).
    package private(set) var revision = EtcdRevision(1)
    /// History older than this is compacted.
    package private(set) var compactRevision = EtcdRevision(0)
    /// The manual clock, in milliseconds.
    package private(set) var nowMilliseconds: Int64 = 0
    /// When set, every request answers `.failed(.unavailable)` and no watch delivers.
    package var unavailable = false
    package var faults = Faults()

    private var keys: [[UInt8]: EtcdKeyValue] = [:]
    /// Every key of `keys`, in key order (ranges read in order without sorting).
    private var orderedKeys: [[UInt8]] = []
    private var history: [EtcdEvent] = []
    private var leases: [EtcdLeaseID: Lease] = [:]
    private var revokedLeases: Set<EtcdLeaseID> = []
    private var nextLeaseID: Int64 = 1
    private var watches: [Int: Watch] = [:]
    private var nextWatchID = 1
    private var random: SeededRandom

    /// An empty store whose faults draw from `seed`.
    package init(seed: UInt64) {
        random = SeededRandom(seed: seed)
    }

    // MARK: - Time and leases

    /// Moves the clock forward; leases whose TTL ran out expire, oldest
    /// deadline first, each deleting its keys at a revision of its own.
    package mutating func advance(byMilliseconds milliseconds: Int64) {
        precondition(milliseconds >= 0, "the clock goes forward only: \(milliseconds)")
        nowMilliseconds += milliseconds
        let expired = leases.filter { $0.value.expiresAtMilliseconds <= nowMilliseconds }
            .sorted {
                ($0.value.expiresAtMilliseconds, $0.key.rawValue) < ($1.value.expiresAtMilliseconds, $1.key.rawValue)
            }
        for (id, _) in expired { end(id) }
    }

    /// Ends a lease: forgets it and deletes its keys (one revision when any).
    private mutating func end(_ id: EtcdLeaseID) {
        leases[id] = nil
        revokedLeases.insert(id)
        let attached = keys.values.filter { $0.lease == id }.map(\.key).sorted { $0.lexicographicallyPrecedes($1) }
        guard !attached.isEmpty else { return }
        let at = revision.next
        for key in attached { delete(key, at: at) }
        revision = at
    }

    // MARK: - Requests

    /// Answers one request as etcd 3.4 would.
    package mutating func handle(_ request: EtcdRequest) -> EtcdResponse {
        guard !unavailable else { return .failed(.unavailable) }
        switch request {
        case .transaction(let compares, let success, let failure):
            guard Self.bytes(of: request) <= Self.requestBytesMax else { return .failed(.requestTooLarge) }
            let succeeded = compares.allSatisfy(holds)
            let operations = succeeded ? success : failure
            for case .put(_, _, let lease?) in operations where leases[lease] == nil {
                return .failed(.leaseNotFound)
            }
            let results = apply(operations)
            if Self.isTooLarge(results, faults) { return .failed(.answerTooLarge) }
            return .transaction(succeeded: succeeded, revision: revision, results: results)
        case .grantLease(let ttl):
            let granted = max(ttl, Self.leaseTTLSecondsMin)
            let id = EtcdLeaseID(nextLeaseID)
            nextLeaseID += 1
            leases[id] = Lease(ttlSeconds: granted, expiresAtMilliseconds: nowMilliseconds + granted * 1000)
            return .lease(id, ttlSeconds: granted)
        case .keepAlive(let id):
            guard var lease = leases[id] else {
                if revokedLeases.contains(id), chance(faults.keepAliveAfterRevokePercent) {
                    // etcd 3.4.23: a keep-alive stream can answer for a lease already gone.
                    return .keptAlive(id, ttlSeconds: 1)
                }
                return .failed(.leaseNotFound)
            }
            lease.expiresAtMilliseconds = nowMilliseconds + lease.ttlSeconds * 1000
            leases[id] = lease
            return .keptAlive(id, ttlSeconds: lease.ttlSeconds)
        case .revokeLease(let id):
            guard leases[id] != nil else { return .failed(.leaseNotFound) }
            end(id)
            return .revoked(revision: revision)
        case .compact(let target):
            guard target <= revision else { return .failed(.futureRevision) }
            guard target > compactRevision else { return .failed(.compacted(compactRevision: compactRevision)) }
            compactRevision = target
            history.removeAll { $0.revision < target }
            return .compacted(target)
        }
    }

    /// Returns the key's current state, if it exists (tests and invariants).
    package func value(of key: [UInt8]) -> EtcdKeyValue? {
        keys[key]
    }

    /// Returns every key of `range`, in key order (tests and invariants).
    package func values(in range: EtcdKeyRange) -> [EtcdKeyValue] {
        switch range {
        case .key(let key):
            return keys[key].map { [$0] } ?? []
        case .prefix(let prefix):
            var found: [EtcdKeyValue] = []
            for key in orderedKeys[firstIndex(notBefore: prefix)...] {
                guard key.starts(with: prefix) else { break }
                if let keyValue = keys[key] { found.append(keyValue) }
            }
            return found
        case .span(let from, let to):
            var found: [EtcdKeyValue] = []
            for key in orderedKeys[firstIndex(notBefore: from)...] {
                guard key.lexicographicallyPrecedes(to) else { break }
                if let keyValue = keys[key] { found.append(keyValue) }
            }
            return found
        }
    }

    /// Returns the index of the first key of `orderedKeys` not before `key`. O(log keys).
    private func firstIndex(notBefore key: [UInt8]) -> Int {
        var low = 0
        var high = orderedKeys.count
        while low < high {
            let middle = (low + high) / 2
            if orderedKeys[middle].lexicographicallyPrecedes(key) { low = middle + 1 } else { high = middle }
        }
        return low
    }

    // MARK: - Watches

    /// Starts a watch of `range` from `revision` (its events at and after
    /// it); fails when that revision was compacted away.
    package mutating func watch(_ range: EtcdKeyRange, from start: EtcdRevision) -> Result<Int, EtcdFailure> {
        guard !unavailable else { return .failure(.unavailable) }
        guard start >= compactRevision else { return .failure(.compacted(compactRevision: compactRevision)) }
        let id = nextWatchID
        nextWatchID += 1
        watches[id] = Watch(range: range, nextRevision: start)
        return .success(id)
    }

    /// Ends a watch.
    package mutating func cancelWatch(_ id: Int) {
        watches[id] = nil
    }

    /// Returns the events of watch `id` not delivered yet, in revision order,
    /// with the faults drawn for this delivery; fails when its next revision
    /// was compacted away (the watch is then cancelled, as etcd does).
    package mutating func takeEvents(_ id: Int) -> Result<[EtcdEvent], EtcdFailure> {
        guard var watch = watches[id] else { preconditionFailure("watch \(id) is not open") }
        guard !unavailable else { return .success([]) }
        guard watch.nextRevision >= compactRevision else {
            watches[id] = nil
            return .failure(.compacted(compactRevision: compactRevision))
        }
        if !watch.lastDelivered.isEmpty, chance(faults.rewindPercent) {
            // Delivered again from an older revision: the watcher sees events it has.
            let again = watch.lastDelivered
            return .success(again)
        }
        let fresh = history.filter { $0.revision >= watch.nextRevision && watch.range.contains($0.keyValue.key) }
        var delivered: [EtcdEvent] = []
        for event in fresh {
            if chance(faults.dropEventPercent) { continue }
            delivered.append(event)
            if chance(faults.duplicateEventPercent) { delivered.append(event) }
        }
        watch.nextRevision = revision.next
        watch.lastDelivered = delivered
        watches[id] = watch
        return .success(delivered)
    }

    // MARK: - Inside a transaction

    private func holds(_ compare: EtcdCompare) -> Bool {
        let current = keys[compare.key]
        switch compare.target {
        case .createRevision(let target):
            return Self.relate(current?.createRevision.rawValue ?? 0, compare.relation, target.rawValue)
        case .modRevision(let target):
            return Self.relate(current?.modRevision.rawValue ?? 0, compare.relation, target.rawValue)
        case .version(let target):
            return Self.relate(current?.version ?? 0, compare.relation, target)
        case .value(let target):
            guard let value = current?.value else { return compare.relation == .notEqual }
            switch compare.relation {
            case .equal: return value == target
            case .notEqual: return value != target
            case .less: return value.lexicographicallyPrecedes(target)
            case .greater: return target.lexicographicallyPrecedes(value)
            }
        }
    }

    private static func relate(_ lhs: Int64, _ relation: EtcdCompare.Relation, _ rhs: Int64) -> Bool {
        switch relation {
        case .equal: lhs == rhs
        case .notEqual: lhs != rhs
        case .less: lhs < rhs
        case .greater: lhs > rhs
        }
    }

    /// Whether the client would refuse these results (`Faults.answerBytesMax`).
    private static func isTooLarge(_ results: [EtcdOperationResult], _ faults: Faults) -> Bool {
        var bytes = 0
        var keysMost = 0
        for case .range(let found) in results {
            keysMost = max(keysMost, found.count)
            for keyValue in found { bytes += keyValue.key.count + keyValue.value.count }
        }
        return bytes > faults.answerBytesMax && keysMost > faults.answerKeysAlwaysFitting
    }

    /// Applies one branch: every write at one new revision (none when nothing changes).
    private mutating func apply(_ operations: [EtcdOperation]) -> [EtcdOperationResult] {
        let at = revision.next
        var wrote = false
        var results: [EtcdOperationResult] = []
        for operation in operations {
            switch operation {
            case .put(let key, let value, let lease):
                let old = keys[key]
                if old == nil { orderedKeys.insert(key, at: firstIndex(notBefore: key)) }
                let entry = EtcdKeyValue(
                    key: key, value: value, createRevision: old?.createRevision ?? at, modRevision: at,
                    version: (old?.version ?? 0) + 1, lease: lease)
                keys[key] = entry
                history.append(EtcdEvent(kind: .put, keyValue: entry))
                wrote = true
                results.append(.put)
            case .delete(let range):
                let doomed = values(in: range).map(\.key)
                for key in doomed { delete(key, at: at) }
                wrote = wrote || !doomed.isEmpty
                results.append(.deleted(count: doomed.count))
            case .range(let range, let limit):
                let found = values(in: range)
                results.append(.range(limit > 0 ? Array(found.prefix(limit)) : found))
            case .rangeLast(let range):
                results.append(.range(values(in: range).suffix(1)))
            }
        }
        if wrote { revision = at }
        return results
    }

    private mutating func delete(_ key: [UInt8], at: EtcdRevision) {
        guard let old = keys.removeValue(forKey: key) else { return }
        let index = firstIndex(notBefore: key)
        precondition(index < orderedKeys.count && orderedKeys[index] == key, "key order lost \(key)")
        orderedKeys.remove(at: index)
        var tombstone = old
        tombstone.value = []
        tombstone.modRevision = at
        history.append(EtcdEvent(kind: .delete, keyValue: tombstone))
    }

    private mutating func chance(_ percent: Int) -> Bool {
        percent > 0 && Int(random.next() % 100) < percent
    }

    /// The bytes a request carries (keys and values), for etcd's request limit.
    private static func bytes(of request: EtcdRequest) -> Int {
        guard case .transaction(let compares, let success, let failure) = request else { return 0 }
        var total = compares.reduce(0) { $0 + $1.key.count }
        for operation in success + failure {
            switch operation {
            case .put(let key, let value, _): total += key.count + value.count
            case .delete(let range), .range(let range, _), .rangeLast(let range):
                total += range.lowerBound.count
            }
        }
        return total
    }
}
