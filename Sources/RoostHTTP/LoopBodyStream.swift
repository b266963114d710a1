import Synchronization

/// The server's stream for one request: a mutex-guarded queue between the
/// producer (any thread) and the connection's event loop. The producer's
/// writes wake the loop through its mailbox; the loop takes chunks as the
/// connection's output has room (`take`) and calls the producer back.
final class LoopBodyStream: HTTPBodyStream {
    private enum Phase {
        case open
        case finished
        case aborted
    }

    private struct State {
        var chunks: [[UInt8]] = []
        var queuedBytes = 0
        var waiter: (@Sendable (HTTPBodyStreamSignal) -> Void)?
        var phase = Phase.open
        /// A wake-up is posted and the loop has not taken since.
        var wakePending = false
    }

    /// What the loop took from the stream in one `take`.
    struct Taken {
        var chunks: [[UInt8]]
        /// The producer finished and every chunk is taken: end the body.
        var finished: Bool
        /// The body was aborted (by the producer or the server).
        var aborted: Bool
        /// The producer's callback, to call with `.writable` (outside the lock).
        var waiter: (@Sendable (HTTPBodyStreamSignal) -> Void)?
        /// Bytes still queued in the stream after this take.
        var queuedBytes: Int
    }

    let mailbox: LoopMailbox
    let connectionKey: UInt64
    let sequence: UInt64
    /// `HTTPServerLimits.streamBufferBytesMax`.
    let bufferBytesMax: Int
    private let state = Mutex(State())

    init(mailbox: LoopMailbox, connectionKey: UInt64, sequence: UInt64, bufferBytesMax: Int) {
        precondition(bufferBytesMax > 0, "stream buffer limit \(bufferBytesMax) must be positive")
        self.mailbox = mailbox
        self.connectionKey = connectionKey
        self.sequence = sequence
        self.bufferBytesMax = bufferBytesMax
    }

    func write(_ chunk: [UInt8], whenWritable: @escaping @Sendable (HTTPBodyStreamSignal) -> Void) {
        let outcome: (accepted: Bool, wake: Bool) = state.withLock { state in
            if state.phase == .aborted { return (false, false) }
            precondition(state.phase == .open, "HTTPBodyStream.write after finish (request \(sequence))")
            precondition(
                state.waiter == nil,
                "HTTPBodyStream.write before the previous write's whenWritable (request \(sequence))")
            if !chunk.isEmpty {
                state.chunks.append(chunk)
                state.queuedBytes += chunk.count
            }
            state.waiter = whenWritable
            let wake = !state.wakePending
            state.wakePending = true
            return (true, wake)
        }
        if !outcome.accepted {
            whenWritable(.aborted)
            return
        }
        if outcome.wake { postWakeup() }
    }

    func finish() {
        let wake: Bool = state.withLock { state in
            if state.phase == .aborted { return false }
            precondition(state.phase == .open, "HTTPBodyStream.finish called twice (request \(sequence))")
            state.phase = .finished
            let wake = !state.wakePending
            state.wakePending = true
            return wake
        }
        if wake { postWakeup() }
    }

    func abort() {
        let waiter = markAborted()
        // The loop must learn of it to cut the connection.
        postWakeup()
        waiter?(.aborted)
    }

    var isAborted: Bool { state.withLock { $0.phase == .aborted } }

    /// Bytes written by the producer and not yet taken by the loop.
    var queuedBytes: Int { state.withLock { $0.queuedBytes } }

    /// The server no longer wants the body (connection closed, HEAD, shutdown):
    /// drops what is queued and tells a waiting producer. Idempotent.
    func abortFromServer() {
        markAborted()?(.aborted)
    }

    /// Moves chunks to the loop while the connection's output (`outputBytes`
    /// pending) stays within `bufferBytesMax`; a chunk larger than that goes
    /// alone into an empty output. Returns the producer's callback once every
    /// queued chunk is taken. Called on the loop thread. O(chunks taken).
    func take(outputBytes: Int) -> Taken {
        state.withLock { state in
            state.wakePending = false
            if state.phase == .aborted {
                return Taken(chunks: [], finished: false, aborted: true, waiter: nil, queuedBytes: 0)
            }
            var taken = 0
            var count = 0
            for chunk in state.chunks {
                let fits = outputBytes + taken + chunk.count <= bufferBytesMax
                if !fits && (count > 0 || outputBytes > 0) { break }
                taken += chunk.count
                count += 1
            }
            let chunks = Array(state.chunks.prefix(count))
            state.chunks.removeFirst(count)
            state.queuedBytes -= taken
            precondition(state.queuedBytes >= 0, "stream queue went negative: \(state.queuedBytes)")
            let drained = state.chunks.isEmpty
            var waiter: (@Sendable (HTTPBodyStreamSignal) -> Void)?
            // A finished stream hands its last callback over with its last chunk.
            if drained && (outputBytes + taken < bufferBytesMax || state.phase == .finished) {
                waiter = state.waiter
                state.waiter = nil
            }
            return Taken(
                chunks: chunks, finished: drained && state.phase == .finished, aborted: false, waiter: waiter,
                queuedBytes: state.queuedBytes)
        }
    }

    private func markAborted() -> (@Sendable (HTTPBodyStreamSignal) -> Void)? {
        state.withLock { state in
            if state.phase == .aborted { return nil }
            state.phase = .aborted
            state.chunks = []
            state.queuedBytes = 0
            let waiter = state.waiter
            state.waiter = nil
            return waiter
        }
    }

    private func postWakeup() {
        mailbox.post(Delivery(connectionKey: connectionKey, sequence: sequence, payload: .streamReady(self)))
    }
}
