import Dispatch
import RoostCluster
import RoostPlatform
import Synchronization

/// The threads that send the replication machine's etcd requests: each has
/// its own `EtcdClient` (one keep-alive connection), takes the next request
/// of one shared queue and posts etcd's answer to the node's mailbox. Several,
/// so that a large read of the group log does not hold up the leader's
/// keep-alive or its append.
final class EtcdRequestWorkers: Sendable {
    /// How many requests may wait (the machine keeps at most
    /// `ReplicationMachine.requestsInFlightMax` in flight).
    static let queuedMax = ReplicationMachine.requestsInFlightMax * 2

    private struct Queue {
        var requests: [(EtcdRequestID, EtcdRequest)] = []
        var stopping = false
        var busy = 0
    }

    private let queue = Mutex(Queue())
    private let available = DispatchSemaphore(value: 0)
    private let threadCount: Int
    /// Answers that were a failure (`roost_cluster_etcd_errors_total`).
    private let failures = Atomic<UInt64>(0)

    /// Starts `count` threads whose answers go to `mailbox`.
    init(count: Int, endpoints: [EtcdEndpoint], options: EtcdClientOptions, mailbox: NodeMailbox)
        throws(SystemCallError)
    {
        precondition(count > 0, "\(count) etcd request threads")
        threadCount = count
        for index in 0..<count {
            let thread = try PlatformThread.spawn(name: "roost-etcd-\(index)") { [self] in
                let client = EtcdClient(endpoints: endpoints, options: options)
                while let (id, request) = self.next() {
                    let response = client.perform(request)
                    if case .failed = response { self.failures.add(1, ordering: .relaxed) }
                    self.finished()
                    mailbox.post(.etcdAnswered(id, response))
                }
                client.close()
            }
            thread.detach()
        }
    }

    /// Queues one request (the replication thread).
    func submit(_ id: EtcdRequestID, _ request: EtcdRequest) {
        queue.withLock { queue in
            precondition(queue.requests.count < Self.queuedMax, "\(queue.requests.count) etcd requests queued")
            queue.requests.append((id, request))
        }
        available.signal()
    }

    /// etcd answers that were failures so far.
    var failureCount: UInt64 { failures.load(ordering: .relaxed) }

    /// Requests queued or being sent.
    var outstanding: Int { queue.withLock { $0.requests.count + $0.busy } }

    /// Makes every thread end once the queue is empty.
    func stop() {
        queue.withLock { $0.stopping = true }
        for _ in 0..<threadCount { available.signal() }
    }

    private func next() -> (EtcdRequestID, EtcdRequest)? {
        while true {
            available.wait()
            let taken = queue.withLock { queue -> (EtcdRequestID, EtcdRequest)?? in
                if !queue.requests.isEmpty {
                    queue.busy += 1
                    return queue.requests.removeFirst()
                }
                return queue.stopping ? .some(nil) : nil
            }
            if let taken { return taken }
        }
    }

    private func finished() {
        queue.withLock { $0.busy -= 1 }
    }
}
