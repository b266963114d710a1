import Glibc
import RoostPlatform
import Synchronization

/// One connection owned by a loop: its socket, identity and state machine.
final class LoopConnection {
    let socket: FileDescriptor
    /// `id << 32 | fd`, unique for the loop's lifetime.
    let key: UInt64
    /// The place it holds in `ServerShared`: under the cap, or in the reserve.
    let admission: HTTPAdmission
    var machine: HTTPConnectionMachine
    var interest: EpollEvents = .readable
    /// Counted in `HTTPServerStatistics.writeBlockedConnections`: its socket
    /// takes no more output, and it has no request in progress or waiting
    /// for its turn (the loop has nothing to do for it until the peer reads).
    var countedWriteBlocked = false
    /// The peer, read once at accept; every request of the connection carries it.
    let peerAddress: IPAddress?
    /// Counted in its loop's `LoopMailbox.silentConnections`: it has not sent a byte.
    var countedSilent = false
    /// Its requests in progress (dispatched, deferred, not answered) and their tenants.
    var inProgress: [(sequence: UInt64, tenant: HTTPTenant)] = []
    /// Its request read and waiting in its tenant's queue for its turn
    /// (`TenantShare`): the responder has not seen it yet.
    var waitingRequest: (request: HTTPRequest, sequence: UInt64, tenant: HTTPTenant)?

    init(socket: FileDescriptor, key: UInt64, admission: HTTPAdmission, machine: HTTPConnectionMachine) {
        self.socket = socket
        self.key = key
        self.admission = admission
        self.machine = machine
        self.peerAddress = TCPSocket.peerAddress(of: socket)
    }
}

/// A single-threaded epoll loop: accepts on the server's one listener (shared
/// by every loop, polled level-triggered by each),
/// reads, drives each connection's state machine, writes, and enforces
/// deadlines with a periodic sweep. Confined to the thread that runs `run()`.
final class EventLoop {
    private static let listenerToken = UInt64.max
    private static let wakeupToken = UInt64.max - 1
    /// Connections accepted per listener wake-up, so one loop cannot starve its clients.
    private static let acceptsPerWakeMax = 64
    /// Pause after EMFILE/ENFILE before accepting again.
    private static let acceptPause: Duration = .milliseconds(100)
    /// Queued bytes (their high-water marks) of connections closed since the
    /// last `MemoryAllocator.returnFreePages`, past which the next sweep
    /// gives malloc's free pages back to the kernel.
    static let returnFreePagesAfterBytes = 4 * 1024 * 1024
    /// Eviction victims chosen per scan of the connections (O(open
    /// connections)): a burst of newcomers at the cap costs one scan per this
    /// many, not one each.
    private static let evictionCandidatesPerScan = 64

    private let epoll: Epoll
    /// The server's listener; nil once this loop stopped accepting (drain).
    /// The server closes it after every loop has stopped.
    private var listener: FileDescriptor?
    /// Every loop's mailbox, in loop order: an accepted connection goes to
    /// the loop whose turn it is (`ServerShared.loopForNextConnection`).
    private let siblings: [LoopMailbox]
    private let mailbox: LoopMailbox
    private let shared: ServerShared
    private let responder: any HTTPResponder
    /// `responder.bodyLimitBytes(for:)`, made once: a method reference made
    /// at each call allocated its context every time (issue 25).
    private let bodyLimit: @Sendable (HTTPRequestHead) -> Int
    /// The events that mean a socket has something to read (or is gone).
    private static let readEvents: EpollEvents = [.readable, .error, .hangUp]
    private let limits: HTTPServerLimits
    /// The server's clock (injected: `HTTPServerConfiguration.clock`).
    private let clock: LoopClock
    private let sweepInterval: Duration

