import RoostModel
import RoostStorage
import Synchronization

/// The catalog as engine state (apps, keys, settings, identity signing keys:
/// `CatalogContents`), next to the indexes: rebuilt by recovery from the
/// catalog records the `Replayer` kept, written to by `CatalogCommand`s, and
/// read into every snapshot by the engine itself. Nothing above the engine
/// owns a copy.
///
/// A command is planned on the visible value by the model's rules
/// (`CatalogContents.plan`), applied and appended to the log under one mutex,
/// so log order is apply order; it is acknowledged once the log's
/// acknowledged LSN reaches its records. The value that acknowledged changes
/// made is kept beside it and brought up to date at every access (pending
/// changes whose LSN the log has acknowledged are folded in): when the log
/// has failed, the visible value falls back to it (the changes in flight are
/// undone) and no further change is taken until a restart. Readers never
/// wait for the disk.
package final class CatalogStore: Sendable {
    private struct Copies {
        /// What requests see: every applied change, durable or in flight.
        var visible: CatalogContents
        /// Only the changes whose records are acknowledged.
        var acknowledged: CatalogContents
        /// Applied changes not yet acknowledged, in LSN order.
        var pending: [(lsn: LogSequenceNumber, records: [CatalogRecord])] = []
        var failed = false
    }

    private let copies: Mutex<Copies>
    /// Where the records go: the engine's log, whose LSNs, group commit and
    /// `--fsync` policy they share (nil: in memory, durable at once; tests).
    private let log: (any MutationLog)?

    /// A catalog holding `contents` (recovered, or new), whose changes go to `log`.
    package init(_ contents: CatalogContents, log: (any MutationLog)?) {
        self.copies = Mutex(Copies(visible: contents, acknowledged: contents))
        self.log = log
    }

    // MARK: - Reads

    /// Returns what `body` reads from the visible value.
    package func read<Result: Sendable>(_ body: (CatalogContents) -> Result) -> Result {
        copies.withLock { copies in
            settleForReading(&copies)
            return body(copies.visible)
        }
    }

    /// Returns what `body` reads from the value of acknowledged changes only.
    package func readAcknowledged<Result: Sendable>(_ body: (CatalogContents) -> Result) -> Result {
        copies.withLock { copies in
            settleForReading(&copies)
            return body(copies.acknowledged)
        }
    }

    /// `settle` where a read needs it: only with changes pending. With none,
    /// both values are what settling would leave (a failed log changes the
    /// visible value only by dropping pending changes), and a change notes
    /// the failure itself (`execute` settles first). Two reads a request
    /// skip the log's two look-ups (issue 25).
    private func settleForReading(_ copies: inout Copies) {
        if !copies.pending.isEmpty { settle(&copies) }
    }

    /// Returns the catalog's record payloads for a snapshot: its whole visible
    /// state as after-images, the catalog's part then the identity keys. A
    /// change still in flight has an LSN at or after the snapshot's start,
    /// and replays over it. O(n log n).
    package func snapshotPayloads() -> [[UInt8]] {
        read { $0.records() }.map { $0.encoded() }
    }

    // MARK: - Changes

    /// False on a cluster follower: the catalog changes only by the leader's
    /// records (`applyReplicated`); every command throws `notLeader`.
    package var takesChanges: Bool { log?.takesLocalWrites ?? true }

    /// Plans `command` on the visible value, applies it and appends its
    /// records in one critical section. Throws the rules' rejection, or
    /// `logUnavailable` when the log cannot take writes (nothing applied).
    /// The ticket says what the answer waits for.
    package func execute(
        _ command: CatalogCommand
    ) throws(CatalogChangeFailure) -> (outcome: CatalogOutcome, ticket: CommitTicket) {
        try copies.withLock { copies throws(CatalogChangeFailure) -> (CatalogOutcome, CommitTicket) in
            settle(&copies)
            guard !copies.failed, log?.acceptsWrites ?? true else { throw .logUnavailable }
            guard log?.takesLocalWrites ?? true else { throw .notLeader }
            let plan: CatalogPlan
            do throws(CatalogRejection) {
                plan = try copies.visible.plan(command)
            } catch {
                throw .rejected(error)
            }
            return (plan.outcome, try commit(plan.records, to: &copies))
        }
    }

    /// Applies and appends records that come from outside the rules (an
    /// older release's catalog files, migrated at start-up).
    package func importRecords(_ records: [CatalogRecord]) throws(CatalogChangeFailure) -> CommitTicket {
        try copies.withLock { copies throws(CatalogChangeFailure) -> CommitTicket in
            settle(&copies)
            guard !copies.failed, log?.acceptsWrites ?? true else { throw .logUnavailable }
            guard log?.takesLocalWrites ?? true else { throw .notLeader }
            return try commit(records, to: &copies)
        }
    }

    /// Applies catalog records another node logged and the group log
    /// committed (a cluster follower, spec §13): to the visible and the
    /// acknowledged value at once (they are acknowledged by the group log).
    /// The follower wrote them to its own log before; nothing is appended.
    /// Throws, naming the record, one that does not decode (the batch passed
    /// its CRC: the leader wrote a record this release cannot read).
    package func applyReplicated(_ payloads: [[UInt8]]) throws(CatalogRecoveryError) {
        var records: [CatalogRecord] = []
        records.reserveCapacity(payloads.count)
        for (position, payload) in payloads.enumerated() {
            do {
                records.append(try CatalogRecord.decode(payload))
            } catch {
                throw CatalogRecoveryError(
                    "replicated catalog record \(position + 1) of \(payloads.count): \(error.reason)")
            }
        }
        copies.withLock { copies in
            settle(&copies)
            precondition(copies.pending.isEmpty, "a follower's catalog holds changes of its own in flight")
            for record in records {
                copies.visible.applyLive(record)
                copies.acknowledged.applyLive(record)
            }
        }
    }

    /// Appends `records` in one append and applies them; returns what the
    /// change waits for: the last record's LSN (`.pending`), `.acknowledged`
    /// for an in-memory log or no record. No callback: the request's loop
    /// waits for the LSN as it does for device writes (values cross threads,
    /// docs/decisions/0005). Never blocks.
    private func commit(
        _ records: [CatalogRecord], to copies: inout Copies
    ) throws(CatalogChangeFailure) -> CommitTicket {
        guard !records.isEmpty else { return .acknowledged }
        guard let log else {
            for record in records {
                copies.visible.applyLive(record)
                copies.acknowledged.applyLive(record)
            }
            return .acknowledged
        }
        guard let lsn = log.append(records.map { EngineRecord.catalog($0.encoded()).encoded() }) else {
            copies.failed = true
            copies.visible = copies.acknowledged
            copies.pending.removeAll()
            throw .logUnavailable
        }
        for record in records { copies.visible.applyLive(record) }
        copies.pending.append((lsn, records))
        return .pending(lsn)
    }

    /// Folds every pending change the log has acknowledged into the
    /// acknowledged value; once the log has failed, drops the rest and makes
    /// the visible value the acknowledged one. O(changes settled).
    private func settle(_ copies: inout Copies) {
        guard let log else { return }
        if !copies.pending.isEmpty {
            let through = log.acknowledgedThrough
            var settled = 0
            for change in copies.pending {
                guard change.lsn <= through else { break }
                for record in change.records { copies.acknowledged.applyLive(record) }
                settled += 1
            }
            copies.pending.removeFirst(settled)
        }
        if !copies.failed && !log.acceptsWrites {
            copies.failed = true
        }
        if copies.failed && !copies.pending.isEmpty {
            copies.pending.removeAll()
            copies.visible = copies.acknowledged
        }
    }
}

