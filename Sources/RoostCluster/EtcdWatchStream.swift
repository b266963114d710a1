import Glibc
import Synchronization

/// Cancels a watch from any thread: shuts the socket down (never closes it,
/// so its number cannot be reused under the reading thread), which wakes a
/// `next` waiting on it. Closing stays with the stream's owner.
package final class EtcdWatchCanceller: Sendable {
    private struct State {
        var descriptor: Int32
        var isClosed = false
        var isCancelled = false
    }

    private let state: Mutex<State>

    init(descriptor: Int32) {
        state = Mutex(State(descriptor: descriptor))
    }

    /// Ends the watch: the owner's `next` throws `.unavailable` (`.http(.cancelled)`).
    package func cancel() {
        state.withLock { state in
            guard !state.isClosed, !state.isCancelled else { return }
            state.isCancelled = true
            _ = shutdown(state.descriptor, Int32(SHUT_RDWR))
        }
    }

    /// Whether `cancel` was called.
    package var isCancelled: Bool { state.withLock { $0.isCancelled } }

    /// Runs `close` (which closes the descriptor) so that no `cancel` can
    /// act on the number afterwards.
    func closing(_ close: () -> Void) {
        state.withLock { state in
            guard !state.isClosed else { return }
            state.isClosed = true
            close()
        }
    }
}

/// A watch of a key range on its own connection: etcd's `/v3/watch`, a
/// POST answered by a chunked stream of JSON messages, one per line. Read
/// by one thread with `next`; cancelled from any thread with `canceller`.
/// Once it threw, it is finished: open another from the revision after the
/// last event seen.
package final class EtcdWatchStream {
    /// The endpoint the watch runs on.
    package let endpoint: EtcdEndpoint
    /// Cancels the watch from another thread.
    package let canceller: EtcdWatchCanceller
    private let connection: HTTPClientConnection
    private let messageBytesMax: Int
    /// Body bytes received and not yet split into messages.
    private var pending: [UInt8] = []
    private var finished: EtcdClientError?
    private var owner = OwnerThread()

    /// Sends the watch's create request on `connection` and waits until
    /// `deadline` for etcd to confirm it.
    init(
        connection: HTTPClientConnection, endpoint: EtcdEndpoint, call: EtcdGatewayCall,
        deadline: ContinuousClock.Instant, messageBytesMax: Int
    ) throws(EtcdClientError) {
        precondition(call.path == EtcdGatewayJSON.Route.watch, "a watch stream opened on \(call.path)")
        self.connection = connection
        self.endpoint = endpoint
        self.messageBytesMax = messageBytesMax
        self.canceller = EtcdWatchCanceller(descriptor: connection.descriptor.rawValue)
        do throws(EtcdClientError) {
            try http {
                () throws(HTTPClientError) in
                try connection.sendPost(
                    path: call.path, hostHeader: endpoint.address.description, body: call.body, deadline: deadline)
            }
            let head = try http { () throws(HTTPClientError) in try connection.readHead(deadline: deadline) }
            guard head.status == 200 else {
                var body: [UInt8] = []
                while body.count < messageBytesMax,
                    let piece = try http({ () throws(HTTPClientError) in
                        try connection.readBodyPiece(deadline: deadline)
                    })
                {
                    body.append(contentsOf: piece)
                }
                var error = EtcdGatewayJSON.errorAnswer(
                    status: head.status, body: body, answerBytesMax: messageBytesMax, compacted: nil)
                error.endpoint = endpoint.description
                throw error
            }
        } catch {
            close()
            throw error
        }
        switch try nextMessage(deadline: deadline) {
        case .created?:
            return
        case nil:
            close()
            throw EtcdClientError(.unavailable, .http(.answerTimedOut), endpoint: endpoint.description)
        case .compacted(let revision)?:
            // etcd 3.4.23 sends `created` first; a compaction in the same
            // message is the same answer.
            throw finish(EtcdClientError(.compacted(compactRevision: revision), .watchCancelled("compacted")))
        case .cancelled(let reason)?:
            throw finish(EtcdClientError(.unavailable, .watchCancelled(reason)))
        case .events?:
            close()
            throw .malformed("watch answered before it was created")
        }
    }

    deinit {
        close()
    }

    /// Closes the connection (once); a later `next` throws.
    package func close() {
        canceller.closing { connection.close() }
        if finished == nil {
            finished = EtcdClientError(.unavailable, .http(.cancelled), endpoint: endpoint.description)
        }
    }

    /// Returns the next batch of events (one etcd message, in revision
    /// order), or `[]` when none arrived within `timeout`. Throws
    /// `.compacted(compactRevision:)` when the watch's revision was compacted
    /// away, `.unavailable` when the connection failed, etcd cancelled the
    /// watch, or `canceller` was used; every later call throws the same.
    package func next(timeout: Duration) throws(EtcdClientError) -> [EtcdEvent] {
        owner.check("EtcdWatchStream")
        let deadline = ContinuousClock.now + timeout
        while true {
            guard let message = try nextMessage(deadline: deadline) else { return [] }
            switch message {
            case .events(let events, _):
                // An empty batch is a progress notification: wait on.
                if !events.isEmpty { return events }
            case .created:
                continue
            case .compacted(let revision):
                throw finish(EtcdClientError(.compacted(compactRevision: revision), .watchCancelled("compacted")))
            case .cancelled(let reason):
                throw finish(EtcdClientError(.unavailable, .watchCancelled(reason)))
            }
        }
    }

    /// Returns the next message, or nil when none is complete by `deadline`.
    private func nextMessage(deadline: ContinuousClock.Instant) throws(EtcdClientError) -> EtcdWatchMessage? {
        if let finished { throw finished }
        while true {
            if let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(pending[..<newline])
                pending.removeSubrange(...newline)
                if line.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\r") }) { continue }
                do {
                    return try EtcdGatewayJSON.watchMessage(line, answerBytesMax: messageBytesMax)
                } catch {
                    throw finish(error)
                }
            }
            guard pending.count <= messageBytesMax else {
                throw finish(EtcdClientError(.unavailable, .http(.answerTooLarge(limitBytes: messageBytesMax))))
            }
            let piece: [UInt8]?
            do {
                piece = try connection.readStreamPiece(deadline: deadline)
            } catch .answerTimedOut {
                return nil
            } catch {
                throw finish(EtcdClientError(.unavailable, .http(canceller.isCancelled ? .cancelled : error)))
            }
            guard let piece else {
                throw finish(EtcdClientError(.unavailable, .http(canceller.isCancelled ? .cancelled : .closedByPeer)))
            }
            pending.append(contentsOf: piece)
        }
    }

    /// Runs one step of the HTTP exchange; its failure is `.unavailable`.
    private func http<T>(_ step: () throws(HTTPClientError) -> T) throws(EtcdClientError) -> T {
        do {
            return try step()
        } catch {
            throw EtcdClientError(.unavailable, .http(error), endpoint: endpoint.description)
        }
    }

    /// Ends the stream with `error` (named with the endpoint) and returns it.
    private func finish(_ error: EtcdClientError) -> EtcdClientError {
        var named = error
        named.endpoint = endpoint.description
        finished = named
        canceller.closing { connection.close() }
        return named
    }
}