    private var connections: [LoopConnection?] = []
    private var openCount = 0
    private var nextConnectionID: UInt64 = 1
    private let readBuffer: UnsafeMutableRawBufferPointer
    private var nextSweep: LoopInstant
    private var acceptPausedUntil: LoopInstant?
    private var drainDeadline: LoopInstant?
    /// This loop counted itself settled in `ServerShared` (`loopSettled`).
    private var settled = false
    /// Mailbox passes per round before the loop defers the rest to the next
    /// round (answers posted on this thread while answers are handled).
    private static let deliveryPassesMax = 4
    /// A request was dispatched since the executor's last round.
    private var dispatchedSinceRound = false
    /// Requests one round dispatches before the engine takes them: past it
    /// the loop runs the engine's round and the answers, then goes on with
    /// the rest of the `epoll_wait` batch. A round's requests finish together,
    /// so an unbounded round would let one app's burst delay every request
    /// read with it (docs/performance.md, "Fairness between apps").
    static let requestsPerRoundMax = 32
    /// Requests dispatched since the last engine round of this batch.
    private var dispatchedInRound = 0
    /// See `returnFreePagesAfterBytes`.
    private var closedQueuedBytesSinceTrim = 0
    /// Requests in progress per tenant and the connections waiting for their turn.
    private var share: TenantShare
    /// Tenants with a request finished since their queue was last served.
    private var tenantsToServe: [HTTPTenant] = []
    /// Waiting requests that got their turn, taken from their connections:
    /// started in the next round, after the sockets epoll reports, unless
    /// their connection closed meanwhile. `tenant` is the one whose share
    /// each counts toward until then (nil when the loops stopped holding back).
    private var wokenToStart: [WokenRequest] = []

    struct WokenRequest {
        let connection: LoopConnection
        let request: HTTPRequest
        let sequence: UInt64
        let tenant: HTTPTenant?
    }
    /// The most evictable connections found by the last scan, most
    /// evictable last; valid only within the batch of accepts or hand-overs
    /// that made it (one `now`).
    private var evictionCandidates = EvictionShortlist<LoopConnection>(capacity: EventLoop.evictionCandidatesPerScan)
    /// The array the mailbox's answers are taken into, traded with the
    /// mailbox's queue at every round (`LoopMailbox.takeAll(into:)`); empty between rounds.
    private var deliveryStorage: [Delivery] = []

    init(
        epoll: Epoll, listener: FileDescriptor, siblings: [LoopMailbox], mailbox: LoopMailbox, shared: ServerShared,
        responder: any HTTPResponder, limits: HTTPServerLimits, clock: LoopClock
    ) throws(SystemCallError) {
        self.clock = clock
        precondition(siblings.indices.contains(mailbox.loopIndex), "loop \(mailbox.loopIndex) not among its siblings")
        precondition(siblings[mailbox.loopIndex] === mailbox, "loop \(mailbox.loopIndex)'s mailbox out of place")
        self.epoll = epoll
        self.listener = listener
        self.siblings = siblings
        self.mailbox = mailbox
        self.shared = shared
        self.responder = responder
        bodyLimit = { [responder] head in responder.bodyLimitBytes(for: head) }
        self.limits = limits
        readBuffer = .allocate(byteCount: limits.readBufferBytes, alignment: 16)
        sweepInterval = min(max(limits.shortestTimeout / 4, .milliseconds(5)), .seconds(1))
        nextSweep = clock.now + sweepInterval
        share = TenantShare(limits: limits, now: clock.now)
        try epoll.add(listener, events: .readable, token: Self.listenerToken)
        try epoll.add(mailbox.executor.wakeup.descriptor, events: .readable, token: Self.wakeupToken)
    }

    deinit {
        readBuffer.deallocate()
    }

    /// Runs until shutdown has drained every connection or the drain deadline
    /// passed. Each round: the sockets and wake-ups `epoll_wait` returned
    /// (requests are dispatched; commands for the engine queue up), then the
    /// executor's round (jobs, then the engine hands each shard the round's
    /// commands in one hop and releases acknowledged outcomes), then the
    /// answers in the mailbox.
    func run() {
        mailbox.executor.adoptCurrentThread()
        defer { mailbox.executor.releaseThread() }
        while true {
            let count: Int
            let waitStart = clock.now
            do {
                count = try epoll.wait(timeoutMs: waitTimeoutMs(now: waitStart))
            } catch {
                preconditionFailure("epoll_wait failed: \(error)")
            }
            var now = clock.now
            if share.noteIdle(now - waitStart, now: now) { shared.noteLoopBusy(share.loopIsBusy) }
            dispatchedInRound = 0
            // The requests that got their tenant's turn start after the
            // sockets epoll reported: a quiet tenant's request read now goes
            // first.
            let woken = wokenToStart
            wokenToStart.removeAll(keepingCapacity: true)
            for index in 0..<count {
                let (token, events) = epoll.event(at: index)
                switch token {
                case Self.listenerToken: acceptConnections(now: now)
                case Self.wakeupToken: mailbox.executor.wakeup.drain()
                default: handleSocket(fd: Int32(truncatingIfNeeded: token), events: events, now: now)
                }
                finishRoundIfFull(moreToCome: index + 1 < count || !woken.isEmpty, now: &now)
            }
            for (index, next) in woken.enumerated() {
                if let tenant = next.tenant { share.wokenStarted(tenant) }
                // Not closed meanwhile (its descriptor then maybe reused).
                let fd = Int(next.connection.socket.rawValue)
                if fd < connections.count, connections[fd] === next.connection {
                    start(next.request, sequence: next.sequence, of: next.connection, now: now)
                    drive(next.connection, now: now)
                }
                finishRoundIfFull(moreToCome: index + 1 < woken.count, now: &now)
            }
            finishRound(now: now)
            if now >= nextSweep { sweep(now: now) }
            serveWaitingTenants(now: now)
            if let pausedUntil = acceptPausedUntil, now >= pausedUntil { resumeAccepting() }
            if let deadline = drainDeadline, hasDrained(now: now, deadline: deadline) { break }
        }
        if share.loopIsBusy { shared.noteLoopBusy(false) }  // a stopped loop holds nobody back
        for case let connection? in connections { close(connection) }
        for handed in mailbox.takeHandedOver() {
            handed.socket.close()
            switch handed.admission {
            case .counted: shared.releaseConnection()
            case .atCap: break  // never counted
            }
        }
        // Streams started for connections that are gone: their producers must stop.
        var deliveries: [Delivery] = []
        mailbox.takeAll(into: &deliveries)
        for delivery in deliveries {
            switch delivery.payload {
            case .streamStart(_, _, let stream), .streamReady(let stream): stream.abortFromServer()
            case .response: break
            }
        }
        precondition(openCount == 0, "loop stopped with \(openCount) connections counted open")
    }

