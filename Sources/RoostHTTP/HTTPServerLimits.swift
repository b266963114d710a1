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
    /// Open connections across all event loops. Beyond it a new connection
    /// is accepted and closed at once.
    public var connectionsMax: Int = 10_000
    /// From the first byte of a request until its head is complete.
    public var headerReadTimeout: Duration = .seconds(10)
    /// From the end of the head until the whole body has arrived.
    public var bodyReadTimeout: Duration = .seconds(30)
    /// How long a keep-alive connection may sit with nothing to do.
    public var keepAliveIdleTimeout: Duration = .seconds(60)
    /// How long queued response bytes may wait without the peer taking any.
    public var writeStallTimeout: Duration = .seconds(30)
    /// Requests of one connection dispatched but not yet written. At the cap
    /// the connection stops reading until answers drain.
    public var pipelinedRequestsMax: Int = 64
    /// Response bytes queued on one connection. Above it the connection stops
    /// reading and dispatching until the peer takes some.
    public var writeBufferBytesMax: Int = 1024 * 1024
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
        require(headerReadTimeout > .zero, "headerReadTimeout \(headerReadTimeout) must be positive")
        require(bodyReadTimeout > .zero, "bodyReadTimeout \(bodyReadTimeout) must be positive")
        require(keepAliveIdleTimeout > .zero, "keepAliveIdleTimeout \(keepAliveIdleTimeout) must be positive")
        require(writeStallTimeout > .zero, "writeStallTimeout \(writeStallTimeout) must be positive")
        require(shutdownDrainTimeout >= .zero, "shutdownDrainTimeout \(shutdownDrainTimeout) must not be negative")
        require(pipelinedRequestsMax >= 1, "pipelinedRequestsMax \(pipelinedRequestsMax) < 1")
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
        min(min(headerReadTimeout, bodyReadTimeout), min(keepAliveIdleTimeout, writeStallTimeout))
    }
}
