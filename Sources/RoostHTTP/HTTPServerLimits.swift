/// Every limit the HTTP server enforces, in one place. Checked where bytes
/// enter (parser, accept, timers); their relations are checked once at start.
public struct HTTPServerLimits: Sendable, Equatable {
    /// Request line plus header fields (with their CRLFs), and separately the
    /// trailer section of a chunked body. Over it: 431 and close.
    public var headBytesMax: Int = 16 * 1024
    /// Header fields in one request. Over it: 431 and close.
    public var headerFieldsMax: Int = 100
    /// The body limit a responder usually returns from `bodyLimitBytes(for:)`.
    public var bodyBytesDefault: Int = 64 * 1024
    /// The most any responder may allow for one body; larger answers from
    /// `bodyLimitBytes(for:)` are clamped to it.
    public var bodyBytesCeiling: Int = 64 * 1024 * 1024
    /// One chunk-size line of a chunked body, extensions included. Over it: 400.
    public var chunkLineBytesMax: Int = 1024
    /// Open connections across all event loops. At the cap a new connection
    /// takes the place of the most evictable open one (one that never sent a
    /// byte, else the slowest partial head older than
    /// `partialHeadEvictableAfter`, else the one idle longest between
    /// requests; `HTTPEvictionRank`); with none evictable it may take one of
    /// `reservedConnections`, else it is accepted and closed.
    public var connectionsMax: Int = 10_000
    /// Connections beyond `connectionsMax`, for probes: taken only when the
    /// cap is reached and no connection is evictable. Such a connection serves one
    /// GET or HEAD of a path in `reservedPaths`, with `Connection: close`; any
    /// other first request closes it unanswered.
    public var reservedConnections: Int = 16
    /// The paths a reserved connection may request (exact match, no query
    /// needed): liveness, readiness and metrics, which an operator must reach
    /// even when every other connection is busy.
    public var reservedPaths: [String] = ["/healthz", "/readyz", "/metrics"]
    /// From the accept until the first byte. A connection that has sent
    /// nothing holds a descriptor and a slot under `connectionsMax`; it gets
    /// this short wait, not the keep-alive idle timeout (the shorter of the
    /// two applies).
    public var firstByteTimeout: Duration = .seconds(5)
    /// From the first byte of a request until its head is complete.
    public var headerReadTimeout: Duration = .seconds(10)
    /// How long part of a request head may have been arriving before the
    /// connection becomes evictable at `connectionsMax` (issue 24 M-2,
    /// decision 0073): a head that takes longer than this is a slow or
    /// stalled client's, and under pressure its place goes to a newcomer
    /// rather than waiting for `headerReadTimeout`. Below it, a head in
    /// flight (a few segments) is never cut.
    public var partialHeadEvictableAfter: Duration = .milliseconds(500)
    /// From the end of the head until the whole body has arrived.
    public var bodyReadTimeout: Duration = .seconds(30)
    /// How long a keep-alive connection may sit with nothing to do.
    public var keepAliveIdleTimeout: Duration = .seconds(60)
    /// How long queued response bytes may wait without the peer taking any.
    public var writeStallTimeout: Duration = .seconds(30)
    /// Requests of one connection dispatched but not yet written. At the cap
    /// the connection stops reading until answers drain.
    public var pipelinedRequestsMax: Int = 64
    /// Requests of one connection handed to the responder whose answers have
    /// not arrived. An answer's size is known only when it arrives, so this
    /// many answers of any size can land on top of `writeBufferBytesMax`:
    /// with 1, a connection holds at most its budget plus one answer. At the
    /// cap the connection stops reading until the answer arrives.
    public var unansweredRequestsMax: Int = 1
    /// Requests one tenant (an app) may have in progress on one event loop
    /// while tenants contend and a loop is busy (`TenantShare`, decision
    /// 0063). A further request of the tenant is read but not started: it
    /// waits in the tenant's queue until one of the tenant's answers goes
    /// out. Past what keeps a loop busy, more requests in progress only
    /// lengthen the queues every tenant waits in. Applies only with
    /// `unansweredRequestsMax` 1 (the default): a waiting request must be
    /// its connection's only one, so that none after it starts first.
    public var tenantRequestsInProgressMax: Int = 32
    /// A loop idle (in `epoll_wait`) for at most this fraction of a 50 ms
    /// window holds contending tenants to `tenantRequestsInProgressMax`
    /// (1: every window counts as busy).
    public var tenantShareBusyBelowIdleFraction: Double = 0.1
    /// A holding loop stops after a window idle more than this fraction.
    public var tenantShareIdleAboveIdleFraction: Double = 0.5
    /// How long tenants count as contending after a loop started requests
    /// of two tenants one after the other.
    public var tenantContentionWindow: Duration = .seconds(1)
    /// Response bytes queued on one connection: unwritten output plus answers
    /// waiting for their turn (behind a stream). At or above it the
    /// connection stops reading and dispatching until the peer takes some.
    public var writeBufferBytesMax: Int = 1024 * 1024
    /// Capacity an emptied input or output buffer keeps for the connection's
    /// next request; a larger one is freed, so that an idle connection does
    /// not hold the memory of its largest exchange.
    public var bufferBytesRetainedMax: Int = 16 * 1024
    /// Body bytes of a streamed response queued on one connection beyond
    /// what the socket accepted; a producer's next write waits for room.
    /// Bounds the memory of `GET /v1/devices/export` per client.
    public var streamBufferBytesMax: Int = 256 * 1024
    /// After `beginShutdown`, how long in-flight requests get before every
    /// remaining connection is closed.
    public var shutdownDrainTimeout: Duration = .seconds(10)
    /// Bytes read from a socket per `read` call (one buffer per loop).
    public var readBufferBytes: Int = 64 * 1024
    /// Kernel accept queue length per listening socket.
    public var acceptBacklog: Int = 1024

