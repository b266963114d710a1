import Glibc
import RoostJSON
import RoostTesting
import Synchronization

/// Keep-alive connections of one client thread, one per node, dropped on
/// any error or when the node's port changes (a restart).
struct ClusterConnections {
    private var open: [Int: (port: UInt16, connection: LoopbackConnection)] = [:]

    /// Sends `request` to node `node` on `port` and returns its answer, or nil
    /// when it cannot connect, the connection breaks or no answer comes in `timeout`.
    mutating func exchange(node: Int, port: UInt16, request: String, timeout: Duration) -> LoopbackResponse? {
        if let cached = open[node], cached.port != port {
            cached.connection.close()
            open[node] = nil
        }
        if open[node] == nil {
            guard let connection = try? LoopbackConnection(port: port) else { return nil }
            open[node] = (port, connection)
        }
        guard let connection = open[node]?.connection else { return nil }
        guard (try? connection.send(request)) != nil, let answer = try? connection.readResponse(timeout: timeout)
        else {
            connection.close()
            open[node] = nil
            return nil
        }
        if answer.header("Connection")?.lowercased() == "close" {
            connection.close()
            open[node] = nil
        }
        return answer
    }

    /// Closes every connection.
    mutating func closeAll() {
        for (_, cached) in open { cached.connection.close() }
        open = [:]
    }
}

/// How the clients build requests and record answers.
enum ClusterWire {
    /// `CrashClient.request` with more header lines (`Name: value` each).
    static func request(_ method: String, _ path: String, key: String, body: String?, headers: [String]) -> String {
        var text = CrashClient.request(method, path, key: key, body: body)
        if !headers.isEmpty, let end = text.firstRange(of: "\r\n") {
            text.insert(contentsOf: headers.map { "\r\n" + $0 }.joined(), at: end.lowerBound)
        }
        return text
    }

    /// Microseconds from `origin` to now.
    static func microseconds(since origin: ContinuousClock.Instant) -> Int64 {
        let elapsed = (ContinuousClock.now - origin).components
        return elapsed.seconds * 1_000_000 + elapsed.attoseconds / 1_000_000_000_000
    }

    /// Fills what every answer tells: node, status, error code, epoch, position, replay.
    static func note(_ answer: LoopbackResponse?, in operation: inout ClusterOperation, origin: ContinuousClock.Instant)
        -> JSONValue?
    {
        operation.endMicroseconds = microseconds(since: origin)
        guard let answer else { return nil }
        operation.status = answer.status
        operation.node = answer.header("Roost-Node").map(ClusterNodeName.init)
        operation.epoch = ClusterEpoch(header: answer.header("Roost-Epoch"))
        operation.position = ClusterPosition(cursor: answer.header("Roost-Position"))
        operation.replayed = answer.header("Idempotent-Replayed") == "true"
        let value = try? JSONReader.parse(answer.body)
        if answer.status >= 400 { operation.errorCode = value?["error"]?["code"]?.stringValue ?? "(no error code)" }
        return value
    }

    /// The next node after `node` (in turn) whose port is known; nil when none is up.
    static func next(after node: Int, _ ports: [UInt16]) -> Int? {
        for step in 1...ports.count {
            let candidate = (node + step) % ports.count
            if ports[candidate] != 0 { return candidate }
        }
        return nil
    }
}

/// What the writers tell the readers: each writer's current person (whose
/// devices may be in flight) and recently acknowledged devices with their positions.
final class ClusterProgress: Sendable {
    struct Acknowledged: Sendable {
        var deviceID: String
        var position: ClusterPosition?
    }

    /// Acknowledged devices kept for the readers (the newest).
    static let recentMax = 256

    private let state: Mutex<(people: [String?], recent: [Acknowledged])>
    private let acknowledged = Atomic<Int>(0)

    /// Registrations acknowledged so far (for the progress lines).
    var acknowledgedCount: Int { acknowledged.load(ordering: .relaxed) }

    init(writers: Int) { state = Mutex((Array(repeating: nil, count: writers), [])) }

    func noteSending(writer: Int, person: String) { state.withLock { $0.people[writer] = person } }

    /// Adds an acknowledged device for the readers; `replayed` ones (an
    /// answer given again) are not counted a second time.
    func noteAcknowledged(_ device: Acknowledged, replayed: Bool) {
        if !replayed { acknowledged.add(1, ordering: .relaxed) }
        state.withLock { state in
            if state.recent.count == Self.recentMax { state.recent.removeFirst() }
            state.recent.append(device)
        }
    }

