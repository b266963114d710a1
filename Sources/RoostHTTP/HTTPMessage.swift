/// The request and response values that cross from RoostHTTP to a responder.
/// RoostHTTP knows nothing of devices or JSON: a responder turns requests into
/// responses and supplies the body of every error the server itself writes.

import RoostPlatform

/// An HTTP request method. Unknown methods are kept verbatim so that a router
/// can answer 405 or 501 as it sees fit.
public enum HTTPMethod: Hashable, Sendable {
    case get, head, post, put, patch, delete, options
    case other(String)

    /// POST, PUT, PATCH and DELETE: the methods that may change state (a
    /// cluster follower refuses them all, spec §13.4).
    public var changesState: Bool {
        switch self {
        case .post, .put, .patch, .delete: true
        case .get, .head, .options, .other: false
        }
    }

    /// The method's token as it appears on the request line.
    public var name: String {
        switch self {
        case .get: "GET"
        case .head: "HEAD"
        case .post: "POST"
        case .put: "PUT"
        case .patch: "PATCH"
        case .delete: "DELETE"
        case .options: "OPTIONS"
        case .other(let token): token
        }
    }
}

/// The protocol version on the request line. Only 1.0 and 1.1 are served.
public enum HTTPVersion: Hashable, Sendable {
    case http10
    case http11
}

/// Header fields in arrival order. Lookup is case-insensitive on the name.
public struct HTTPHeaders: Sendable, Sequence {
    /// The fields, names as sent, values with surrounding whitespace removed.
    public private(set) var fields: [(name: String, value: String)]

    public init(_ fields: [(name: String, value: String)] = []) {
        self.fields = fields
    }

    public mutating func append(name: String, value: String) {
        fields.append((name, value))
    }

    /// Makes room for `count` fields in all (a parsed head: one allocation, not one per doubling).
    public mutating func reserveCapacity(_ count: Int) {
        fields.reserveCapacity(count)
    }

    /// Sets the field at `index`, which is at most the field count (then it is appended).
    mutating func set(name: String, value: String, at index: Int) {
        precondition(index <= fields.count, "header field \(index) of \(fields.count)")
        if index == fields.count { fields.append((name, value)) } else { fields[index] = (name, value) }
    }

    /// Removes the fields from `index` on.
    mutating func removeFields(from index: Int) {
        if index < fields.count { fields.removeSubrange(index...) }
    }

    /// Returns the first value of the named field, or nil. O(number of fields).
    public subscript(_ name: String) -> String? {
        // Through the array's buffer: `for field in fields` copied each field
        // (two retains and releases), and a look at `fields[index]` retained
        // its strings (~700 instructions for the `Authorization` of a
        // five-field head; issue 25). The comparison checks lengths first.
        fields.withUnsafeBufferPointer { fields in
            for index in fields.indices where asciiCaseInsensitiveEqual(fields[index].name, name) {
                return fields[index].value
            }
            return nil
        }
    }

    /// Returns every value of the named field, in order.
    public func values(_ name: String) -> [String] {
        var values: [String] = []
        for index in fields.indices where asciiCaseInsensitiveEqual(fields[index].name, name) {
            values.append(fields[index].value)
        }
        return values
    }

    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> {
        fields.makeIterator()
    }
}

/// Returns whether two ASCII strings are equal ignoring case.
@inlinable
public func asciiCaseInsensitiveEqual(_ a: String, _ b: String) -> Bool {
    // Lengths first: most header look-ups pass fields of other lengths. Then
    // the strings' own storage (iterating `String.UTF8View`s cost ~350
    // instructions a field: 2 % of a registration's, in header look-ups).
    guard a.utf8.count == b.utf8.count else { return false }
    let stored = a.utf8.withContiguousStorageIfAvailable { left in
        b.utf8.withContiguousStorageIfAvailable { right in asciiCaseInsensitiveEqual(left, right) }
    }
    if let stored, let stored { return stored }
    return a.utf8.elementsEqual(b.utf8) { lowercased($0) == lowercased($1) }
}

