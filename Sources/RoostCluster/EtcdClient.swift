import Glibc

/// The etcd client's timeouts and limits, each named (HOUSE_STYLE 4).
package struct EtcdClientOptions: Hashable, Sendable {
    /// Spec §13.7's `--etcd-timeout-ms` default: a request answers (or fails
    /// `.unavailable`) within this, connect and whole answer included.
    package static let requestTimeoutDefault = Duration.milliseconds(1000)
    /// The longest one connect may take, so that a member that does not
    /// answer SYN leaves time to try the next within one request.
    package static let connectTimeoutDefault = Duration.milliseconds(250)
    /// The largest answer body read: a range of group-log batches (each at
    /// most etcd's 1.5 MiB request limit, 4/3 of it in base64).
    package static let answerBytesMaxDefault = 16 * 1024 * 1024

    /// Connect, send and the whole answer of one request.
    package var requestTimeout: Duration
    /// One connect (also bounded by what is left of `requestTimeout`).
    package var connectTimeout: Duration
    /// The largest answer body, and the longest message of a watch stream.
    package var answerBytesMax: Int
    package var httpLimits: HTTPClientLimits

    package init(
        requestTimeout: Duration = EtcdClientOptions.requestTimeoutDefault,
        connectTimeout: Duration = EtcdClientOptions.connectTimeoutDefault,
        answerBytesMax: Int = EtcdClientOptions.answerBytesMaxDefault, httpLimits: HTTPClientLimits = .default
    ) {
        precondition(requestTimeout > .zero, "the etcd request timeout must be positive, got \(requestTimeout)")
        precondition(connectTimeout > .zero, "the etcd connect timeout must be positive, got \(connectTimeout)")
        precondition(answerBytesMax > 0, "the etcd answer limit must be positive, got \(answerBytesMax)")
        self.requestTimeout = requestTimeout
        self.connectTimeout = connectTimeout
        self.answerBytesMax = answerBytesMax
        self.httpLimits = httpLimits
    }
}

