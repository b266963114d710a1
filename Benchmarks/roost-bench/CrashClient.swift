import RoostJSON
import RoostTesting
import Synchronization

/// What one crash client is given for a cycle: a value, handed to its thread.
struct CrashClientPlan: Sendable {
    var client: Int
    var port: UInt16
    var key: String
    var slots: [SlotState]
    var people: Int
    var weights: [Int]
    var seed: UInt64
    /// The first generation this cycle may use (generations are never reused).
    var nextGeneration: UInt32
    /// The most rows one import sends.
    static let importRowsMax = 5
}

/// A flag the harness raises to stop its clients (shared by reference).
final class StopFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    var isSet: Bool { flag.load(ordering: .relaxed) }
    func set() { flag.store(true, ordering: .relaxed) }
}

/// What a crash client hands back when its connection dies (the server was
/// killed): the acknowledged state of its slots, the write in flight, counts.
struct CrashClientResult: Sendable {
    var slots: [SlotState]
    var pending: PendingWrite?
    var acknowledged = 0
    var acknowledgedByOperation = [Int](repeating: 0, count: CrashOperation.allCases.count)
    var nextGeneration: UInt32
    /// Answers a correct server would not give (status or body), with detail.
    var unexpected: [String] = []
    /// Acknowledged writes sent with an `Idempotency-Key`, the newest `CrashClient.rememberedMax`.
    var remembered: [RememberedWrite] = []
    /// People this client erased (acknowledged), and the one whose erasure
    /// was in flight at the kill: remembered answers of earlier cycles that
    /// name them replay as erased (decision 0079).
    var erased: [String] = []
    var erasureInFlight: String?
}

extension CrashClientResult {
    /// The erasure of `person` was sent and not acknowledged: it may have been applied.
    mutating func noteErasureInFlight(_ person: String?) {
        guard let person else { return }
        erasureInFlight = person
        RememberedWrite.mark(&remembered, erasing: person, certainly: false)
    }
}

/// One client of the crash harness: owns its slots and people (no other
/// client touches them), sends one write at a time over one keep-alive
/// connection, and records each write before sending it, so that at the
/// kill it knows the last acknowledged state and the one write in flight.
enum CrashClient {
    /// How long one answer may take before the client gives up (the server hangs).
    static let answerTimeout: Duration = .seconds(30)
    /// One registration in this many carries an `Idempotency-Key` (spec §7).
    static let keyedOneIn = 4
    /// Keyed writes one client remembers (the newest).
    static let rememberedMax = 64

    static func run(_ plan: CrashClientPlan, stop: StopFlag) -> CrashClientResult {
        var result = CrashClientResult(slots: plan.slots, nextGeneration: plan.nextGeneration)
        var random = SeededRandom(seed: plan.seed)
        guard let connection = try? LoopbackConnection(port: plan.port) else { return result }
        let total = plan.weights.reduce(0, +)
        while !stop.isSet {
            var draw = Int(random.next() % UInt64(total))
            var operation = CrashOperation.register
            for candidate in CrashOperation.allCases {
                draw -= plan.weights[candidate.rawValue]
                if draw < 0 {
                    operation = candidate
                    break
                }
            }
            guard var write = prepare(operation, plan: plan, result: &result, random: &random) else { continue }
            let keyed =
                [.register, .rotate, .move].contains(operation) && random.next() % UInt64(keyedOneIn) == 0
            if keyed, let lineEnd = write.request.firstRange(of: "\r\n") {
                let name = "crash-c\(plan.client)-\(String(random.next(), radix: 16))"
                write.request.insert(contentsOf: "\r\nIdempotency-Key: \(name)", at: lineEnd.lowerBound)
            }
            result.pending = write.pending
            guard (try? connection.send(write.request)) != nil,
                let answer = try? connection.readResponse(timeout: answerTimeout)
            else {
                // The server is gone: the write stays in flight.
                result.noteErasureInFlight(write.erasedPerson)
                return result
            }
            if let problem = verify(write, status: answer.status, body: answer.body) {
                result.unexpected.append("client \(plan.client): \(write.pending.operation.name): \(problem)")
                result.noteErasureInFlight(write.erasedPerson)
                return result  // its outcome is unknown: it stays in flight, and this client stops
            }
            if let person = write.erasedPerson {
                result.erased.append(person)
                RememberedWrite.mark(&result.remembered, erasing: person, certainly: true)
            }
            let id = (try? JSONReader.parse(answer.body))?["id"]?.stringValue
            for change in write.pending.changes {
                var after = change.after
                if after.present && after.id == nil && write.pending.operation == .register { after.id = id }
                result.slots[change.slot] = after
            }
            result.pending = nil
            if keyed {
                if result.remembered.count == rememberedMax { result.remembered.removeFirst() }
                result.remembered.append(
                    RememberedWrite(
                        request: write.request, status: answer.status, body: answer.body,
                        person: (try? JSONReader.parse(answer.body))?["external_id"]?.stringValue))
            }
            result.acknowledged += 1
            result.acknowledgedByOperation[write.pending.operation.rawValue] += 1
        }
        return result
    }

