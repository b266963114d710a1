import RoostModel
import RoostPlatform

/// The engine's façade for code outside the loops (tools, tests, start-up):
/// async forms of the commands requests submit through their `ShardLoop`.
package final class Registry: Sendable {
    package let shardSet: ShardSet

    /// False once the log has failed: writes are refused before they are
    /// applied (503), reads go on.
    package var acceptsWrites: Bool { shardSet.log.acceptsWrites }

    /// A registry over its own shards and loops, driven by its own threads.
    /// `tokenRate` is each shard's per-token registration limit, timed by `clock`.
    /// `changesRetained` is each index's change-feed retention.
    package init(
        shardCount: Int, loopCount: Int = 1, log: any MutationLog, tokenRate: RateLimit = Shard.tokenRegistrationRate,
        clock: any MonotonicClock = SystemMonotonicClock(), changesRetained: Int = ChangeFeed.retainedDefault
    ) {
        shardSet = ShardSet(
            shardCount: shardCount, loopCount: loopCount, log: log,
            tables: Array(repeating: IndexTable(changesRetained: changesRetained), count: shardCount),
            tokenRate: tokenRate, clock: clock)
    }

    package init(shardSet: ShardSet) {
        self.shardSet = shardSet
    }

    /// Runs `command` on the index of `key` and returns its outcome once its
    /// mutations are acknowledged; nil when the log could not take them.
    package func execute(_ key: IndexKey, settings: AppSettings = .defaults, _ command: Command) async -> Outcome? {
        await shardSet.perform(.index(key, settings: settings, command))
    }

    /// Runs `body` on the index of `key` in the shard's turn and returns its
    /// value once its mutations are acknowledged; nil when the log could not
    /// take them. Tools and tests only (`Command.custom`): no route may use
    /// it, and the request path asserts that its work holds only value
    /// commands (`RoostService`).
    package func perform<Value: Sendable>(
        _ key: IndexKey, settings: AppSettings = .defaults,
        _ body: @escaping @Sendable (inout AppIndex) -> (value: Value, mutations: [Mutation])
    ) async -> Value? {
        let work = CustomWork { index in
            let (value, mutations) = body(&index)
            return (value, mutations)
        }
        guard case .custom(let value)? = await execute(key, settings: settings, .custom(work)) else { return nil }
        guard let typed = value as? Value else { preconditionFailure("custom work returned \(type(of: value))") }
        return typed
    }

    /// Removes both modes of `app`; returns the number of devices removed, or
    /// nil when the log could not take the record.
    package func removeApp(_ app: AppID) async -> Int? {
        guard case .appRemoved(let devices)? = await shardSet.perform(.removeApp(app)) else { return nil }
        return devices
    }
}
