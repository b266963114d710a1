import RoostPlatform
import RoostTelemetry
import Synchronization

/// State shared by every loop of one server: the connection counts (under
/// the cap, and in the reserve for probes) and the shutdown flag.
final class ServerShared: Sendable {
    let connectionsMax: Int
    /// `HTTPServerLimits.reservedConnections`.
    let reservedMax: Int
    /// One block of counters per loop (`LoopCounters`), written by that loop.
    private let loopCounters: [LoopCounters]
    /// Where refusals are logged (rate-limited).
    let logger: Logger
    private let connections = Atomic<Int>(0)
    private let reserved = Atomic<Int>(0)
    /// Connections whose answers wait for their peer to read
    /// (`HTTPServerStatistics.writeBlockedConnections`).
    private let writeBlocked = Atomic<Int>(0)
    private let streamQueuedHighWater = Atomic<Int>(0)
    private let shuttingDown = Atomic<Bool>(false)
    /// Loops that have not settled since shutdown began (`loopSettled`).
    private let unsettledLoops: Atomic<Int>
    private let acceptTurn = Atomic<Int>(0)
    /// `HTTPServerLimits.tenantContentionWindow`, in nanoseconds.
    private let tenantContentionNanoseconds: Int64
    /// The server's clock, which every loop reads.
    let clock: LoopClock
    /// The instant (`LoopInstant.nanoseconds`) until which tenants contend
    /// (`TenantShare`); 0 before any contention.
    private let tenantsContendUntil = Atomic<Int64>(0)

    /// Returns the loop that takes the next accepted connection: the loops
    /// in turn, whichever accepted it (one listener is shared, so the kernel
    /// no longer spreads connections as SO_REUSEPORT did).
    func loopForNextConnection(loopCount: Int) -> Int {
        acceptTurn.wrappingAdd(1, ordering: .relaxed).oldValue % loopCount
    }

    init(
        connectionsMax: Int, reservedMax: Int = 0, loopCount: Int = 1,
        tenantContentionWindow: Duration = HTTPServerLimits().tenantContentionWindow, logger: Logger = .standard,
        clock: LoopClock = LoopClock(SystemMonotonicClock())
    ) {
        self.clock = clock
        precondition(connectionsMax >= 1, "connectionsMax \(connectionsMax) < 1")
        precondition(reservedMax >= 0, "reservedMax \(reservedMax) < 0")
        precondition(loopCount >= 1, "loopCount \(loopCount) < 1")
        self.connectionsMax = connectionsMax
        self.reservedMax = reservedMax
        self.loopCounters = (0..<loopCount).map { _ in LoopCounters() }
        self.unsettledLoops = Atomic<Int>(loopCount)
        self.tenantContentionNanoseconds = tenantContentionWindow.wholeNanoseconds
        self.logger = logger
    }

    /// Counts a refusal by loop `loop` and logs it (rate-limited: a flood of
    /// bad requests costs a few lines a second).
    func refused(_ reason: HTTPRefusalReason, loop: Int) {
        loopCounters[loop].cells.add(LoopCounters.slot(reason))
        logger.warning("http.refusal") { line in
            line.field("reason", reason.rawValue)
            line.field("loop", loop)
        }
    }

    /// Counts a connection loop `loop` started serving.
    func accepted(loop: Int) { loopCounters[loop].cells.add(LoopCounters.accepted) }

    /// Counts an idle keep-alive connection loop `loop` closed.
    func closedIdle(loop: Int) { loopCounters[loop].cells.add(LoopCounters.idleClosed) }

    /// Counts a request loop `loop` left waiting for its tenant's turn.
    func tenantWaited(loop: Int) { loopCounters[loop].cells.add(LoopCounters.tenantWaits) }

    /// The counters of every loop added up, and the connections open now.
    var statistics: HTTPServerStatistics {
        let total = CounterCells.sum(loopCounters.map(\.cells))
        var refusals: [HTTPRefusalReason: UInt64] = [:]
        for reason in HTTPRefusalReason.allCases { refusals[reason] = total[LoopCounters.slot(reason)] }
        return HTTPServerStatistics(
            openConnections: openConnections, acceptedConnections: total[LoopCounters.accepted],
            idleClosedConnections: total[LoopCounters.idleClosed], tenantWaits: total[LoopCounters.tenantWaits],
            refusals: refusals, writeBlockedConnections: writeBlocked.load(ordering: .relaxed))
    }

