import RoostPlatform

/// Arrays for an answer's body and header fields, emptied, with their
/// capacity: what `HTTPReplySink.takeAnswerBuffers` hands a responder to
/// render into. Both empty when the loop has none to spare.
public struct HTTPAnswerBuffers: Sendable {
    public var body: [UInt8] = []
    public var headers: [(name: String, value: String)] = []

    public init() {}
}

/// The body and header arrays of answers one event loop wrote to its
/// connections, kept for the answers it renders next (issue 25: two
/// allocations per answer before). A loop writes an answer's bytes into the
/// connection's output and is then done with the answer's arrays; rendering
/// on the same loop takes them back (`LoopReplySink.takeAnswerBuffers`).
///
/// Confined to its loop's thread: `keep` asserts it; `take` off the loop
/// (a task answering outside the loop) gets empty arrays. Kept arrays are
/// emptied when taken, not when kept: at keep time the delivery that carried
/// the answer may still refer to it, and emptying a shared array copies it.
/// At most `keptMax` of each, each of at most `bytesRetainedMax` bytes or
/// `headerFieldsRetainedMax` fields.
final class AnswerBufferPool: @unchecked Sendable {
    /// Arrays kept of each kind.
    static let keptMax = 64
    /// Header fields an array kept may have room for.
    static let headerFieldsRetainedMax = 16

    private let executor: LoopExecutor
    /// The largest body capacity kept (`HTTPServerLimits.bufferBytesRetainedMax`).
    private let bytesRetainedMax: Int
    /// The arrays kept, in one stored property: each call accesses the
    /// class's state once (a dynamic exclusivity check an access, four a
    /// `keep` when they were two properties; issue 25).
    private var kept = Kept()

    private struct Kept {
        var bodies: [[UInt8]] = []
        var headerLists: [[(name: String, value: String)]] = []

        mutating func keep(_ written: consuming HTTPResponse, bytesRetainedMax: Int) {
            // Not a range: `bufferBytesRetainedMax` may be 0 (keep none), and `1...0` traps.
            // The arrays moved out of the answer (a copy retained each, and
            // dropping the answer released it again).
            let bodyCapacity = written.body.capacity
            if bodies.count < AnswerBufferPool.keptMax, bodyCapacity > 0, bodyCapacity <= bytesRetainedMax {
                var body: [UInt8] = []
                swap(&body, &written.body)
                bodies.append(body)
            }
            let headersCapacity = written.headers.capacity
            if headerLists.count < AnswerBufferPool.keptMax, headersCapacity > 0,
                headersCapacity <= AnswerBufferPool.headerFieldsRetainedMax
            {
                var headers: [(name: String, value: String)] = []
                swap(&headers, &written.headers)
                headerLists.append(headers)
            }
        }

        mutating func take() -> HTTPAnswerBuffers {
            var buffers = HTTPAnswerBuffers()
            if var body = bodies.popLast() {
                body.removeAll(keepingCapacity: true)
                buffers.body = body
            }
            if var headers = headerLists.popLast() {
                headers.removeAll(keepingCapacity: true)
                buffers.headers = headers
            }
            return buffers
        }
    }

    init(executor: LoopExecutor, bytesRetainedMax: Int) {
        self.executor = executor
        self.bytesRetainedMax = bytesRetainedMax
    }

    /// Keeps the arrays of an answer the loop wrote.
    func keep(_ written: consuming HTTPResponse) {
        executor.preconditionOnLoop("AnswerBufferPool.keep")
        kept.keep(written, bytesRetainedMax: bytesRetainedMax)
    }

    /// Emptied arrays for an answer (empty ones when none is kept, or off the loop).
    func take() -> HTTPAnswerBuffers {
        guard executor.isCurrent else { return HTTPAnswerBuffers() }
        return kept.take()
    }
}
