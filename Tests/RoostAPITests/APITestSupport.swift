import Glibc
import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostPlatform
import RoostStorage
import RoostTesting
import Synchronization

@testable import RoostAPI

/// A clock the test moves by hand.
final class ManualWallClock: APIClock {
    private let state = Mutex((wall: Int64(1_790_000_000_000), monotonic: UInt64(1_000_000_000)))

    func wallMilliseconds() -> Int64 { state.withLock { $0.wall } }
    func monotonicNanoseconds() -> UInt64 { state.withLock { $0.monotonic } }

    func advance(milliseconds: Int64) {
        state.withLock {
            $0.wall += milliseconds
            $0.monotonic += UInt64(milliseconds) * 1_000_000
        }
    }
}

/// An answer as a test sees it.
struct Answer {
    var status: Int
    var headers: [(name: String, value: String)]
    var body: [UInt8]

    var json: JSONValue? { try? JSONReader.parse(body) }
    var errorCode: String? { json?["error"]?["code"]?.stringValue }
    var errorField: String? { json?["error"]?["field"]?.stringValue }

    func header(_ name: String) -> String? {
        headers.first { asciiCaseInsensitiveEqual($0.name, name) }?.value
    }
}

/// An in-process service with a manual clock over an in-memory log.
struct Harness {
    static let adminKey = "test-admin-key-0123456789"

    let service: RoostService
    let clock: ManualWallClock
    let catalog: Catalog

    /// `trustedProxies` as `roost serve --trusted-proxy` names them.
    /// `changesRetained` as `roost serve --changes-retained` sets it.
    init(trustedProxies: [IPAddress] = [], changesRetained: Int = ChangeFeed.retainedDefault) throws {
        let log = VolatileLog()
        clock = ManualWallClock()
        catalog = Catalog(state: CatalogState(), log: log, clock: clock)
        service = RoostService(
            catalog: catalog, adminKey: Harness.adminKey, clock: clock,
            registry: Registry(shardCount: 2, log: log, clock: clock, changesRetained: changesRetained),
            trustedProxies: trustedProxies)
    }

    func call(_ method: HTTPMethod, _ target: String, key: String? = nil, body: String? = nil) async -> Answer {
        await call(method, target, key: key, rawBody: body.map { Array($0.utf8) } ?? [])
    }

    /// A request as it arrives from `peer` (the event loop sets the peer
    /// address; `handle` alone has none), with extra header fields.
    func call(
        _ method: HTTPMethod, _ target: String, key: String? = nil, body: String? = nil, peer: IPAddress?,
        headers extra: [(name: String, value: String)] = []
    ) async -> Answer {
        await call(method, target, key: key, rawBody: body.map { Array($0.utf8) } ?? [], peer: peer, headers: extra)
    }

    func call(
        _ method: HTTPMethod, _ target: String, key: String?, rawBody: [UInt8], peer: IPAddress? = nil,
        headers extra: [(name: String, value: String)] = []
    ) async -> Answer {
        var headers = HTTPHeaders([("Host", "test")])
        if let key { headers.append(name: "Authorization", value: "Bearer \(key)") }
        for field in extra { headers.append(name: field.name, value: field.value) }
        var head = HTTPRequestHead(method: method, target: target, version: .http11, headers: headers, keepAlive: true)
        head.peerAddress = peer
        let response = await service.handle(HTTPRequest(head: head, body: rawBody))
        return Answer(status: response.status, headers: response.headers, body: response.body)
    }

    /// Creates an app as the operator and returns its id.
    func createApp(_ name: String = "Example") async throws -> Int {
        let answer = await call(.post, "/v1/apps", key: Harness.adminKey, body: #"{"name":"\#(name)"}"#)
        guard answer.status == 201, let id = answer.json?["id"]?.intValue else {
            throw HarnessError(message: "create app answered \(answer.status)")
        }
        return id
    }

    /// Creates a key on an app as the operator and returns (id, key).
    func createKey(app: Int, _ body: String) async throws -> (id: String, key: String) {
        let answer = await call(.post, "/v1/apps/\(app)/keys", key: Harness.adminKey, body: body)
        guard answer.status == 201, let id = answer.json?["id"]?.stringValue,
            let key = answer.json?["key"]?.stringValue
        else {
            throw HarnessError(
                message: "create key answered \(answer.status): \(String(decoding: answer.body, as: UTF8.self))")
        }
        return (id, key)
    }
}

extension Harness {
    /// The change-feed long polls the shards hold now, over every app.
    func changeWaitersHeld() async -> Int {
        var held = 0
        for shard in service.registry.shardSet.shards { held += await shard.changeWaiterCounts().values.reduce(0, +) }
        return held
    }

    /// Moves the manual clock and wakes the engine's loops, so that their
    /// timers (long polls) see the new time.
    func advanceAndWake(milliseconds: Int64) {
        clock.advance(milliseconds: milliseconds)
        for executor in service.registry.shardSet.executors { executor.wake() }
    }
}

extension Harness {
    /// Small segments, preallocated: what the durable harness opens with.
    static var storageOptions: StorageOptions {
        var options = StorageOptions()
        options.segmentBytesMax = 2 << 20
        options.zeroFillSegments = false
        return options
    }

    /// A harness over a real data directory, as `roost serve` opens it: the
    /// engine recovered from the log, the catalog rebuilt (and migrated) from
    /// its records, indexes reconciled. The caller closes the engine.
    static func durable(_ directory: String, policy: FsyncPolicy = .always) async throws -> (Harness, DurableEngine) {
        let (engine, _) = try DurableEngine.open(
            directory: directory, policy: policy, shardCount: 2, options: storageOptions)
        do {
            let clock = ManualWallClock()
            let service = try RoostService(
                dataDirectory: directory, adminKey: adminKey, engine: engine, clock: clock)
            try await service.reconcile(dataDirectory: directory)
            return (Harness(service: service, clock: clock, catalog: service.catalog), engine)
        } catch {
            engine.close()
            throw error
        }
    }
}

struct HarnessError: Error {
    var message: String
}