/// Whether two buffers are equal ignoring ASCII case.
@usableFromInline
func asciiCaseInsensitiveEqual(_ left: UnsafeBufferPointer<UInt8>, _ right: UnsafeBufferPointer<UInt8>) -> Bool {
    guard left.count == right.count else { return false }
    for index in 0..<left.count where lowercased(left[index]) != lowercased(right[index]) { return false }
    return true
}

/// A request line and its header fields, available before the body arrives.
public struct HTTPRequestHead: Sendable {
    public var method: HTTPMethod
    /// The request target as sent (origin form: path and optional query).
    public var target: String
    public var version: HTTPVersion
    public var headers: HTTPHeaders
    /// Whether the connection stays open after this request's response
    /// (HTTP/1.1 unless `Connection: close`; HTTP/1.0 only with `keep-alive`).
    public var keepAlive: Bool
    /// The address of the connection's peer (set by the event loop from the
    /// accepted socket; nil outside a server, or when the kernel had none).
    /// Behind a proxy it is the proxy's.
    package var peerAddress: IPAddress?

    public init(method: HTTPMethod, target: String, version: HTTPVersion, headers: HTTPHeaders, keepAlive: Bool) {
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers
        self.keepAlive = keepAlive
    }

    /// The path part of the target, without the query.
    public var path: Substring {
        if let question = queryMark { return target[..<question] }
        return target[...]
    }

    /// The query part of the target after `?`, or nil.
    public var query: Substring? {
        guard let question = queryMark else { return nil }
        return target[target.utf8.index(after: question)...]
    }

    /// Where the target's first `?` is, searched in the target's own bytes
    /// (a generic `firstIndex` over `String.UTF8View` cost ~370 instructions,
    /// and the path is read twice a request).
    private var queryMark: String.Index? {
        // A plain loop: a generic `firstIndex(of:)` allocates per element in a debug build.
        let offset = target.utf8.withContiguousStorageIfAvailable { bytes -> Int? in
            for index in 0..<bytes.count where bytes[index] == UInt8(ascii: "?") { return index }
            return nil
        }
        guard let offset else { return target.utf8.firstIndex(of: UInt8(ascii: "?")) }
        return offset.map { target.utf8.index(target.utf8.startIndex, offsetBy: $0) }
    }
}

/// A complete request: head and the whole body (de-chunked). The body lives
/// only as long as the request value.
public struct HTTPRequest: Sendable {
    public var head: HTTPRequestHead
    public var body: [UInt8]

    public init(head: HTTPRequestHead, body: [UInt8]) {
        self.head = head
        self.body = body
    }
}

/// A response. `Content-Length`, `Date`-free framing and `Connection` are
/// added by the server; a responder sets status, content type and body.
public struct HTTPResponse: Sendable {
    public var status: Int
    /// Extra header fields. Values must not hold CR or LF: the writer refuses
    /// them (precondition) so user data can never split a response.
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// Why the server refused a request before it reached the responder.
public enum HTTPRequestFailure: Sendable, Equatable {
    /// Malformed framing or syntax: 400, connection closed.
    case badRequest(reason: String)
    /// Request line plus headers over the limit: 431, connection closed.
    case headersTooLarge(limitBytes: Int)
    /// Body over the route's limit: 413, connection closed.
    case bodyTooLarge(limitBytes: Int)
    /// A transfer coding other than chunked: 501, connection closed.
    case unsupportedTransferCoding(String)
    /// An HTTP version other than 1.0 or 1.1: 505, connection closed.
    case unsupportedVersion(String)
    /// An `Expect` field whose value is not `100-continue`: 417, connection closed.
    case expectationFailed(String)

