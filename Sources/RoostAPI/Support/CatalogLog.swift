import Glibc
import RoostEngine
import Synchronization

/// The one place catalog records reach the log (apps, keys, settings,
/// counters, identity signing keys): `EngineRecord.catalog` records through
/// the engine's `MutationLog`, so they share its LSNs, group commit and
/// `--fsync` policy. Re-point this type, and only this one, when the log's
/// completion mechanism changes.
package final class CatalogLog: Sendable {
    private let log: (any MutationLog)?

    /// `log` nil keeps every change in memory, "durable" at once (tests).
    package init(log: (any MutationLog)?) {
        self.log = log
    }

    /// False once the log cannot take writes: changes are refused (503)
    /// before anything is applied.
    var acceptsWrites: Bool { log?.acceptsWrites ?? true }

    /// Appends `records` in one append. Returns the outcome when the log knew
    /// it before returning (a failed log refuses at once; an in-memory log
    /// takes at once), and then never calls `completion`; otherwise returns
    /// nil and calls `completion` once, from the log's completion thread, after
    /// the records are durable (true) or cannot be (false). Never blocks.
    func append(_ records: [CatalogRecord], completion: @escaping @Sendable (_ durable: Bool) -> Void) -> Bool? {
        guard let log else { return true }
        let encoded = records.map { EngineRecord.catalog($0.encoded()).encoded() }
        let early = Mutex<(returned: Bool, outcome: Bool?)>((false, nil))
        log.append(encoded) { durable in
            let late = early.withLock { state -> Bool in
                guard state.returned else {
                    state.outcome = durable
                    return false
                }
                return true
            }
            if late { completion(durable) }
        }
        return early.withLock { state in
            state.returned = true
            return state.outcome
        }
    }

    /// Appends `records` and waits until they are durable (start-up only:
    /// migration and the first identity key, before anything is served).
    package func appendAndWait(_ records: [CatalogRecord]) throws(CatalogStartError) {
        let done = Mutex<Bool?>(nil)
        let outcome =
            append(records) { durable in done.withLock { $0 = durable } }
            ?? {
                while true {
                    if let value = done.withLock({ $0 }) { return value }
                    usleepForStartUp()
                }
            }()
        guard outcome else { throw CatalogStartError("the log could not take the catalog records") }
    }
}

/// Sleeps 1 ms; start-up waits for the log with it (never on an event loop).
private func usleepForStartUp() {
    var request = timespec(tv_sec: 0, tv_nsec: 1_000_000)
    _ = nanosleep(&request, nil)
}

/// The outcome of one logged change, known once its records are durable or
/// cannot be. The request that made the change answers from it.
package final class CommitTicket: Sendable {
    private enum State {
        case pending([@Sendable (Bool) -> Void])
        case done(Bool)
    }

    private let state: Mutex<State>

    init(done: Bool? = nil) {
        state = Mutex(done.map { .done($0) } ?? .pending([]))
    }

    /// A change that needed no record: acknowledged at once.
    static var nothingToLog: CommitTicket { CommitTicket(done: true) }

    /// Records the outcome and runs the waiters. Called once.
    func complete(_ durable: Bool) {
        let waiters = state.withLock { state -> [@Sendable (Bool) -> Void] in
            guard case .pending(let waiters) = state else { preconditionFailure("a change completed twice") }
            state = .done(durable)
            return waiters
        }
        for waiter in waiters { waiter(durable) }
    }

    /// Returns the outcome when it is known (and does not keep `waiter`);
    /// otherwise keeps `waiter`, which gets it later, and returns nil.
    func outcomeOrWait(_ waiter: @escaping @Sendable (_ durable: Bool) -> Void) -> Bool? {
        state.withLock { state -> Bool? in
            switch state {
            case .done(let durable):
                return durable
            case .pending(var waiters):
                waiters.append(waiter)
                state = .pending(waiters)
                return nil
            }
        }
    }

    /// Calls `body` with the outcome, now when it is known, else later.
    func whenDone(_ body: @escaping @Sendable (_ durable: Bool) -> Void) {
        if let durable = outcomeOrWait(body) { body(durable) }
    }
}

/// A value changed only by logged records (the catalog, the identity keys).
/// A change is planned on the visible value, applied and appended to the log
/// under one mutex, so log order is apply order; it is acknowledged once its
/// records are durable. The value that acknowledged changes made is kept
/// beside it: when the log fails, the visible value falls back to it (the
/// failed change, and any appended behind it, which fail too, are undone),
/// and no further change is taken until a restart. Readers never wait for
/// the disk.
package final class LoggedState<Value: Sendable>: Sendable {
    private struct Copies {
        /// What requests see: every applied change, durable or in flight.
        var visible: Value
        /// Only the changes whose records are durable.
        var acknowledged: Value
        var failed = false
    }

    private let copies: Mutex<Copies>
    private let log: CatalogLog
    private let apply: @Sendable (inout Value, CatalogRecord) -> Void

    package init(_ value: Value, log: CatalogLog, apply: @escaping @Sendable (inout Value, CatalogRecord) -> Void) {
        self.copies = Mutex(Copies(visible: value, acknowledged: value))
        self.log = log
        self.apply = apply
    }

    /// Returns what `body` reads from the visible value.
    func read<Result: Sendable>(_ body: (Value) -> Result) -> Result {
        copies.withLock { body($0.visible) }
    }

    /// Returns what `body` reads from the value of acknowledged changes only.
    func readAcknowledged<Result: Sendable>(_ body: (Value) -> Result) -> Result {
        copies.withLock { body($0.acknowledged) }
    }

    /// Plans a change on the visible value (`plan` validates and returns the
    /// records, after-images, and a result), applies it and appends it in one
    /// critical section. Throws `plan`'s error, or 503 when the log cannot
    /// take writes (nothing applied). The ticket says when it is durable.
    func change<Result>(
        _ plan: (Value) throws(APIError) -> (records: [CatalogRecord], result: Result)
    ) throws(APIError) -> (Result, CommitTicket) {
        let (result, ticket, completeNow) = try copies.withLock {
            copies throws(APIError) -> (Result, CommitTicket, Bool) in
            guard !copies.failed, log.acceptsWrites else { throw APIError.logUnavailable }
            let (records, result) = try plan(copies.visible)
            guard !records.isEmpty else { return (result, .nothingToLog, false) }
            let ticket = CommitTicket()
            let early = log.append(records) { [self] durable in self.finish(records, durable: durable, ticket: ticket) }
            switch early {
            case .none:
                for record in records { apply(&copies.visible, record) }
                return (result, ticket, false)
            case .some(true):
                for record in records {
                    apply(&copies.visible, record)
                    apply(&copies.acknowledged, record)
                }
                return (result, ticket, true)
            case .some(false):
                copies.failed = true
                throw APIError.logUnavailable
            }
        }
        if completeNow { ticket.complete(true) }
        return (result, ticket)
    }

    /// Applies a durable change to the acknowledged value, or undoes every
    /// change in flight when the log failed. Runs on the log's completion
    /// thread, in LSN order.
    private func finish(_ records: [CatalogRecord], durable: Bool, ticket: CommitTicket) {
        copies.withLock { copies in
            if durable {
                for record in records { apply(&copies.acknowledged, record) }
            } else {
                copies.visible = copies.acknowledged
                copies.failed = true
            }
        }
        ticket.complete(durable)
    }
}

/// Start-up cannot bring the catalog up: exit 2 with this line.
package struct CatalogStartError: Error, CustomStringConvertible {
    package var reason: String
    init(_ reason: String) { self.reason = reason }
    package var description: String { reason }
}
