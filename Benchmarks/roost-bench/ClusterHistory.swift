import RoostJSON

/// A node as its answers name it (`Roost-Node`, spec §13.2), e.g. `n2`.
struct ClusterNodeName: Hashable, Comparable, Sendable, CustomStringConvertible {
    let rawValue: String

    init(_ rawValue: String) { self.rawValue = rawValue }

    static func < (lhs: ClusterNodeName, rhs: ClusterNodeName) -> Bool { lhs.rawValue < rhs.rawValue }
    var description: String { rawValue }
}

/// An epoch (`Roost-Epoch`, spec §13.1): grows with every new leader.
struct ClusterEpoch: Hashable, Comparable, Sendable, CustomStringConvertible {
    let rawValue: Int64

    init(_ rawValue: Int64) { self.rawValue = rawValue }

    /// Parses the header's decimal value; nil for anything else.
    init?(header: String?) {
        guard let header, let value = Int64(header), value >= 0 else { return nil }
        rawValue = value
    }

    static func < (lhs: ClusterEpoch, rhs: ClusterEpoch) -> Bool { lhs.rawValue < rhs.rawValue }
    var description: String { "epoch \(rawValue)" }
}

/// A position of the app (spec §13.1): the change-feed cursor `c` + 16
/// lower-case hex digits, which counts the app's own records in log order.
struct ClusterPosition: Hashable, Comparable, Sendable, CustomStringConvertible {
    let rawValue: UInt64

    init(_ rawValue: UInt64) { self.rawValue = rawValue }

    /// Parses a cursor as the server writes it; nil for anything else.
    init?(cursor: String?) {
        guard let cursor else { return nil }
        let utf8 = Array(cursor.utf8)
        guard utf8.count == Self.cursorBytes, utf8[0] == UInt8(ascii: "c"),
            utf8.dropFirst().allSatisfy({
                (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
                    || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0)
            }),
            let value = UInt64(cursor.dropFirst(), radix: 16)
        else { return nil }
        rawValue = value
    }

    /// `c` and 16 hex digits.
    static let cursorBytes = 17

    static func < (lhs: ClusterPosition, rhs: ClusterPosition) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The cursor text, as the server writes it.
    var description: String {
        let digits = String(rawValue, radix: 16)
        return "c" + String(repeating: "0", count: 16 - digits.count) + digits
    }
}

/// A device as a read showed it: its id, and its token when the answer
/// carries one (device reads and upserts do; a person's devices and a
/// deletion do not).
struct ClusterSeenDevice: Hashable, Sendable {
    var deviceID: String
    var token: String?
}

/// One change of the feed (spec §9) as an answer or the final state showed it.
struct ClusterChange: Hashable, Sendable, CustomStringConvertible {
    var cursor: ClusterPosition
    var deleted: Bool
    var deviceID: String
    /// The upsert's token; nil for a deletion.
    var token: String?

    var description: String {
        deleted
            ? "delete \(deviceID) at \(cursor)" : "upsert \(deviceID) (token …\((token ?? "").suffix(8))) at \(cursor)"
    }

    /// Parses a `GET /v1/changes` answer: its changes and `next_cursor`.
    static func parsePage(_ body: [UInt8]) throws(LoadError) -> (changes: [ClusterChange], next: ClusterPosition) {
        let value: JSONValue
        do {
            value = try JSONReader.parse(body)
        } catch {
            throw LoadError("a change-feed page is not JSON: \(error)")
        }
        guard let list = value["changes"]?.arrayValue,
            let next = ClusterPosition(cursor: value["next_cursor"]?.stringValue)
        else { throw LoadError("a change-feed page without changes or next_cursor") }
        var changes: [ClusterChange] = []
        for change in list {
            guard let cursor = ClusterPosition(cursor: change["cursor"]?.stringValue) else {
                throw LoadError("a change without a cursor: \(change)")
            }
            switch change["op"]?.stringValue {
            case "upsert":
                guard let device = change["device"], let id = device["id"]?.stringValue else {
                    throw LoadError("an upsert without a device: \(change)")
                }
                changes.append(
                    ClusterChange(cursor: cursor, deleted: false, deviceID: id, token: device["token"]?.stringValue))
            case "delete":
                guard let id = change["id"]?.stringValue else { throw LoadError("a delete without an id: \(change)") }
                changes.append(ClusterChange(cursor: cursor, deleted: true, deviceID: id, token: nil))
            default:
                throw LoadError("a change of no known op: \(change)")
            }
        }
        return (changes, next)
    }
}