    /// Returns the defaults.
    public init() {}

    /// Returns a description of every broken relation between the limits; empty when sound.
    public var violations: [String] {
        var found: [String] = []
        func require(_ holds: Bool, _ message: @autoclosure () -> String) {
            if !holds { found.append(message()) }
        }
        require(headBytesMax >= 64, "headBytesMax \(headBytesMax) < 64: no request line fits")
        require(headerFieldsMax >= 1, "headerFieldsMax \(headerFieldsMax) < 1: Host cannot be sent")
        require(bodyBytesDefault >= 0, "bodyBytesDefault \(bodyBytesDefault) < 0")
        require(
            bodyBytesDefault <= bodyBytesCeiling,
            "bodyBytesDefault \(bodyBytesDefault) > bodyBytesCeiling \(bodyBytesCeiling)")
        require(chunkLineBytesMax >= 18, "chunkLineBytesMax \(chunkLineBytesMax) < 18: 16 hex digits and CRLF")
        require(connectionsMax >= 1, "connectionsMax \(connectionsMax) < 1")
        require(reservedConnections >= 0, "reservedConnections \(reservedConnections) < 0")
        for path in reservedPaths {
            require(path.hasPrefix("/") && !path.contains("?"), "reserved path '\(path)' is not a path")
        }
        require(firstByteTimeout > .zero, "firstByteTimeout \(firstByteTimeout) must be positive")
        require(headerReadTimeout > .zero, "headerReadTimeout \(headerReadTimeout) must be positive")
        require(
            partialHeadEvictableAfter > .zero,
            "partialHeadEvictableAfter \(partialHeadEvictableAfter) must be positive: "
                + "a head in flight would be evictable")
        require(bodyReadTimeout > .zero, "bodyReadTimeout \(bodyReadTimeout) must be positive")
        require(keepAliveIdleTimeout > .zero, "keepAliveIdleTimeout \(keepAliveIdleTimeout) must be positive")
        require(writeStallTimeout > .zero, "writeStallTimeout \(writeStallTimeout) must be positive")
        require(shutdownDrainTimeout >= .zero, "shutdownDrainTimeout \(shutdownDrainTimeout) must not be negative")
        require(pipelinedRequestsMax >= 1, "pipelinedRequestsMax \(pipelinedRequestsMax) < 1")
        require(unansweredRequestsMax >= 1, "unansweredRequestsMax \(unansweredRequestsMax) < 1")
        require(
            unansweredRequestsMax <= pipelinedRequestsMax,
            "unansweredRequestsMax \(unansweredRequestsMax) > pipelinedRequestsMax \(pipelinedRequestsMax)")
        require(tenantRequestsInProgressMax >= 1, "tenantRequestsInProgressMax \(tenantRequestsInProgressMax) < 1")
        require(
            (0...1).contains(tenantShareBusyBelowIdleFraction) && tenantShareIdleAboveIdleFraction >= 0
                && tenantShareBusyBelowIdleFraction <= tenantShareIdleAboveIdleFraction,
            "tenant share idle fractions \(tenantShareBusyBelowIdleFraction) (busy below) and "
                + "\(tenantShareIdleAboveIdleFraction) (idle above) must lie in 0...1, the first not above the second")
        require(tenantContentionWindow > .zero, "tenantContentionWindow \(tenantContentionWindow) must be positive")
        require(bufferBytesRetainedMax >= 0, "bufferBytesRetainedMax \(bufferBytesRetainedMax) < 0")
        require(
            bufferBytesRetainedMax <= writeBufferBytesMax,
            "bufferBytesRetainedMax \(bufferBytesRetainedMax) > writeBufferBytesMax \(writeBufferBytesMax)")
        require(readBufferBytes >= 1024, "readBufferBytes \(readBufferBytes) < 1024")
        require(
            writeBufferBytesMax >= 4096,
            "writeBufferBytesMax \(writeBufferBytesMax) < 4096: one error response must fit")
        require(streamBufferBytesMax >= 4096, "streamBufferBytesMax \(streamBufferBytesMax) < 4096")
        require(
            streamBufferBytesMax <= writeBufferBytesMax,
            "streamBufferBytesMax \(streamBufferBytesMax) > writeBufferBytesMax \(writeBufferBytesMax): "
                + "a stream would stop the connection's reading")
        require(acceptBacklog >= 1, "acceptBacklog \(acceptBacklog) < 1")
        return found
    }

    /// The shortest timeout: the event loop checks deadlines at a fraction of it.
    var shortestTimeout: Duration {
        min(
            min(min(headerReadTimeout, bodyReadTimeout), min(keepAliveIdleTimeout, writeStallTimeout)),
            firstByteTimeout)
    }

    /// The wait for a new connection's first byte: `firstByteTimeout`, or the
    /// keep-alive idle timeout when that is shorter.
    var firstByteWait: Duration { min(firstByteTimeout, keepAliveIdleTimeout) }
}
