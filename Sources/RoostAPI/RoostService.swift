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

    /// Opens the service over a data directory: loads the catalog
    /// (`DIR/catalog.json`). Throws when it exists but cannot be read.
    public convenience init(dataDirectory: String, adminKey: String) throws {
        let store = CatalogStore(path: dataDirectory + "/catalog.json")
        let clock = SystemClock()
        let catalog = Catalog(state: try store.load(), store: store, clock: clock)
        self.init(catalog: catalog, adminKey: adminKey, clock: clock)
    }

    package init(catalog: Catalog, adminKey: String, clock: any APIClock) {
        let authenticator = Authenticator(adminKey: adminKey, catalog: catalog)
        let apps = AppRoutes(catalog: catalog, authenticator: authenticator)
        self.router = Router([Route(.get, "/healthz", RoostService.health)] + apps.routes)
        self.clock = clock
    }

    public func bodyLimitBytes(for head: HTTPRequestHead) -> Int {
        RoostService.jsonBodyBytesMax
    }

    public func respond(to request: HTTPRequest, sink: any HTTPReplySink) -> HTTPResponderResult {
        .respond(handle(request))
    }

    public func response(for failure: HTTPRequestFailure) -> HTTPResponse {
        APIError.from(failure).response
    }

    /// Routes and answers one request; every thrown error becomes its envelope.
    package func handle(_ request: HTTPRequest) -> HTTPResponse {
        do {
            let (route, parameters) = try router.match(method: request.head.method, path: request.head.path)
            let context = RequestContext(
                request: request, parameters: parameters, nowMilliseconds: clock.wallMilliseconds())
            return try route.handler(context)
        } catch {
            return error.response
        }
    }

    private static let healthBody = Array(#"{"status":"ok"}"#.utf8)

    private static func health(_ context: RequestContext) throws(APIError) -> HTTPResponse {
        HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: healthBody)
    }
}
