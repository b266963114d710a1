import RoostPlatform
import RoostTelemetry
import Synchronization

/// Where and how the server listens.
public struct HTTPServerConfiguration: Sendable {
    /// IPv4 address to bind, as a dotted quad.
    public var host: String
    /// Port to bind; 0 picks a free one (see `HTTPServer.start`).
    public var port: UInt16
    /// Event loops (threads), each with its own listening socket. One per core by default.
    public var eventLoopCount: Int
    public var limits: HTTPServerLimits
    /// Where the loops log refusals.
    package var logger: Logger = .standard
    /// The time the loops keep (timeouts, sweeps, the tenant share's
    /// windows): the machine's monotonic clock, or a test's manual one.
    package var clock: any MonotonicClock = SystemMonotonicClock()

    public init(
        host: String = "127.0.0.1", port: UInt16 = 8080, eventLoopCount: Int = onlineProcessorCount(),
        limits: HTTPServerLimits = HTTPServerLimits()
    ) {
        self.host = host
        self.port = port
        self.eventLoopCount = eventLoopCount
        self.limits = limits
    }
}

/// Returns the number of online processors (at least 1).
public func onlineProcessorCount() -> Int {
    PlatformThread.onlineProcessorCount
}

/// A configuration the server refuses to run with.
public struct HTTPServerConfigurationError: Error, Sendable, CustomStringConvertible {
    /// Every broken rule, in words with the values.
    public var problems: [String]

    public var description: String { "invalid HTTP server configuration: " + problems.joined(separator: "; ") }
}

/// An HTTP/1.1 server: one epoll event loop per thread, all accepting on one
/// listening socket that no other process can join. See docs/http.md.
public final class HTTPServer: Sendable {
    private struct State {
        var started = false
        /// The one listening socket; closed after every loop has stopped.
        var listener: FileDescriptor?
        var mailboxes: [LoopMailbox] = []
        var threads: [PlatformThread] = []
    }

    public let configuration: HTTPServerConfiguration
    private let responder: any HTTPResponder
    private let shared: ServerShared
    private let executors: [LoopExecutor]
    private let state = Mutex(State())

    /// Checks the configuration (limits and their relations); binds nothing
    /// yet. Loop `i` runs `executors[i]` (the engine's shards and rounds) on
    /// its thread; with none given, each loop gets an executor of its own.
    package init(
        configuration: HTTPServerConfiguration, responder: any HTTPResponder, executors: [LoopExecutor]
    ) throws {
        var problems = configuration.limits.violations
        if configuration.eventLoopCount < 1 || configuration.eventLoopCount > 256 {
            problems.append("eventLoopCount \(configuration.eventLoopCount) outside 1...256")
        }
        if !executors.isEmpty && executors.count != configuration.eventLoopCount {
            problems.append("\(executors.count) loop executors for eventLoopCount \(configuration.eventLoopCount)")
        }
        if !problems.isEmpty { throw HTTPServerConfigurationError(problems: problems) }
        self.configuration = configuration
        self.responder = responder
        shared = ServerShared(
            connectionsMax: configuration.limits.connectionsMax, reservedMax: configuration.limits.reservedConnections,
            loopCount: configuration.eventLoopCount,
            tenantContentionWindow: configuration.limits.tenantContentionWindow, logger: configuration.logger,
            clock: LoopClock(configuration.clock))
        self.executors =
            executors.isEmpty
            ? try (0..<configuration.eventLoopCount).map { index throws(SystemCallError) in
                try LoopExecutor(index: index)
            } : executors
    }

    /// A server whose loops run executors of their own.
    public convenience init(configuration: HTTPServerConfiguration, responder: any HTTPResponder) throws {
        try self.init(configuration: configuration, responder: responder, executors: [])
    }

    /// Wakes every loop for a round (tests: after moving the injected
    /// manual clock, so that the loops see the new time at once).
    package func wakeLoops() {
        for executor in executors { executor.wake() }
    }

    /// Open connections across all loops (for tests and metrics).
    public var openConnections: Int { shared.openConnections }

    /// Whether a new client would be refused an API call now: the server is
    /// at `connectionsMax` and found nothing to evict (`ServerShared.isSaturated`);
    /// `/readyz` answers 503 `at_capacity` while it holds (decision 0073).
    package var isSaturated: Bool { shared.isSaturated }

    /// Connections registered on their loops that have not sent a byte yet,
    /// summed over the loops (for tests). A connection accepted by one loop
    /// and handed to another is counted in `openConnections` at once but here
    /// only once its loop has taken it.
    package var silentConnections: Int {
        state.withLock { $0.mailboxes }.reduce(0) { $0 + $1.silentConnections.load(ordering: .relaxed) }
    }

