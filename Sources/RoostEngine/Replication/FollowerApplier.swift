import RoostModel
import RoostStorage

/// Makes a follower's state the leader's (spec §13): takes the records of
/// group-log batches, in LSN order, checks that they continue this node's
/// log, applies them to live state through the `Replayer`'s one function
/// (catalog records to the catalog, index records to their app's shard, as
/// `ShardWork.replicate`), then writes them to this node's own log at the
/// same LSNs. Applied before written, as a leader's shards apply before they
/// append: a fuzzy snapshot whose start LSN precedes them replays them over
/// state that already holds them, which after-images make exact.
///
/// One caller at a time (the cluster's apply task): it owns the order.
package struct FollowerApplier: Sendable {
    package let registry: Registry
    package let catalog: CatalogStore
    package let log: ClusterLog

    package init(registry: Registry, catalog: CatalogStore, log: ClusterLog) {
        self.registry = registry
        self.catalog = catalog
        self.log = log
    }

    /// The LSN the next replicated record must have: the one after this
    /// node's log.
    package var nextLSN: LogSequenceNumber { LogSequenceNumber(log.appendedThrough.rawValue + 1) }

    /// Applies `records` (consecutive LSNs from `nextLSN`) and writes them to
    /// this node's log; returns the last LSN — with `awaitDurable`, once this
    /// node's log has it under its `--fsync` policy (a follower need not wait:
    /// the records are committed in the group log, and its reads wait for its
    /// log anyway; a new leader's epoch record must). Throws, changing nothing, when the records
    /// do not continue the log or one cannot be read; `logUnavailable` when
    /// this node's log failed (the state then holds records its log does not:
    /// the node must stop, as a leader whose log fails does).
    package func apply(_ records: [ReplicatedRecord], awaitDurable: Bool = true) async throws(ReplicationApplyError)
        -> LogSequenceNumber
    {
        guard let first = records.first, let last = records.last else { return log.appendedThrough }
        guard first.lsn == nextLSN else { throw .notContinuous(expected: nextLSN, got: first.lsn) }
        var catalogPayloads: [[UInt8]] = []
        var byApp: [AppID: [ReplicatedRecord]] = [:]
        var appOrder: [AppID] = []
        for (offset, record) in records.enumerated() {
            guard record.lsn.rawValue == first.lsn.rawValue + UInt64(offset) else {
                throw .notContinuous(expected: LogSequenceNumber(first.lsn.rawValue + UInt64(offset)), got: record.lsn)
            }
            let destination: Replayer.Destination
            do {
                destination = try record.payload.withUnsafeBytes { payload in
                    try Replayer.route(payload, from: .log(record.lsn)) {
                        "replicated record LSN \(record.lsn.rawValue)"
                    }
                }
            } catch {
                throw .unreadable("\(error)")
            }
            switch destination {
            case .clusterMark: break  // it takes its LSN in this node's log below
            case .catalog(let payload): catalogPayloads.append(payload)
            case .index(let app):
                if byApp[app] == nil { appOrder.append(app) }
                byApp[app, default: []].append(record)
            }
        }
        // The catalog first: an index record may belong to an app these records create.
        do {
            try catalog.applyReplicated(catalogPayloads)
        } catch {
            throw .unreadable(error.description)
        }
        let outcomes = await registry.shardSet.perform(batch: appOrder.map { .replicate($0, byApp[$0] ?? []) })
        guard outcomes.allSatisfy({ $0 != nil }) else { throw .logUnavailable }
        guard let appended = log.appendReplicated(records.map(\.payload)) else { throw .logUnavailable }
        precondition(appended == last.lsn, "this node's log gave \(appended) to the leader's \(last.lsn)")
        if awaitDurable {
            guard await registry.shardSet.perform(.awaitLog(appended)) != nil else { throw .logUnavailable }
        } else if !log.acceptsWrites {
            throw .logUnavailable
        }
        return appended
    }
}

/// Why replicated records were not applied.
package enum ReplicationApplyError: Error, Equatable, CustomStringConvertible {
    /// The first record is not the one after this node's log (a gap or an
    /// overlap: the caller reads the group log again from `expected`).
    case notContinuous(expected: LogSequenceNumber, got: LogSequenceNumber)
    /// A record this release cannot read: this node cannot follow.
    case unreadable(String)
    /// This node's log failed.
    case logUnavailable

    package var description: String {
        switch self {
        case .notContinuous(let expected, let got): "expected LSN \(expected.rawValue), got \(got.rawValue)"
        case .unreadable(let reason): "a replicated record cannot be read: \(reason)"
        case .logUnavailable: "this node's log cannot take writes"
        }
    }
}
