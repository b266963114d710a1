import RoostPlatform

/// What the event loop should do next for one connection.
package enum HTTPConnectionAction {
    /// Hand this request to the responder; answer with `answer(_:to:now:)`.
    case dispatch(HTTPRequest, sequence: UInt64)
    /// The request was refused: answer `sequence` with the responder's body for `failure`.
    case refuse(HTTPRequestFailure, sequence: UInt64)
    /// Write `output` to the socket and report with `wrote` or `writeWouldBlock`.
    case write
    /// Every answer is written and the connection ends: shut down the sending
    /// side, keep reading (and discarding) until the peer closes or the linger ends.
    case shutdownWrite
    /// Close the socket now.
    case close
    /// Nothing to do until the socket is readable (`read`) or writable (`write`),
    /// an answer arrives, or a deadline passes.
    case wait(read: Bool, write: Bool)
}

/// The phase of one HTTP/1.1 connection, each case holding only the data
/// valid in it. The first five are "serving" (requests are read, parsed and
/// dispatched); the others end the connection. docs/http.md has the details.
///
/// ```
///  awaitingFirstByte ── first byte ──┐
///                   first byte       ▼     head complete
///  awaitingRequest ───────────▶ readingHead ────────────▶ readingBody
///         ▲                          │ request complete        │
///         │                          ▼                         │
///         └── last answer queued ── awaitingAnswers ◀──────────┘
///            (or to readingHead/readingBody if the next request is arriving)
///
///  serving ── refusal, Connection: close, HTTP/1.0 ──▶ finishingLastRequest
///  awaitingFirstByte, awaitingRequest ── beginDrain ──▶ (same state; its next request is its last)
///  readingHead, readingBody, awaitingAnswers, finishingLastRequest ── beginDrain ──▶ draining ── nothing owed ──▶ (close)
///  awaitingAnswers, finishingLastRequest, draining
///          ── the answer that ends the connection is queued ──▶ closing
///  closing ── output written, shutdownWrite ──▶ lingering ── peer closed or linger over ──▶ (close)
/// ```
package enum HTTPConnectionState: Equatable, Sendable {
    /// The connection was accepted at `since` and no byte has arrived: the
    /// first-byte timeout runs.
    case awaitingFirstByte(since: LoopInstant)
    /// Nothing is owed and no byte of a next request is buffered: the
    /// keep-alive idle timeout runs from `since`.
    case awaitingRequest(since: LoopInstant)
    /// Part of the head of the connection's request number `request` (from 0)
    /// is buffered: the header timeout runs from `since`, its first byte.
    case readingHead(request: Int, since: LoopInstant)
    /// The head of request `request` is complete and its body is arriving:
    /// the body timeout runs from `since`, the end of the head.
    case readingBody(request: Int, since: LoopInstant)
    /// Dispatched requests are not all answered (an answer is queued for
    /// writing only once those before it are): it is the server's turn and
    /// no read timeout applies. Later requests are still
    /// read and parsed (pipelining) within the limits. `continueOwed`: the
    /// request being read expects `100 Continue`, sent once the answers
    /// before it are written.
    case awaitingAnswers(continueOwed: Bool)
    /// The last request dispatched ends the connection (a refusal,
    /// `Connection: close`, HTTP/1.0 without keep-alive): nothing more is
    /// parsed; it and the requests before it are answered in order.
    case finishingLastRequest
    /// The server is shutting down: nothing more is parsed; dispatched
    /// requests are answered, the last with `Connection: close`; with nothing
    /// owed the connection closes.
    case draining
    /// The answer that ends the connection is queued: write it, then shut
    /// down the sending side. Answers for requests from `firstDropped` on are
    /// never sent (the loop aborts their streams).
    case closing(firstDropped: UInt64)
    /// The sending side is shut down since `since`: input is discarded until
    /// the peer closes or `HTTPConnectionMachine.lingerTimeout` passes.
    case lingering(since: LoopInstant, firstDropped: UInt64)
}

