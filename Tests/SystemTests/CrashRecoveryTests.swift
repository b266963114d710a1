import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting
import Synchronization
import Testing

/// Kills the real `roost` binary under concurrent load and checks, after each
/// restart, that every acknowledged write is there and that every device is in
/// the state of its last acknowledged operation or of the one in flight.
@Suite("Crash recovery (real process, SIGKILL)", .serialized)
struct CrashRecoveryTests {
    /// kill -9 cycles run by `make test`; `ROOST_CRASH_CYCLES` raises it (`make soak`).
    static var cycles: Int {
        getenv("ROOST_CRASH_CYCLES").flatMap { Int(String(cString: $0)) } ?? 20
    }
    static let clients = 6
    /// A cycle kills the server once a seeded number of operations in this
    /// range were acknowledged: a moment under load, whatever the machine's
    /// speed. (It replaced a seeded 30–280 ms wait, in which a debug build on
    /// two cores acknowledged about 75 to 600.)
    static let acknowledgedBeforeKill: Range<UInt64> = 50..<600
    static let tokensPerClient = 12

    /// What a client knows about one token: the state after its last
    /// acknowledged operation, and the state its unacknowledged one would give.
    struct TokenHistory: Sendable {
        var acknowledged: TokenState = .absent
        var inFlight: TokenState?
        var deviceID: String?
    }

    enum TokenState: Sendable, Equatable, CustomStringConvertible {
        case absent
        case boundTo(String)

        var description: String {
            switch self {
            case .absent: "absent"
            case .boundTo(let person): "bound to \(person)"
            }
        }
    }

    /// The 64-hex-digit APNs token of (client, slot).
    static func token(client: Int, slot: Int) -> String {
        let seed = String(client * 1000 + slot)
        return String(repeating: "ab", count: 28) + String(repeating: "0", count: 8 - seed.count) + seed
    }

