import RoostJSON
import RoostTesting

/// A consumer of `GET /v1/changes` across kill -9 (spec §9): it starts from
/// an export and its `Roost-Cursor`, tails the feed while the clients write
/// (long polls), is cut off by the kill, and after each restart goes on from
/// the cursor it had: the devices it then holds must be the export's, device
/// for device. A feed that showed a change the log then lost, skipped one,
/// or whose cursors moved across the restart makes them differ.
struct CrashFeedFollower: Sendable {
    /// Device JSON by id, as the consumer has applied it.
    private(set) var devices: [String: JSONValue] = [:]
    /// The cursor to go on from.
    private(set) var cursor: String
    /// Changes applied, over the whole run.
    private(set) var applied = 0

    /// Changes per page.
    static let pageLimit = 1_000
    /// How long one tailing request waits for a change.
    static let waitMilliseconds = 500
    /// The longest catch-up after a restart, in pages.
    static let catchUpPagesMax = 100_000

    /// Starts from an export's devices (`CrashModel.parseExport`) and its `Roost-Cursor`.
    init(export: [ExportedDevice], cursor: String?) throws(LoadError) {
        guard let cursor else { throw LoadError("the export has no Roost-Cursor") }
        self.cursor = cursor
        devices = Self.byID(export)
    }

    /// Each exported device's JSON, by id.
    static func byID(_ export: [ExportedDevice]) -> [String: JSONValue] {
        Dictionary(export.map { ($0.id, $0.json) }, uniquingKeysWith: { first, _ in first })
    }

    /// Tails the feed until `stop` is set or the server goes away (the kill):
    /// the page in flight then is simply not applied.
    mutating func tail(port: UInt16, key: String, stop: StopFlag) {
        guard let connection = try? LoopbackConnection(port: port) else { return }
        while !stop.isSet {
            guard (try? page(connection, key: key, wait: Self.waitMilliseconds)) != nil else { return }
        }
    }

    /// Follows the feed to its end (nothing after the cursor). Throws when
    /// the server refuses the cursor (410 after a restart: positions moved)
    /// or answers otherwise than 200.
    mutating func catchUp(port: UInt16, key: String) throws(LoadError) {
        let connection: LoopbackConnection
        do {
            connection = try LoopbackConnection(port: port)
        } catch {
            throw LoadError("change feed: \(error)")
        }
        for _ in 0..<Self.catchUpPagesMax {
            if try page(connection, key: key, wait: 0) == 0 { return }
        }
        throw LoadError("change feed: more than \(Self.catchUpPagesMax) pages to catch up")
    }

    /// Reads and applies one page; returns how many changes it held.
    private mutating func page(_ connection: LoopbackConnection, key: String, wait: Int) throws(LoadError) -> Int {
        let path = "/v1/changes?after=\(cursor)&limit=\(Self.pageLimit)" + (wait > 0 ? "&wait_ms=\(wait)" : "")
        let answer: LoopbackResponse
        do {
            try connection.send(CrashClient.request("GET", path, key: key, body: nil))
            answer = try connection.readResponse(timeout: .seconds(30))
        } catch {
            throw LoadError("change feed: \(error)")
        }
        guard answer.status == 200, let value = try? JSONReader.parse(answer.body),
            let changes = value["changes"]?.arrayValue, let next = value["next_cursor"]?.stringValue
        else {
            throw LoadError(
                "GET \(path) answered \(answer.status): \(String(decoding: answer.body.prefix(300), as: UTF8.self))")
        }
        for change in changes {
            switch change["op"]?.stringValue {
            case "upsert":
                guard let device = change["device"], let id = device["id"]?.stringValue else {
                    throw LoadError("an upsert change without a device: \(change)")
                }
                devices[id] = device
            case "delete":
                guard let id = change["id"]?.stringValue else { throw LoadError("a delete change without an id") }
                devices[id] = nil
            default:
                throw LoadError("a change of no known op: \(change)")
            }
        }
        applied += changes.count
        cursor = next
        return changes.count
    }