/// One request of the run as it happened: who sent it, to which node, what
/// it asked and what came back. Every attempt is one operation (a retry is
/// another); the checker reads nothing but these and the final state.
struct ClusterOperation: Sendable {
    /// What the request was.
    enum Kind: String, Sendable, CaseIterable {
        /// `POST /v1/devices` of a new token, with an `Idempotency-Key`.
        case register
        /// `DELETE /v1/devices/{id}`, with an `Idempotency-Key`.
        case delete
        /// `GET /v1/devices/{id}`.
        case readDevice
        /// `GET /v1/people/{external_id}`: shows devices whose writes may still be in flight.
        case readPerson
        /// `GET /v1/changes?after=…` of a feed follower.
        case readFeed
    }

    /// Its place in the merged history (sorted by start); set by `ClusterHistory.init`.
    var index = 0
    /// `w0`, `r1`, `f0`: the client's thread.
    var client: String
    var kind: Kind
    /// The node the request was sent to (by the harness's numbering).
    var target: ClusterNodeName
    /// `Roost-Node` of the answer.
    var node: ClusterNodeName?
    /// nil: no answer (refused, closed or timed out).
    var status: Int?
    /// The error code of a 4xx/5xx answer.
    var errorCode: String?
    var epoch: ClusterEpoch?
    var position: ClusterPosition?
    /// `Idempotent-Replayed: true`.
    var replayed = false
    /// Microseconds since the run started.
    var startMicroseconds: Int64
    var endMicroseconds: Int64
    /// Writes: the `Idempotency-Key`.
    var idempotencyKey: String?
    /// Register: the token sent; delete: the token of the device deleted.
    var token: String?
    /// Register: the id answered; delete and device read: the id asked for.
    var deviceID: String?
    /// Delete: `"deleted"` of the answer.
    var deletedAnswer: Bool?
    /// Device reads: `Roost-Min-Position`, the position the write answered.
    var minPosition: ClusterPosition?
    /// Device and person reads: the devices shown.
    var seen: [ClusterSeenDevice] = []
    /// Feed reads: the cursor asked from, the changes shown and `next_cursor`.
    var after: ClusterPosition?
    var changes: [ClusterChange] = []
    var next: ClusterPosition?

    /// Whether the answer was 2xx.
    var succeeded: Bool { status.map { (200..<300).contains($0) } ?? false }
    /// Whether this is a write that was acknowledged.
    var acknowledged: Bool { (kind == .register || kind == .delete) && succeeded }

    /// One line for a report.
    var summary: String {
        var text =
            "#\(index) \(client) \(kind.rawValue) →\(target)"
            + (node.map { " answered by \($0)" } ?? "") + " " + (status.map(String.init) ?? "no answer")
        if let errorCode { text += " \(errorCode)" }
        if let epoch { text += ", \(epoch)" }
        if let position { text += ", position \(position)" }
        if replayed { text += ", replayed" }
        if let token { text += ", token …\(token.suffix(8))" }
        if let deviceID { text += ", \(deviceID)" }
        if let after {
            text += ", after \(after) → \(next.map(String.init(describing:)) ?? "-") (\(changes.count) changes)"
        }
        if !seen.isEmpty { text += ", \(seen.count) devices shown" }
        text += " [\(ClusterOperation.seconds(startMicroseconds))–\(ClusterOperation.seconds(endMicroseconds)) s]"
        return text
    }

    static func seconds(_ microseconds: Int64) -> String { Format.fixed(Double(microseconds) / 1e6, 3) }
}

/// A fault the harness injected, for the report and the history file.
struct ClusterFault: Sendable {
    enum Kind: String, Sendable, CaseIterable {
        case killLeader = "kill-leader"
        case stopLeader = "stop-leader"
        case killFollower = "kill-follower"
        case stepDown = "step-down"
        case killEtcd = "kill-etcd"
    }

