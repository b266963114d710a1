import Synchronization

/// What a stream tells its producer when a write's turn is over.
public enum HTTPBodyStreamSignal: Sendable, Equatable {
    /// The chunk has moved to the connection: write the next one (or finish).
    case writable
    /// The body is not wanted any more (the client went away or stopped
    /// reading past `writeStallTimeout`, a HEAD request, shutdown, or the
    /// producer's own `abort`): stop producing. Later writes are dropped.
    case aborted
}

/// The body of a streamed response, written by a producer on any thread.
///
/// Backpressure: a producer has at most one write outstanding. `write` queues
/// the chunk and calls `whenWritable` exactly once, on the event loop's thread,
/// once the chunk has moved into the connection's output and that output is
/// below `HTTPServerLimits.streamBufferBytesMax`; only then may it write again
/// (a second write before that is a broken invariant and stops the process).
/// So a stream never holds more than `streamBufferBytesMax` plus the one chunk
/// in hand beyond what the socket accepted. Callbacks must not block.
public protocol HTTPBodyStream: Sendable {
    /// Queues `chunk` (an empty chunk is ignored) and calls `whenWritable` once
    /// when the next write may follow, or with `.aborted` when the body is not
    /// wanted any more (at once if it already is not).
    func write(_ chunk: [UInt8], whenWritable: @escaping @Sendable (HTTPBodyStreamSignal) -> Void)

    /// Ends the body once the queued chunks are sent (the last chunk for
    /// chunked encoding). At most once; nothing may be written after it.
    func finish()

    /// Gives up on the body: the connection is closed without completing the
    /// response, so the client sees it cut (chunked: no last chunk).
    func abort()

    /// Whether the body is no longer wanted; a producer may poll it between chunks.
    var isAborted: Bool { get }
}

/// A stream that collects the body and sends it as one response at `finish`,
/// for sinks made outside a server (test fakes). Unbounded: never use it to
/// serve a client.
public final class HTTPCollectingBodyStream: HTTPBodyStream {
    private struct State {
        var body: [UInt8] = []
        var ended = false
        var aborted = false
    }

    private let status: Int
    private let headers: [(name: String, value: String)]
    private let sink: any HTTPReplySink
    private let state = Mutex(State())

    /// Returns a stream that answers through `sink` at `finish`.
    public init(status: Int, headers: [(name: String, value: String)], sink: any HTTPReplySink) {
        self.status = status
        self.headers = headers
        self.sink = sink
    }

    public func write(_ chunk: [UInt8], whenWritable: @escaping @Sendable (HTTPBodyStreamSignal) -> Void) {
        let accepted = state.withLock { state in
            precondition(!state.ended || state.aborted, "write after finish")
            if state.aborted { return false }
            state.body.append(contentsOf: chunk)
            return true
        }
        whenWritable(accepted ? .writable : .aborted)
    }

    public func finish() {
        let body: [UInt8]? = state.withLock { state in
            precondition(!state.ended, "finish called twice")
            state.ended = true
            return state.aborted ? nil : state.body
        }
        if let body { sink.send(HTTPResponse(status: status, headers: headers, body: body)) }
    }

    public func abort() {
        state.withLock { $0.aborted = true }
    }

    public var isAborted: Bool { state.withLock { $0.aborted } }
}
