import RoostEngine
import RoostHTTP
import RoostModel
import RoostPlatform

/// One piece of a route pattern.
package enum PathPattern: Sendable, Equatable {
    /// A segment that must match byte for byte.
    case literal([UInt8])
    /// A path segment captured for the handler, percent-decoded.
    case parameter
}

/// What a handler receives: the request, its captured path parameters and
/// who its route's `RouteAccess` admitted.
package struct RequestContext: Sendable {
    package var request: HTTPRequest
    package var parameters: [String]
    /// One wall-clock read per request, taken when it was routed.
    package var nowMilliseconds: Int64
    /// Set by `RoostService` from `Authenticator.authorize` before the handler runs.
    var caller: Caller
}

/// How a handler answers: now, or from the outcomes of work for the shard
/// that owns the app, rendered on the request's own loop once the records
/// they depend on are acknowledged.
package enum RouteOutcome: Sendable {
    case response(HTTPResponse)
    /// Work for the engine (values); `answer` runs on the loop that read the
    /// request with the outcomes in order.
    case engine(EngineWork, answer: EngineAnswer)
    /// Work that runs on a task of its own, off the loop, and answers through
    /// the sink (a CSV import: parsing is real work).
    case detached(@Sendable (any HTTPReplySink) -> Void)

    /// A catalog change already applied and appended: answered with
    /// `render()` once its records are acknowledged — the loop waits for
    /// their LSN as for a device write (`ShardWork.awaitLog`) — or 503
    /// `unavailable` if they cannot be.
    static func afterCommit(_ ticket: CommitTicket, _ render: @escaping @Sendable () -> HTTPResponse) -> RouteOutcome {
        switch ticket {
        case .acknowledged: .response(render())
        case .refused: .response(APIError.logUnavailable.response)
        case .pending(let lsn): .engine(EngineWork(.awaitLog(lsn)), answer: .rendering { _ in render() })
        }
    }

    /// One command on one index, its outcome rendered by `render` (503 when
    /// the log could not take its records).
    static func command(
        _ key: IndexKey, settings: AppSettings, _ command: consuming Command,
        render: @escaping @Sendable (Outcome) -> HTTPResponse
    ) -> RouteOutcome {
        .engine(EngineWork(.index(key, settings: settings, command)), answer: .rendering(render))
    }

    /// `command(_:settings:_:render:)` for an answer rendered into the
    /// arrays its loop kept from answers it wrote (`HTTPAnswerBuffers`).
    static func command(
        _ key: IndexKey, settings: AppSettings, _ command: consuming Command,
        render: @escaping @Sendable (Outcome, inout HTTPAnswerBuffers) -> HTTPResponse
    ) -> RouteOutcome {
        .engine(EngineWork(.index(key, settings: settings, command)), answer: .rendering(render))
    }
}

/// How a route answers from its engine outcomes. Called on the loop that
/// read the request (or on the caller's task outside a server), never on a
/// shard: rendering is the loop's work.
package struct EngineAnswer: Sendable {
    /// Receives the outcomes in the order the work was given, or nil when the
    /// log could not take a write among them (nothing was acknowledged).
    package let finish: @Sendable (_ outcomes: [Outcome]?, _ reply: any EngineReply) -> Void

    package init(_ finish: @escaping @Sendable (_ outcomes: [Outcome]?, _ reply: any EngineReply) -> Void) {
        self.finish = finish
    }

    /// Renders the first outcome into the response; 503 when not acknowledged.
    static func rendering(_ render: @escaping @Sendable (Outcome) -> HTTPResponse) -> EngineAnswer {
        EngineAnswer { outcomes, reply in
            reply.sink.send(outcomes.map { render($0[0]) } ?? APIError.logUnavailable.response)
        }
    }

    /// `rendering(_:)` into the arrays the request's loop kept from answers
    /// it wrote (`HTTPReplySink.takeAnswerBuffers`): an answer of a warm
    /// loop allocates neither its body nor its header array (issue 25).
    static func rendering(_ render: @escaping @Sendable (Outcome, inout HTTPAnswerBuffers) -> HTTPResponse)
        -> EngineAnswer
    {
        EngineAnswer { outcomes, reply in
            guard let outcomes else { return reply.sink.send(APIError.logUnavailable.response) }
            var buffers = reply.sink.takeAnswerBuffers()
            reply.sink.send(render(outcomes[0], &buffers))
        }
    }
}