    /// Once `requestsPerRoundMax` requests were dispatched and more of the
    /// batch is to come, runs the engine's round and the answers first: what
    /// stands between a request and its shard stays bounded.
    private func finishRoundIfFull(moreToCome: Bool, now: inout LoopInstant) {
        guard dispatchedInRound >= Self.requestsPerRoundMax && moreToCome else { return }
        finishRound(now: now)
        dispatchedInRound = 0
        now = clock.now
    }

    /// Returns whether this draining loop may stop: the deadline passed, it
    /// has no connection left, or it owes nothing on any connection and
    /// neither do the other loops (idle connections stay open until then, so
    /// that a request on one, such as a `/readyz` poll, is answered while
    /// the server drains). The first time it owes nothing it counts itself
    /// settled; the last loop to do so wakes the others. O(open connections).
    private func hasDrained(now: LoopInstant, deadline: LoopInstant) -> Bool {
        if now >= deadline { return true }
        guard wokenToStart.isEmpty else { return false }
        for case let connection? in connections where !connection.machine.isSettled { return false }
        if !settled {
            settled = true
            if shared.loopSettled(mailbox.loopIndex) {
                for sibling in siblings where sibling !== mailbox { sibling.executor.wake() }
            }
        }
        return openCount == 0 || shared.allLoopsSettled
    }

    private func waitTimeoutMs(now: LoopInstant) -> Int32 {
        if !wokenToStart.isEmpty { return 0 }
        var until = nextSweep
        if let pausedUntil = acceptPausedUntil { until = min(until, pausedUntil) }
        if let deadline = drainDeadline { until = min(until, deadline) }
        let ownTimers = LoopExecutor.wholeMillisecondsRoundedUp(until - now)
        // The engine's timers on this loop (change-feed long polls), by its own clock.
        let engineTimers = mailbox.executor.timerWaitMilliseconds()
        return engineTimers < 0 ? ownTimers : min(ownTimers, engineTimers)
    }

    // MARK: - Accepting

    private func acceptConnections(now: LoopInstant) {
        guard let listener else { return }
        evictionCandidates.removeAll()
        defer { evictionCandidates.removeAll() }
        for _ in 0..<Self.acceptsPerWakeMax {
            let accepted: NonBlockingResult<FileDescriptor>
            do {
                accepted = try TCPSocket.accept(listener)
            } catch {
                switch error.errno {
                case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                    // Out of descriptors: stop polling the listener for a moment
                    // instead of spinning on a level-triggered readiness.
                    epoll.remove(listener)
                    acceptPausedUntil = now + Self.acceptPause
                    shared.refused(.acceptPaused, loop: mailbox.loopIndex)
                    return
                default:
                    continue  // ECONNABORTED and the like concern one peer only.
                }
            }
            switch accepted {
            case .wouldBlock:
                return
            case .done(let socket):
                guard shared.reserveConnection() else {
                    admitAtCap(socket, search: HandedOverConnection.AtCapSearch(), now: now)
                    continue
                }
                shared.noteSaturated(false)  // a place was free
                let target = shared.loopForNextConnection(loopCount: siblings.count)
                if target == mailbox.loopIndex {
                    register(socket, admission: .counted, now: now)
                } else {
                    siblings[target].handOver(HandedOverConnection(socket: socket, admission: .counted))
                }
            }
        }
    }

