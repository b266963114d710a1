import RoostEngine
import RoostModel
import RoostStorage
import Synchronization

/// The one place catalog records reach the log (apps, keys, settings,
/// counters, identity signing keys): `EngineRecord.catalog` records through
/// the engine's `MutationLog`, so they share its LSNs, group commit and
/// `--fsync` policy.
package final class CatalogLog: Sendable {
    private let log: (any MutationLog)?

    /// `log` nil keeps every change in memory, "durable" at once (tests).
    package init(log: (any MutationLog)?) {
        self.log = log
    }

    /// False once the log cannot take writes: changes are refused (503)
    /// before anything is applied.
    var acceptsWrites: Bool { log?.acceptsWrites ?? true }

    /// The LSN every record appended so far is acknowledged through
    /// (`UInt64.max` for an in-memory log: everything is).
    var acknowledgedThrough: LogSequenceNumber { log?.acknowledgedThrough ?? LogSequenceNumber(UInt64.max) }

    /// Appends `records` in one append and returns what the change waits for:
    /// the last record's LSN (`.pending`), `.acknowledged` for an in-memory
    /// log, or `.refused` when the log cannot take them. No callback: the
    /// request's loop waits for the LSN as it does for device writes (values
    /// cross threads, docs/decisions/0005). Never blocks.
    func append(_ records: [CatalogRecord]) -> CommitTicket {
        guard let log else { return .acknowledged }
        let encoded = records.map { EngineRecord.catalog($0.encoded()).encoded() }
        guard let lsn = log.append(encoded) else { return .refused }
        return .pending(lsn)
    }
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

    /// A change that needed no record: acknowledged at once.
    static var nothingToLog: CommitTicket { .acknowledged }
}

/// The catalog's state (`CatalogContents`: apps, keys, settings, identity
/// signing keys), changed only by logged records. A `CatalogCommand` is
/// planned on the visible value by the model's rules, applied and appended to the log
/// under one mutex, so log order is apply order; it is acknowledged once the
/// log's acknowledged LSN reaches its records. The value that acknowledged
/// changes made is kept beside it and brought up to date at every access
/// (pending changes whose LSN the log has acknowledged are folded in): when
/// the log has failed, the visible value falls back to it (the changes in
/// flight are undone) and no further change is taken until a restart.
/// Readers never wait for the disk.
package final class LoggedState: Sendable {
    package typealias Value = CatalogContents

    private struct Copies {
        /// What requests see: every applied change, durable or in flight.
        var visible: Value
        /// Only the changes whose records are acknowledged.
        var acknowledged: Value
        /// Applied changes not yet acknowledged, in LSN order.
        var pending: [(lsn: LogSequenceNumber, records: [CatalogRecord])] = []
        var failed = false
    }

    private let copies: Mutex<Copies>
    private let log: CatalogLog

    /// A state recovered from the log (or new), whose changes go to `log`.
    package init(_ value: Value, log: CatalogLog) {
        self.copies = Mutex(Copies(visible: value, acknowledged: value))
        self.log = log
    }

    /// Applies one record to the part it belongs to (live changes are not
    /// counted as recovery counts them).
    private func apply(_ value: inout Value, _ record: CatalogRecord) {
        value.catalog.apply(record)
        value.identityKeys.apply(record)
    }

    /// Returns what `body` reads from the visible value.
    package func read<Result: Sendable>(_ body: (Value) -> Result) -> Result {
        copies.withLock { copies in
            settle(&copies)
            return body(copies.visible)
        }
    }

    /// Returns what `body` reads from the value of acknowledged changes only.
    func readAcknowledged<Result: Sendable>(_ body: (Value) -> Result) -> Result {
        copies.withLock { copies in
            settle(&copies)
            return body(copies.acknowledged)
        }
    }

    /// Plans `command` on the visible value (`CatalogContents.plan`: the
    /// model's rules give the records, after-images, and an outcome), applies
    /// it and appends it in one critical section. Throws the rules' rejection,
    /// or 503 when the log cannot take writes (nothing applied). The ticket
    /// says what the answer waits for.
    func execute(_ command: CatalogCommand) throws(APIError) -> (outcome: CatalogOutcome, ticket: CommitTicket) {
        try copies.withLock { copies throws(APIError) -> (CatalogOutcome, CommitTicket) in
            settle(&copies)
            guard !copies.failed, log.acceptsWrites else { throw APIError.logUnavailable }
            let plan: CatalogPlan
            do throws(CatalogRejection) {
                plan = try copies.visible.plan(command)
            } catch {
                throw APIError(error)
            }
            let (records, result) = (plan.records, plan.outcome)
            guard !records.isEmpty else { return (result, .nothingToLog) }
            let ticket = log.append(records)
            switch ticket {
            case .pending(let lsn):
                for record in records { apply(&copies.visible, record) }
                copies.pending.append((lsn, records))
            case .acknowledged:
                for record in records {
                    apply(&copies.visible, record)
                    apply(&copies.acknowledged, record)
                }
            case .refused:
                copies.failed = true
                copies.visible = copies.acknowledged
                copies.pending.removeAll()
                throw APIError.logUnavailable
            }
            return (result, ticket)
        }
    }

    /// Folds every pending change the log has acknowledged into the
    /// acknowledged value; once the log has failed, drops the rest and makes
    /// the visible value the acknowledged one. O(changes settled).
    private func settle(_ copies: inout Copies) {
        if !copies.pending.isEmpty {
            let through = log.acknowledgedThrough
            var settled = 0
            for change in copies.pending {
                guard change.lsn <= through else { break }
                for record in change.records { apply(&copies.acknowledged, record) }
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

/// Start-up cannot bring the catalog up: exit 2 with this line.
package struct CatalogStartError: Error, CustomStringConvertible {
    package var reason: String
    init(_ reason: String) { self.reason = reason }
    package var description: String { reason }
}