    /// A person being written to, or an acknowledged device, drawn with `draw`.
    func pick(_ draw: UInt64) -> (person: String?, device: Acknowledged?) {
        state.withLock { state in
            let people = state.people.compactMap { $0 }
            if draw % 2 == 0 || state.recent.isEmpty {
                return (people.isEmpty ? nil : people[Int(draw / 2 % UInt64(people.count))], nil)
            }
            return (nil, state.recent[Int(draw / 2 % UInt64(state.recent.count))])
        }
    }
}

/// What one client (a writer or a reader) is given: a value, handed to its thread.
struct ClusterClientPlan: Sendable {
    /// The client's number among its kind (`w0`, `r1`).
    var number: Int
    var key: String
    var seed: UInt64
    var origin: ContinuousClock.Instant
}

/// A writer: registers new tokens one after another (each with its own
/// `Idempotency-Key`, no person shared with another writer), now and then
/// deletes one of its acknowledged devices or sends an acknowledged
/// registration again; retries every write with the same key on 503, 409
/// `idempotency_key_in_use` or a lost connection, following `Roost-Leader`.
enum ClusterWriter {
    /// How long one answer may take (a paused leader holds it).
    static let answerTimeout = Duration.seconds(5)
    /// Pause before a retry.
    static let retryPauseMicroseconds: UInt32 = 20_000
    /// How long one write is retried before the writer gives it up (unacknowledged).
    static let retryLimit = Duration.seconds(60)
    /// One operation in this many deletes an acknowledged device; one in this many replays a registration.
    static let deleteOneIn: UInt64 = 12
    static let replayOneIn: UInt64 = 12
    /// Devices per person: far below `max_devices_per_person` (1,000), so that no eviction removes one.
    static let devicesPerPerson = 200
    /// Acknowledged registrations a writer keeps for deletions and replays (the newest).
    static let keptMax = 1_024

    /// One write: the request (sent again byte for byte on a retry) and what it concerns.
    struct Write {
        var kind: ClusterOperation.Kind
        var request: String
        var idempotencyKey: String
        var token: String?
        var deviceID: String?
        var person: String?
    }

    /// An acknowledged registration the writer may delete or replay.
    struct Kept {
        var write: Write
        var deviceID: String
    }

    /// Token of writer `writer`'s `serial`-th registration: 64 hex digits, `c1…` then both in hex.
    static func token(writer: Int, serial: Int) -> String {
        let writerHex = String(writer, radix: 16)
        let serialHex = String(serial, radix: 16)
        return String(repeating: "c1", count: 20) + String(repeating: "0", count: 8 - writerHex.count) + writerHex
            + String(repeating: "0", count: 16 - serialHex.count) + serialHex
    }

    static func run(_ plan: ClusterClientPlan, stop: StopFlag, ports: ClusterPorts, progress: ClusterProgress)
        -> [ClusterOperation]
    {
        var random = SeededRandom(seed: plan.seed)
        var connections = ClusterConnections()
        var operations: [ClusterOperation] = []
        var kept: [Kept] = []
        var serial = 0
        var target = plan.number % max(1, ports.current.count)
        while !stop.isSet {
            let draw = random.next()
            var write: Write
            var keptIndex: Int? = nil
            if draw % deleteOneIn == 0 && !kept.isEmpty {
                let index = Int(random.next() % UInt64(kept.count))
                keptIndex = index
                let id = kept[index].deviceID
                let key = "cluster-w\(plan.number)-delete-\(id)"
                write = Write(
                    kind: .delete,
                    request: ClusterWire.request(
                        "DELETE", "/v1/devices/\(id)", key: plan.key, body: nil, headers: ["Idempotency-Key: \(key)"]),
                    idempotencyKey: key, token: kept[index].write.token, deviceID: id)
            } else if draw % replayOneIn == 1 && !kept.isEmpty {
                write = kept[Int(random.next() % UInt64(kept.count))].write
            } else {
                serial += 1
                let token = token(writer: plan.number, serial: serial)
                let person = "w\(plan.number)p\(serial / devicesPerPerson)"
                let key = "cluster-w\(plan.number)-\(serial)"
                write = Write(
                    kind: .register,
                    request: ClusterWire.request(
                        "POST", "/v1/devices", key: plan.key,
                        body: #"{"platform":"ios","token":"\#(token)","external_id":"\#(person)"}"#,
                        headers: ["Idempotency-Key: \(key)"]),
                    idempotencyKey: key, token: token, person: person)
                progress.noteSending(writer: plan.number, person: person)
            }
            guard
                let acknowledged = send(
                    write, plan: plan, target: &target, connections: &connections, operations: &operations,
                    stop: stop, ports: ports)
            else { continue }
            switch write.kind {
            case .register:
                guard let id = acknowledged.deviceID else { continue }
                if !acknowledged.replayed {
                    if kept.count == keptMax { kept.removeFirst() }
                    kept.append(Kept(write: write, deviceID: id))
                }
                progress.noteAcknowledged(
                    .init(deviceID: id, position: acknowledged.position), replayed: acknowledged.replayed)
            case .delete:
                if let keptIndex { kept.remove(at: keptIndex) }
            case .readDevice, .readPerson, .readFeed:
                preconditionFailure("a writer sent a read")
            }
        }
        connections.closeAll()
        return operations
    }