    /// Counts one more open connection; returns false (and counts nothing) at the limit.
    func reserveConnection() -> Bool {
        let after = connections.wrappingAdd(1, ordering: .relaxed).newValue
        if after > connectionsMax {
            connections.wrappingSubtract(1, ordering: .relaxed)
            return false
        }
        return true
    }

    /// Counts one connection closed.
    func releaseConnection() {
        let after = connections.wrappingSubtract(1, ordering: .relaxed).newValue
        precondition(after >= 0, "open connection count went negative: \(after)")
    }

    /// Counts one more reserved connection (beyond the cap, for a probe);
    /// returns false (and counts nothing) when the reserve is used up.
    func reserveProbeConnection() -> Bool {
        let after = reserved.wrappingAdd(1, ordering: .relaxed).newValue
        if after > reservedMax {
            reserved.wrappingSubtract(1, ordering: .relaxed)
            return false
        }
        return true
    }

    /// Counts one reserved connection closed.
    func releaseProbeConnection() {
        let after = reserved.wrappingSubtract(1, ordering: .relaxed).newValue
        precondition(after >= 0, "reserved connection count went negative: \(after)")
    }

    /// Releases the place `admission` took.
    func release(_ admission: HTTPAdmission) {
        switch admission {
        case .counted: releaseConnection()
        case .reserved: releaseProbeConnection()
        }
    }

    /// A connection started (`blocked`) or stopped waiting for its peer to
    /// read with nothing else to do (its loop, at the end of driving it or when closing it).
    func noteWriteBlocked(_ blocked: Bool) {
        if blocked {
            writeBlocked.wrappingAdd(1, ordering: .relaxed)
        } else {
            let after = writeBlocked.wrappingSubtract(1, ordering: .relaxed).newValue
            precondition(after >= 0, "write-blocked connection count went negative: \(after)")
        }
    }

    /// Open connections across all loops, reserved ones included.
    var openConnections: Int { connections.load(ordering: .relaxed) + reserved.load(ordering: .relaxed) }

    /// The last search for a place at the cap found nothing to evict on any
    /// loop (`EventLoop.admitAtCap`), and no place or evictable connection
    /// was seen since: a new client gets at most a probe's reserved place.
    private let saturated = Atomic<Bool>(false)

    /// Records whether the last at-cap search (or a sweep that found an
    /// evictable connection: `false`) left the server saturated. Writes only
    /// on a change, so that a busy cap does not bounce the line between loops.
    func noteSaturated(_ isSaturated: Bool) {
        if saturated.load(ordering: .relaxed) != isSaturated { saturated.store(isSaturated, ordering: .relaxed) }
    }

    /// Whether a new connection would be refused an API call now: every
    /// place under `connectionsMax` is taken and the last search for one
    /// found nothing evictable (every connection has a request in progress
    /// or owed, or a head younger than `partialHeadEvictableAfter`). Stays
    /// true until a place comes free, a newcomer evicts, or a loop's sweep
    /// finds an evictable connection (at most one sweep interval late).
    var isSaturated: Bool {
        saturated.load(ordering: .relaxed) && connections.load(ordering: .relaxed) >= connectionsMax
    }

    /// The most bytes ever seen queued for one streamed response beyond what
    /// its socket accepted (connection output plus the stream's own queue).
    var streamQueuedBytesHighWater: Int { streamQueuedHighWater.load(ordering: .relaxed) }

    /// Records a queued-bytes observation of a streamed response.
    func noteStreamQueued(_ bytes: Int) {
        var seen = streamQueuedHighWater.load(ordering: .relaxed)
        while bytes > seen {
            let (exchanged, original) = streamQueuedHighWater.compareExchange(
                expected: seen, desired: bytes, ordering: .relaxed)
            if exchanged { return }
            seen = original
        }
    }

