import RoostPlatform
import RoostStorage
import Synchronization

/// Where the engine's records go before an answer is released. The storage
/// layer implements it with the write-ahead log. An append returns the LSN
/// to wait for and the waiting loop watches `acknowledgedThrough` (values,
/// no callbacks).
package protocol MutationLog: Sendable {
    /// Appends records (each one logical after-image) and returns the last
    /// one's LSN — the records get consecutive LSNs, one each, and the
    /// change feed takes a device change's position from them (spec §9) —
    /// an answer that depends on them waits until
    /// `acknowledgedThrough` reaches it. Nil when the log cannot take them
    /// (then nothing of this append is acknowledged).
    func append(_ records: [[UInt8]]) -> LogSequenceNumber?

    /// Appends as `append` does, but the records may wait for `writeHeld()`
    /// to be written: a loop appends its shards' turns this way and calls
    /// `writeHeld()` once at the end of the round, before it releases
    /// answers (one write for the round, on the loop's thread when the log
    /// allows it).
    func appendHeld(_ records: [[UInt8]]) -> LogSequenceNumber?

    /// Writes what `appendHeld` left waiting, or hands it to the log's own
    /// writer (`WriteAheadLog.writeHeld`).
    func writeHeld()

    /// The LSN of the last record appended so far: a read waits for it, so
    /// that it never shows a write that could still be lost.
    var appendedThrough: LogSequenceNumber { get }

    /// Every record at or before this LSN is acknowledged under the policy.
    var acknowledgedThrough: LogSequenceNumber { get }

    /// False once the log can no longer take writes (a failed write or
    /// fdatasync): the API then refuses a write before applying it in memory.
    var acceptsWrites: Bool { get }

    /// Wakes `executor` once `acknowledgedThrough >= lsn` or the log failed.
    func wakeWhenAcknowledged(_ lsn: LogSequenceNumber, _ executor: LoopExecutor)

    /// False on a cluster follower (`ClusterLog`): its state changes only by
    /// the leader's records, so a shard answers reads and refuses a write
    /// before applying it (503), and the catalog takes no change.
    var takesLocalWrites: Bool { get }

    /// Records through this LSN not acknowledged yet are given up on for
    /// now (a cluster leader whose etcd did not confirm them within
    /// `--etcd-timeout-ms`, spec §13.7): an answer waiting for one is 503;
    /// they may still be acknowledged later (a retry with the same
    /// idempotency key tells). 0 on one node.
    var unconfirmedThrough: LogSequenceNumber { get }
}

extension MutationLog {
    /// A log that writes each append by itself holds nothing back.
    package func appendHeld(_ records: [[UInt8]]) -> LogSequenceNumber? { append(records) }
    package func writeHeld() {}
    /// Every log of one node takes the writes of its shards.
    package var takesLocalWrites: Bool { true }
    /// One node's log never gives up on a record it has not failed.
    package var unconfirmedThrough: LogSequenceNumber { LogSequenceNumber(0) }
}

/// A log that keeps nothing: every append is acknowledged at once. For tests
/// and in-process benchmarks of the engine alone; the server never uses it.
package struct VolatileLog: MutationLog {
    /// The LSN of the last record appended (0: none): one per record, as the
    /// real log counts them, so that change-feed positions grow.
    private let last = VolatileLogCounter()

    package init() {}

    package func append(_ records: [[UInt8]]) -> LogSequenceNumber? {
        LogSequenceNumber(last.value.add(UInt64(records.count), ordering: .relaxed).newValue)
    }

    package var appendedThrough: LogSequenceNumber { LogSequenceNumber(last.value.load(ordering: .relaxed)) }
    package var acknowledgedThrough: LogSequenceNumber { appendedThrough }
    package var acceptsWrites: Bool { true }

    package func wakeWhenAcknowledged(_ lsn: LogSequenceNumber, _ executor: LoopExecutor) {
        executor.wake()
    }
}

/// The record count a `VolatileLog` and its copies share.
private final class VolatileLogCounter: Sendable {
    let value = Atomic<UInt64>(0)
}