    var kind: Kind
    /// The node or etcd member it hit (`n2`, `e1`).
    var subject: String
    var atMicroseconds: Int64
}

/// Every operation of a run, in order of their start, and the faults.
struct ClusterHistory: Sendable {
    private(set) var operations: [ClusterOperation]
    var faults: [ClusterFault]

    /// Merges the clients' operations, ordered by start (ties by client), and numbers them.
    init(_ operations: [ClusterOperation], faults: [ClusterFault] = []) {
        var sorted = operations.sorted {
            ($0.startMicroseconds, $0.client, $0.endMicroseconds) < (
                $1.startMicroseconds, $1.client, $1.endMicroseconds
            )
        }
        for index in sorted.indices { sorted[index].index = index }
        self.operations = sorted
        self.faults = faults
    }

    /// The history as JSON (`--out`): one object per operation and per fault.
    func json() -> [UInt8] {
        var writer = JSONWriter(reservingCapacity: 256 * operations.count + 1024)
        writer.beginObject()
        writer.member("roost_bench", "cluster-history")
        writer.key("faults")
        writer.beginArray()
        for fault in faults {
            writer.beginObject()
            writer.member("kind", fault.kind.rawValue)
            writer.member("subject", fault.subject)
            writer.member("at_us", Int(fault.atMicroseconds))
            writer.endObject()
        }
        writer.endArray()
        writer.key("operations")
        writer.beginArray()
        for operation in operations { Self.write(operation, into: &writer) }
        writer.endArray()
        writer.endObject()
        return writer.bytes
    }

    private static func write(_ operation: ClusterOperation, into writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("index", operation.index)
        writer.member("client", operation.client)
        writer.member("op", operation.kind.rawValue)
        writer.member("target", operation.target.rawValue)
        writer.member("node", operation.node?.rawValue)
        if let status = operation.status { writer.member("status", status) } else { writer.memberNull("status") }
        writer.member("error", operation.errorCode)
        if let epoch = operation.epoch {
            writer.member("epoch", Int(epoch.rawValue))
        } else {
            writer.memberNull("epoch")
        }
        writer.member("position", operation.position.map(String.init(describing:)))
        writer.member("replayed", operation.replayed)
        writer.member("start_us", Int(operation.startMicroseconds))
        writer.member("end_us", Int(operation.endMicroseconds))
        writer.member("idempotency_key", operation.idempotencyKey)
        writer.member("token", operation.token)
        writer.member("device_id", operation.deviceID)
        if let deleted = operation.deletedAnswer { writer.member("deleted", deleted) }
        if let minimum = operation.minPosition { writer.member("min_position", minimum.description) }
        if !operation.seen.isEmpty {
            writer.key("seen")
            writer.beginArray()
            for device in operation.seen {
                writer.beginObject()
                writer.member("id", device.deviceID)
                writer.member("token", device.token)
                writer.endObject()
            }
            writer.endArray()
        }
        if operation.kind == .readFeed {
            writer.member("after", operation.after.map(String.init(describing:)))
            writer.member("next", operation.next.map(String.init(describing:)))
            writer.key("changes")
            writer.beginArray()
            for change in operation.changes {
                writer.beginObject()
                writer.member("cursor", change.cursor.description)
                writer.member("op", change.deleted ? "delete" : "upsert")
                writer.member("id", change.deviceID)
                writer.member("token", change.token)
                writer.endObject()
            }
            writer.endArray()
        }
        writer.endObject()
    }
}

/// What every node holds once the run settled: the export (raw bytes, so
/// that nodes compare byte for byte) at its `Roost-Cursor`, the whole change
/// feed, and the epochs its log says it won (`cluster.elected`).
struct ClusterFinalNode: Sendable {
    var node: ClusterNodeName
    var exportBody: [UInt8]
    var exportCursor: ClusterPosition?
    var feed: [ClusterChange]
    var electedEpochs: [ClusterEpoch]
}

/// The final state of every node.
struct ClusterFinalState: Sendable {
    var nodes: [ClusterFinalNode]
}