    /// A loop saw two tenants start requests one after the other at `now`:
    /// tenants contend for `tenantContentionWindow` from now.
    /// Stored only when it moves the end by a tenth of the window or more,
    /// so that a steady mix of tenants does not write the line every request.
    func noteTenantsContend(now: LoopInstant) {
        let until = now.nanoseconds + tenantContentionNanoseconds
        let stored = tenantsContendUntil.load(ordering: .relaxed)
        if until - stored >= tenantContentionNanoseconds / 10 {
            tenantsContendUntil.store(until, ordering: .relaxed)
        }
    }

    /// Whether tenants contend at `now` (a loop noted a switch within the window).
    func tenantsContend(now: LoopInstant) -> Bool {
        now.nanoseconds < tenantsContendUntil.load(ordering: .relaxed)
    }

    /// Loops that count as busy now (`TenantShare`).
    private let busyLoops = Atomic<Int>(0)

    /// A loop became busy (`true`) or stopped being busy.
    func noteLoopBusy(_ busy: Bool) {
        let after =
            busy
            ? busyLoops.wrappingAdd(1, ordering: .relaxed).newValue
            : busyLoops.wrappingSubtract(1, ordering: .relaxed).newValue
        precondition(after >= 0, "busy loop count went negative: \(after)")
    }

    /// Whether the loops hold tenants to their share at `now`: tenants
    /// contend and some loop is busy (`TenantShare`).
    func holdsTenantsBack(now: LoopInstant) -> Bool {
        busyLoops.load(ordering: .relaxed) > 0 && tenantsContend(now: now)
    }

    var isShuttingDown: Bool { shuttingDown.load(ordering: .acquiring) }

    func requestShutdown() { shuttingDown.store(true, ordering: .releasing) }

    /// Counts loop `loop` as settled: since shutdown began it has owed
    /// nothing on any connection (every one `HTTPConnectionMachine.isSettled`)
    /// at least once. Each loop calls it once. Returns whether it was the
    /// last loop to settle: the server has drained, and that loop wakes the
    /// others so that they close their idle connections and stop.
    func loopSettled(_ loop: Int) -> Bool {
        precondition(isShuttingDown, "loop \(loop) settled before shutdown")
        let left = unsettledLoops.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue
        precondition(left >= 0, "more loops settled than \(loopCounters.count)")
        return left == 0
    }

    /// Whether every loop has settled since shutdown began (`loopSettled`).
    var allLoopsSettled: Bool { unsettledLoops.load(ordering: .acquiring) == 0 }

}

/// An accepted connection one loop hands to another.
struct HandedOverConnection: Sendable {
    /// How the receiving loop must let it in.
    enum Admission: Sendable {
        /// Already counted under the cap: register it.
        case counted
        /// Accepted at the cap and not counted: the receiving loop goes on
        /// with the search for a place (`EventLoop.admitAtCap`).
        case atCap(AtCapSearch)
    }

    /// How far the search for a place at the cap has come.
    struct AtCapSearch: Sendable {
        /// Loops that had no idle connection to evict.
        var loopsWithoutIdle = 0
        /// Hand-overs to a loop that reported a connection that never spoke;
        /// at most one per loop, so that the search ends even when those
        /// connections speak or close on the way.
        var silentRedirects = 0
    }

    var socket: FileDescriptor
    var admission: Admission
}

/// An answer produced off the loop thread, on its way back to its connection.
struct Delivery: Sendable {
    /// What arrives for the request.
    enum Payload: Sendable {
        /// A whole response.
        case response(HTTPResponse)
        /// The head of a streamed response; its body follows through the stream.
        case streamStart(status: Int, headers: [(name: String, value: String)], stream: LoopBodyStream)
        /// The stream has chunks, finished or aborted: the loop should take from it.
        case streamReady(LoopBodyStream)
    }

    /// `connectionID << 32 | fd`: finds the connection by descriptor and
    /// rejects a later connection that reused the descriptor.
    var connectionKey: UInt64
    var sequence: UInt64
    var payload: Payload
}