/// What an `EngineAnswer` answers through: the request's sink, and more
/// engine work for the same request (the next slice of an export or an
/// import), answered on the same loop.
package protocol EngineReply: Sendable {
    var sink: any HTTPReplySink { get }
    func submit(_ work: EngineWork, answer: EngineAnswer)
}

/// The shard work of one request, in order: nearly always one item, held
/// inline (an array per request was an allocation, issue 25), or several
/// (an app's both modes, a removal and its catalog record's wait). An array
/// literal makes one from several items.
package struct EngineWork: Sendable, RandomAccessCollection, ExpressibleByArrayLiteral {
    /// The one item (nil when the work is `items`). Two stored properties,
    /// not an enum: an item is read and moved in place, where binding an
    /// enum's payload copied it (every reference of its request retained and
    /// released again: three copies a registration, issue 25).
    private var single: ShardWork?
    /// Several items (empty, which allocates nothing, when the work is `single`).
    private var items: [ShardWork]

    /// One item, inline.
    package init(_ item: ShardWork) {
        single = item
        items = []
    }

    /// Several items (or one, in an array already built).
    package init(_ items: [ShardWork]) {
        precondition(!items.isEmpty, "engine work without items")
        if items.count == 1 {
            single = items[0]
            self.items = []
        } else {
            single = nil
            self.items = items
        }
    }

    package init(arrayLiteral items: ShardWork...) { self.init(items) }

    package var startIndex: Int { 0 }

    package var endIndex: Int { single != nil ? 1 : items.count }

    package subscript(position: Int) -> ShardWork {
        if let single {
            precondition(position == 0, "engine work item \(position) of 1")
            return single
        }
        return items[position]
    }

    /// Whether every item is a value command (no `Command.custom`), looked
    /// at in place (the collection's generic algorithms copy each item).
    package var holdsOnlyValues: Bool {
        if let isValue = single?.isValue { return isValue }
        return items.allSatisfy(\.isValue)
    }

    /// Hands each item to `body` with its position, the work consumed: a
    /// copy of an item retains every reference its request holds.
    package consuming func forEachItem(_ body: (_ position: Int, _ item: consuming ShardWork) -> Void) {
        if let item = single.take() { return body(0, item) }
        var position = 0
        items.moveEach { item in
            body(position, item)
            position += 1
        }
    }
}

/// A handler answers one request or throws an API error.
package typealias RouteHandler = @Sendable (RequestContext) throws(APIError) -> RouteOutcome

/// A method, a path pattern, who may call it, and its handler.
package struct Route: Sendable {
    package var method: HTTPMethod
    /// The pattern as declared, e.g. `/v1/devices/{id}` (tests, docs, labels).
    package var path: String
    package var pattern: [PathPattern]
    /// Who may call the route; `RoostService` checks it before `handler` runs,
    /// and the isolation matrix test reads the same declaration.
    package var access: RouteAccess
    package var handler: RouteHandler
    /// The largest body the route accepts; nil takes the JSON default (64 KiB).
    package var bodyLimitBytes: Int?
    /// The route's position in the router's table (set by `Router`): its metrics slot.
    package var index = -1

    /// A route whose handler may defer its answer to the engine.
    package init(
        _ method: HTTPMethod, _ path: String, access: RouteAccess, bodyLimitBytes: Int? = nil,
        outcome handler: @escaping RouteHandler
    ) {
        self.method = method
        self.path = path
        self.pattern = path.split(separator: "/").map { segment in
            segment.hasPrefix("{") ? .parameter : .literal(Array(segment.utf8))
        }
        self.access = access
        self.handler = handler
        self.bodyLimitBytes = bodyLimitBytes
    }

    /// A route that always answers at once.
    package init(
        _ method: HTTPMethod, _ path: String, access: RouteAccess,
        _ handler: @escaping @Sendable (RequestContext) throws(APIError) -> HTTPResponse
    ) {
        self.init(method, path, access: access) { (context) throws(APIError) -> RouteOutcome in
            .response(try handler(context))
        }
    }

    /// The names of the path parameters, in order (`{id}` → `id`).
    package var parameterNames: [String] {
        path.split(separator: "/").filter { $0.hasPrefix("{") && $0.hasSuffix("}") }.map {
            String($0.dropFirst().dropLast())
        }
    }
}