    /// Lets in a connection accepted at `connectionsMax`, not counted yet, in
    /// the place of an evictable one: a connection that never spoke, on
    /// whichever loop holds one (this loop's first); else this loop's most
    /// evictable (`HTTPEvictionRank`: the slowest partial head older than
    /// `partialHeadEvictableAfter`, then the one idle longest between
    /// requests), else the next loop's, in turn. When no loop has an
    /// evictable connection, the server cannot take a new API client
    /// (`ServerShared.isSaturated`, which `/readyz` reports); the last loop
    /// gives the newcomer a reserved place (a probe only,
    /// `HTTPServerLimits.reservedConnections`) or closes it. At most two
    /// hand-overs per loop.
    private func admitAtCap(
        _ socket: FileDescriptor, search: HandedOverConnection.AtCapSearch, now: LoopInstant
    ) {
        var search = search
        let loopCount = siblings.count
        precondition(search.loopsWithoutIdle < loopCount, "at-cap search past every loop: \(search)")
        if shared.reserveConnection() {
            shared.noteSaturated(false)
            register(socket, admission: .counted, now: now)  // a place came free meanwhile
            return
        }
        if drainDeadline == nil {
            if mailbox.silentConnections.load(ordering: .relaxed) > 0, let victim = nextEvictionVictim(now: now) {
                evict(victim, for: socket, now: now)
                return
            }
            if search.silentRedirects < loopCount,
                let holder = siblings.firstIndex(where: {
                    $0 !== mailbox && $0.silentConnections.load(ordering: .relaxed) > 0
                })
            {
                search.silentRedirects += 1
                siblings[holder].handOver(HandedOverConnection(socket: socket, admission: .atCap(search)))
                return
            }
            if let victim = nextEvictionVictim(now: now) {
                evict(victim, for: socket, now: now)
                return
            }
        }
        search.loopsWithoutIdle += 1
        if search.loopsWithoutIdle < loopCount {
            let next = (mailbox.loopIndex + 1) % loopCount
            siblings[next].handOver(HandedOverConnection(socket: socket, admission: .atCap(search)))
            return
        }
        // No loop had anything to evict: a new API client would be refused now.
        shared.noteSaturated(true)
        if shared.reserveProbeConnection() {
            register(socket, admission: .reserved, now: now)
        } else {
            socket.close()
            shared.refused(.connectionsMax, loop: mailbox.loopIndex)
        }
    }

    /// Closes `victim` and gives its counted place to the newcomer `socket`.
    private func evict(_ victim: LoopConnection, for socket: FileDescriptor, now: LoopInstant) {
        shared.noteSaturated(false)
        close(victim, releasing: false)
        shared.refused(.evictedAtCap, loop: mailbox.loopIndex)
        register(socket, admission: .counted, now: now)
    }

    /// Returns this loop's most evictable connection at `now`, or nil. Scans
    /// the connections (O(open connections)) only when the candidates of the
    /// last scan in this batch are used up.
    private func nextEvictionVictim(now: LoopInstant) -> LoopConnection? {
        if evictionCandidates.isEmpty { scanEvictionCandidates(now: now) }
        while let (rank, connection) = evictionCandidates.popMostEvictable() {
            let fd = Int(connection.socket.rawValue)
            // Still open and still as evictable as when ranked (nothing ran on it since).
            guard connections[fd] === connection, connection.machine.evictionRank(now: now) == rank else { continue }
            return connection
        }
        return nil
    }

    /// Keeps the `evictionCandidatesPerScan` most evictable counted
    /// connections at `now`. O(open connections × log of the candidates kept).
    private func scanEvictionCandidates(now: LoopInstant) {
        evictionCandidates.removeAll()
        for case let connection? in connections where connection.admission == .counted {
            guard let rank = connection.machine.evictionRank(now: now) else { continue }
            // The machine's rule protects these; the loop's books must agree.
            precondition(
                connection.inProgress.isEmpty && connection.waitingRequest == nil,
                "connection \(connection.key) evictable with \(connection.inProgress.count) requests in progress")
            evictionCandidates.offer(rank, connection)
        }
    }

