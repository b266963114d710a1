import RoostPlatform
import Synchronization

/// State shared by every loop of one server: the connection count and the
/// shutdown flag.
final class ServerShared: Sendable {
    let connectionsMax: Int
    private let connections = Atomic<Int>(0)
    private let shuttingDown = Atomic<Bool>(false)

    init(connectionsMax: Int) {
        precondition(connectionsMax >= 1, "connectionsMax \(connectionsMax) < 1")
        self.connectionsMax = connectionsMax
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

    /// Open connections across all loops.
    var openConnections: Int { connections.load(ordering: .relaxed) }

    var isShuttingDown: Bool { shuttingDown.load(ordering: .acquiring) }

    func requestShutdown() { shuttingDown.store(true, ordering: .releasing) }
}

/// An answer produced off the loop thread, on its way back to its connection.
struct Delivery: Sendable {
    /// `connectionID << 32 | fd`: finds the connection by descriptor and
    /// rejects a later connection that reused the descriptor.
    var connectionKey: UInt64
    var sequence: UInt64
    var response: HTTPResponse
}

/// The queue through which any thread hands answers to one event loop: a
/// mutex-guarded array plus an eventfd that wakes the loop when the queue
/// stops being empty.
final class LoopMailbox: Sendable {
    let wakeup: EventFD
    private let queue = Mutex<[Delivery]>([])

    init(wakeup: EventFD) {
        self.wakeup = wakeup
    }

    deinit {
        // Sinks keep the mailbox alive, so the eventfd outlives every sender.
        wakeup.descriptor.close()
    }

    /// Queues an answer; wakes the loop when the queue was empty (a non-empty
    /// queue already has a wake-up pending). Safe from any thread.
    func post(_ delivery: Delivery) {
        let wasEmpty = queue.withLock { pending in
            let wasEmpty = pending.isEmpty
            pending.append(delivery)
            return wasEmpty
        }
        if wasEmpty { wakeup.signal() }
    }

    /// Returns and removes every queued answer. The loop drains the eventfd first.
    func takeAll() -> [Delivery] {
        queue.withLock { pending in
            var taken: [Delivery] = []
            swap(&taken, &pending)
            return taken
        }
    }
}

/// The sink a responder keeps to answer a deferred request. Three words, so
/// passing it as `any HTTPReplySink` allocates nothing.
struct LoopReplySink: HTTPReplySink {
    let mailbox: LoopMailbox
    let connectionKey: UInt64
    let sequence: UInt64

    func send(_ response: HTTPResponse) {
        mailbox.post(Delivery(connectionKey: connectionKey, sequence: sequence, response: response))
    }
}