/// How a connection was let in.
package enum HTTPAdmission: Equatable, Sendable {
    /// Under `connectionsMax` (possibly in the place of an evicted connection).
    case counted
    /// Beyond the cap, one of `reservedConnections`: one request, to a path
    /// in `reservedPaths`, answered with `Connection: close`.
    case reserved
}

/// How evictable a connection is at the connection cap: smaller is evicted
/// first (decisions 0021 and 0073). Kinds in order: a connection that never
/// sent a byte, then one holding a partial head older than
/// `HTTPServerLimits.partialHeadEvictableAfter`, then one idle between
/// requests. Within a kind the oldest goes first; partial heads go slowest
/// first (the most time per byte received), then oldest. A connection with
/// a request dispatched, waiting for its tenant's turn, answers owed or
/// output queued has no rank: it is never evicted.
package struct HTTPEvictionRank: Comparable, Sendable {
    /// What the connection is doing, in the order connections are evicted.
    package enum Kind: Int, Comparable, Sendable {
        /// It has not sent a byte since it was accepted.
        case neverSpoke = 0
        /// Part of a request head has been arriving for at least `partialHeadEvictableAfter`.
        case partialHead = 1
        /// Nothing owed, nothing queued, no byte of a next request received.
        case idle = 2

        package static func < (a: Kind, b: Kind) -> Bool { a.rawValue < b.rawValue }
    }

    package var kind: Kind
    /// Since when: the accept, the head's first byte, or the last answer queued.
    package var since: LoopInstant
    /// A partial head's bytes received so far (at least 1); 0 for the other kinds.
    package var bytesReceived: Int
    /// A partial head's age at the instant it was ranked; zero for the other kinds.
    package var age: Duration

    package init(kind: Kind, since: LoopInstant, bytesReceived: Int = 0, age: Duration = .zero) {
        precondition(kind != .partialHead || bytesReceived >= 1, "a partial head of \(bytesReceived) bytes")
        self.kind = kind
        self.since = since
        self.bytesReceived = bytesReceived
        self.age = age
    }

    package static func < (a: HTTPEvictionRank, b: HTTPEvictionRank) -> Bool {
        if a.kind != b.kind { return a.kind < b.kind }
        switch a.kind {
        case .partialHead:
            // Slower first: a.age / a.bytes > b.age / b.bytes, without dividing.
            let aSlowness = a.age * b.bytesReceived
            let bSlowness = b.age * a.bytesReceived
            if aSlowness != bSlowness { return aSlowness > bSlowness }
            return a.since < b.since
        case .neverSpoke, .idle:
            return a.since < b.since
        }
    }
}