    /// Connections and refusals since start, summed over the loops (a scrape).
    public var statistics: HTTPServerStatistics { shared.statistics }

    /// The most bytes any streamed response ever had queued beyond what its
    /// socket accepted (for tests: it stays near `streamBufferBytesMax`).
    package var streamQueuedBytesHighWater: Int { shared.streamQueuedBytesHighWater }

    /// Binds one listening socket, shared by every loop, and starts the loop
    /// threads. Returns the bound port. The socket is bound without
    /// SO_REUSEPORT, so no other process can join it: a second server on the
    /// same address fails here with EADDRINUSE (spec §11) instead of silently
    /// taking half of the connections.
    public func start() throws -> UInt16 {
        try start(on: HTTPServer.bind(configuration))
    }

    /// Binds the listening socket of `configuration` without starting a
    /// server: a process binds first, so that an address in use is refused
    /// before anything else happens, and starts the server on it later.
    package static func bind(_ configuration: HTTPServerConfiguration) throws(SystemCallError) -> BoundListener {
        let listener = try TCPSocket.listen(
            host: configuration.host, port: configuration.port,
            backlog: Int32(clamping: configuration.limits.acceptBacklog), reusePort: false)
        do {
            let port = configuration.port == 0 ? try TCPSocket.localPort(of: listener) : configuration.port
            return BoundListener(descriptor: listener, port: port)
        } catch {
            listener.close()
            throw error
        }
    }

    /// Starts the loop threads on a socket `bind` made; the server owns it
    /// from here on. Returns its port.
    package func start(on bound: BoundListener) throws -> UInt16 {
        try state.withLock { state throws -> UInt16 in
            precondition(!state.started, "HTTPServer.start called twice")
            // Large answers' blocks go back to the kernel when freed (docs/http.md).
            MemoryAllocator.mapLargeBlocks()
            let limits = configuration.limits
            let listener = bound.descriptor
            let port = bound.port
            state.listener = listener
            let loopCount = configuration.eventLoopCount
            // Every mailbox first: a loop hands accepted connections to the others.
            let mailboxes = executors.map {
                LoopMailbox(
                    executor: $0, streamBufferBytesMax: limits.streamBufferBytesMax,
                    bufferBytesRetainedMax: limits.bufferBytesRetainedMax)
            }
            state.mailboxes = mailboxes
            do {
                for loopIndex in 0..<loopCount {
                    let mailbox = mailboxes[loopIndex]
                    let epoll = try Epoll.makeDescriptor()
                    let shared = self.shared
                    let responder = self.responder
                    let thread = try PlatformThread.spawn(name: "roost-loop-\(loopIndex)") {
                        do {
                            let loop = try EventLoop(
                                epoll: Epoll(adopting: epoll), listener: listener, siblings: mailboxes,
                                mailbox: mailbox, shared: shared, responder: responder, limits: limits,
                                clock: shared.clock)
                            loop.run()
                        } catch {
                            preconditionFailure("event loop could not start: \(error)")
                        }
                    }
                    state.threads.append(thread)
                }
            } catch {
                // The listener is closed once the loops that started have stopped.
                if state.threads.isEmpty {
                    listener.close()
                    state.listener = nil
                } else {
                    shared.requestShutdown()
                    for mailbox in state.mailboxes { mailbox.executor.wake() }
                }
                throw error
            }
            state.started = true
            return port
        }
    }

    /// Stops accepting, lets dispatched requests finish and be written (up
    /// to `shutdownDrainTimeout`) while idle keep-alive connections stay open
    /// for one last request each, then closes those and the loops exit.
    /// Returns at once; see `waitUntilStopped`.
    public func beginShutdown() {
        shared.requestShutdown()
        let (mailboxes, listener) = state.withLock { ($0.mailboxes, $0.listener) }
        // Refuse new connections at once; the loops stop polling it as they drain.
        listener?.stopListening()
        for mailbox in mailboxes { mailbox.executor.wake() }
    }

    /// Blocks until every loop thread has ended. Returns at once if the
    /// server never started or another caller already waited.
    public func waitUntilStopped() {
        let threads = state.withLock { state in
            let threads = state.threads
            state.threads = []
            return threads
        }
        for thread in threads { thread.join() }
        // Every loop has stopped polling it (they drop it when they drain).
        let listener = state.withLock { state -> FileDescriptor? in
            defer { state.listener = nil }
            return threads.isEmpty ? nil : state.listener
        }
        listener?.close()
    }
}

/// A listening socket bound by `HTTPServer.bind` and not yet served.
package struct BoundListener: Sendable {
    package let descriptor: FileDescriptor
    package let port: UInt16
}
