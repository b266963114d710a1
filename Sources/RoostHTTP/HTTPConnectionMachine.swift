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
    /// One dispatched request waiting for its answer to be written.
    private struct Slot {
        var sequence: UInt64
        var keepAlive: Bool
        var isHead: Bool
        var response: HTTPResponse?
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
        precondition(slotsHead < slots.count, "answer for request \(sequence) but none is pending")
        let first = slots[slotsHead].sequence
        precondition(sequence >= first, "request \(sequence) answered twice (oldest pending is \(first))")
        let index = slotsHead + Int(sequence - first)
        precondition(index < slots.count, "answer for request \(sequence) that was never dispatched")
        precondition(slots[index].response == nil, "request \(sequence) answered twice")
        slots[index].response = response
        flushAnsweredSlots()
        noteProgress(now)
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
                let sequence = enqueueSlot(keepAlive: request.head.keepAlive, isHead: request.head.method == .head)
                if !request.head.keepAlive { stopParsing = true }
                noteProgress(now)
                return .dispatch(request, sequence: sequence)
            case .failure(let failure):
                let sequence = enqueueSlot(keepAlive: false, isHead: false)
                stopParsing = true
                noteProgress(now)
                return .refuse(failure, sequence: sequence)
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

    private mutating func enqueueSlot(keepAlive: Bool, isHead: Bool) -> UInt64 {
        let sequence = nextSequence
        nextSequence += 1
        if slotsHead == slots.count {
            slots.removeAll(keepingCapacity: true)
            slotsHead = 0
        }
        slots.append(Slot(sequence: sequence, keepAlive: keepAlive, isHead: isHead, response: nil))
        return sequence
    }

    /// Serializes answers from the front of the queue, stopping at the first
    /// request still unanswered, so output is always in request order.
    private mutating func flushAnsweredSlots() {
        while slotsHead < slots.count, let response = slots[slotsHead].response {
            let slot = slots[slotsHead]
            slots[slotsHead].response = nil
            slotsHead += 1
            let isLast = slotsHead == slots.count
            let close = !slot.keepAlive || (draining && isLast)
            if outputOffset > 0 && outputOffset * 2 >= outputBytes.count {
                outputBytes.removeSubrange(0..<outputOffset)
                outputOffset = 0
            }
            HTTPResponseWriter.append(response, keepAlive: !close, isHead: slot.isHead, to: &outputBytes)
            if close {
                closeAfterOutput = true
                stopParsing = true
                slots.removeAll()
                slotsHead = 0
                return
            }
        }
        if slotsHead == slots.count {
            slots.removeAll(keepingCapacity: true)
            slotsHead = 0
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
