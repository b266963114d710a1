import RoostJSON

/// One kind of write the crash harness sends (`--mix`).
enum CrashOperation: Int, CaseIterable, Sendable {
    /// `POST /v1/devices`: a new device for an absent slot (201), the same registration again for a present one (200).
    case register
    /// A new token for a present slot's installation (200).
    case rotate
    /// A present slot's token for another of the client's people (200).
    case move
    /// `DELETE /v1/devices/{id}` (200 `{"deleted":true}`).
    case delete
    /// `PATCH /v1/devices/{id}` with a new tag value (200).
    case tags
    /// `DELETE /v1/people/{external_id}`: the person and every device bound to them (200).
    case erase
    /// `POST /v1/devices/import`: a few rows, each a registration (200 with the counts).
    case `import`

    var name: String {
        switch self {
        case .register: "register"
        case .rotate: "rotate"
        case .move: "move"
        case .delete: "delete"
        case .tags: "tags"
        case .erase: "erase"
        case .import: "import"
        }
    }

    /// The mix `roost-bench crash` runs without `--mix`.
    static let standardMix = "register=25,rotate=15,move=15,delete=10,tags=15,erase=5,import=15"

    /// Parses `name=weight,…` into weights by rawValue.
    static func parseMix(_ text: String) throws(UsageError) -> [Int] {
        var weights = [Int](repeating: 0, count: allCases.count)
        var seen: Set<String> = []
        for part in text.split(separator: ",", omittingEmptySubsequences: false) {
            let pair = part.split(separator: "=", omittingEmptySubsequences: false)
            guard pair.count == 2, let weight = Arguments.integer(String(pair[1])), weight >= 0, weight <= 1_000_000
            else { throw UsageError("--mix \(text): expected name=weight pairs, weights 0 to 1000000") }
            guard let operation = allCases.first(where: { $0.name == pair[0] }) else {
                throw UsageError(
                    "--mix: unknown operation '\(pair[0])' (known: \(allCases.map(\.name).joined(separator: ", ")))")
            }
            guard seen.insert(operation.name).inserted else { throw UsageError("--mix: \(operation.name) given twice") }
            weights[operation.rawValue] = weight
        }
        guard weights.contains(where: { $0 > 0 }) else { throw UsageError("--mix \(text): every weight is 0") }
        return weights
    }
}

/// What the harness knows about one slot (a device position of a client):
/// absent, or present with its token generation, person, tag value and id.
struct SlotState: Equatable, Sendable, CustomStringConvertible {
    var present = false
    var generation: UInt32 = 0
    var person = 0
    /// The value of tag `n` (`"v<tag>"`), nil: no tags.
    var tag: Int? = nil
    /// The device id; nil until an answer or an export told it.
    var id: String? = nil

    static let absent = SlotState()

    /// Whether `other` is the same outcome (an unknown id matches any id).
    func matches(_ other: SlotState) -> Bool {
        guard present == other.present else { return false }
        guard present else { return true }
        return generation == other.generation && person == other.person && tag == other.tag
            && (id == nil || other.id == nil || id == other.id)
    }

    var description: String {
        present ? "present(token gen \(generation), person \(person), tag \(tag.map(String.init) ?? "none"))" : "absent"
    }
}

/// A write sent and not (yet) acknowledged: the slots it changes, each from
/// `before` to `after`. Applied wholly or not at all, except an import,
/// whose rows apply in order: any prefix of them (docs/crash-testing.md).
struct PendingWrite: Sendable {
    var operation: CrashOperation
    var changes: [(slot: Int, before: SlotState, after: SlotState)]

    /// The outcomes a correct server may leave: nothing applied, or all of it
    /// (or, for an import, the first k rows for every k).
    var candidates: [[SlotState]] {
        let before = changes.map(\.before)
        let after = changes.map(\.after)
        guard operation == .import else { return [before, after] }
        return (0...changes.count).map { applied in Array(after[..<applied] + before[applied...]) }
    }
}

/// Naming of the harness's tokens, installations and people, so that any
/// exported device can be traced to its client and slot.
enum CrashNames {
    /// Token of client `client`, slot `slot`, generation `generation`: 40
    /// hex digits `ca…`, then client (4), slot (8) and generation (12) in hex.
    static func token(client: Int, slot: Int, generation: UInt32) -> String {
        String(repeating: "ca", count: 20) + hex(client, 4) + hex(slot, 8) + hex(Int(generation), 12)
    }

