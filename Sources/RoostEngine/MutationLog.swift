import RoostPlatform
import RoostStorage

/// Where the engine's records go before an answer is released. The storage
/// layer implements it with the write-ahead log. An append returns the LSN
/// to wait for and the waiting loop watches `acknowledgedThrough` (values,
/// no callbacks).
package protocol MutationLog: Sendable {
    /// Appends records (each one logical after-image) and returns the last
    /// one's LSN: an answer that depends on them waits until
    /// `acknowledgedThrough` reaches it. Nil when the log cannot take them
    /// (then nothing of this append is acknowledged).
    func append(_ records: [[UInt8]]) -> LogSequenceNumber?

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
}

/// A log that keeps nothing: every append is acknowledged at once. For tests
/// and in-process benchmarks of the engine alone; the server never uses it.
package struct VolatileLog: MutationLog {
    package init() {}

    package func append(_ records: [[UInt8]]) -> LogSequenceNumber? { LogSequenceNumber(1) }

    package var appendedThrough: LogSequenceNumber { LogSequenceNumber(1) }
    package var acknowledgedThrough: LogSequenceNumber { LogSequenceNumber(1) }
    package var acceptsWrites: Bool { true }

    package func wakeWhenAcknowledged(_ lsn: LogSequenceNumber, _ executor: LoopExecutor) {
        executor.wake()
    }
}