    /// A request and what it changes, and what its answer must say.
    struct Write {
        var request: String
        var pending: PendingWrite
        var status: Int
        /// Import: rows that create and rows that update; erase: devices removed.
        var created = 0
        var updated = 0
        var removed = 0
        /// Erase: the person.
        var erasedPerson: String?
    }

    /// Returns nil when the operation has no slot to act on now (a draw again).
    static func prepare(
        _ operation: CrashOperation, plan: CrashClientPlan, result: inout CrashClientResult,
        random: inout SeededRandom
    ) -> Write? {
        let slots = result.slots
        let client = plan.client
        let key = plan.key
        func draw(_ condition: (SlotState) -> Bool) -> Int? {
            for _ in 0..<16 {
                let slot = Int(random.next() % UInt64(slots.count))
                if condition(slots[slot]) { return slot }
            }
            return nil
        }
        func newGeneration() -> UInt32 {
            defer { result.nextGeneration &+= 1 }
            return result.nextGeneration
        }
        /// The registration that puts `slot` into `state` (a new token, or a new person).
        func registerBody(slot: Int, state: SlotState) -> String {
            #"{"platform":"ios","token":"\#(CrashNames.token(client: client, slot: slot, generation: state.generation))","#
                + #""installation_id":"\#(CrashNames.installation(client: client, slot: slot))","#
                + #""external_id":"\#(CrashNames.person(client: client, state.person))"}"#
        }
        func otherPerson(_ person: Int) -> Int {
            plan.people == 1 ? person : (person + 1 + Int(random.next() % UInt64(plan.people - 1))) % plan.people
        }
        switch operation {
        case .register:
            let slot = Int(random.next() % UInt64(slots.count))
            var after = slots[slot]
            if !after.present {
                after = SlotState(
                    present: true, generation: newGeneration(), person: Int(random.next() % UInt64(plan.people)))
            }
            let body = registerBody(slot: slot, state: after)
            return Write(
                request: request("POST", "/v1/devices", key: key, body: body),
                pending: PendingWrite(operation: operation, changes: [(slot, slots[slot], after)]),
                status: slots[slot].present ? 200 : 201)
        case .rotate, .move:
            guard let slot = draw({ $0.present }) else { return nil }
            var after = slots[slot]
            if operation == .rotate {
                after.generation = newGeneration()
            } else {
                after.person = otherPerson(after.person)
            }
            let body = registerBody(slot: slot, state: after)
            return Write(
                request: request("POST", "/v1/devices", key: key, body: body),
                pending: PendingWrite(operation: operation, changes: [(slot, slots[slot], after)]), status: 200)
        case .delete:
            guard let slot = draw({ $0.present && $0.id != nil }), let id = slots[slot].id else { return nil }
            return Write(
                request: request("DELETE", "/v1/devices/\(id)", key: key, body: nil),
                pending: PendingWrite(operation: operation, changes: [(slot, slots[slot], .absent)]), status: 200)
        case .tags:
            guard let slot = draw({ $0.present && $0.id != nil }), let id = slots[slot].id else { return nil }
            var after = slots[slot]
            after.tag = Int(random.next() % 1_000_000)
            return Write(
                request: request(
                    "PATCH", "/v1/devices/\(id)", key: key, body: #"{"tags":{"n":"v\#(after.tag!)"}}"#),
                pending: PendingWrite(operation: operation, changes: [(slot, slots[slot], after)]), status: 200)
        case .erase:
            let person = Int(random.next() % UInt64(plan.people))
            let changes = slots.indices.filter { slots[$0].present && slots[$0].person == person }.map {
                (slot: $0, before: slots[$0], after: SlotState.absent)
            }
            var write = Write(
                request: request(
                    "DELETE", "/v1/people/\(CrashNames.person(client: client, person))", key: key, body: nil),
                pending: PendingWrite(operation: operation, changes: changes), status: 200)
            write.removed = changes.count
            write.erasedPerson = CrashNames.person(client: client, person)
            return write
        case .import:
            let rows = 1 + Int(random.next() % UInt64(CrashClientPlan.importRowsMax))
            var chosen: [Int] = []
            for _ in 0..<(rows * 4) where chosen.count < rows {
                let slot = Int(random.next() % UInt64(slots.count))
                if !chosen.contains(slot) { chosen.append(slot) }
            }
            var csv = "platform,token,installation_id,external_id\n"
            var changes: [(slot: Int, before: SlotState, after: SlotState)] = []
            var created = 0
            for slot in chosen {
                var after = slots[slot]
                if after.present {
                    if random.next() % 2 == 0 { after.person = otherPerson(after.person) }
                } else {
                    after = SlotState(
                        present: true, generation: newGeneration(), person: Int(random.next() % UInt64(plan.people)))
                    created += 1
                }
                csv +=
                    "ios,\(CrashNames.token(client: client, slot: slot, generation: after.generation)),"
                    + "\(CrashNames.installation(client: client, slot: slot)),"
                    + "\(CrashNames.person(client: client, after.person))\n"
                changes.append((slot, slots[slot], after))
            }
            var write = Write(
                request: request("POST", "/v1/devices/import", key: key, body: csv, contentType: "text/csv"),
                pending: PendingWrite(operation: operation, changes: changes), status: 200)
            write.created = created
            write.updated = changes.count - created
            return write
        }
    }

    /// Returns what is wrong with an answer, or nil when it is what a correct server sends.
    static func verify(_ write: Write, status: Int, body: [UInt8]) -> String? {
        let text = String(decoding: body.prefix(300), as: UTF8.self)
        guard status == write.status else { return "answered \(status), expected \(write.status): \(text)" }
        let value = try? JSONReader.parse(body)
        switch write.pending.operation {
        case .register, .rotate, .move, .tags:
            guard value?["id"]?.stringValue != nil else { return "no device id in the answer: \(text)" }
        case .delete:
            guard value?["deleted"]?.boolValue == true else { return "a present device not deleted: \(text)" }
        case .erase:
            guard value?["devices_removed"]?.intValue == write.removed else {
                return
                    "erased \(value?["devices_removed"]?.intValue ?? -1) devices, the model has \(write.removed): \(text)"
            }
        case .import:
            let created = value?["created"]?.intValue
            let updated = value?["updated"]?.intValue
            let rejected = value?["rejected_count"]?.intValue ?? value?["rejected"]?.arrayValue?.count
            guard created == write.created, updated == write.updated, rejected == 0 else {
                return "import counts \(text), expected created \(write.created), updated \(write.updated)"
            }
        }
        return nil
    }

    static func request(
        _ method: String, _ path: String, key: String, body: String?, contentType: String = "application/json"
    ) -> String {
        var text = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(key)\r\n"
        if let body {
            text += "Content-Type: \(contentType)\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        } else {
            text += "\r\n"
        }
        return text
    }
}