    /// Token of background device `index` (imported once, never changed).
    static func backgroundToken(_ index: Int) -> String { String(repeating: "bb", count: 20) + hex(index, 24) }

    static func installation(client: Int, slot: Int) -> String { "c\(client)s\(slot)" }
    static func person(client: Int, _ person: Int) -> String { "c\(client)p\(person)" }
    static func backgroundPerson(_ index: Int) -> String { "bgp\(index % 1000)" }

    /// Parses a harness token back into (client, slot, generation).
    static func parse(token: String) -> (client: Int, slot: Int, generation: UInt32)? {
        let bytes = Array(token.utf8)
        guard bytes.count == 64, token.hasPrefix(String(repeating: "ca", count: 20)) else { return nil }
        guard let client = Int(String(decoding: bytes[40..<44], as: UTF8.self), radix: 16),
            let slot = Int(String(decoding: bytes[44..<52], as: UTF8.self), radix: 16),
            let generation = UInt32(String(decoding: bytes[52..<64], as: UTF8.self), radix: 16)
        else { return nil }
        return (client, slot, generation)
    }

    private static func hex(_ value: Int, _ digits: Int) -> String {
        let text = String(value, radix: 16)
        precondition(text.count <= digits, "\(value) does not fit \(digits) hex digits")
        return String(repeating: "0", count: digits - text.count) + text
    }
}

/// What one check of the exported state against the model found.
struct CheckCounts: Sendable {
    /// Slots and background devices compared.
    var checked = 0
    /// Acknowledged states not found (a device missing or changed).
    var lost = 0
    /// Devices the model does not have: duplicates, never-acknowledged devices, stray tokens.
    var extra = 0
    /// In-flight writes found partly applied.
    var halfApplied = 0
    /// In-flight writes found applied / not applied.
    var inFlightApplied = 0
    var inFlightNotApplied = 0
    /// Devices the change-feed consumer compared with the export, and differences.
    var feedChecked = 0
    var feedMismatched = 0
    /// Remembered idempotent writes sent again, and answers that differed.
    var replayChecked = 0
    var replayMismatched = 0
    /// The first problems, for the report.
    var problems: [String] = []

    var failures: Int { lost + extra + halfApplied + feedMismatched + replayMismatched }

    mutating func note(_ problem: String) {
        if problems.count < CrashModel.problemsListedMax { problems.append(problem) }
    }

    mutating func add(_ other: CheckCounts) {
        checked += other.checked
        lost += other.lost
        extra += other.extra
        halfApplied += other.halfApplied
        inFlightApplied += other.inFlightApplied
        inFlightNotApplied += other.inFlightNotApplied
        feedChecked += other.feedChecked
        feedMismatched += other.feedMismatched
        replayChecked += other.replayChecked
        replayMismatched += other.replayMismatched
        for problem in other.problems { note(problem) }
    }
}

/// One exported device, reduced to what the model compares.
struct ExportedDevice {
    var id: String
    var token: String
    var installation: String?
    var person: String?
    var tags: [(key: String, value: JSONValue)]
    /// The whole exported line (`parseExport` sets it; the change-feed
    /// consumer compares it member for member).
    var json: JSONValue = .null
}

/// The model of every client's slots after the last check plus the
/// acknowledged writes since, and the background devices; checks an export.
enum CrashModel {
    /// Problems listed per check.
    static let problemsListedMax = 20

    /// Parses the NDJSON export.
    static func parseExport(_ body: [UInt8]) throws(LoadError) -> [ExportedDevice] {
        var devices: [ExportedDevice] = []
        var lineStart = 0
        var lineNumber = 0
        while lineStart < body.count {
            var lineEnd = lineStart
            while lineEnd < body.count && body[lineEnd] != UInt8(ascii: "\n") { lineEnd += 1 }
            lineNumber += 1
            if lineEnd > lineStart {
                let value: JSONValue
                do {
                    value = try JSONReader.parse(Array(body[lineStart..<lineEnd]))
                } catch {
                    throw LoadError("export line \(lineNumber) is not JSON: \(error)")
                }
                guard let id = value["id"]?.stringValue, let token = value["token"]?.stringValue else {
                    throw LoadError("export line \(lineNumber) has no id or token")
                }
                devices.append(
                    ExportedDevice(
                        id: id, token: token, installation: value["installation_id"]?.stringValue,
                        person: value["external_id"]?.stringValue, tags: value["tags"]?.objectMembers ?? [],
                        json: value))
            }
            lineStart = lineEnd + 1
        }
        return devices
    }

