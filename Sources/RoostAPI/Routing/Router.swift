import RoostHTTP

/// One piece of a route pattern.
package enum PathPattern: Sendable, Equatable {
    case literal(String)
    /// A path segment captured for the handler, percent-decoded.
    case parameter
}

/// What a handler receives: the request and its captured path parameters.
package struct RequestContext: Sendable {
    package var request: HTTPRequest
    package var parameters: [String]
    /// One wall-clock read per request, taken when it was routed.
    package var nowMilliseconds: Int64
}

/// A handler answers one request or throws an API error.
package typealias RouteHandler = @Sendable (RequestContext) throws(APIError) -> HTTPResponse

/// A method, a path pattern and its handler.
package struct Route: Sendable {
    package var method: HTTPMethod
    package var pattern: [PathPattern]
    package var handler: RouteHandler

    package init(_ method: HTTPMethod, _ path: String, _ handler: @escaping RouteHandler) {
        self.method = method
        self.pattern = path.split(separator: "/").map { segment in
            segment.hasPrefix("{") ? .parameter : .literal(String(segment))
        }
        self.handler = handler
    }
}

/// Finds the route for a method and path: 404 when no pattern matches the
/// path, 405 (with the allowed methods) when the path matches with other methods.
package struct Router: Sendable {
    /// The most path segments a request may have; a longer path matches nothing.
    package static let pathSegmentsMax = 16

    private let routes: [Route]

    package init(_ routes: [Route]) {
        for (index, route) in routes.enumerated() {
            for other in routes[..<index] {
                precondition(
                    !(other.method == route.method && other.pattern == route.pattern),
                    "route \(route.method.name) \(route.pattern) declared twice")
            }
        }
        self.routes = routes
    }

    /// Returns the matching route and its decoded parameters. O(routes).
    package func match(method: HTTPMethod, path: Substring) throws(APIError) -> (Route, [String]) {
        let segments = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        guard path.first == "/", segments.count <= Router.pathSegmentsMax else { throw APIError.notFound() }
        var allowed: [String] = []
        for route in routes where route.pattern.count == segments.count {
            var parameters: [String] = []
            var matches = true
            for (pattern, segment) in zip(route.pattern, segments) {
                switch pattern {
                case .literal(let text):
                    if segment != text { matches = false }
                case .parameter:
                    guard !segment.isEmpty, let decoded = percentDecoded(segment) else {
                        matches = false
                        break
                    }
                    parameters.append(decoded)
                }
                if !matches { break }
            }
            guard matches else { continue }
            let methodMatches = route.method == method || (method == .head && route.method == .get)
            if methodMatches { return (route, parameters) }
            allowed.append(route.method.name)
        }
        if allowed.isEmpty { throw APIError.notFound() }
        throw APIError.methodNotAllowed(allowed)
    }
}

/// Returns a path segment with `%XX` escapes decoded, or nil when an escape is
/// malformed or the result is not valid UTF-8.
package func percentDecoded(_ segment: Substring) -> String? {
    guard segment.utf8.contains(UInt8(ascii: "%")) else { return String(segment) }
    var bytes: [UInt8] = []
    bytes.reserveCapacity(segment.utf8.count)
    var iterator = segment.utf8.makeIterator()
    while let byte = iterator.next() {
        guard byte == UInt8(ascii: "%") else {
            bytes.append(byte)
            continue
        }
        guard let high = iterator.next().flatMap(hexDigitValue), let low = iterator.next().flatMap(hexDigitValue) else {
            return nil
        }
        bytes.append(high << 4 | low)
    }
    return String(validating: bytes, as: UTF8.self)
}
