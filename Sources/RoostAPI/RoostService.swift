import RoostEngine
import RoostHTTP
import RoostJSON
import RoostPlatform

/// The application behind the HTTP server: routes every request of spec
/// §1–3 to its handler and renders every error in the envelope of spec §2.
public final class RoostService: HTTPResponder {
    /// The default largest JSON body (spec §2).
    public static let jsonBodyBytesMax = 64 * 1024

    private let router: Router
    private let clock: any APIClock
    package let registry: Registry
    package let catalog: Catalog

    /// Opens the service over a data directory: loads the catalog
    /// (`DIR/catalog.json`; throws when it exists but cannot be read) and the
    /// identity signing keys (`DIR/identity-keys.json`, created on first start),
    /// and serves devices from `registry` (the recovered engine).
    package convenience init(dataDirectory: String, adminKey: String, registry: Registry) throws {
        let store = CatalogStore(path: dataDirectory + "/catalog.json")
        let clock = SystemClock()
        let catalog = Catalog(state: try store.load(), store: store, clock: clock)
        let identityKeys = try IdentityKeyStore.open(
            path: dataDirectory + "/identity-keys.json", now: clock.wallMilliseconds())
        self.init(
            catalog: catalog, adminKey: adminKey, clock: clock, registry: registry, identityKeys: identityKeys)
    }

    /// `identityKeys` nil keeps fresh signing keys in memory (tests).
    package init(
        catalog: Catalog, adminKey: String, clock: any APIClock, registry: Registry,
        identityKeys: IdentityKeyStore? = nil
    ) {
        self.registry = registry
        self.catalog = catalog
        let authenticator = Authenticator(adminKey: adminKey, catalog: catalog)
        let apps = AppRoutes(catalog: catalog, authenticator: authenticator, registry: registry)
        let keys = identityKeys ?? IdentityKeyStore.inMemory(now: clock.wallMilliseconds())
        let compat =
            BaruaRoutes(catalog: catalog, authenticator: authenticator).routes
            + NativeNotifyRoutes(catalog: catalog).routes
            + ConnectRoutes(catalog: catalog, authenticator: authenticator, keys: keys).routes
        self.router = Router(
            [Route(.get, "/healthz", RoostService.health)] + apps.routes
                + NativeRoutes(catalog: catalog, authenticator: authenticator, registry: registry).routes + compat)
        self.clock = clock
    }

    public func bodyLimitBytes(for head: HTTPRequestHead) -> Int {
        router.bodyLimitBytes(path: head.path) ?? RoostService.jsonBodyBytesMax
    }

    public func respond(to request: HTTPRequest, sink: any HTTPReplySink) -> HTTPResponderResult {
        switch route(request) {
        case .response(let response):
            return .respond(response)
        case .deferred(let makeJobs):
            if let refusal = refusalWhileLogFailed(request.head.method) { return .respond(refusal) }
            registry.submit(makeJobs(sink))
            return .deferred
        }
    }

    /// 503 for a write once the log has failed, before anything is applied in
    /// memory; reads (GET, HEAD) are still served.
    private func refusalWhileLogFailed(_ method: HTTPMethod) -> HTTPResponse? {
        guard !registry.acceptsWrites, method != .get, method != .head else { return nil }
        return APIError.logUnavailable.response
    }

    public func response(for failure: HTTPRequestFailure) -> HTTPResponse {
        APIError.from(failure).response
    }

    /// Routes one request; every thrown error becomes its envelope.
    package func route(_ request: HTTPRequest) -> RouteOutcome {
        do {
            let (route, parameters) = try router.match(method: request.head.method, path: request.head.path)
            let context = RequestContext(
                request: request, parameters: parameters, nowMilliseconds: clock.wallMilliseconds())
            return try route.handler(context)
        } catch {
            return .response(error.response)
        }
    }

    /// Answers one request and waits for a deferred answer (tests and tools;
    /// never on an event loop).
    package func handle(_ request: HTTPRequest) async -> HTTPResponse {
        switch route(request) {
        case .response(let response):
            return response
        case .deferred(let makeJobs):
            if let refusal = refusalWhileLogFailed(request.head.method) { return refusal }
            return await withCheckedContinuation { continuation in
                registry.submit(makeJobs(ContinuationSink(continuation: continuation)))
            }
        }
    }

    private static let healthBody = Array(#"{"status":"ok"}"#.utf8)

    private static func health(_ context: RequestContext) throws(APIError) -> HTTPResponse {
        HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: healthBody)
    }
}

/// A sink that resumes an async caller with the answer (tests and tools).
struct ContinuationSink: HTTPReplySink {
    let continuation: CheckedContinuation<HTTPResponse, Never>

    func send(_ response: HTTPResponse) {
        continuation.resume(returning: response)
    }
}
