import RoostEngine
import RoostHTTP
import RoostModel

/// The index an app key acts on: the key's app and mode (spec §4: "the key
/// selects the app and the live/test mode"), with the app's settings for the
/// shard to create the index with if the app has no data in that mode yet.
struct IndexScope: Sendable {
    var key: KeyRecord
    var indexKey: IndexKey
    var settings: AppSettings

    /// Returns the scope of `key`; 401 when its app is gone (a deleted app's
    /// keys stop working).
    init(_ key: KeyRecord, catalog: Catalog) throws(APIError) {
        guard let app = catalog.app(key.appID) else { throw APIError.unauthorized }
        self.key = key
        self.indexKey = IndexKey(app: key.appID, mode: key.mode)
        self.settings = app.settings
    }

    /// Returns an outcome that runs `work` in the shard's turn on this scope's
    /// index and, once its mutations are durable, sends the response `work`
    /// handed back (rendered then, off the shard). When the log cannot take
    /// the mutations the answer is 503 `unavailable` and nothing is acknowledged.
    func run(_ work: @escaping @Sendable (inout AppIndex) -> IndexAnswer) -> RouteOutcome {
        IndexScope.outcome(indexKey: indexKey, settings: settings, work)
    }

    /// The one way a route answers from an index (native and compatibility
    /// routes alike): `work` runs in the shard's turn; its answer is rendered
    /// and sent once its mutations are durable, or 503 when they cannot be.
    static func outcome(
        indexKey: IndexKey, settings: AppSettings, _ work: @escaping @Sendable (inout AppIndex) -> IndexAnswer
    ) -> RouteOutcome {
        let custom = CustomWork { index in
            let answer = work(&index)
            return (answer, answer.mutations)
        }
        return .command(indexKey, settings: settings, .custom(custom)) { outcome in
            guard case .custom(let value) = outcome, let answer = value as? IndexAnswer else {
                preconditionFailure("custom work answered \(outcome)")
            }
            return answer.render()
        }
    }

    /// Returns an outcome that runs `command` on this scope's index and
    /// renders its outcome on the request's loop.
    func command(_ command: Command, render: @escaping @Sendable (Outcome) -> HTTPResponse) -> RouteOutcome {
        .command(indexKey, settings: settings, command, render: render)
    }
}

/// What a job on one index hands back: the mutations to log and the answer to
/// render once they are durable.
struct IndexAnswer: Sendable {
    var mutations: [Mutation]
    var render: @Sendable () -> HTTPResponse

    init(mutations: [Mutation] = [], render: @escaping @Sendable () -> HTTPResponse) {
        self.mutations = mutations
        self.render = render
    }

    /// An answer that changes nothing and reports a model rejection.
    static func rejected(_ rejection: RegistryRejection) -> IndexAnswer {
        IndexAnswer { APIError(rejection).response }
    }
}

extension Authenticator {
    /// Returns the scope of a request's app key holding `capability`: 401 for
    /// a missing or unknown key, 403 for the operator, a mobile key or a key
    /// without the capability.
    func scope(_ head: HTTPRequestHead, _ capability: Capability, catalog: Catalog) throws(APIError) -> IndexScope {
        let key = try authenticate(head).requireAppKey(capability)
        return try IndexScope(key, catalog: catalog)
    }
}

/// Returns the timestamp of a request's one wall-clock read.
func requestTime(_ context: RequestContext) -> Timestamp {
    Timestamp(millisecondsSinceEpoch: context.nowMilliseconds)
}