/// The catalog the shards read their apps' settings from: set once, when a
/// service wires the catalog to the engine (`RoostService`). The catalog is
/// the settings' one owner: an index does not log its own copy, it adopts
/// the catalog's at each turn it runs commands in (`Shard.execute`). A
/// registry with no catalog attached (the engine alone: tools, engine tests)
/// uses the settings each command carries.
package final class CatalogLink: Sendable {
    private let store = AtomicLazyReference<CatalogStore>()

    package init() {}

    /// Attaches `catalog`; a second, different one is a wiring error.
    package func attach(_ catalog: CatalogStore) {
        let attached = store.storeIfNil(catalog)
        precondition(attached === catalog, "a registry's shards are wired to two catalogs")
    }

    /// The settings of `app` as the catalog holds them now (every applied
    /// change); nil without a catalog, or for an app it does not hold.
    func settings(of app: AppID) -> AppSettings? {
        store.load()?.read { $0.catalog.apps[app]?.settings }
    }
}

/// Why a catalog change was not made: nothing was applied.
package enum CatalogChangeFailure: Error, Equatable {
    /// The catalog's rules refused it.
    case rejected(CatalogRejection)
    /// The log cannot take writes (503 until a restart).
    case logUnavailable
    /// This node is a cluster follower: the leader takes catalog changes (503 `not_leader`).
    case notLeader
}

/// What one logged change waits for before it may be answered: a value (an
/// LSN), not a callback. The request's loop waits for it as for device
/// writes (`ShardWork.awaitLog`).
package enum CommitTicket: Sendable, Equatable {
    /// Nothing to wait for: no record was needed, or the log keeps nothing.
    case acknowledged
    /// Answer once the log has acknowledged this LSN (503 if it fails first).
    case pending(LogSequenceNumber)
    /// The log refused the records: nothing was applied (503).
    case refused
}

extension CatalogContents {
    /// Applies one record of a live change to the part it belongs to (not
    /// counted: the counts say what recovery read).
    fileprivate mutating func applyLive(_ record: CatalogRecord) {
        catalog.apply(record)
        identityKeys.apply(record)
    }
}
