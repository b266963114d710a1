import RoostModel

/// The engine's façade: submits work to the shard that owns an app, and offers
/// an async form for tools, tests and benchmarks.
package final class Registry: Sendable {
    package let shardSet: ShardSet

    /// False once the log has failed: writes are refused before they are
    /// applied (503), reads go on.
    package var acceptsWrites: Bool { shardSet.log.acceptsWrites }

    package init(shardCount: Int, log: any MutationLog) {
        shardSet = ShardSet(shardCount: shardCount, log: log)
    }

    package init(shardSet: ShardSet) {
        self.shardSet = shardSet
    }

    /// Queues jobs; answers come back through each job's `deliver`.
    package func submit(_ jobs: [ShardJob]) {
        shardSet.submit(jobs)
    }

    /// Runs `body` on the index of `key` and returns its value once its
    /// mutations are durable; nil when the log could not take them.
    package func perform<Value: Sendable>(
        _ key: IndexKey, settings: AppSettings = .defaults,
        _ body: @escaping @Sendable (inout AppIndex) -> (value: Value, mutations: [Mutation])
    ) async -> Value? {
        await withCheckedContinuation { continuation in
            shardSet.submit(
                .index(
                    key: key, settings: settings,
                    work: { index in
                        let (value, mutations) = body(&index)
                        return JobResult(mutations: mutations) { durable in
                            continuation.resume(returning: durable ? value : nil)
                        }
                    }))
        }
    }

    /// Removes both modes of `app`; returns the number of devices removed, or
    /// nil when the log could not take the record.
    package func removeApp(_ app: AppID) async -> Int? {
        await withCheckedContinuation { continuation in
            shardSet.submit(
                .removeApp(app) { removed, durable in continuation.resume(returning: durable ? removed : nil) })
        }
    }
}