    /// The status code the server answers with.
    public var status: Int {
        switch self {
        case .badRequest: 400
        case .headersTooLarge: 431
        case .bodyTooLarge: 413
        case .unsupportedTransferCoding: 501
        case .unsupportedVersion: 505
        case .expectationFailed: 417
        }
    }
}

/// A handle with which a responder answers a request later, from any thread.
/// Exactly one `send` or `startStream` per request; answers go out in request order.
public protocol HTTPReplySink: Sendable {
    /// Answers the request with a whole response.
    func send(_ response: consuming HTTPResponse)

    /// The index (0..<eventLoopCount) of the event loop that read the request:
    /// the responder queues the request's engine work on that loop (its
    /// executor's round runs at the end of every `epoll_wait` round).
    var loopIndex: Int { get }

    /// Answers the request with a head now and a body produced later, from any
    /// thread, through the returned stream (see `HTTPBodyStream`). Sent with
    /// `Transfer-Encoding: chunked` to HTTP/1.1 clients and delimited by the
    /// close of the connection for HTTP/1.0; a HEAD request gets the head only.
    /// `status` must allow a body (200...599 except 204 and 304).
    func startStream(status: Int, headers: [(name: String, value: String)]) -> any HTTPBodyStream

    /// Emptied arrays to render the answer's body and header fields into,
    /// from answers this request's loop already wrote (empty ones when it
    /// has none, or when called off that loop). Optional: an answer built
    /// in new arrays is as good, it only allocates them.
    func takeAnswerBuffers() -> HTTPAnswerBuffers
}

extension HTTPReplySink {
    /// Loop 0, for sinks made outside a server (test fakes).
    public var loopIndex: Int { 0 }

    /// None: for sinks made outside a server (test fakes, tasks).
    public func takeAnswerBuffers() -> HTTPAnswerBuffers { HTTPAnswerBuffers() }

    /// Returns a stream that collects the whole body and sends it as one
    /// response at `finish`: for sinks made outside a server (test fakes). The
    /// server's own sink streams with a bounded queue instead.
    public func startStream(status: Int, headers: [(name: String, value: String)]) -> any HTTPBodyStream {
        HTTPCollectingBodyStream(status: status, headers: headers, sink: self)
    }
}

/// What a responder does with one request.
public enum HTTPResponderResult: Sendable {
    /// The answer is ready now (the fast path: no hop, no allocation of a sink).
    case respond(HTTPResponse)
    /// The responder keeps the sink and calls `send` when the answer is ready
    /// (for example after the covering fsync). The tenant, when the request
    /// has one, is who the request counts for while in progress
    /// (`HTTPServerLimits.tenantRequestsInProgressMax`).
    case deferred(HTTPTenant?)
}

/// The application side of the server. Called on an event-loop thread; it must
/// not block. Long work is deferred and answered through the sink.
public protocol HTTPResponder: Sendable {
    /// Returns the largest body this request may carry, in bytes, decided from
    /// its head (a CSV import route may raise the default).
    func bodyLimitBytes(for head: HTTPRequestHead) -> Int

    /// Handles a complete request.
    func respond(to request: HTTPRequest, sink: any HTTPReplySink) -> HTTPResponderResult

    /// Returns the response the server writes when it refuses a request itself.
    func response(for failure: HTTPRequestFailure) -> HTTPResponse

    /// Called on loop `loop`'s thread once per round of that loop, after the
    /// round's accepts and reads and before its executor's round, with the
    /// instant the round began (its `epoll_wait` returned) and the server's
    /// clock that read it (injected: a test's manual clock). A responder that
    /// renders answers over several rounds (RoostService: the engine's
    /// answers, `LoopRequests`) spends its per-round budget from `start`,
    /// by that clock, and goes on with what it left for this round. Must
    /// not block. The default does nothing.
    func willFinishRound(loop: Int, startedAt start: LoopInstant, clock: LoopClock)
}

extension HTTPResponder {
    public func willFinishRound(loop: Int, startedAt start: LoopInstant, clock: LoopClock) {}
}
