import Glibc
import RoostCrypto
import RoostEngine
import RoostHTTP
import RoostModel
import RoostTelemetry

/// One request on its way through the service: what the observer needs to
/// count it, name it in the access log and answer `X-Request-Id`. A value:
/// it travels with the request's sink to whichever thread answers.
package struct Exchange: Sendable {
    /// The route slot (`RequestMetrics.labels`), known once routed.
    package var route: Int
    /// The counting lane (the engine loop that read the request, or the shared lane).
    package var lane: Int
    /// `APIClock.monotonicNanoseconds` when the request reached the service.
    package var startNanoseconds: UInt64
    /// The request's one wall-clock read (milliseconds since the epoch).
    package var wallMilliseconds: Int64
    /// 15 characters (a small string: no allocation), unique per process and lane.
    package var requestID: String
    /// The request's method, for the access log.
    package var method: HTTPMethod
    /// The app the request's key or identity token belongs to, once known.
    package var app: AppID?
    /// The mode of that key or token (with `app`: the index whose position
    /// a cluster node's answer carries).
    package var mode: AppMode?

    /// The index of the request's app and mode, once known.
    var index: IndexKey? {
        guard let app, let mode else { return nil }
        return IndexKey(app: app, mode: mode)
    }
}

/// Counts every answered request (`RequestMetrics`), stamps `X-Request-Id`
/// on it, and writes the access-log line when `--access-log` is on. The
/// access log names the route pattern, never the path, query, headers or
/// body: no key, token, identity token or installation secret can reach it.
package final class RequestObserver: Sendable {
    /// The response header carrying the request id (every response).
    package static let requestIDHeader = "X-Request-Id"
    /// The most header fields `finish` adds to an answer: `X-Request-Id`
    /// and, in cluster mode, `ClusterHeaders.fieldsMax`.
    package static let fieldsAddedMax = 1 + ClusterHeaders.fieldsMax
    /// The longest method token written to the access log; longer ones are cut.
    package static let loggedMethodBytesMax = 16

    package let metrics: RequestMetrics
    private let clock: any APIClock
    private let logger: Logger
    private let accessLog: Bool
    /// 30 bits of the request id that differ between processes: 21 random, 9 the lane.
    private let processBits: UInt64
    /// In cluster mode, the node whose headers every answer carries (`ClusterHeaders`).
    private let cluster: (any ClusterControl)?

    package init(
        metrics: RequestMetrics, clock: any APIClock, logger: Logger, accessLog: Bool,
        cluster: (any ClusterControl)? = nil
    ) {
        self.cluster = cluster
        self.metrics = metrics
        self.clock = clock
        self.logger = logger
        self.accessLog = accessLog
        let random = Crypto.randomBytes(3)
        processBits = (UInt64(random[0]) << 16 | UInt64(random[1]) << 8 | UInt64(random[2])) & 0x1F_FFFF
    }

    /// Starts observing a request read by engine loop `loop` (any other
    /// value: the shared lane); `route` is set once it is routed.
    package func begin(_ method: HTTPMethod, loop: Int, route: Int) -> Exchange {
        let lane = metrics.lane(forLoop: loop)
        let sequence = metrics.nextSequence(lane: lane)
        return Exchange(
            route: route, lane: lane, startNanoseconds: clock.monotonicNanoseconds(),
            wallMilliseconds: clock.wallMilliseconds(), requestID: requestID(lane: lane, sequence: sequence),
            method: method, app: nil, mode: nil)
    }

    /// Counts the answer to `exchange`, logs it when the access log is on,
    /// and returns `response` with `X-Request-Id`.
    /// Takes `response` (an answer's only copy: its header array grows in
    /// place, into the room `answerHeaders` left).
    package func finish(_ exchange: Exchange, _ response: consuming HTTPResponse) -> HTTPResponse {
        answered(exchange, status: response.status)
        var stamped = response
        stamped.headers.append((Self.requestIDHeader, exchange.requestID))
        if let cluster { ClusterHeaders.stamp(&stamped.headers, cluster, index: exchange.index) }
        return stamped
    }

    /// The head of a streamed answer to `exchange` (an export): counted, with
    /// `X-Request-Id` and, in cluster mode, the cluster headers.
    func streamHeaders(_ exchange: Exchange, status: Int, _ headers: [(name: String, value: String)]) -> [(
        name: String, value: String
    )] {
        answered(exchange, status: status)
        var stamped = headers + [(Self.requestIDHeader, exchange.requestID)]
        if let cluster { ClusterHeaders.stamp(&stamped, cluster, index: exchange.index) }
        return stamped
    }

    /// Counts the answer to `exchange` with `status` (a streamed answer: its head).
    package func answered(_ exchange: Exchange, status: Int) {
        let now = clock.monotonicNanoseconds()
        let nanoseconds = now >= exchange.startNanoseconds ? now - exchange.startNanoseconds : 0
        metrics.record(route: exchange.route, status: status, nanoseconds: nanoseconds, lane: exchange.lane)
        guard accessLog else { return }
        let label = metrics.labels[exchange.route]
        logger.log(.info, "http.request", wallMilliseconds: exchange.wallMilliseconds) { line in
            line.field("request.id", exchange.requestID)
            line.field(
                "http.method",
                String(decoding: exchange.method.name.utf8.prefix(Self.loggedMethodBytesMax), as: UTF8.self))
            line.field("http.route", label.route)
            line.field("http.status", status)
            line.field("duration.ms", milliseconds: .nanoseconds(Int64(clamping: nanoseconds)))
            if let app = exchange.app { line.field("app.id", Int(app.rawValue)) }
            line.field("loop", exchange.lane)
        }
    }

    private static let requestIDDigits = Array("0123456789abcdefghijklmnopqrstuv".utf8)

    /// 75 bits in 15 base-32 digits (`0-9a-v`): 21 random bits of this
    /// process, 9 bits of lane, 45 bits of the lane's sequence.
    private func requestID(lane: Int, sequence: UInt64) -> String {
        let high = processBits << 9 | UInt64(lane & 0x1FF)
        let low = sequence & 0x1FFF_FFFF_FFFF
        // Formatted on the stack and decoded: 15 ASCII bytes make a small
        // string (no allocation; `String(unsafeUninitializedCapacity:)` made one).
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 15) { buffer in
            Self.requestIDDigits.withUnsafeBufferPointer { digits in
                for index in 0..<6 { buffer[index] = digits[Int(high >> UInt64(5 * (5 - index)) & 31)] }
                for index in 0..<9 { buffer[6 + index] = digits[Int(low >> UInt64(5 * (8 - index)) & 31)] }
            }
            return String(decoding: UnsafeBufferPointer(buffer), as: UTF8.self)
        }
    }
}