    /// Starts serving an accepted connection, already counted in `shared`
    /// (`admission` says where).
    private func register(_ socket: FileDescriptor, admission: HTTPAdmission, now: LoopInstant) {
        guard drainDeadline == nil else {
            // Handed over while this loop drains: it takes nothing new.
            socket.close()
            shared.release(admission)
            return
        }
        let fd = Int(socket.rawValue)
        let key = nextConnectionID << 32 | UInt64(UInt32(bitPattern: socket.rawValue))
        nextConnectionID += 1
        do {
            try epoll.add(socket, events: .readable, token: UInt64(fd))
        } catch {
            socket.close()
            shared.release(admission)
            return
        }
        if fd >= connections.count {
            connections.append(contentsOf: repeatElement(nil, count: max(fd + 1 - connections.count, 64)))
        }
        precondition(connections[fd] == nil, "descriptor \(fd) accepted while still registered")
        let connection = LoopConnection(
            socket: socket, key: key, admission: admission,
            machine: HTTPConnectionMachine(limits: limits, now: now, admission: admission))
        if admission == .counted {
            connection.countedSilent = true
            mailbox.silentConnections.wrappingAdd(1, ordering: .relaxed)
        }
        connections[fd] = connection
        openCount += 1
        shared.accepted(loop: mailbox.loopIndex)
    }

    private func resumeAccepting() {
        acceptPausedUntil = nil
        guard let listener, drainDeadline == nil else { return }
        do {
            try epoll.add(listener, events: .readable, token: Self.listenerToken)
        } catch {
            acceptPausedUntil = clock.now + Self.acceptPause
        }
    }

    // MARK: - Answers (from this and other threads), shutdown

    /// The end of a round that began at `now`: the responder is told (it
    /// renders what it left for this round, within its budget), then the
    /// executor's round (the engine takes the commands dispatched so far),
    /// then the answers. Answering a pipelined request can dispatch the next
    /// one; its work is taken in another pass, a few at most, then the loop
    /// wakes itself for the next round.
    private func finishRound(now: LoopInstant) {
        responder.willFinishRound(loop: mailbox.loopIndex, startedAt: now, clock: clock)
        for _ in 0..<Self.deliveryPassesMax {
            dispatchedSinceRound = false
            mailbox.executor.runRound()
            // Answers handed over may post more on this thread (no eventfd
            // signal then): another pass takes them.
            let delivered = handleDeliveries(now: now)
            if !dispatchedSinceRound && !delivered { return }
        }
        mailbox.executor.wake()
    }

    /// Registers the connections other loops handed over and hands every
    /// answer in the mailbox to its connection; returns whether there were any.
    private func handleDeliveries(now: LoopInstant) -> Bool {
        evictionCandidates.removeAll()
        for handed in mailbox.takeHandedOver() {
            switch handed.admission {
            case .counted: register(handed.socket, admission: .counted, now: now)
            case .atCap(let search): admitAtCap(handed.socket, search: search, now: now)
            }
        }
        evictionCandidates.removeAll()
        // Taken out of the property while delivering: a delivery can finish
        // a round, which comes back here (it then starts from an empty array).
        var taken: [Delivery] = []
        swap(&taken, &deliveryStorage)
        mailbox.takeAll(into: &taken)
        // The drain begins before the answers taken go out: an answer posted
        // after the shutdown began is taken with it in view, and must already
        // say `Connection: close` (it went out keep-alive when the drain began
        // after delivering, in the round the loop learnt of the shutdown).
        if shared.isShuttingDown && drainDeadline == nil { beginDrain(now: now) }
        let delivered = !taken.isEmpty
        deliver(&taken, now: now)
        deliveryStorage = taken
        return delivered
    }

    /// Hands each delivery to its connection, moved (a copy of an answer
    /// retained its body and headers and released them again); leaves
    /// `deliveries` empty with its capacity.
    private func deliver(_ deliveries: inout [Delivery], now: LoopInstant) {
        deliveries.moveEach { delivery in
            let (key, sequence) = (delivery.connectionKey, delivery.sequence)
            let fd = Int(UInt32(truncatingIfNeeded: key))
            let payload = delivery.payload
            // The connection may have closed meanwhile: its answer is dropped, its stream aborted.
            guard fd < connections.count, let connection = connections[fd], connection.key == key else {
                switch payload {
                case .streamStart(_, _, let stream), .streamReady(let stream): stream.abortFromServer()
                case .response: break
                }
                return
            }
            switch consume payload {
            case .response(let response):
                finishInProgress(sequence, of: connection)
                connection.machine.answer(response, to: sequence, now: now)
                keepWrittenAnswer(of: connection)
            case .streamStart(let status, let headers, let stream):
                finishInProgress(sequence, of: connection)
                let accepted = connection.machine.answerStream(
                    status: status, headers: headers, stream: stream, to: sequence, now: now)
                if !accepted { stream.abortFromServer() }
            case .streamReady:
                break  // drive takes from the active stream
            }
            drive(connection, now: now)
        }
    }