    /// Compares the export with the model: `slots[client][slot]` acknowledged
    /// states, `pending[client]` the write in flight at the kill (if any),
    /// `background` devices imported at the start. Returns the counts and
    /// the states found (the truth the next cycle builds on, ids learned).
    static func check(
        _ devices: [ExportedDevice], slots: [[SlotState]], pending: [PendingWrite?], background: Int
    ) -> (CheckCounts, [[SlotState]]) {
        var counts = CheckCounts()
        var found = slots.map { Array(repeating: SlotState.absent, count: $0.count) }
        var seen = slots.map { Array(repeating: 0, count: $0.count) }
        var backgroundSeen = [Bool](repeating: false, count: background)
        for device in devices {
            if let index = backgroundIndex(device.token) {
                guard index < background, device.person == CrashNames.backgroundPerson(index) else {
                    counts.extra += 1
                    counts.note(
                        "background device \(device.id) with token …\(device.token.suffix(8)) changed or unknown")
                    continue
                }
                if backgroundSeen[index] {
                    counts.extra += 1
                    counts.note("background token …\(device.token.suffix(8)) twice")
                }
                backgroundSeen[index] = true
                continue
            }
            guard let (client, slot, generation) = CrashNames.parse(token: device.token), client < slots.count,
                slot < slots[client].count, device.installation == CrashNames.installation(client: client, slot: slot)
            else {
                counts.extra += 1
                counts.note("device \(device.id) not made by the harness: token …\(device.token.suffix(12))")
                continue
            }
            seen[client][slot] += 1
            if seen[client][slot] > 1 {
                counts.extra += 1
                counts.note("client \(client) slot \(slot): a second device \(device.id)")
                continue
            }
            guard let person = personIndex(device.person, client: client) else {
                counts.lost += 1
                counts.note("client \(client) slot \(slot): device \(device.id) bound to \(device.person ?? "nobody")")
                continue
            }
            var tag: Int? = nil
            if let member = device.tags.first(where: { $0.key == "n" })?.value.stringValue {
                tag = Int(member.dropFirst())
            }
            found[client][slot] = SlotState(
                present: true, generation: generation, person: person, tag: tag, id: device.id)
        }
        for index in 0..<background where !backgroundSeen[index] {
            counts.lost += 1
            counts.note("background device \(index) (token …\(CrashNames.backgroundToken(index).suffix(8))) missing")
        }
        counts.checked += background
        for client in slots.indices {
            var touched: Set<Int> = []
            if let write = pending[client] {
                touched = Set(write.changes.map(\.slot))
                let actual = write.changes.map { found[client][$0.slot] }
                let candidates = write.candidates
                if let match = candidates.firstIndex(where: { zip($0, actual).allSatisfy { $0.matches($1) } }) {
                    if match == 0 { counts.inFlightNotApplied += 1 } else { counts.inFlightApplied += 1 }
                } else {
                    counts.halfApplied += 1
                    counts.note(
                        "client \(client): \(write.operation.name) in flight half-applied: found \(actual), "
                            + "before \(write.changes.map(\.before)), after \(write.changes.map(\.after))")
                }
            }
            for slot in slots[client].indices where !touched.contains(slot) {
                let expected = slots[client][slot]
                let actual = found[client][slot]
                if !expected.matches(actual) {
                    if expected.present {
                        counts.lost += 1
                    } else {
                        counts.extra += 1
                    }
                    counts.note("client \(client) slot \(slot): acknowledged \(expected), found \(actual)")
                }
            }
            counts.checked += slots[client].count
        }
        return (counts, found)
    }

    private static func backgroundIndex(_ token: String) -> Int? {
        guard token.hasPrefix(String(repeating: "bb", count: 20)) else { return nil }
        return Int(token.dropFirst(40), radix: 16)
    }

    private static func personIndex(_ externalID: String?, client: Int) -> Int? {
        let prefix = "c\(client)p"
        guard let externalID, externalID.hasPrefix(prefix) else { return nil }
        return Int(externalID.dropFirst(prefix.count))
    }
}