/// The queue through which any thread hands answers to one event loop: a
/// mutex-guarded array plus an eventfd that wakes the loop when the queue
/// stops being empty.
final class LoopMailbox: Sendable {
    /// The loop's executor: its eventfd wakes the loop (sinks keep it alive,
    /// so the eventfd outlives every sender).
    let executor: LoopExecutor
    /// `HTTPServerLimits.streamBufferBytesMax`, for the streams this loop's sinks start.
    let streamBufferBytesMax: Int
    /// Counted connections of this loop that have not sent a byte: written
    /// by the loop, read by every loop that looks for a connection to evict
    /// at the cap (those go first, whichever loop holds them).
    let silentConnections = Atomic<Int>(0)
    private let queue = Mutex<[Delivery]>([])
    /// Accepted connections another loop handed to this one.
    private let handedOver = Mutex<[HandedOverConnection]>([])
    /// The arrays of answers this loop wrote, for the answers it renders
    /// next; used on the loop's thread only.
    let answerBuffers: AnswerBufferPool

    init(
        executor: LoopExecutor, streamBufferBytesMax: Int,
        bufferBytesRetainedMax: Int = HTTPServerLimits().bufferBytesRetainedMax
    ) {
        self.executor = executor
        self.streamBufferBytesMax = streamBufferBytesMax
        self.answerBuffers = AnswerBufferPool(executor: executor, bytesRetainedMax: bufferBytesRetainedMax)
    }

    /// The loop's index, 0..<eventLoopCount.
    var loopIndex: Int { executor.index }

    /// Queues an answer; wakes the loop when the queue was empty (a non-empty
    /// queue already has a wake-up pending). Safe from any thread. On the
    /// loop's own thread no wake-up is needed: the loop takes its mailbox at
    /// the end of every round.
    func post(_ delivery: Delivery) {
        let wasEmpty = queue.withLock { pending in
            let wasEmpty = pending.isEmpty
            pending.append(delivery)
            return wasEmpty
        }
        if wasEmpty && !executor.isCurrent { executor.wake() }
    }

    /// Hands an accepted connection to this mailbox's loop and wakes it.
    func handOver(_ connection: HandedOverConnection) {
        handedOver.withLock { $0.append(connection) }
        executor.wake()
    }

    /// Returns and removes the connections handed over to this loop.
    func takeHandedOver() -> [HandedOverConnection] {
        handedOver.withLock { sockets in
            var taken: [HandedOverConnection] = []
            swap(&taken, &sockets)
            return taken
        }
    }

    /// Moves every queued answer into `taken`, which must be empty, and
    /// keeps `taken`'s storage as the queue's: the loop and its mailbox
    /// trade one pair of arrays, so a steady round allocates no queue
    /// (issue 25: one allocation per answered request before). The loop
    /// drains the eventfd first.
    func takeAll(into taken: inout [Delivery]) {
        precondition(taken.isEmpty, "the loop's delivery array still holds \(taken.count) answers")
        queue.withLock { pending in swap(&taken, &pending) }
    }
}

/// The sink a responder keeps to answer a deferred request. Three words, so
/// passing it as `any HTTPReplySink` allocates nothing; the loop index lives
/// in the mailbox for that reason.
struct LoopReplySink: HTTPReplySink {
    let mailbox: LoopMailbox
    let connectionKey: UInt64
    let sequence: UInt64

    func send(_ response: consuming HTTPResponse) {
        mailbox.post(Delivery(connectionKey: connectionKey, sequence: sequence, payload: .response(response)))
    }

    var loopIndex: Int { mailbox.loopIndex }

    func takeAnswerBuffers() -> HTTPAnswerBuffers { mailbox.answerBuffers.take() }

    func startStream(status: Int, headers: [(name: String, value: String)]) -> any HTTPBodyStream {
        precondition(
            status >= 200 && status <= 599 && status != 204 && status != 304,
            "a streamed response needs a status with a body, got \(status)")
        let stream = LoopBodyStream(
            mailbox: mailbox, connectionKey: connectionKey, sequence: sequence,
            bufferBytesMax: mailbox.streamBufferBytesMax)
        mailbox.post(
            Delivery(
                connectionKey: connectionKey, sequence: sequence,
                payload: .streamStart(status: status, headers: headers, stream: stream)))
        return stream
    }
}