    /// Keeps the arrays of the answer `connection` wrote last for the
    /// answers this loop renders next (`AnswerBufferPool`).
    private func keepWrittenAnswer(of connection: LoopConnection) {
        if let written = connection.machine.takeWrittenResponse() { mailbox.answerBuffers.keep(written) }
    }

    private func beginDrain(now: LoopInstant) {
        drainDeadline = now + limits.shutdownDrainTimeout
        acceptPausedUntil = nil
        if let listener {
            // Shared with the other loops: the server closes it once all stopped.
            epoll.remove(listener)
            self.listener = nil
        }
        // Requests waiting for their turn start now: their answers are owed.
        for key in share.takeAllWaiting() {
            let woken = takeWaitingRequest(key, tenant: nil)
            start(woken.request, sequence: woken.sequence, of: woken.connection, now: now)
        }
        for case let connection? in connections {
            connection.machine.beginDrain()
            drive(connection, now: now)
        }
    }

    // MARK: - Tenants' shares (TenantShare)

    /// The tenant whose turn a request just read must wait for, or nil if
    /// it starts now: the loops hold tenants back and the tenant its
    /// credential counts for has its share in progress on this loop, or
    /// others of the tenant wait already (they go first). Only with one
    /// unanswered request per connection: then a waiting request is its
    /// connection's only one, and nothing after it can start first.
    private func tenantToWaitFor(_ head: HTTPRequestHead, now: LoopInstant) -> HTTPTenant? {
        guard limits.unansweredRequestsMax == 1, shared.holdsTenantsBack(now: now),
            let credential = TenantShare.credential(of: head),
            let tenant = share.tenant(of: credential)
        else { return nil }
        let mustWait = !share.mayStart(tenant) || share.waitingCount(of: tenant) > 0
        return mustWait ? tenant : nil
    }

    /// The answer to request `sequence` of `connection` arrived: it is no
    /// longer in progress, and its tenant's queue may move.
    private func finishInProgress(_ sequence: UInt64, of connection: LoopConnection) {
        guard let tenant = Self.remove(sequence, from: &connection.inProgress) else { return }
        if share.finished(tenant) { tenantsToServe.append(tenant) }
    }

    /// Takes request `sequence` out of a connection's requests in progress
    /// and returns its tenant (nil: not there). One access to the list (a
    /// look-up and a removal were two, each checked at run time).
    private static func remove(
        _ sequence: UInt64, from inProgress: inout [(sequence: UInt64, tenant: HTTPTenant)]
    ) -> HTTPTenant? {
        guard let index = inProgress.firstIndex(where: { $0.sequence == sequence }) else { return nil }
        return inProgress.remove(at: index).tenant
    }

    /// Wakes, for every tenant with a request finished since, the first
    /// waiting requests while the tenant may start more; every waiting
    /// request once the loops stopped holding back. They start in the next
    /// round (`wokenToStart`).
    private func serveWaitingTenants(now: LoopInstant) {
        guard share.hasWaiting else {
            tenantsToServe.removeAll()
            return
        }
        let holdingBack = shared.holdsTenantsBack(now: now)
        if !holdingBack {
            tenantsToServe.removeAll()
            for key in share.takeAllWaiting() { wokenToStart.append(takeWaitingRequest(key, tenant: nil)) }
            return
        }
        while let tenant = tenantsToServe.popLast() {
            while let key = share.nextToWake(for: tenant) {
                wokenToStart.append(takeWaitingRequest(key, tenant: tenant))
            }
        }
    }

    /// Takes the waiting request of connection `key`, just taken from its
    /// queue (still open: a closing one leaves its queue), counted toward
    /// `tenant`'s share until it starts.
    private func takeWaitingRequest(_ key: UInt64, tenant: HTTPTenant?) -> WokenRequest {
        let fd = Int(UInt32(truncatingIfNeeded: key))
        guard fd < connections.count, let connection = connections[fd], connection.key == key else {
            preconditionFailure("connection \(key) closed but still waiting for its turn")
        }
        guard let (request, sequence, _) = connection.waitingRequest else {
            preconditionFailure("connection \(key) woken but not waiting")
        }
        connection.waitingRequest = nil
        return WokenRequest(connection: connection, request: request, sequence: sequence, tenant: tenant)
    }