    /// Sends `write` until it is acknowledged (returns that attempt), the
    /// run stops, the retry limit passes or an answer no retry can change comes (nil).
    static func send(
        _ write: Write, plan: ClusterClientPlan, target: inout Int, connections: inout ClusterConnections,
        operations: inout [ClusterOperation], stop: StopFlag, ports: ClusterPorts
    ) -> ClusterOperation? {
        let started = ContinuousClock.now
        while !stop.isSet && ContinuousClock.now - started < retryLimit {
            let current = ports.current
            if current[target] == 0 {
                guard let next = ClusterWire.next(after: target, current) else {
                    usleep(retryPauseMicroseconds)
                    continue
                }
                target = next
            }
            var operation = ClusterOperation(
                client: "w\(plan.number)", kind: write.kind, target: ClusterNodeName("n\(target + 1)"),
                startMicroseconds: ClusterWire.microseconds(since: plan.origin), endMicroseconds: 0,
                idempotencyKey: write.idempotencyKey, token: write.token, deviceID: write.deviceID)
            let answer = connections.exchange(
                node: target, port: current[target], request: write.request, timeout: answerTimeout)
            let value = ClusterWire.note(answer, in: &operation, origin: plan.origin)
            if write.kind == .register, operation.succeeded { operation.deviceID = value?["id"]?.stringValue }
            if write.kind == .delete, operation.succeeded { operation.deletedAnswer = value?["deleted"]?.boolValue }
            operations.append(operation)
            guard let answer else {
                target = ClusterWire.next(after: target, ports.current) ?? target
                usleep(retryPauseMicroseconds)
                continue
            }
            switch answer.status {
            case 200, 201:
                return operation
            case 503:
                let hinted = answer.header("Roost-Leader").flatMap { url in
                    url.split(separator: ":").last.flatMap { UInt16($0) }
                }.flatMap { port in ports.current.firstIndex(of: port) }
                target = hinted ?? ClusterWire.next(after: target, ports.current) ?? target
                usleep(retryPauseMicroseconds)
            case 409 where operation.errorCode == "idempotency_key_in_use":
                usleep(retryPauseMicroseconds)
            default:
                return nil  // recorded; the checker reports it
            }
        }
        return nil
    }
}

/// A reader: on every node in turn, the devices of a person being written
/// to (they may include a write in flight) or an acknowledged device with
/// `Roost-Min-Position` at its write's position (read-your-writes, spec §13.3).
enum ClusterReader {
    static let answerTimeout = Duration.seconds(3)
    /// Pause between reads: the readers leave the two cores to the writers and the nodes.
    static let pauseMicroseconds: UInt32 = 5_000

    static func run(_ plan: ClusterClientPlan, stop: StopFlag, ports: ClusterPorts, progress: ClusterProgress)
        -> [ClusterOperation]
    {
        var random = SeededRandom(seed: plan.seed)
        var connections = ClusterConnections()
        var operations: [ClusterOperation] = []
        var target = plan.number
        while !stop.isSet {
            usleep(pauseMicroseconds)
            let current = ports.current
            guard let node = ClusterWire.next(after: target, current) else { continue }
            target = node
            let (person, device) = progress.pick(random.next())
            var operation: ClusterOperation
            let request: String
            if let person {
                operation = ClusterOperation(
                    client: "r\(plan.number)", kind: .readPerson, target: ClusterNodeName("n\(node + 1)"),
                    startMicroseconds: 0, endMicroseconds: 0)
                request = ClusterWire.request("GET", "/v1/people/\(person)", key: plan.key, body: nil, headers: [])
            } else if let device {
                operation = ClusterOperation(
                    client: "r\(plan.number)", kind: .readDevice, target: ClusterNodeName("n\(node + 1)"),
                    startMicroseconds: 0, endMicroseconds: 0, deviceID: device.deviceID,
                    minPosition: device.position)
                request = ClusterWire.request(
                    "GET", "/v1/devices/\(device.deviceID)", key: plan.key, body: nil,
                    headers: device.position.map { ["Roost-Min-Position: \($0)"] } ?? [])
            } else {
                continue
            }
            operation.startMicroseconds = ClusterWire.microseconds(since: plan.origin)
            let answer = connections.exchange(node: node, port: current[node], request: request, timeout: answerTimeout)
            let value = ClusterWire.note(answer, in: &operation, origin: plan.origin)
            if operation.status == 200, let value {
                if operation.kind == .readPerson {
                    for shown in value["devices"]?.arrayValue ?? [] {
                        if let id = shown["id"]?.stringValue {
                            operation.seen.append(ClusterSeenDevice(deviceID: id, token: shown["token"]?.stringValue))
                        }
                    }
                } else if let id = value["id"]?.stringValue {
                    operation.seen.append(ClusterSeenDevice(deviceID: id, token: value["token"]?.stringValue))
                }
            }
            operations.append(operation)
        }
        connections.closeAll()
        return operations
    }
}