/// The sans-I/O state of one HTTP/1.1 connection: it parses received bytes,
/// keeps answers in request order, queues output and decides when to stop
/// reading, close, or give up on a slow peer. The event loop performs the I/O.
/// Time comes in as `now` on every call (the loop's clock, a manual clock in
/// tests); the machine never reads a clock.
package struct HTTPConnectionMachine {
    /// How a request is answered.
    private enum Answer {
        case response(HTTPResponse)
        /// A streamed response; `stream` is nil for a HEAD request (head only).
        case stream(status: Int, headers: [(name: String, value: String)], stream: LoopBodyStream?)
    }

    /// One dispatched request waiting for its answer to be written.
    private struct Slot {
        var sequence: UInt64
        var keepAlive: Bool
        var isHead: Bool
        /// HTTP/1.0: a streamed body is delimited by closing the connection.
        var isHTTP10: Bool
        var answer: Answer?
    }

    /// The streamed response whose head is written and whose body is going out.
    /// Its slot stays at the front until the body ends, so later answers wait.
    private struct ActiveStream {
        var stream: LoopBodyStream
        var sequence: UInt64
        var chunked: Bool
        var closeAfter: Bool
    }

    /// Response bytes on their way to the socket, and whether the socket takes them.
    private struct Output {
        /// Those before `offset` are written.
        var bytes: [UInt8] = []
        var offset = 0
        /// The socket refused bytes (EAGAIN or a short write) and has not
        /// reported writable since.
        var isBlocked = false
        /// When the socket last took a byte or became writable: the
        /// write-stall timeout runs from here while `isBlocked`.
        var lastProgress: LoopInstant

        var pendingBytes: Int { bytes.count - offset }

        /// Drops written bytes from the front once they are at least half of the buffer.
        mutating func compact() {
            if offset > 0 && offset * 2 >= bytes.count {
                bytes.removeSubrange(0..<offset)
                offset = 0
            }
        }
    }

    /// How long a closing connection keeps discarding input after its last
    /// answer, so that unread request bytes do not turn the close into a reset
    /// that destroys the answer in flight.
    static let lingerTimeout: Duration = .seconds(2)

    private let limits: HTTPServerLimits
    private var parser: HTTPParser
    /// The connection's phase; see `HTTPConnectionState`.
    package private(set) var state: HTTPConnectionState
    /// The peer closed its sending side (read returned 0). Kept apart from
    /// `state` because a peer may close in any phase.
    private var peerClosed = false
    /// Shutdown began while the connection was idle (nothing owed, nothing
    /// half-received): it stays open while the server drains, so that a
    /// balancer polling `/readyz` on it gets the 503 that says so instead of
    /// a closed connection, and the one request it may still send is its
    /// last (answered with `Connection: close`). Kept apart from `state`: the
    /// connection goes through the serving phases as before.
    private var drainRequested = false
    private var slots: [Slot] = []
    private var slotsHead = 0
    private var nextSequence: UInt64 = 0
    private var activeStreamState: ActiveStream?
    private var output: Output
    /// Streams the machine will never send; the loop aborts them (`takeAbandonedStreams`).
    private var abandonedStreams: [LoopBodyStream] = []
    private let admission: HTTPAdmission
    /// When the connection was accepted: the first-byte timeout runs from here
    /// until a request begins (blank lines before it do not count).
    private let acceptedAt: LoopInstant
    /// A reserved connection's first request is not a probe: the next action is `.close`.
    private var refusedAdmission = false
    /// Requests dispatched or refused whose answers have not arrived; while
    /// serving, at most `unansweredRequestsMax`.
    private var unansweredCount = 0
    /// Body bytes of answers that arrived but wait in their slots (behind an
    /// unanswered request or a stream); they count toward the output budget.
    private var heldAnswerBytes = 0

    package init(limits: HTTPServerLimits, now: LoopInstant, admission: HTTPAdmission = .counted) {
        self.limits = limits
        self.admission = admission
        acceptedAt = now
        parser = HTTPParser(limits: limits)
        state = .awaitingFirstByte(since: now)
        output = Output(lastProgress: now)
    }

    /// Requests dispatched or refused whose answers are not yet written.
    package var pendingAnswers: Int { slots.count - slotsHead }

    /// Queued response bytes not yet written.
    package var pendingOutputBytes: Int { output.pendingBytes }

    /// Where the loop may evict this connection at the connection cap at
    /// `now`; nil when it may not: a request of it is with the responder or
    /// waits for its tenant's turn (both leave an answer owed), a body is
    /// arriving (the request is in progress), output is queued, a head has
    /// been arriving for less than `partialHeadEvictableAfter`, or it is
    /// ending. Depends on `now` only through a partial head's age.
    package func evictionRank(now: LoopInstant) -> HTTPEvictionRank? {
        guard pendingOutputBytes == 0 && activeStreamState == nil && !refusedAdmission && !drainRequested else {
            return nil
        }
        switch state {
        case .awaitingFirstByte(let since): return HTTPEvictionRank(kind: .neverSpoke, since: since)
        case .awaitingRequest(let since): return HTTPEvictionRank(kind: .idle, since: since)
        case .readingHead(_, let since):
            precondition(pendingAnswers == 0, "\(pendingAnswers) answers pending while a head arrives")
            let age = now - since
            guard age >= limits.partialHeadEvictableAfter else { return nil }
            // The head's bytes: the parser keeps them from its first byte until it is complete.
            return HTTPEvictionRank(
                kind: .partialHead, since: since, bytesReceived: max(parser.bufferedBytes, 1), age: age)
        case .readingBody, .awaitingAnswers, .finishingLastRequest, .draining, .closing, .lingering:
            return nil
        }
    }

    /// Whether no request has begun since the accept (blank lines aside).
    package var isAwaitingFirstByte: Bool {
        if case .awaitingFirstByte = state { return true }
        return false
    }

    /// Response bytes the connection holds for its peer: unwritten output
    /// plus answers waiting in their slots. At or above
    /// `writeBufferBytesMax` nothing more is read or dispatched.
    package var queuedBytes: Int { output.pendingBytes + heldAnswerBytes }

    /// The most `queuedBytes` seen before a write: what the connection's
    /// answers made the process allocate at once (the loop returns memory to
    /// the kernel after closing connections that held much).
    package private(set) var queuedBytesHighWater = 0

    /// The capacity of the connection's input and output buffers, in bytes
    /// (what it holds even when they are empty).
    package var bufferCapacityBytes: Int { output.bytes.capacity + parser.bufferCapacityBytes }

    /// Whether the connection has nothing in flight and nothing half-received
    /// (an idle keep-alive connection).
    package var isIdle: Bool { pendingAnswers == 0 && pendingOutputBytes == 0 && parser.phase == .idle }

    /// Whether the server may stop with this connection open: it owes
    /// nothing, has nothing half-received and is not ending (an idle
    /// connection kept open by `beginDrain`, or one that never spoke). The
    /// loop closes such connections when the whole server has drained.
    package var isSettled: Bool {
        guard isIdle && activeStreamState == nil else { return false }
        switch state {
        case .awaitingFirstByte, .awaitingRequest: return true
        case .readingHead, .readingBody, .awaitingAnswers, .finishingLastRequest, .draining, .closing, .lingering:
            return false
        }
    }

    // MARK: - Events from the loop

    /// Takes bytes read from the socket. Once the connection stops parsing
    /// (it ends, or drains) they are discarded.
    package mutating func received(_ bytes: UnsafeRawBufferPointer, now: LoopInstant) {
        switch state {
        case .awaitingFirstByte, .awaitingRequest, .readingHead, .readingBody, .awaitingAnswers:
            parser.append(bytes)
            noteProgress(now)
        case .finishingLastRequest, .draining, .closing, .lingering:
            return
        }
    }

    /// The peer closed its sending side (read returned 0).
    package mutating func receivedEndOfStream() {
        peerClosed = true
    }

    /// Supplies the answer for a dispatched or refused request. Exactly once per sequence.
    package mutating func answer(_ response: consuming HTTPResponse, to sequence: UInt64, now: LoopInstant) {
        _ = fill(sequence, with: .response(response), now: now)
    }

    /// Answers a dispatched request with a streamed response. Returns false if
    /// the body will never be sent (a HEAD request, or a request dropped after
    /// a close-delimited answer): the loop then aborts the stream.
    mutating func answerStream(
        status: Int, headers: [(name: String, value: String)], stream: LoopBodyStream, to sequence: UInt64,
        now: LoopInstant
    ) -> Bool {
        fill(sequence, with: .stream(status: status, headers: headers, stream: stream), now: now)
    }

    /// The stream whose body is being sent, if any; the loop takes chunks from it.
    var activeStream: LoopBodyStream? { activeStreamState?.stream }

    /// Appends body chunks of the active stream (framed if chunked) and, when
    /// `finished`, ends its body and moves on to the answers behind it.
    package mutating func appendStreamBody(_ chunks: [[UInt8]], finished: Bool, now: LoopInstant) {
        guard let active = activeStreamState else { preconditionFailure("stream body with no active stream") }
        output.compact()
        for chunk in chunks where !chunk.isEmpty {
            if active.chunked {
                HTTPResponseWriter.appendChunk(chunk, to: &output.bytes)
            } else {
                output.bytes.append(contentsOf: chunk)
            }
        }
        if finished {
            if active.chunked { output.bytes.append(contentsOf: HTTPResponseWriter.lastChunk) }
            activeStreamState = nil
            precondition(
                slots[slotsHead].sequence == active.sequence,
                "stream of request \(active.sequence) ended but request \(slots[slotsHead].sequence) is in front")
            slotsHead += 1
            if active.closeAfter {
                closeAfterSlot(active.sequence)
            } else {
                flushAnsweredSlots()
            }
        }
        noteProgress(now)
    }

    /// Every stream the machine holds (active, waiting in a slot, or
    /// abandoned); the loop aborts them when it closes the connection.
    mutating func takeAllStreams() -> [LoopBodyStream] {
        var streams = abandonedStreams
        abandonedStreams = []
        if let active = activeStreamState { streams.append(active.stream) }
        for slot in slots[slotsHead...] {
            if case .stream(_, _, let stream?) = slot.answer { streams.append(stream) }
        }
        return streams
    }

    /// Streams that will never be sent; the loop aborts them.
    mutating func takeAbandonedStreams() -> [LoopBodyStream] {
        if abandonedStreams.isEmpty { return [] }
        defer { abandonedStreams = [] }
        return abandonedStreams
    }

    /// Records `answer` in its slot and writes what is now in order. Returns
    /// false when a stream answer will not be sent.
    private mutating func fill(_ sequence: UInt64, with answer: consuming Answer, now: LoopInstant) -> Bool {
        switch state {
        case .closing(let firstDropped), .lingering(_, let firstDropped):
            // The connection ends before this request's turn.
            precondition(
                sequence >= firstDropped && sequence < nextSequence,
                "answer for request \(sequence) after the connection's last answer (dropped \(firstDropped)..<\(nextSequence))"
            )
            return false
        case .awaitingFirstByte, .awaitingRequest, .readingHead, .readingBody, .awaitingAnswers, .finishingLastRequest,
            .draining:
            break
        }
        precondition(slotsHead < slots.count, "answer for request \(sequence) but none is pending")
        let first = slots[slotsHead].sequence
        precondition(sequence >= first, "request \(sequence) answered twice (oldest pending is \(first))")
        let index = slotsHead + Int(sequence - first)
        precondition(index < slots.count, "answer for request \(sequence) that was never dispatched")
        precondition(slots[index].answer == nil, "request \(sequence) answered twice")
        precondition(unansweredCount > 0, "answer for request \(sequence) with none unanswered")
        unansweredCount -= 1
        if case .response(let response) = answer { heldAnswerBytes += response.body.count }
        var accepted = true
        if case .stream(let status, let headers, _) = answer, slots[index].isHead {
            slots[index].answer = .stream(status: status, headers: headers, stream: nil)
            accepted = false
        } else {
            slots[index].answer = answer
        }
        if activeStreamState == nil { flushAnsweredSlots() }
        noteProgress(now)
        return accepted
    }

    /// The socket took `count` bytes of `output`.
    package mutating func wrote(_ count: Int, now: LoopInstant) {
        precondition(count >= 0 && count <= pendingOutputBytes, "wrote \(count) of \(pendingOutputBytes) bytes")
        if count > 0 { output.lastProgress = now }
        output.offset += count
        if output.offset == output.bytes.count {
            // An idle connection keeps a small buffer, not its largest answer's.
            // A stream keeps its buffer until it ends: its next chunk needs
            // the same room, and a buffer above the allocator's mapped-block
            // size (`MemoryAllocator`) came back as fresh pages, each a fault
            // (13 % of an export's CPU, issue 25).
            output.bytes.removeAll(
                keepingCapacity: output.bytes.capacity <= limits.bufferBytesRetainedMax || activeStreamState != nil)
            output.offset = 0
        } else {
            // A short write means the socket buffer is full: wait for writability.
            output.isBlocked = true
        }
        noteProgress(now)
    }

    /// The socket refused more bytes (EAGAIN).
    package mutating func writeWouldBlock() {
        output.isBlocked = true
    }

    /// The socket became writable again.
    package mutating func writable(now: LoopInstant) {
        output.isBlocked = false
        output.lastProgress = now
    }

    /// The server is shutting down. A connection waiting for a request (no
    /// answer owed, no byte of a request received; its last answer may still
    /// be going out) stays as it is, and its next request is its last: the
    /// loop closes it once the server has drained. Any other parses nothing
    /// more (a half-received request is dropped), finishes what was
    /// dispatched, then closes.
    package mutating func beginDrain() {
        switch state {
        case .awaitingFirstByte, .awaitingRequest:
            precondition(pendingAnswers == 0, "\(pendingAnswers) answers pending in state \(state)")
            drainRequested = true
        case .readingHead, .readingBody, .awaitingAnswers, .finishingLastRequest:
            state = .draining
        case .draining, .closing, .lingering:
            break  // already ending
        }
    }

    /// Calls `body` with the bytes waiting to be written. `mutating` though it
    /// changes nothing: called on a machine a class holds, a non-mutating
    /// method with a closure made the caller copy the whole machine (its
    /// eleven references retained, then released) once a write (issue 25).
    package mutating func withOutput<Result>(_ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        output.bytes.withUnsafeBytes { all in
            body(UnsafeRawBufferPointer(rebasing: all[output.offset...]))
        }
    }

    /// An answer whose bytes are in the output now, for its loop to reuse
    /// its arrays (`takeWrittenResponse`); one at a time, and none whose
    /// body is larger than `bufferBytesRetainedMax` (an idle connection
    /// holds no large answer).
    private var writtenResponse: HTTPResponse?

    /// Takes the answer written last, if the loop has not taken it yet.
    package mutating func takeWrittenResponse() -> HTTPResponse? {
        writtenResponse.take()
    }

    /// Gives a dispatched request's body back once the responder is done
    /// with it (`HTTPParser.recycle(body:)`).
    package mutating func recycle(body: consuming [UInt8]) {
        parser.recycle(body: body)
    }

    // MARK: - Decisions

    /// Returns the next thing the loop should do. Call repeatedly until `.wait`
    /// or `.close`. `bodyLimit` is the responder's limit for a request head.
    package mutating func nextAction(
        now: LoopInstant, bodyLimit: (HTTPRequestHead) -> Int
    ) -> HTTPConnectionAction {
        if refusedAdmission { return .close }
        if mayParse {
            switch parser.next(bodyLimit: bodyLimit) {
            case .request(let request):
                if admission == .reserved && !isProbe(request.head) {
                    refusedAdmission = true
                    return .close
                }
                // A reserved connection serves one request; so does one the drain found idle.
                let keepAlive = request.head.keepAlive && admission == .counted && !drainRequested
                let sequence = enqueueSlot(
                    keepAlive: keepAlive, isHead: request.head.method == .head,
                    isHTTP10: request.head.version == .http10)
                if !keepAlive { state = .finishingLastRequest }
                noteProgress(now)
                return .dispatch(request, sequence: sequence)
            case .failure(let failure):
                let sequence = enqueueSlot(keepAlive: false, isHead: false, isHTTP10: false)
                state = .finishingLastRequest
                return .refuse(failure, sequence: sequence)
            case .expectsContinue:
                if pendingAnswers == 0 {
                    output.compact()
                    output.bytes.append(contentsOf: HTTPResponseWriter.continueResponse)
                } else {
                    // Sent once the answers before this request are written.
                    guard case .awaitingAnswers = state else {
                        preconditionFailure("\(pendingAnswers) answers pending in state \(state)")
                    }
                    state = .awaitingAnswers(continueOwed: true)
                }
                noteProgress(now)
            case nil:
                // The head may have completed without the body: the body timeout starts now.
                noteProgress(now)
            }
        }
        if pendingOutputBytes > 0 {
            queuedBytesHighWater = max(queuedBytesHighWater, queuedBytes)
            return output.isBlocked ? .wait(read: false, write: true) : .write
        }
        switch state {
        case .awaitingFirstByte, .awaitingRequest, .readingHead, .readingBody:
            precondition(pendingAnswers == 0, "\(pendingAnswers) answers pending in state \(state)")
            return peerClosed ? .close : .wait(read: mayRead, write: false)
        case .awaitingAnswers, .finishingLastRequest:
            precondition(pendingAnswers > 0, "no answer pending in state \(state)")
            return .wait(read: mayRead, write: false)
        case .draining:
            return pendingAnswers == 0 ? .close : .wait(read: false, write: false)
        case .closing(let firstDropped):
            state = .lingering(since: now, firstDropped: firstDropped)
            return .shutdownWrite
        case .lingering:
            return peerClosed ? .close : .wait(read: true, write: false)
        }
    }

    /// Returns whether the connection has waited too long for its peer; the loop then closes it.
    package func hasTimedOut(now: LoopInstant) -> Bool {
        if case .lingering(let since, _) = state { return now - since > Self.lingerTimeout }
        if pendingOutputBytes > 0 && output.isBlocked {
            return now - output.lastProgress > limits.writeStallTimeout
        }
        switch state {
        case .awaitingFirstByte(let since): return now - since > limits.firstByteWait
        case .awaitingRequest(let since): return now - since > limits.keepAliveIdleTimeout
        case .readingHead(_, let since): return now - since > limits.headerReadTimeout
        case .readingBody(_, let since): return now - since > limits.bodyReadTimeout
        // The server's turn: answers are owed, or the connection ends once they are written.
        case .awaitingAnswers, .finishingLastRequest, .draining, .closing, .lingering: return false
        }
    }

    // MARK: - Internals

    /// Whether the next request may be parsed: the connection is serving and
    /// within its pipelining, unanswered-request and output-byte limits.
    /// Checked before every parse, so a single answer may take the output
    /// past the budget but nothing starts after it until the peer reads.
    private var mayParse: Bool {
        switch state {
        case .awaitingFirstByte, .awaitingRequest, .readingHead, .readingBody, .awaitingAnswers:
            return pendingAnswers < limits.pipelinedRequestsMax && unansweredCount < limits.unansweredRequestsMax
                && queuedBytes < limits.writeBufferBytesMax
        case .finishingLastRequest, .draining, .closing, .lingering:
            return false
        }
    }

    /// Whether the socket may be read. Beyond what may be parsed now, a
    /// connection waiting for its answer (`unansweredRequestsMax`) keeps
    /// reading up to one read buffer of input, so that a client sending one
    /// request at a time keeps its epoll interest unchanged; over the output
    /// budget or the pipelining cap nothing is read.
    private var mayRead: Bool {
        if peerClosed { return false }
        if mayParse { return true }
        switch state {
        case .awaitingFirstByte, .awaitingRequest, .readingHead, .readingBody, .awaitingAnswers:
            return pendingAnswers < limits.pipelinedRequestsMax && queuedBytes < limits.writeBufferBytesMax
                && parser.bufferedBytes < limits.readBufferBytes
        case .finishingLastRequest, .draining, .closing, .lingering:
            return false
        }
    }

    /// Whether a reserved connection may serve this request: a GET or HEAD
    /// of one of `reservedPaths` (the query does not matter).
    private func isProbe(_ head: HTTPRequestHead) -> Bool {
        switch head.method {
        case .get, .head: return limits.reservedPaths.contains { head.path == $0 }
        case .post, .put, .patch, .delete, .options, .other: return false
        }
    }

    private var isDraining: Bool {
        if case .draining = state { return true }
        return false
    }

    private mutating func enqueueSlot(keepAlive: Bool, isHead: Bool, isHTTP10: Bool) -> UInt64 {
        let sequence = nextSequence
        nextSequence += 1
        if slotsHead == slots.count {
            slots.removeAll(keepingCapacity: true)
            slotsHead = 0
        }
        slots.append(Slot(sequence: sequence, keepAlive: keepAlive, isHead: isHead, isHTTP10: isHTTP10, answer: nil))
        unansweredCount += 1
        // The request is complete (or refused): a 100 Continue would be pointless now.
        if case .awaitingAnswers(continueOwed: true) = state { state = .awaitingAnswers(continueOwed: false) }
        return sequence
    }

    /// Serializes answers from the front of the queue, stopping at the first
    /// request still unanswered or at a streamed response (its body must end
    /// first), so output is always in request order.
    private mutating func flushAnsweredSlots() {
        precondition(activeStreamState == nil, "flushing answers behind an active stream")
        // Each answer taken out of its slot (moved: a copy retained its body
        // and headers, and the slot released them again).
        while slotsHead < slots.count, let answer = slots[slotsHead].answer.take() {
            let slot = slots[slotsHead]
            let isLast = slotsHead + 1 == slots.count
            output.compact()
            switch consume answer {
            case .response(let response):
                slotsHead += 1
                heldAnswerBytes -= response.body.count
                precondition(heldAnswerBytes >= 0, "held answer bytes \(heldAnswerBytes) < 0")
                let close = !slot.keepAlive || (isDraining && isLast)
                HTTPResponseWriter.append(response, keepAlive: !close, isHead: slot.isHead, to: &output.bytes)
                if writtenResponse == nil, response.body.capacity <= limits.bufferBytesRetainedMax {
                    writtenResponse = response
                }
                if close {
                    closeAfterSlot(slot.sequence)
                    return
                }
            case .stream(let status, let headers, let stream):
                let chunked = !slot.isHTTP10
                let close = !slot.keepAlive || !chunked || (isDraining && isLast)
                HTTPResponseWriter.appendStreamHead(
                    status: status, headers: headers, keepAlive: !close, chunked: chunked, to: &output.bytes)
                if let stream {
                    // The slot stays at the front until the body ends.
                    activeStreamState = ActiveStream(
                        stream: stream, sequence: slot.sequence, chunked: chunked, closeAfter: close)
                    return
                }
                slotsHead += 1  // HEAD: the head is the whole answer
                if close {
                    closeAfterSlot(slot.sequence)
                    return
                }
            }
        }
        if slotsHead == slots.count {
            slots.removeAll(keepingCapacity: true)
            slotsHead = 0
            if case .awaitingAnswers(continueOwed: true) = state {
                state = .awaitingAnswers(continueOwed: false)
                output.bytes.append(contentsOf: HTTPResponseWriter.continueResponse)
            }
        }
    }

    /// The answer to request `sequence`, just queued, ends the connection:
    /// parse nothing more and drop the requests behind it (their streams are
    /// abandoned).
    private mutating func closeAfterSlot(_ sequence: UInt64) {
        let firstDropped = sequence + 1
        for slot in slots[slotsHead...] {
            precondition(slot.sequence >= firstDropped, "request \(slot.sequence) pending behind the last answer")
            if case .stream(_, _, let stream?) = slot.answer { abandonedStreams.append(stream) }
        }
        slots.removeAll()
        slotsHead = 0
        // Answers still to come for the dropped requests are discarded on arrival.
        unansweredCount = 0
        heldAnswerBytes = 0
        state = .closing(firstDropped: firstDropped)
    }

    /// Moves to the wait that applies now, restarting its timer when the kind
    /// of wait changes (a new request begins, its head completes, or the last
    /// answer went out). Only serving phases have read timeouts.
    private mutating func noteProgress(_ now: LoopInstant) {
        switch state {
        case .awaitingFirstByte, .awaitingRequest, .readingHead, .readingBody:
            if pendingAnswers > 0 {
                state = .awaitingAnswers(continueOwed: false)
                return
            }
        case .awaitingAnswers:
            if pendingAnswers > 0 { return }
        case .finishingLastRequest, .draining, .closing, .lingering:
            return
        }
        let request = parser.requestsParsed
        switch parser.phase {
        case .idle:
            // Blank lines before the first request line do not make a connection speak.
            if nextSequence == 0 {
                state = .awaitingFirstByte(since: acceptedAt)
                return
            }
            if case .awaitingRequest = state { return }
            state = .awaitingRequest(since: now)
        case .head:
            if case .readingHead(request, _) = state { return }
            state = .readingHead(request: request, since: now)
        case .body:
            if case .readingBody(request, _) = state { return }
            state = .readingBody(request: request, since: now)
        case .failed:
            preconditionFailure("the parser failed while the connection is \(state)")
        }
    }
}
