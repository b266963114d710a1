import RoostModel
import RoostStorage
import Synchronization

/// What a shard is asked to do: a command on one (app, mode) index, or the
/// removal of a whole app. A value: it crosses from the loop that decoded it
/// to the loop that runs the shard.
package enum ShardWork: Sendable {
    /// Runs `command` on the index of `key`, creating it with `settings` if
    /// the app has no data in that mode yet.
    case index(IndexKey, settings: AppSettings, Command)
    /// Drops both modes of an app (`Outcome.appRemoved`).
    case removeApp(AppID)
    /// No shard work: answers `Outcome.logAcknowledged` once the log has
    /// acknowledged this LSN (a catalog change appended by the route itself).
    /// Handled by the loop it is submitted to.
    case awaitLog(LogSequenceNumber)
    /// Applies index records another node logged (a cluster follower, spec
    /// §13), all of `app`'s, in LSN order, through `Replayer.apply`: the
    /// state, the change feed and its waiters change as the leader's did.
    /// Answers `Outcome.logAcknowledged`; logs nothing (the follower wrote
    /// the records to its log at the same LSNs before).
    case replicate(AppID, [ReplicatedRecord])

    /// The app the work belongs to (which decides its shard); nil for work
    /// that needs no shard.
    package var app: AppID? {
        switch self {
        case .index(let key, _, _): key.app
        case .removeApp(let app), .replicate(let app, _): app
        case .awaitLog: nil
        }
    }
}

/// One record of the group log as a follower applies it: its LSN (the same
/// on every node) and its `EngineRecord` bytes.
package struct ReplicatedRecord: Sendable, Equatable {
    package var lsn: LogSequenceNumber
    package var payload: [UInt8]

    package init(lsn: LogSequenceNumber, payload: [UInt8]) {
        self.lsn = lsn
        self.payload = payload
    }
}

/// Who waits for a command's outcome.
package enum CommandOrigin: Sendable {
    /// A request read by engine loop `loop`; its receiver finds the request by `ticket`.
    case loop(Int, ticket: UInt64)
    /// Part `position` of work submitted from outside the loops (tools,
    /// tests, start-up, bulk imports): the caller resumes once every part is in.
    case caller(CallerWaiter, position: Int)
}

/// One unit of work for a shard and where its outcome goes.
package struct ShardCommand: Sendable {
    package var work: ShardWork
    package var origin: CommandOrigin

    package init(_ work: ShardWork, origin: CommandOrigin) {
        self.work = work
        self.origin = origin
    }
}

/// A command's outcome on its way back to its origin: released once the log
/// has acknowledged `waitsFor` (every record the outcome depends on); nil
/// when the log refused the records (answered 503 at once).
package struct ShardOutcome: Sendable {
    package var origin: CommandOrigin
    package var outcome: Outcome
    package var waitsFor: LogSequenceNumber?
    /// The newest record the answer can show: a write's own records, or the
    /// last logged change of the index a read looked at (0: none). If the log
    /// fails before acknowledging it, the answer is 503, not the outcome: a
    /// write so answered was not applied (spec §2), so no read may show it.
    /// A read that depends only on acknowledged records is still answered.
    package var dependsOn: LogSequenceNumber

    /// An outcome answered 503 at once (`waitsFor` nil): the log refused the
    /// records, or the answer could show a change it never acknowledged.
    static func unavailable(_ origin: CommandOrigin) -> ShardOutcome {
        ShardOutcome(origin: origin, outcome: .logAcknowledged, waitsFor: nil, dependsOn: LogSequenceNumber(0))
    }
}

/// What the origin of a command receives: the outcome once its records are
/// acknowledged, or `nil` when the log could not take them (answer 503).
package typealias Acknowledged = Outcome?

/// Receives the outcomes of the commands a loop's requests submitted, on that
/// loop's thread, once each is acknowledged (the API renders them there).
package protocol OutcomeReceiver: AnyObject, Sendable {
    /// Called on the loop thread with each finished command's ticket. Takes
    /// the outcomes out (moved, not copied) and leaves the array empty.
    func receive(_ outcomes: inout [(ticket: UInt64, outcome: Acknowledged)])
}

/// The waiting end of work submitted from outside the loops: resumes its
/// caller with every outcome, in order, once all are in.
package final class CallerWaiter: Sendable {
    private let parts: Mutex<(outcomes: [Acknowledged], missing: Int)>
    private let continuation: CheckedContinuation<[Acknowledged], Never>

    package init(count: Int, _ continuation: CheckedContinuation<[Acknowledged], Never>) {
        precondition(count > 0, "a batch of no commands")
        parts = Mutex((Array(repeating: nil, count: count), count))
        self.continuation = continuation
    }

    func deliver(_ position: Int, _ outcome: Acknowledged) {
        let finished = parts.withLock { parts -> [Acknowledged]? in
            parts.outcomes[position] = outcome
            parts.missing -= 1
            precondition(parts.missing >= 0, "batch part \(position) delivered twice")
            return parts.missing == 0 ? parts.outcomes : nil
        }
        if let finished { continuation.resume(returning: finished) }
    }
}