/// A blocking client of etcd 3.4's JSON gateway over our own HTTP/1.1
/// (docs/decisions/0078-etcd-json-gateway-client.md), used by one thread,
/// the cluster's I/O thread (asserted). It keeps one keep-alive connection
/// to the current endpoint; on a connection failure, a timeout or an
/// `.unavailable` answer it moves on to the next endpoint for the next
/// request. Within one request it tries the next endpoint only while nothing
/// was sent (a refused or timed-out connect): a request sent and not
/// answered has an unknown outcome, which only the caller can resolve.
package final class EtcdClient {
    package let endpoints: [EtcdEndpoint]
    package let options: EtcdClientOptions
    private var currentIndex = 0
    private var connection: HTTPClientConnection?
    private var owner = OwnerThread()
    /// The last failure, for the log line of a `perform` that answered `.failed`.
    package private(set) var lastError: EtcdClientError?
    /// How many times the client moved on to another endpoint.
    package private(set) var endpointChanges = 0
    /// Connections opened (keep-alive makes this far smaller than the requests sent).
    package private(set) var connectionsOpened = 0

    package init(endpoints: [EtcdEndpoint], options: EtcdClientOptions = EtcdClientOptions()) {
        precondition(!endpoints.isEmpty, "an etcd client needs an endpoint")
        precondition(
            endpoints.count <= EtcdEndpoint.listCountMax,
            "\(endpoints.count) etcd endpoints, at most \(EtcdEndpoint.listCountMax)")
        self.endpoints = endpoints
        self.options = options
    }

    deinit {
        connection?.close()
    }

    /// The endpoint the next request goes to.
    package var currentEndpoint: EtcdEndpoint { endpoints[currentIndex] }

    /// Closes the connection (a later request opens another).
    package func close() {
        assertOwnerThread()
        connection?.close()
        connection = nil
    }

    // MARK: - Requests

    /// Returns etcd's answer to `request`, every failure as `.failed` (its
    /// detail in `lastError`). Blocks at most `options.requestTimeout`.
    package func perform(_ request: EtcdRequest) -> EtcdResponse {
        do {
            return try send(request)
        } catch {
            lastError = error
            return .failed(error.failure)
        }
    }

    /// Returns etcd's answer to `request`, or throws why there is none.
    package func send(_ request: EtcdRequest) throws(EtcdClientError) -> EtcdResponse {
        let (answer, endpoint) = try exchange(EtcdGatewayJSON.call(for: request))
        return try attributed(to: endpoint) { () throws(EtcdClientError) in
            try EtcdGatewayJSON.response(
                to: request, status: answer.status, body: answer.body, answerBytesMax: options.answerBytesMax)
        }
    }

    /// Returns the keys of `range` (at most `limit`, 0: all) at `revision`
    /// (nil: the newest), linearizable. A compacted revision fails
    /// `.compacted` with that revision as the bound.
    package func range(_ range: EtcdKeyRange, limit: Int = 0, revision: EtcdRevision? = nil)
        throws(EtcdClientError) -> EtcdRangeResult
    {
        let (answer, endpoint) = try exchange(EtcdGatewayJSON.rangeCall(range, limit: limit, revision: revision))
        return try attributed(to: endpoint) { () throws(EtcdClientError) in
            try EtcdGatewayJSON.rangeResult(
                status: answer.status, body: answer.body, asked: revision, answerBytesMax: options.answerBytesMax)
        }
    }

    /// Returns the current endpoint's status (database size, leader, Raft index).
    package func status() throws(EtcdClientError) -> EtcdStatus {
        let (answer, endpoint) = try exchange(EtcdGatewayJSON.statusCall)
        return try attributed(to: endpoint) { () throws(EtcdClientError) in
            try EtcdGatewayJSON.status(status: answer.status, body: answer.body, answerBytesMax: options.answerBytesMax)
        }
    }

    /// Opens a watch of `range` from `start` (nil: from now) on a connection
    /// of its own, and returns once etcd confirmed it (within
    /// `options.requestTimeout`). Its events are read with `next`.
    package func watch(_ range: EtcdKeyRange, from start: EtcdRevision?) throws(EtcdClientError) -> EtcdWatchStream {
        assertOwnerThread()
        let deadline = ContinuousClock.now + options.requestTimeout
        let call = EtcdGatewayJSON.watchCall(range, from: start)
        let (connection, endpoint) = try connect(deadline: deadline)
        do {
            return try EtcdWatchStream(
                connection: connection, endpoint: endpoint, call: call, deadline: deadline,
                messageBytesMax: options.answerBytesMax)
        } catch {
            if error.failure == .unavailable { moveToNextEndpoint() }
            throw error
        }
    }

    // MARK: - Exchanges

    /// Sends `call` and reads the whole answer, on the kept connection or a new one.
    private func exchange(_ call: EtcdGatewayCall) throws(EtcdClientError) -> (HTTPClientAnswer, EtcdEndpoint) {
        assertOwnerThread()
        let deadline = ContinuousClock.now + options.requestTimeout
        let active: HTTPClientConnection
        let endpoint: EtcdEndpoint
        if let kept = connection, kept.isUsable {
            active = kept
            endpoint = currentEndpoint
        } else {
            connection?.close()
            connection = nil
            (active, endpoint) = try connect(deadline: deadline)
            connection = active
        }
        do {
            try active.sendPost(
                path: call.path, hostHeader: endpoint.address.description, body: call.body, deadline: deadline)
            let answer = try active.readAnswer(deadline: deadline, bodyBytesMax: options.answerBytesMax)
            if answer.status >= 500 {
                // This member cannot serve (no leader, stopping): the next request tries another.
                moveToNextEndpoint()
            }
            return (answer, endpoint)
        } catch {
            moveToNextEndpoint()
            if case .answerTooLarge = error {
                throw EtcdClientError(.answerTooLarge, .http(error), endpoint: endpoint.description)
            }
            throw EtcdClientError(.unavailable, .http(error), endpoint: endpoint.description)
        }
    }

    /// Connects to the current endpoint, moving on to the next ones while
    /// they refuse or time out and the deadline allows: nothing was sent yet.
    private func connect(deadline: ContinuousClock.Instant) throws(EtcdClientError) -> (
        HTTPClientConnection, EtcdEndpoint
    ) {
        var lastFailure: EtcdClientError?
        for _ in 0..<endpoints.count {
            let endpoint = currentEndpoint
            let connectDeadline = min(deadline, ContinuousClock.now + options.connectTimeout)
            do {
                let made = try HTTPClientConnection(
                    to: endpoint.address, deadline: connectDeadline, limits: options.httpLimits)
                connectionsOpened += 1
                return (made, endpoint)
            } catch {
                lastFailure = EtcdClientError(.unavailable, .http(error), endpoint: endpoint.description)
                moveToNextEndpoint()
            }
            if ContinuousClock.now >= deadline { break }
        }
        throw lastFailure ?? EtcdClientError(.unavailable, .noEndpointReachable)
    }

    private func moveToNextEndpoint() {
        connection?.close()
        connection = nil
        guard endpoints.count > 1 else { return }
        currentIndex = (currentIndex + 1) % endpoints.count
        endpointChanges += 1
    }

    /// Runs `decode`; a failure it throws names `endpoint`, and an
    /// `.unavailable` one moves on to the next endpoint.
    private func attributed<T>(to endpoint: EtcdEndpoint, _ decode: () throws(EtcdClientError) -> T)
        throws(EtcdClientError) -> T
    {
        do {
            return try decode()
        } catch {
            var named = error
            named.endpoint = endpoint.description
            if named.failure == .unavailable, currentEndpoint == endpoint { moveToNextEndpoint() }
            throw named
        }
    }

    private func assertOwnerThread() {
        owner.check("EtcdClient")
    }
}

/// The thread an object is confined to: the first that used it
/// (HOUSE_STYLE 16); any other crashes the process.
struct OwnerThread {
    private var thread: pthread_t?

    /// Records the calling thread on first use; afterwards requires it.
    mutating func check(_ what: String) {
        let current = pthread_self()
        if let thread {
            precondition(pthread_equal(thread, current) != 0, "\(what) used from a second thread")
        } else {
            thread = current
        }
    }
}
