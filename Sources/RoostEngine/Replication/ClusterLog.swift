import RoostPlatform
import RoostStorage
import Synchronization

/// The log of a cluster node (spec §13), the one its shards and catalog
/// append to, whatever its role.
///
/// - As a **follower** it takes no append from them (nil: a write that
///   reached a shard on a follower is refused, 503); the `FollowerApplier`
///   writes the leader's records to `local` at the leader's LSNs
///   (`appendReplicated`), and they are acknowledged as `local` acknowledges them.
/// - As the **leader** (`promote`) every append goes to this node's own log
///   (`local`, which gives the LSNs), and the same records, in LSN order, into
///   an outbox the replicator takes as the next group-log batch. A record is
///   acknowledged only once the group log committed it (`commit(through:)`,
///   after etcd's answer) **and** `local` acknowledged it under `--fsync`:
///   `acknowledgedThrough` is the smaller of the two, so every answer, device
///   write or catalog change, waits for both (spec §13.2).
/// - **Closed** (deposed, §13.5) it takes nothing more and acknowledges
///   nothing after the last commit.
///
/// Threads: shards and the catalog append from the loops; the replicator's
/// thread takes the outbox and reports commits. Values cross, no callbacks:
/// a waiting loop is woken (`LoopExecutor.wake`) and looks again.
package final class ClusterLog: MutationLog {
    /// What the node is to its log.
    package enum Role: Sendable, Equatable {
        case follower
        case leader
        case closed
    }

    /// The records waiting for the replicator, and the loops to wake on a commit.
    private struct Outbox {
        var role = Role.follower
        var records: [ReplicatedRecord] = []
        var bytes = 0
        var wakeRequests: [(executor: LoopExecutor, through: UInt64)] = []
        /// Appends refused because this node did not lead.
        var refusedAsFollower = 0
        /// Signalled when records arrive in an empty outbox: the replicator's wake-up.
        var replicatorWakeup: EventFD?
    }

    /// Outbox bytes beyond which appends are refused (503): the group log
    /// has stopped taking batches and memory must not grow without bound.
    /// 64 MiB: about 30 s of the peak write rate of docs/performance.md.
    package static let outboxBytesMax = 64 << 20

    package let local: any MutationLog
    /// Each index's position as its shard published it (`PositionBoard`).
    package let positions = PositionBoard()
    private let outbox = Mutex(Outbox())
    /// The last LSN the group log committed as this node knows it (0: none);
    /// a follower's whole log is committed (it holds only what it applied).
    private let committed = Atomic<UInt64>(0)
    /// Set while this node leads (read lock-free on the answer path).
    private let leading = Atomic<Bool>(false)
    private let leader = Mutex<String?>(nil)
    /// Set once deposed (read lock-free: every shard turn asks `acceptsWrites`).
    private let isClosed = Atomic<Bool>(false)
    /// Records through this LSN the group log did not confirm in time (`markUnconfirmed`).
    private let unconfirmed = Atomic<UInt64>(0)

    /// A follower's log over `local`.
    package init(local: any MutationLog) {
        self.local = local
    }

    /// The role now.
    package var role: Role { outbox.withLock { $0.role } }

    /// The leader's URL as this node last learned it (nil: none known, or
    /// this node leads), for `Roost-Leader` (spec §13.4).
    package var leaderURL: String? { leader.withLock { $0 } }

    /// Records the leader this node follows now (nil: none known).
    package func noteLeader(url: String?) {
        leader.withLock { $0 = url }
    }

    /// Appends refused because this node did not lead (a write that should
    /// have been refused before it reached a shard).
    package var appendsRefusedAsFollower: Int { outbox.withLock { $0.refusedAsFollower } }

    /// Makes this follower the leader: every record of `local` is in the
    /// group log (the new leader read the group log to its end and applied
    /// it), and appends from now on go to the outbox.
    package func promote() {
        outbox.withLock { outbox in
            precondition(outbox.role == .follower, "promoting a \(outbox.role) log")
            precondition(outbox.records.isEmpty, "a follower's outbox holds records")
            committed.store(local.appendedThrough.rawValue, ordering: .releasing)
            outbox.role = .leader
            leading.store(true, ordering: .releasing)
        }
    }

    /// A follower's log was compared with the group log at start (and cut
    /// where etcd did not hold it): every record through `lsn` is committed.
    /// Until then a follower that recovered records counts none of them
    /// committed, and a read (or a replicated apply, which answers as a read)
    /// would wait for them forever.
    package func markCommitted(through lsn: LogSequenceNumber) {
        outbox.withLock { outbox in
            precondition(outbox.role == .follower, "a follower's commit noted on a \(outbox.role) log")
            precondition(lsn <= local.appendedThrough, "committed \(lsn) beyond the local log's end")
            if lsn.rawValue > committed.load(ordering: .acquiring) {
                committed.store(lsn.rawValue, ordering: .releasing)
            }
        }
        wake { $0.through <= lsn.rawValue }
    }

    /// Writes records the group log committed (a follower's, from the
    /// `FollowerApplier`) to `local`; returns the last LSN, nil when `local`
    /// refused them. They are committed: nothing waits for the group log.
    package func appendReplicated(_ records: [[UInt8]]) -> LogSequenceNumber? {
        outbox.withLock { outbox -> LogSequenceNumber? in
            precondition(outbox.role == .follower, "replicated records appended to a \(outbox.role) log")
            guard let last = local.append(records) else { return nil }
            committed.store(last.rawValue, ordering: .releasing)
            return last
        }
    }

    package func append(_ records: [[UInt8]]) -> LogSequenceNumber? {
        precondition(!records.isEmpty, "an append of no records")
        let (appended, wake) = outbox.withLock { outbox -> (LogSequenceNumber?, EventFD?) in
            // Under the outbox's lock, so that the outbox is in LSN order.
            guard outbox.role == .leader else {
                if outbox.role == .follower { outbox.refusedAsFollower += 1 }
                return (nil, nil)
            }
            guard outbox.bytes < Self.outboxBytesMax, let last = local.append(records) else { return (nil, nil) }
            let wasEmpty = outbox.records.isEmpty
            var lsn = last.rawValue - UInt64(records.count) + 1
            for payload in records {
                outbox.records.append(ReplicatedRecord(lsn: LogSequenceNumber(lsn), payload: payload))
                outbox.bytes += payload.count
                lsn += 1
            }
            return (last, wasEmpty ? outbox.replicatorWakeup : nil)
        }
        wake?.signal()
        return appended
    }

    /// Signals `wakeup` whenever records arrive in an empty outbox (the
    /// replicator's thread waits on it). Set once, before the node leads.
    package func wakeOnAppend(_ wakeup: EventFD) {
        outbox.withLock { outbox in
            precondition(outbox.replicatorWakeup == nil, "the outbox already wakes a replicator")
            outbox.replicatorWakeup = wakeup
        }
    }

    /// Payload bytes waiting in the outbox (the replicator has not taken them).
    package var outboxBytes: Int { outbox.withLock { $0.bytes } }

    package var appendedThrough: LogSequenceNumber { local.appendedThrough }

    package var acknowledgedThrough: LogSequenceNumber {
        min(local.acknowledgedThrough, committedThrough)
    }

    /// Only while this node leads (a closed log refuses every append anyway).
    package var takesLocalWrites: Bool { leading.load(ordering: .acquiring) || isClosed.load(ordering: .acquiring) }

    package var unconfirmedThrough: LogSequenceNumber {
        LogSequenceNumber(unconfirmed.load(ordering: .acquiring))
    }

    /// The group log has not confirmed the records through `lsn` within
    /// `--etcd-timeout-ms` (spec §13.7): the answers waiting for them are
    /// 503 now; the records stay in the outbox's hands and may still commit.
    package func markUnconfirmed(through lsn: LogSequenceNumber) {
        precondition(lsn <= local.appendedThrough, "unconfirmed \(lsn) was never appended here")
        guard lsn.rawValue > unconfirmed.load(ordering: .acquiring) else { return }
        unconfirmed.store(lsn.rawValue, ordering: .releasing)
        wake { $0.through <= lsn.rawValue }
    }

    /// The last LSN the group log committed.
    package var committedThrough: LogSequenceNumber { LogSequenceNumber(committed.load(ordering: .acquiring)) }

    /// False once `local` failed or this node was deposed. A follower
    /// accepts writes in this sense (its reads are served as usual); the API
    /// refuses writes sent to it before they reach a shard (503 `not_leader`).
    package var acceptsWrites: Bool {
        local.acceptsWrites && !isClosed.load(ordering: .acquiring)
    }

    package func wakeWhenAcknowledged(_ lsn: LogSequenceNumber, _ executor: LoopExecutor) {
        // Each part wakes the loop once it is done, and only a part not done
        // yet is asked: a part that is done wakes at once, and a loop woken
        // while the other part is still pending would ask again and again (a
        // busy loop).
        let localDone = local.acknowledgedThrough >= lsn
        if !localDone { local.wakeWhenAcknowledged(lsn, executor) }
        let due = outbox.withLock { outbox -> Bool in
            if outbox.role == .closed || unconfirmed.load(ordering: .acquiring) >= lsn.rawValue { return true }
            if committed.load(ordering: .acquiring) >= lsn.rawValue { return localDone }
            if let at = outbox.wakeRequests.firstIndex(where: { $0.executor === executor }) {
                outbox.wakeRequests[at].through = min(outbox.wakeRequests[at].through, lsn.rawValue)
            } else {
                outbox.wakeRequests.append((executor, lsn.rawValue))
            }
            return false
        }
        if due { executor.wake() }
    }

    // MARK: - The replicator's side

    /// Takes the records appended since the last call, in LSN order, at
    /// most `bytesMax` of payload and `recordsMax` records (at least one
    /// record when any waits): the next group-log batch. Empty when nothing waits.
    package func takeBatch(bytesMax: Int, recordsMax: Int = .max) -> [ReplicatedRecord] {
        precondition(bytesMax > 0 && recordsMax > 0, "a batch of at most \(bytesMax) bytes, \(recordsMax) records")
        return outbox.withLock { outbox in
            var taken = 0
            var bytes = 0
            while taken < outbox.records.count, taken < recordsMax {
                let size = outbox.records[taken].payload.count
                if taken > 0 && bytes + size > bytesMax { break }
                bytes += size
                taken += 1
            }
            let batch = Array(outbox.records[..<taken])
            outbox.records.removeFirst(taken)
            outbox.bytes -= bytes
            return batch
        }
    }

    /// Records that the group log committed every record through `lsn`, and
    /// wakes the loops whose answers that releases (with the local log's
    /// acknowledgement they may still wait for; they look again).
    package func commit(through lsn: LogSequenceNumber) {
        precondition(leading.load(ordering: .acquiring), "a commit reported to a log that does not lead")
        precondition(lsn <= local.appendedThrough, "committed \(lsn) was never appended here")
        let previous = committed.load(ordering: .acquiring)
        precondition(lsn.rawValue >= previous, "the committed LSN went back from \(previous) to \(lsn)")
        committed.store(lsn.rawValue, ordering: .releasing)
        wake { $0.through <= lsn.rawValue }
    }

    /// Stops taking appends for good (deposed, spec §13.5): nothing appended
    /// and not committed is ever acknowledged; waiting loops are woken (a
    /// write that was not committed is answered 503 as the log refuses it).
    package func close() {
        outbox.withLock { outbox in
            outbox.role = .closed
            leading.store(false, ordering: .releasing)
            isClosed.store(true, ordering: .releasing)
        }
        wake { _ in true }
    }

    private func wake(where isDue: ((executor: LoopExecutor, through: UInt64)) -> Bool) {
        let due = outbox.withLock { outbox -> [LoopExecutor] in
            var due: [LoopExecutor] = []
            outbox.wakeRequests.removeAll { request in
                guard isDue(request) else { return false }
                due.append(request.executor)
                return true
            }
            return due
        }
        for executor in due { executor.wake() }
    }
}