/// The sink a deferred request answers through: it counts and stamps the
/// answer (`RequestObserver.finish`) and passes it on to the server's sink.
/// A class: a request allocates it once, where a struct this size was boxed
/// each time it became an `any HTTPReplySink`, and a one-word reference
/// keeps `LoopReply` small enough to travel as an `any EngineReply`
/// without a box of its own (issue 25). An engine loop reuses the sinks of
/// answered requests that nothing else holds (`LoopRequests.observedSink`),
/// so that a request on a warm loop allocates none.
///
/// Sendable though its request changes on reuse: `reuse` runs only on the
/// loop that pools the sink, while that loop holds the only reference
/// (`isKnownUniquelyReferenced`), so no other thread can read it meanwhile.
final class ObservedSink: HTTPReplySink, @unchecked Sendable {
    private(set) var inner: any HTTPReplySink
    let observer: RequestObserver
    private(set) var exchange: Exchange

    init(inner: any HTTPReplySink, observer: RequestObserver, exchange: Exchange) {
        self.inner = inner
        self.observer = observer
        self.exchange = exchange
    }

    /// Makes this sink answer another request of the same observer. Only for
    /// the pool of the loop holding the one reference to it.
    func reuse(inner: any HTTPReplySink, exchange: Exchange) {
        self.inner = inner
        self.exchange = exchange
    }

    func send(_ response: consuming HTTPResponse) {
        inner.send(observer.finish(exchange, response))
    }

    var loopIndex: Int { inner.loopIndex }

    func takeAnswerBuffers() -> HTTPAnswerBuffers { inner.takeAnswerBuffers() }

    func startStream(status: Int, headers: [(name: String, value: String)]) -> any HTTPBodyStream {
        inner.startStream(status: status, headers: observer.streamHeaders(exchange, status: status, headers))
    }
}

/// The app a request acts for, noted where its key or identity token is
/// resolved (`Catalog.key`, the Connect principal) and read by the service
/// once the route returns, for the access log. Kept per thread (a routing
/// runs on one thread, start to end) as a pointer-sized value: no allocation.
enum RequestAttribution {
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let result = pthread_key_create(&key, nil)
        precondition(result == 0, "pthread_key_create failed with \(result)")
        return key
    }()

    /// Notes that the current request acts for `app` in `mode`.
    static func note(_ app: AppID, mode: AppMode) {
        let bits = UInt(app.rawValue) | UInt(mode.rawValue + 1) << 32
        pthread_setspecific(key, UnsafeRawPointer(bitPattern: bits))
    }

    /// Returns the app and mode noted since the last call, and forgets them.
    static func take() -> (app: AppID, mode: AppMode)? {
        guard let value = pthread_getspecific(key) else { return nil }
        pthread_setspecific(key, nil)
        let bits = UInt(bitPattern: value)
        let raw = UInt32(truncatingIfNeeded: bits)
        guard raw != 0, let mode = AppMode(rawValue: UInt8(truncatingIfNeeded: (bits >> 32) &- 1)) else { return nil }
        return (AppID(raw), mode)
    }
}
