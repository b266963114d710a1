import RoostModel

/// What a job hands back from inside the shard's turn: the mutations it made
/// (logged before the answer) and the continuation that answers.
package struct JobResult: Sendable {
    package var mutations: [Mutation]
    /// Called once the mutations are durable (`true`), or when the log could
    /// not take them (`false`: answer 503, nothing acknowledged). For a job
    /// without mutations it runs after every earlier write of the shard is
    /// durable, so no answer shows data that could still be lost.
    package var deliver: @Sendable (_ durable: Bool) -> Void

    package init(mutations: [Mutation], deliver: @escaping @Sendable (_ durable: Bool) -> Void) {
        self.mutations = mutations
        self.deliver = deliver
    }
}

/// One unit of work for a shard.
package enum ShardJob: Sendable {
    /// Runs `work` on the index of `key`, creating it with `settings` if the
    /// app has no data in that mode yet. `work` runs in the shard's turn and
    /// must not block.
    case index(key: IndexKey, settings: AppSettings, work: @Sendable (inout AppIndex) -> JobResult)
    /// Drops both modes of an app and reports how many devices went with them.
    case removeApp(AppID, deliver: @Sendable (_ devicesRemoved: Int, _ durable: Bool) -> Void)

    /// The index the job runs on; nil for a job on a whole app.
    package var indexKey: IndexKey? {
        if case .index(let key, _, _) = self { return key }
        return nil
    }

    /// The app the job belongs to (which decides its shard).
    package var app: AppID {
        switch self {
        case .index(let key, _, _): key.app
        case .removeApp(let app, _): app
        }
    }
}
