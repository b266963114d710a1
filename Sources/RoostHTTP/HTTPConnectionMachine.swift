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

/// The sans-I/O state of one HTTP/1.1 connection: it parses received bytes,
/// keeps answers in request order, queues output and decides when to stop
/// reading, close, or give up on a slow peer. The event loop performs the I/O.
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
        var chunked: Bool
        var closeAfter: Bool
    }

    /// How long a closing connection keeps discarding input after its last
    /// answer, so that unread request bytes do not turn the close into a reset
    /// that destroys the answer in flight.
    static let lingerTimeout: Duration = .seconds(2)

    private let limits: HTTPServerLimits
    private var parser: HTTPParser
    private var slots: [Slot] = []
    private var slotsHead = 0
    private var nextSequence: UInt64 = 0
    /// Response bytes; those before `outputOffset` are written.
    private var outputBytes: [UInt8] = []
    private var outputOffset = 0
    /// Parse no further requests (a refusal, `Connection: close`, draining).
    private var stopParsing = false
    /// An answer with `Connection: close` is queued: close once output is written.
    private var closeAfterOutput = false
    private var peerClosed = false
    private var writeBlocked = false
    private var draining = false
    private var lingerStart: ContinuousClock.Instant?
    private var activeStreamState: ActiveStream?
    /// A `100 Continue` is owed but earlier answers are still unwritten.
    private var continueOwed = false
    /// After a close-delimited answer, answers for requests from this sequence
    /// on are dropped (their streams aborted by the loop).
    private var discardFromSequence: UInt64?
    /// Streams the machine will never send; the loop aborts them (`takeAbandonedStreams`).
    private var abandonedStreams: [LoopBodyStream] = []
    /// The start of the current wait, for the timeout that applies to it.
    private var waitStart: ContinuousClock.Instant
    private var waitKey: WaitKey
    private var lastWriteProgress: ContinuousClock.Instant

    private struct WaitKey: Equatable {
        var phase: HTTPParserPhase
        var requestsParsed: Int
        var slotsPending: Int
    }

    package init(limits: HTTPServerLimits, now: ContinuousClock.Instant) {
        self.limits = limits
        parser = HTTPParser(limits: limits)
        waitStart = now
        lastWriteProgress = now
        waitKey = WaitKey(phase: .idle, requestsParsed: 0, slotsPending: 0)
    }

    /// Requests dispatched or refused whose answers are not yet written.
    package var pendingAnswers: Int { slots.count - slotsHead }

    /// Queued response bytes not yet written.
    package var pendingOutputBytes: Int { outputBytes.count - outputOffset }

    /// Whether the connection has nothing in flight and nothing half-received
    /// (an idle keep-alive connection).
    package var isIdle: Bool { pendingAnswers == 0 && pendingOutputBytes == 0 && parser.phase == .idle }

    // MARK: - Events from the loop

    /// Takes bytes read from the socket.
    package mutating func received(_ bytes: UnsafeRawBufferPointer, now: ContinuousClock.Instant) {
        if lingerStart != nil || stopParsing { return }
        parser.append(bytes)
        noteProgress(now)
    }

    /// The peer closed its sending side (read returned 0).
    package mutating func receivedEndOfStream() {
        peerClosed = true
    }

    /// Supplies the answer for a dispatched or refused request. Exactly once per sequence.
    package mutating func answer(_ response: HTTPResponse, to sequence: UInt64, now: ContinuousClock.Instant) {
        _ = fill(sequence, with: .response(response), now: now)
    }

    /// Answers a dispatched request with a streamed response. Returns false if
    /// the body will never be sent (a HEAD request, or a request dropped after
    /// a close-delimited answer): the loop then aborts the stream.
    mutating func answerStream(
        status: Int, headers: [(name: String, value: String)], stream: LoopBodyStream, to sequence: UInt64,
        now: ContinuousClock.Instant
    ) -> Bool {
        fill(sequence, with: .stream(status: status, headers: headers, stream: stream), now: now)
    }

    /// The stream whose body is being sent, if any; the loop takes chunks from it.
    var activeStream: LoopBodyStream? { activeStreamState?.stream }

    /// Appends body chunks of the active stream (framed if chunked) and, when
    /// `finished`, ends its body and moves on to the answers behind it.
    package mutating func appendStreamBody(_ chunks: [[UInt8]], finished: Bool, now: ContinuousClock.Instant) {
        guard let active = activeStreamState else { preconditionFailure("stream body with no active stream") }
        compactOutput()
        for chunk in chunks where !chunk.isEmpty {
            if active.chunked {
                HTTPResponseWriter.appendChunk(chunk, to: &outputBytes)
            } else {
                outputBytes.append(contentsOf: chunk)
            }
        }
        if finished {
            if active.chunked { outputBytes.append(contentsOf: HTTPResponseWriter.lastChunk) }
            activeStreamState = nil
            slotsHead += 1
            if active.closeAfter {
                closeAfterSlot()
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
    private mutating func fill(_ sequence: UInt64, with answer: Answer, now: ContinuousClock.Instant) -> Bool {
        if let discardFromSequence, sequence >= discardFromSequence {
            return false  // the connection ends before this request's turn
        }
        precondition(slotsHead < slots.count, "answer for request \(sequence) but none is pending")
        let first = slots[slotsHead].sequence
        precondition(sequence >= first, "request \(sequence) answered twice (oldest pending is \(first))")
        let index = slotsHead + Int(sequence - first)
        precondition(index < slots.count, "answer for request \(sequence) that was never dispatched")
        precondition(slots[index].answer == nil, "request \(sequence) answered twice")
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
    package mutating func wrote(_ count: Int, now: ContinuousClock.Instant) {
        precondition(count >= 0 && count <= pendingOutputBytes, "wrote \(count) of \(pendingOutputBytes) bytes")
        if count > 0 { lastWriteProgress = now }
        outputOffset += count
        if outputOffset == outputBytes.count {
            outputBytes.removeAll(keepingCapacity: outputBytes.capacity <= limits.writeBufferBytesMax)
            outputOffset = 0
        } else {
            // A short write means the socket buffer is full: wait for writability.
            writeBlocked = true
        }
        noteProgress(now)
    }

    /// The socket refused more bytes (EAGAIN).
    package mutating func writeWouldBlock() {
        writeBlocked = true
    }

    /// The socket became writable again.
    package mutating func writable(now: ContinuousClock.Instant) {
        writeBlocked = false
        lastWriteProgress = now
    }

    /// The server is shutting down: parse nothing more, finish what was
    /// dispatched, then close.
    package mutating func beginDrain() {
        draining = true
        stopParsing = true
    }

    /// Calls `body` with the bytes waiting to be written.
    package func withOutput<Result>(_ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        outputBytes.withUnsafeBytes { all in
            body(UnsafeRawBufferPointer(rebasing: all[outputOffset...]))
        }
    }

    // MARK: - Decisions

    /// Returns the next thing the loop should do. Call repeatedly until `.wait`
    /// or `.close`. `bodyLimit` is the responder's limit for a request head.
    package mutating func nextAction(
        now: ContinuousClock.Instant, bodyLimit: (HTTPRequestHead) -> Int
    ) -> HTTPConnectionAction {
        if mayParse {
            switch parser.next(bodyLimit: bodyLimit) {
            case .request(let request):
                let sequence = enqueueSlot(
                    keepAlive: request.head.keepAlive, isHead: request.head.method == .head,
                    isHTTP10: request.head.version == .http10)
                if !request.head.keepAlive { stopParsing = true }
                noteProgress(now)
                return .dispatch(request, sequence: sequence)
            case .failure(let failure):
                let sequence = enqueueSlot(keepAlive: false, isHead: false, isHTTP10: false)
                stopParsing = true
                noteProgress(now)
                return .refuse(failure, sequence: sequence)
            case .expectsContinue:
                if pendingAnswers == 0 {
                    compactOutput()
                    outputBytes.append(contentsOf: HTTPResponseWriter.continueResponse)
                } else {
                    continueOwed = true  // sent once the answers before this request are written
                }
                noteProgress(now)
            case nil:
                // The head may have completed without the body: the body timeout starts now.
                noteProgress(now)
            }
        }
        if pendingOutputBytes > 0 {
            return writeBlocked ? .wait(read: false, write: true) : .write
        }
        if lingerStart != nil {
            return peerClosed ? .close : .wait(read: true, write: false)
        }
        if closeAfterOutput {
            lingerStart = now
            return .shutdownWrite
        }
        let nothingPending = pendingAnswers == 0
        if nothingPending && (peerClosed || draining) { return .close }
        return .wait(read: mayRead, write: false)
    }

    /// Returns whether the connection has waited too long for its peer; the loop then closes it.
    package func hasTimedOut(now: ContinuousClock.Instant) -> Bool {
        if let lingerStart { return now - lingerStart > Self.lingerTimeout }
        if pendingOutputBytes > 0 && writeBlocked {
            return now - lastWriteProgress > limits.writeStallTimeout
        }
        // While answers are pending it is the server's turn, not the peer's.
        if pendingAnswers > 0 { return false }
        let waited = now - waitStart
        switch parser.phase {
        case .idle: return waited > limits.keepAliveIdleTimeout
        case .head: return waited > limits.headerReadTimeout
        case .body: return waited > limits.bodyReadTimeout
        case .failed: return false
        }
    }

    // MARK: - Internals

    private var mayParse: Bool {
        !stopParsing && !closeAfterOutput && pendingAnswers < limits.pipelinedRequestsMax
            && pendingOutputBytes < limits.writeBufferBytesMax
    }

    private var mayRead: Bool {
        mayParse && !peerClosed
    }

    private mutating func enqueueSlot(keepAlive: Bool, isHead: Bool, isHTTP10: Bool) -> UInt64 {
        let sequence = nextSequence
        nextSequence += 1
        if slotsHead == slots.count {
            slots.removeAll(keepingCapacity: true)
            slotsHead = 0
        }
        slots.append(Slot(sequence: sequence, keepAlive: keepAlive, isHead: isHead, isHTTP10: isHTTP10, answer: nil))
        // The request is complete (or refused): a 100 Continue would be pointless now.
        continueOwed = false
        return sequence
    }

    /// Serializes answers from the front of the queue, stopping at the first
    /// request still unanswered or at a streamed response (its body must end
    /// first), so output is always in request order.
    private mutating func flushAnsweredSlots() {
        precondition(activeStreamState == nil, "flushing answers behind an active stream")
        while slotsHead < slots.count, let answer = slots[slotsHead].answer {
            let slot = slots[slotsHead]
            let isLast = slotsHead + 1 == slots.count
            compactOutput()
            switch answer {
            case .response(let response):
                slots[slotsHead].answer = nil
                slotsHead += 1
                let close = !slot.keepAlive || (draining && isLast)
                HTTPResponseWriter.append(response, keepAlive: !close, isHead: slot.isHead, to: &outputBytes)
                if close {
                    closeAfterSlot()
                    return
                }
            case .stream(let status, let headers, let stream):
                let chunked = !slot.isHTTP10
                let close = !slot.keepAlive || !chunked || (draining && isLast)
                HTTPResponseWriter.appendStreamHead(
                    status: status, headers: headers, keepAlive: !close, chunked: chunked, to: &outputBytes)
                slots[slotsHead].answer = nil
                if let stream {
                    // The slot stays at the front until the body ends.
                    activeStreamState = ActiveStream(stream: stream, chunked: chunked, closeAfter: close)
                    return
                }
                slotsHead += 1  // HEAD: the head is the whole answer
                if close {
                    closeAfterSlot()
                    return
                }
            }
        }
        if slotsHead == slots.count {
            slots.removeAll(keepingCapacity: true)
            slotsHead = 0
            if continueOwed {
                continueOwed = false
                outputBytes.append(contentsOf: HTTPResponseWriter.continueResponse)
            }
        }
    }

    /// The answer just written ends the connection: parse nothing more and
    /// drop the requests behind it (their streams are abandoned).
    private mutating func closeAfterSlot() {
        closeAfterOutput = true
        stopParsing = true
        continueOwed = false
        if slotsHead < slots.count {
            discardFromSequence = slots[slotsHead].sequence
            for slot in slots[slotsHead...] {
                if case .stream(_, _, let stream?) = slot.answer { abandonedStreams.append(stream) }
            }
        }
        slots.removeAll()
        slotsHead = 0
    }

    /// Drops written bytes from the front of the output once they are at least half of it.
    private mutating func compactOutput() {
        if outputOffset > 0 && outputOffset * 2 >= outputBytes.count {
            outputBytes.removeSubrange(0..<outputOffset)
            outputOffset = 0
        }
    }

    /// Restarts the wait clock whenever the connection moves to a new kind of wait
    /// (a new request begins, its head completes, or the last answer went out).
    private mutating func noteProgress(_ now: ContinuousClock.Instant) {
        let key = WaitKey(phase: parser.phase, requestsParsed: parser.requestsParsed, slotsPending: pendingAnswers)
        if key != waitKey {
            waitKey = key
            waitStart = now
        }
    }
}
