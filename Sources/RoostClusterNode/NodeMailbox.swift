import Glibc
import RoostCluster
import RoostPlatform
import RoostStorage
import Synchronization

/// What the node's other threads tell its replication thread (values only,
/// HOUSE_STYLE 7): etcd's answers, watch events, the applier's progress,
/// the operator's step-down.
enum NodeInput: Sendable {
    case etcdAnswered(EtcdRequestID, EtcdResponse)
    case watchDelivered(WatchToken, [EtcdEvent])
    case watchFailed(WatchToken, EtcdFailure)
    /// The applier applied and wrote the records through this LSN (durable under `--fsync`).
    case applied(through: LogSequenceNumber)
    /// The applier promoted the node's log: appends go to the group log from now on.
    case promoted
    /// The applier could not apply or write replicated records: the node must stop.
    case applyFailed(String)
    case stepDown
    /// A snapshot of this node was checkpointed at this start LSN.
    case checkpointed(snapshotLSN: LogSequenceNumber)
}

/// The replication thread's inbox: a list under a mutex and an eventfd it
/// waits on (also signalled by the engine's `ClusterLog` when writes arrive
/// in its empty outbox).
final class NodeMailbox: Sendable {
    /// Inputs waiting beyond this are a bug (every producer has a bound far below it).
    static let inputsMax = 1 << 20

    private let inputs = Mutex<[NodeInput]>([])
    let wakeup: EventFD

    init() throws(SystemCallError) {
        wakeup = try EventFD()
    }

    deinit {
        wakeup.descriptor.close()
    }

    /// Hands `input` to the replication thread (any thread).
    func post(_ input: NodeInput) {
        inputs.withLock { inputs in
            precondition(inputs.count < Self.inputsMax, "\(inputs.count) inputs wait for the replication thread")
            inputs.append(input)
        }
        wakeup.signal()
    }

    /// Takes every input posted so far, in order.
    func take() -> [NodeInput] {
        inputs.withLock { inputs in
            var taken: [NodeInput] = []
            swap(&taken, &inputs)
            return taken
        }
    }

    /// Waits until something is posted or `milliseconds` passed.
    func wait(milliseconds: Int64) {
        var descriptor = pollfd(fd: wakeup.descriptor.rawValue, events: Int16(POLLIN), revents: 0)
        _ = poll(&descriptor, 1, Int32(clamping: max(0, milliseconds)))
        wakeup.drain()
    }
}
