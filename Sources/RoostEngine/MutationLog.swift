/// Where the engine's records go before an answer is released. The storage
/// layer implements it with the write-ahead log; `completion` is called once
/// the records are durable under the server's `--fsync` policy, in the order
/// the appends were made.
package protocol MutationLog: Sendable {
    /// Appends records (each one logical after-image) and calls `completion`
    /// when they are durable, or with `false` when the log cannot take them
    /// (then nothing of this append is acknowledged). An empty append is a
    /// barrier: its completion runs after every earlier append's.
    func append(_ records: [[UInt8]], completion: @escaping @Sendable (_ durable: Bool) -> Void)

    /// False once the log can no longer take writes (a failed write or
    /// fdatasync): the API then refuses a write before applying it in memory.
    var acceptsWrites: Bool { get }
}

/// A log that keeps nothing: every append is "durable" at once. For tests and
/// in-process benchmarks of the engine alone; the server never uses it.
package struct VolatileLog: MutationLog {
    package init() {}

    package func append(_ records: [[UInt8]], completion: @escaping @Sendable (_ durable: Bool) -> Void) {
        completion(true)
    }

    package var acceptsWrites: Bool { true }
}