    /// Compares what the consumer holds with an export taken when nothing
    /// is being written: the same devices, member for member, and the same
    /// cursor. Adds to `counts` (a difference is lost or extra).
    func check(against export: [ExportedDevice], cursor exportCursor: String?, into counts: inout CheckCounts) {
        let exported = Self.byID(export)
        counts.feedChecked += exported.count
        if exportCursor != cursor {
            counts.feedMismatched += 1
            counts.note("change feed: followed to \(cursor), but the export is at \(exportCursor ?? "no cursor")")
        }
        for (id, device) in exported where devices[id] != device {
            counts.feedMismatched += 1
            counts.note(
                devices[id] == nil
                    ? "change feed: \(id) is in the export but the feed never showed it"
                    : "change feed: \(id) differs from the export: feed \(devices[id]!), export \(device)")
        }
        for id in devices.keys where exported[id] == nil {
            counts.feedMismatched += 1
            counts.note("change feed: \(id) is not in the export but the feed left it present")
        }
    }
}

/// An acknowledged write sent with an `Idempotency-Key` (spec §7): sending it
/// again, after any number of kills, must give its first answer back,
/// marked `Idempotent-Replayed: true`, and change nothing.
struct RememberedWrite: Sendable {
    /// What a replay of it must answer once its person may be erased
    /// (decision 0079: 410 `person_erased`, replayed).
    enum Erasure: Sendable {
        /// Not erased since: the first answer.
        case none
        /// Erased since (acknowledged): 410 `person_erased`.
        case erased
        /// An erasure was in flight at a kill: either.
        case maybe
    }

    var request: String
    var status: Int
    var body: [UInt8]
    /// The external id its answer names, if any.
    var person: String? = nil
    var erasure = Erasure.none

    /// Marks every write of `writes` whose answer names `person` as erased
    /// (`certainly`: the erasure was acknowledged) or maybe erased.
    static func mark(_ writes: inout [RememberedWrite], erasing person: String, certainly: Bool) {
        for index in writes.indices where writes[index].person == person {
            if certainly {
                writes[index].erasure = .erased
            } else if writes[index].erasure == .none {
                writes[index].erasure = .maybe
            }
        }
    }

    /// Whether `answer` is the replay of the erased person's answer.
    static func isErasedReplay(_ answer: LoopbackResponse) -> Bool {
        answer.status == 410 && answer.header("Idempotent-Replayed") == "true"
            && (try? JSONReader.parse(answer.body))?["error"]?["code"]?.stringValue == "person_erased"
    }

    /// The remembered writes the run keeps (the newest), checked after every restart.
    static let keptMax = 256

    /// Sends every write again and compares the answers.
    static func check(_ writes: [RememberedWrite], port: UInt16, into counts: inout CheckCounts) throws(LoadError) {
        guard !writes.isEmpty else { return }
        let connection: LoopbackConnection
        do {
            connection = try LoopbackConnection(port: port)
        } catch {
            throw LoadError("idempotency replay: \(error)")
        }
        for write in writes {
            let answer: LoopbackResponse
            do {
                try connection.send(write.request)
                answer = try connection.readResponse(timeout: .seconds(30))
            } catch {
                throw LoadError("idempotency replay: \(error)")
            }
            counts.replayChecked += 1
            let first =
                answer.status == write.status && answer.body == write.body
                && answer.header("Idempotent-Replayed") == "true"
            let expected: Bool
            switch write.erasure {
            case .none: expected = first
            case .erased: expected = isErasedReplay(answer)
            case .maybe: expected = first || isErasedReplay(answer)
            }
            guard expected else {
                counts.replayMismatched += 1
                counts.note(
                    "idempotency replay (\(write.erasure)): first \(write.status) \(String(decoding: write.body.prefix(120), as: UTF8.self)), "
                        + "now \(answer.status) replayed=\(answer.header("Idempotent-Replayed") ?? "no") "
                        + String(decoding: answer.body.prefix(120), as: UTF8.self))
                continue
            }
        }
    }
}