    @Test("SIGKILL at seeded random moments under register/move/delete load loses no acknowledged write")
    func killNineCycles() throws {
        let seed = UInt64(getenv("ROOST_CRASH_SEED").flatMap { UInt64(String(cString: $0)) } ?? 20_261_129)
        var random = SeededRandom(seed: seed)
        let directory = try TemporaryDirectory.make(prefix: "roost-system")
        defer { TemporaryDirectory.remove(directory) }
        var (process, _) = try ServeTests.start(data: directory, extra: ["--fsync", "always"])
        let key = try CrashRecoveryTests.setUp(port: process.port)
        var histories = [[TokenHistory]](
            repeating: [TokenHistory](repeating: TokenHistory(), count: Self.tokensPerClient), count: Self.clients)
        var totalAcknowledged = 0

        for cycle in 0..<Self.cycles {
            let load = Load(port: process.port, key: key, histories: histories, seed: random.next())
            load.start()
            // The moment: after a seeded random number of acknowledged operations.
            let range = Self.acknowledgedBeforeKill
            let acknowledgedBeforeKill = Int(range.lowerBound + random.next() % UInt64(range.count))
            #expect(
                ConditionWait.until { load.acknowledgedCount >= acknowledgedBeforeKill },
                "cycle \(cycle): the load stalled at \(load.acknowledgedCount)")
            #expect(process.stop(signal: SIGKILL) == 128 + SIGKILL)
            histories = load.join()
            totalAcknowledged += load.acknowledgedCount

            (process, _) = try ServeTests.start(data: directory, extra: ["--fsync", "always"])
            let found = try CrashRecoveryTests.exportedStates(port: process.port, key: key)
            for client in 0..<Self.clients {
                for slot in 0..<Self.tokensPerClient {
                    let token = Self.token(client: client, slot: slot)
                    var history = histories[client][slot]
                    let actual = found[token] ?? .absent
                    let allowed = [history.acknowledged] + (history.inFlight.map { [$0] } ?? [])
                    #expect(
                        allowed.contains(actual),
                        "seed \(seed) cycle \(cycle) token \(client)/\(slot): found \(actual), allowed \(allowed)")
                    // The restarted server's state is the truth the next cycle builds on.
                    history.acknowledged = actual
                    history.inFlight = nil
                    if actual == .absent { history.deviceID = nil }
                    histories[client][slot] = history
                }
            }
            let ids = try CrashRecoveryTests.exportedIDs(port: process.port, key: key)
            for client in 0..<Self.clients {
                for slot in 0..<Self.tokensPerClient {
                    histories[client][slot].deviceID = ids[Self.token(client: client, slot: slot)]
                }
            }
        }
        #expect(totalAcknowledged > Self.cycles * 10, "seed \(seed): only \(totalAcknowledged) writes acknowledged")
        #expect(process.stop(signal: SIGTERM) == 0)
    }

    @Test("SIGTERM exits 0 and a restart reproduces the export byte for byte")
    func cleanRestartReproducesExport() throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-system")
        defer { TemporaryDirectory.remove(directory) }
        let (first, _) = try ServeTests.start(data: directory)
        let key = try CrashRecoveryTests.setUp(port: first.port)
        for slot in 0..<40 {
            let body =
                #"{"platform":"ios","token":"\#(Self.token(client: 9, slot: slot))","external_id":"p\#(slot % 7)","tags":{"n":\#(slot)}}"#
            #expect(try ServeTests.request(first.port, "POST", "/v1/devices", key: key, body: body).status == 201)
        }
        let before = try ServeTests.request(first.port, "GET", "/v1/devices/export", key: key)
        #expect(before.status == 200)
        #expect(first.stop(signal: SIGTERM) == 0)
        let (second, _) = try ServeTests.start(data: directory)
        let after = try ServeTests.request(second.port, "GET", "/v1/devices/export", key: key)
        #expect(after.body == before.body)
        #expect(before.bodyText.split(separator: "\n").count == 40)
        #expect(second.stop(signal: SIGTERM) == 0)
    }

    /// Creates an app (with room for every token on one person, so that no
    /// eviction changes a token behind its client's back) and a secret key
    /// with the device capabilities.
    static func setUp(port: UInt16) throws -> String {
        _ = try ServeTests.request(
            port, "POST", "/v1/apps", key: ServeTests.adminKey,
            body: #"{"name":"crash","settings":{"max_devices_per_person":1000}}"#)
        let made = try ServeTests.request(
            port, "POST", "/v1/apps/1/keys", key: ServeTests.adminKey,
            body: #"{"kind":"secret","capabilities":["devices:write","devices:read","devices:delete"]}"#)
        return try #require(try JSONReader.parse(made.body)["key"]?.stringValue)
    }

    /// Token → state, from the NDJSON export.
    static func exportedStates(port: UInt16, key: String) throws -> [String: TokenState] {
        var states: [String: TokenState] = [:]
        for line in try exportLines(port: port, key: key) {
            guard let token = line["token"]?.stringValue else { continue }
            states[token] = .boundTo(line["external_id"]?.stringValue ?? "")
        }
        return states
    }

    static func exportedIDs(port: UInt16, key: String) throws -> [String: String] {
        var ids: [String: String] = [:]
        for line in try exportLines(port: port, key: key) {
            if let token = line["token"]?.stringValue, let id = line["id"]?.stringValue { ids[token] = id }
        }
        return ids
    }

    static func exportLines(port: UInt16, key: String) throws -> [JSONValue] {
        let answer = try ServeTests.request(port, "GET", "/v1/devices/export", key: key)
        #expect(answer.status == 200)
        return try answer.bodyText.split(separator: "\n").map { try JSONReader.parse(Array($0.utf8)) }
    }
}

/// Concurrent clients, one thread each, each owning a disjoint set of tokens
/// and issuing one operation at a time on them: register for a person (new or
/// moving the token), or delete. The process is killed under them.
final class Load: Sendable {
    private let port: UInt16
    private let key: String
    private let seed: UInt64
    private let histories: Mutex<[[CrashRecoveryTests.TokenHistory]]>
    private let acknowledged = Atomic<Int>(0)
    private let threads = Mutex<[PlatformThread]>([])

    init(port: UInt16, key: String, histories: [[CrashRecoveryTests.TokenHistory]], seed: UInt64) {
        self.port = port
        self.key = key
        self.seed = seed
        self.histories = Mutex(histories)
    }

    var acknowledgedCount: Int { acknowledged.load(ordering: .relaxed) }

    func start() {
        for client in 0..<CrashRecoveryTests.clients {
            let thread = try? PlatformThread.spawn { self.run(client: client) }
            precondition(thread != nil, "cannot start a load thread")
            threads.withLock { $0.append(thread!) }
        }
    }

    /// Waits for every client (they stop when the server goes away) and
    /// returns the histories.
    func join() -> [[CrashRecoveryTests.TokenHistory]] {
        for thread in threads.withLock({ $0 }) { thread.join() }
        return histories.withLock { $0 }
    }

    private func run(client: Int) {
        var random = SeededRandom(seed: seed &+ UInt64(client) &* 0x9E37_79B9)
        guard let connection = try? LoopbackConnection(port: port) else { return }
        while true {
            let slot = Int(random.next() % UInt64(CrashRecoveryTests.tokensPerClient))
            let token = CrashRecoveryTests.token(client: client, slot: slot)
            let history = histories.withLock { $0[client][slot] }
            let request: String
            let intended: CrashRecoveryTests.TokenState
            if let id = history.deviceID, random.next() % 4 == 0 {
                request = "DELETE /v1/devices/\(id) HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer \(key)\r\n\r\n"
                intended = .absent
            } else {
                let person = "person_\(random.next() % 5)"
                let body = #"{"platform":"ios","token":"\#(token)","external_id":"\#(person)"}"#
                request =
                    "POST /v1/devices HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer \(key)\r\n"
                    + "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
                intended = .boundTo(person)
            }
            histories.withLock { $0[client][slot].inFlight = intended }
            guard (try? connection.send(request)) != nil,
                let answer = try? connection.readResponse(timeout: .seconds(10))
            else { return }
            guard answer.status < 300 else {
                // A refusal changed nothing.
                histories.withLock { $0[client][slot].inFlight = nil }
                continue
            }
            let id = (try? JSONReader.parse(answer.body))?["id"]?.stringValue
            histories.withLock { all in
                all[client][slot].acknowledged = intended
                all[client][slot].inFlight = nil
                all[client][slot].deviceID = intended == .absent ? nil : (id ?? all[client][slot].deviceID)
            }
            acknowledged.add(1, ordering: .relaxed)
        }
    }
}