/// Finds the route for a method and path: 404 when no pattern matches the
/// path, 405 (with the allowed methods) when the path matches with other methods.
package struct Router: Sendable {
    /// The most path segments a request may have; a longer path matches nothing.
    package static let pathSegmentsMax = 16

    /// Every route, in declaration order (`Route.index` is the position): the
    /// route table the service serves, the isolation matrix test walks and
    /// the request metrics label.
    package let routes: [Route]
    /// Routes by their number of path segments: a request is compared only
    /// with the routes of its own depth.
    private let routesBySegmentCount: [[Route]]
    /// Body limits of the routes that raise the default, by literal path.
    private let bodyLimits: [Substring: Int]

    package init(_ declared: [Route]) {
        var routes = declared
        for index in routes.indices { routes[index].index = index }
        self.routes = routes
        for (index, route) in routes.enumerated() {
            for other in routes[..<index] {
                precondition(
                    !(other.method == route.method && other.pattern == route.pattern),
                    "route \(route.method.name) \(route.pattern) declared twice")
            }
        }
        var byCount = [[Route]](repeating: [], count: Router.pathSegmentsMax + 1)
        var limits: [Substring: Int] = [:]
        for route in routes {
            precondition(route.pattern.count <= Router.pathSegmentsMax, "route deeper than \(Router.pathSegmentsMax)")
            byCount[route.pattern.count].append(route)
            if let limit = route.bodyLimitBytes {
                var path = ""
                for piece in route.pattern {
                    guard case .literal(let text) = piece else {
                        preconditionFailure("a raised body limit needs a literal path")
                    }
                    path += "/" + String(decoding: text, as: UTF8.self)
                }
                limits[path[...]] = limit
            }
        }
        self.routesBySegmentCount = byCount
        self.bodyLimits = limits
    }

    /// Returns the body limit of the route at `path` when it raises the
    /// default, else nil. One dictionary probe: it runs for every request head.
    package func bodyLimitBytes(path: Substring) -> Int? {
        bodyLimits[path]
    }

    /// Returns the matching route and its decoded parameters. O(routes ×
    /// path bytes), on bytes: no String is made but for the parameters of the
    /// route that matched.
    package func match(method: HTTPMethod, path: Substring) throws(APIError) -> (Route, [String]) {
        var path = path
        let found = path.withUTF8 { bytes -> Result<(Route, [String]), APIError> in
            // Segment boundaries: segment k is bytes[starts[k]..<ends[k]].
            guard bytes.first == UInt8(ascii: "/") else { return .failure(APIError.notFound()) }
            // The boundaries on the stack: no array per request (issue 25).
            return withUnsafeTemporaryAllocation(of: Int.self, capacity: 2 * (Router.pathSegmentsMax + 1)) { bounds in
                let starts = UnsafeMutableBufferPointer(rebasing: bounds[0...Router.pathSegmentsMax])
                let ends = UnsafeMutableBufferPointer(rebasing: bounds[(Router.pathSegmentsMax + 1)...])
                var count = 0
                var start = 1
                for index in 1...bytes.count where index == bytes.count || bytes[index] == UInt8(ascii: "/") {
                    starts[count] = start
                    ends[count] = index
                    count += 1
                    start = index + 1
                    if count > Router.pathSegmentsMax { return .failure(APIError.notFound()) }
                }
                return route(
                    method, bytes, starts: UnsafeBufferPointer(rebasing: starts[..<count]),
                    ends: UnsafeBufferPointer(rebasing: ends[..<count]))
            }
        }
        return try found.get()
    }

    /// The route whose pattern matches the path's segments (`starts` and
    /// `ends`, one pair a segment) and its decoded parameters.
    private func route(
        _ method: HTTPMethod, _ bytes: UnsafeBufferPointer<UInt8>, starts: UnsafeBufferPointer<Int>,
        ends: UnsafeBufferPointer<Int>
    ) -> Result<(Route, [String]), APIError> {
        // Read in place, by index: `for route in` copied every candidate (its
        // path, pattern and handler retained and released) on every request.
        let candidates = routesBySegmentCount[starts.count]
        for candidate in candidates.indices {
            guard Router.matches(candidates[candidate].pattern, bytes, starts, ends),
                Router.methodMatches(candidates[candidate].method, method)
            else { continue }
            var parameters: [String] = []
            for (index, pattern) in candidates[candidate].pattern.enumerated() where pattern == .parameter {
                let segment = UnsafeBufferPointer(rebasing: bytes[starts[index]..<ends[index]])
                guard let decoded = percentDecoded(segment) else { return .failure(APIError.notFound()) }
                parameters.append(decoded)
            }
            return .success((candidates[candidate], parameters))
        }
        // No route takes the method: the methods of the path's routes, listed
        // only now (a found route allocated this list before, issue 25).
        var allowed: [String] = []
        for candidate in candidates.indices where Router.matches(candidates[candidate].pattern, bytes, starts, ends) {
            allowed.append(candidates[candidate].method.name)
        }
        return .failure(allowed.isEmpty ? APIError.notFound() : APIError.methodNotAllowed(allowed))
    }

    /// A route declared for `declared` answers `requested` (`HEAD` is answered as `GET`).
    private static func methodMatches(_ declared: HTTPMethod, _ requested: HTTPMethod) -> Bool {
        declared == requested || (requested == .head && declared == .get)
    }

    private static func matches(
        _ pattern: [PathPattern], _ bytes: UnsafeBufferPointer<UInt8>, _ starts: UnsafeBufferPointer<Int>,
        _ ends: UnsafeBufferPointer<Int>
    ) -> Bool {
        for (index, piece) in pattern.enumerated() {
            let length = ends[index] - starts[index]
            switch piece {
            case .parameter:
                if length == 0 { return false }
            case .literal(let text):
                guard text.count == length else { return false }
                for offset in 0..<length where text[offset] != bytes[starts[index] + offset] { return false }
            }
        }
        return true
    }
}

/// Returns `%XX`-decoded text, or nil when an escape is malformed or the
/// result is not valid UTF-8. With `plusAsSpace` (query strings, as HTML forms
/// send them) `+` becomes a space; in a path it stays `+`.
package func percentDecoded(_ segment: UnsafeBufferPointer<UInt8>, plusAsSpace: Bool = false) -> String? {
    guard segment.contains(UInt8(ascii: "%")) || (plusAsSpace && segment.contains(UInt8(ascii: "+"))) else {
        return String(validating: segment, as: UTF8.self)
    }
    var bytes: [UInt8] = []
    bytes.reserveCapacity(segment.count)
    var iterator = segment.makeIterator()
    while let byte = iterator.next() {
        switch byte {
        case UInt8(ascii: "%"):
            guard let high = iterator.next().flatMap(Hex.digitValue), let low = iterator.next().flatMap(Hex.digitValue)
            else { return nil }
            bytes.append(high << 4 | low)
        case UInt8(ascii: "+") where plusAsSpace:
            bytes.append(UInt8(ascii: " "))
        default:
            bytes.append(byte)
        }
    }
    return String(validating: bytes, as: UTF8.self)
}
