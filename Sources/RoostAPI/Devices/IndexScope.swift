import RoostEngine
import RoostHTTP
import RoostModel

/// The index an app key acts on: the key's app and mode (spec §4: "the key
/// selects the app and the live/test mode"), with the app's settings for the
/// shard to create the index with if the app has no data in that mode yet.
struct IndexScope: Sendable {
    var indexKey: IndexKey
    var settings: AppSettings

    /// Returns the scope of `key`; 401 when its app is gone (a deleted app's
    /// keys stop working). Only the key's app and mode are kept, and only the
    /// app's settings read: a copy of the key and of the app record retained
    /// their strings and sets on every request (issue 25).
    init(_ key: borrowing KeyRecord, catalog: Catalog) throws(APIError) {
        guard let settings = catalog.settings(of: key.appID) else { throw APIError.unauthorized }
        self.indexKey = IndexKey(app: key.appID, mode: key.mode)
        self.settings = settings
    }

    /// Returns an outcome that runs `command` on this scope's index and
    /// renders its outcome on the request's loop.
    func command(_ command: consuming Command, render: @escaping @Sendable (Outcome) -> HTTPResponse) -> RouteOutcome {
        .command(indexKey, settings: settings, command, render: render)
    }

    /// `command(_:render:)` rendered into the loop's kept arrays (`HTTPAnswerBuffers`).
    func command(
        _ command: consuming Command, render: @escaping @Sendable (Outcome, inout HTTPAnswerBuffers) -> HTTPResponse
    ) -> RouteOutcome {
        .command(indexKey, settings: settings, command, render: render)
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