    /// Hands a request to the responder, counting it in progress for its
    /// tenant, then gives its body back to the connection's parser for the
    /// next one (a responder that kept it keeps its own copy).
    private func start(
        _ request: consuming HTTPRequest, sequence: UInt64, of connection: LoopConnection, now: LoopInstant
    ) {
        defer {
            var body: [UInt8] = []
            swap(&body, &request.body)
            connection.machine.recycle(body: body)
        }
        dispatchedSinceRound = true
        dispatchedInRound += 1
        let sink = LoopReplySink(mailbox: mailbox, connectionKey: connection.key, sequence: sequence)
        switch responder.respond(to: request, sink: sink) {
        case .respond(let response):
            connection.machine.answer(response, to: sequence, now: now)
            keepWrittenAnswer(of: connection)
        case .deferred(let tenant):
            guard let tenant else { return }
            connection.inProgress.append((sequence, tenant))
            if share.started(tenant) { shared.noteTenantsContend(now: now) }
            // Learnt only while tenants contend: a lone tenant pays nothing.
            if shared.tenantsContend(now: now), let credential = TenantShare.credential(of: request.head) {
                share.remember(credential, as: tenant)
            }
        }
    }

    // MARK: - Connections

    private func handleSocket(fd: Int32, events: EpollEvents, now: LoopInstant) {
        guard Int(fd) < connections.count, let connection = connections[Int(fd)] else { return }
        if !events.isDisjoint(with: Self.readEvents) {
            do {
                switch try connection.socket.read(into: readBuffer) {
                case .wouldBlock:
                    break
                case .done(0):
                    connection.machine.receivedEndOfStream()
                case .done(let count):
                    connection.machine.received(UnsafeRawBufferPointer(rebasing: readBuffer[0..<count]), now: now)
                    if connection.countedSilent && !connection.machine.isAwaitingFirstByte { noteSpoke(connection) }
                }
            } catch {
                close(connection)  // ECONNRESET and the like: the peer is gone.
                return
            }
        }
        if events.contains(.writable) { connection.machine.writable(now: now) }
        drive(connection, now: now)
    }

    /// Runs the connection's state machine until it waits or closes, performing its actions.
    private func drive(_ connection: LoopConnection, now: LoopInstant) {
        while true {
            if let stream = connection.machine.activeStream, !pump(stream, into: connection, now: now) {
                return
            }
            switch connection.machine.nextAction(now: now, bodyLimit: bodyLimit) {
            case .dispatch(var request, let sequence):
                request.head.peerAddress = connection.peerAddress
                if let tenant = tenantToWaitFor(request.head, now: now) {
                    // Read, not started: it waits in its tenant's queue, and the
                    // connection (its answer owed) reads no further request.
                    precondition(connection.waitingRequest == nil, "connection \(connection.key) waits twice")
                    connection.waitingRequest = (request, sequence, tenant)
                    share.wait(connection.key, for: tenant)
                    shared.tenantWaited(loop: mailbox.loopIndex)
                } else {
                    start(consume request, sequence: sequence, of: connection, now: now)
                }
            case .refuse(let failure, let sequence):
                shared.refused(HTTPRefusalReason(failure), loop: mailbox.loopIndex)
                connection.machine.answer(responder.response(for: failure), to: sequence, now: now)
            case .write:
                let result = connection.machine.withOutput { bytes in
                    Result { () throws(SystemCallError) in try connection.socket.send(bytes) }
                }
                switch result {
                case .success(.done(let count)): connection.machine.wrote(count, now: now)
                case .success(.wouldBlock): connection.machine.writeWouldBlock()
                case .failure:
                    close(connection)
                    return
                }
            case .shutdownWrite:
                connection.socket.shutdownWrite()
            case .close:
                close(connection)
                return
            case .wait(let read, let write):
                for stream in connection.machine.takeAbandonedStreams() { stream.abortFromServer() }
                // `EpollEvents()`, not the literal `[]`: the literal went through the
                // unspecialised `SetAlgebra.init(_:)`, which looked up the array's
                // generic metadata at run time on every wait (about 1 % of a
                // registration's CPU in the profile; issue 25).
                var wanted = EpollEvents()
                if read { wanted.insert(.readable) }
                if write { wanted.insert(.writable) }
                if wanted != connection.interest {
                    do {
                        try epoll.modify(connection.socket, events: wanted, token: UInt64(connection.socket.rawValue))
                        connection.interest = wanted
                    } catch {
                        close(connection)
                        return
                    }
                }
                // Nothing to do for it but wait for its peer to read.
                let blocked =
                    wanted.contains(.writable) && connection.inProgress.isEmpty && connection.waitingRequest == nil
                if blocked != connection.countedWriteBlocked {
                    connection.countedWriteBlocked = blocked
                    shared.noteWriteBlocked(blocked)
                }
                return
            }
        }
    }