/// A change-feed consumer that moves to another node for every page,
/// carrying its cursor (spec §13.1: a cursor is valid on every node), and
/// asks each node to have applied it first (`Roost-Min-Position`).
struct ClusterFeedFollower: Sendable {
    static let client = "f0"
    /// Changes per page.
    static let pageLimit = 1_000
    /// How long a tailing page waits for a change.
    static let waitMilliseconds = 200
    static let answerTimeout = Duration.seconds(5)
    /// The most pages of the final catch-up.
    static let catchUpPagesMax = 100_000

    private(set) var cursor: ClusterPosition
    private(set) var operations: [ClusterOperation] = []
    private var node = 0
    let key: String
    let origin: ContinuousClock.Instant

    init(cursor: ClusterPosition, key: String, origin: ContinuousClock.Instant) {
        self.cursor = cursor
        self.key = key
        self.origin = origin
    }

    /// Reads one page from the next node; returns its number of changes (nil: no 200).
    mutating func step(_ ports: [UInt16], waitMilliseconds: Int, connections: inout ClusterConnections) -> Int? {
        guard let target = ClusterWire.next(after: node, ports) else { return nil }
        node = target
        var operation = ClusterOperation(
            client: Self.client, kind: .readFeed, target: ClusterNodeName("n\(target + 1)"),
            startMicroseconds: ClusterWire.microseconds(since: origin), endMicroseconds: 0, after: cursor)
        let path = "/v1/changes?after=\(cursor)&limit=\(Self.pageLimit)&wait_ms=\(waitMilliseconds)"
        let request = ClusterWire.request(
            "GET", path, key: key, body: nil, headers: ["Roost-Min-Position: \(cursor)"])
        let answer = connections.exchange(
            node: target, port: ports[target], request: request, timeout: Self.answerTimeout)
        _ = ClusterWire.note(answer, in: &operation, origin: origin)
        var count: Int? = nil
        if let answer, answer.status == 200 {
            if let page = try? ClusterChange.parsePage(answer.body) {
                operation.changes = page.changes
                operation.next = page.next
                cursor = page.next
                count = page.changes.count
            } else {
                operation.errorCode = "(a 200 page that does not parse)"
                operation.status = 599
            }
        }
        operations.append(operation)
        return count
    }

    /// Follows the feed across the nodes until `stop` is set.
    mutating func tail(stop: StopFlag, ports: ClusterPorts) {
        var connections = ClusterConnections()
        while !stop.isSet {
            if step(ports.current, waitMilliseconds: Self.waitMilliseconds, connections: &connections) == nil {
                usleep(ClusterWriter.retryPauseMicroseconds)
            }
        }
        connections.closeAll()
    }

    /// Reads on, a node after the other, until every node in turn has
    /// answered a page with no change (the end of the feed).
    mutating func catchUp(_ ports: [UInt16]) throws(LoadError) {
        var connections = ClusterConnections()
        defer { connections.closeAll() }
        var emptyInARow = 0
        for _ in 0..<Self.catchUpPagesMax {
            switch step(ports, waitMilliseconds: 0, connections: &connections) {
            case 0: emptyInARow += 1
            case .some: emptyInARow = 0
            case nil: usleep(ClusterWriter.retryPauseMicroseconds)
            }
            if emptyInARow >= ports.filter({ $0 != 0 }).count { return }
        }
        throw LoadError("the feed follower did not reach the end in \(Self.catchUpPagesMax) pages")
    }
}