    /// Moves chunks from the active stream into the connection's output as far
    /// as `streamBufferBytesMax` allows, ends the body when the producer
    /// finished, and calls the producer back. Returns false if the producer
    /// aborted: the connection is closed, cutting the response.
    private func pump(_ stream: LoopBodyStream, into connection: LoopConnection, now: LoopInstant) -> Bool {
        var taken = stream.take(outputBytes: connection.machine.pendingOutputBytes)
        if taken.aborted {
            close(connection)
            return false
        }
        if !taken.chunks.isEmpty || taken.finished {
            connection.machine.appendStreamBody(taken.chunks, finished: taken.finished, now: now)
        }
        // The chunks are copied: let go of them before the producer is called
        // back, so that it may render the next chunk into the same memory
        // (`ExportChunkStorage`).
        taken.chunks = []
        shared.noteStreamQueued(connection.machine.pendingOutputBytes + taken.queuedBytes)
        taken.waiter?(.writable)
        return true
    }

    /// Closes a connection and, unless its place passes to a newcomer
    /// (`releasing` false, an eviction), releases its count.
    private func close(_ connection: LoopConnection, releasing: Bool = true) {
        let fd = Int(connection.socket.rawValue)
        precondition(connections[fd] === connection, "closing descriptor \(fd) not owned by this connection")
        precondition(releasing || connection.admission == .counted, "evicting a reserved connection \(fd)")
        epoll.remove(connection.socket)
        connection.socket.close()
        if connection.countedWriteBlocked { shared.noteWriteBlocked(false) }
        connections[fd] = nil
        openCount -= 1
        if releasing { shared.release(connection.admission) }
        if connection.countedSilent { noteSpoke(connection) }
        if let (_, _, tenant) = connection.waitingRequest {
            share.stopWaiting(connection.key, for: tenant)
            connection.waitingRequest = nil
        }
        for (sequence, _) in connection.inProgress { finishInProgress(sequence, of: connection) }
        closedQueuedBytesSinceTrim += connection.machine.queuedBytesHighWater
        // The bodies not yet sent are not wanted any more: tell their producers.
        for stream in connection.machine.takeAllStreams() { stream.abortFromServer() }
    }

    /// The connection sent its first byte or closed: it no longer counts as silent.
    private func noteSpoke(_ connection: LoopConnection) {
        precondition(connection.countedSilent, "connection \(connection.key) was not counted silent")
        connection.countedSilent = false
        let after = mailbox.silentConnections.wrappingSubtract(1, ordering: .relaxed).newValue
        precondition(after >= 0, "silent connections of loop \(mailbox.loopIndex) went negative: \(after)")
    }

    /// Closes every connection whose peer has been too slow. O(open connections),
    /// run a few times per shortest timeout.
    private func sweep(now: LoopInstant) {
        nextSweep = now + sweepInterval
        // Only while saturated: whether a newcomer would find a place now.
        let lookForEvictable = shared.isSaturated
        var anyEvictable = false
        for case let connection? in connections {
            guard connection.machine.hasTimedOut(now: now) else {
                if lookForEvictable && connection.admission == .counted
                    && connection.machine.evictionRank(now: now) != nil
                {
                    anyEvictable = true
                }
                continue
            }
            if let reason = HTTPRefusalReason.afterTimeout(connection.machine.state, limits: limits, now: now) {
                shared.refused(reason, loop: mailbox.loopIndex)
            } else if case .awaitingRequest = connection.machine.state {
                shared.closedIdle(loop: mailbox.loopIndex)
            }
            close(connection)
        }
        // A newcomer would find a place now (a partial head aged past
        // `partialHeadEvictableAfter`): `/readyz` need not wait for one to say so.
        if anyEvictable { shared.noteSaturated(false) }
        // glibc keeps what large answers left behind in its arenas; give it
        // back once closed connections had held a few MiB.
        if closedQueuedBytesSinceTrim >= Self.returnFreePagesAfterBytes {
            closedQueuedBytesSinceTrim = 0
            MemoryAllocator.returnFreePages()
        }
    }
}
