import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostPlatform
import RoostStorage
import RoostTesting
import Synchronization

@testable import RoostAPI

/// A log whose appends fail while `failing` is set: the 503 path. Reads
/// (no records to append) are still served, as after a real log failure.
final class SwitchableLog: MutationLog {
    let failing = Mutex(false)
    private let appended = Mutex<UInt64>(0)

    func append(_ records: [[UInt8]]) -> LogSequenceNumber? {
        if failing.withLock({ $0 }) { return nil }
        return appended.withLock { last in
            last += UInt64(records.count)
            return LogSequenceNumber(last)
        }
    }

    var appendedThrough: LogSequenceNumber { LogSequenceNumber(appended.withLock { $0 }) }
    var acknowledgedThrough: LogSequenceNumber { appendedThrough }
    var acceptsWrites: Bool { !failing.withLock { $0 } }

    func wakeWhenAcknowledged(_ lsn: LogSequenceNumber, _ executor: LoopExecutor) {
        executor.wake()
    }
}

extension Harness {
    /// A harness over a given log and identity key store.
    init(log: any MutationLog, identityKeys: IdentityKeyStore? = nil) {
        clock = ManualWallClock()
        catalog = Catalog(state: CatalogState(), log: log, clock: clock)
        service = RoostService(
            catalog: catalog, adminKey: Harness.adminKey, clock: clock,
            registry: Registry(shardCount: 2, log: log, clock: clock), identityKeys: identityKeys)
    }

    /// Runs `body` on an app's index through the engine (set-up and inspection
    /// of state the compatibility routes do not show).
    func withIndex<Value: Sendable>(
        app: Int, mode: AppMode = .live,
        _ body: @escaping @Sendable (inout AppIndex, Timestamp) -> (Value, [Mutation])
    ) async throws -> Value {
        let now = Timestamp(millisecondsSinceEpoch: clock.wallMilliseconds())
        let settings = catalog.app(AppID(UInt32(app)))?.settings ?? .defaults
        let value = await service.registry.perform(IndexKey(app: AppID(UInt32(app)), mode: mode), settings: settings) {
            index in
            let (value, mutations) = body(&index, now)
            return (value: value, mutations: mutations)
        }
        guard let value else { throw HarnessError(message: "the log refused a set-up write") }
        return value
    }

    /// A live secret key with every capability, for set-up through the native routes.
    func setupKey(app: Int, mode: String = "live") async throws -> String {
        try await createKey(
            app: app,
            #"{"kind":"secret","mode":"\#(mode)","capabilities":["setup:write","people:write","devices:write"]}"#
        ).key
    }

    /// Uploads APNs credential metadata for (bundle, environment) through
    /// `PUT /v1/credentials/apns/{bundle_id}/{environment}`.
    func putCredential(app: Int, bundle: String = "com.example.app", environment: APNsEnvironment = .production)
        async throws
    {
        let answer = await call(
            .put, "/v1/credentials/apns/\(bundle)/\(environment.name)", key: try await setupKey(app: app),
            body: #"{"team_id":"TEAM1","key_id":"KEY1"}"#)
        guard answer.status == 200 || answer.status == 201 else {
            throw HarnessError(message: "credential answered \(answer.status)")
        }
    }

    /// Makes a person known through `PUT /v1/people/{external_id}`.
    func putPerson(app: Int, _ externalID: String, mode: AppMode = .live) async throws {
        let answer = await call(.put, "/v1/people/\(externalID)", key: try await setupKey(app: app, mode: mode.name))
        guard answer.status == 200 || answer.status == 201 else {
            throw HarnessError(message: "person answered \(answer.status)")
        }
    }

    func device(app: Int, mode: AppMode = .live, installation: String) async throws -> Device? {
        let id = try InstallationID(installation)
        return try await withIndex(app: app, mode: mode) { index, _ in (index.device(installation: id), []) }
    }

    func device(app: Int, mode: AppMode = .live, token: String, platform: Platform = .ios) async throws -> Device? {
        let parsed = try PushToken(parsing: token, platform: platform)
        return try await withIndex(app: app, mode: mode) { index, _ in (index.device(token: parsed), []) }
    }

    func person(app: Int, mode: AppMode = .live, _ externalID: String) async throws -> PersonDevices? {
        let id = try ExternalID(externalID)
        return try await withIndex(app: app, mode: mode) { index, _ in (index.person(id), []) }
    }

    func stats(app: Int, mode: AppMode = .live) async throws -> RegistryStats {
        try await withIndex(app: app, mode: mode) { index, _ in (index.stats(), []) }
    }

    /// Reports a token gone through `POST /v1/feedback` ("Apple reported gone").
    func reportGone(app: Int, token: String) async throws {
        let answer = await call(
            .post, "/v1/feedback", key: try await setupKey(app: app),
            body: #"{"provider":"apns","token":"\#(token)","reason":"Unregistered"}"#)
        guard answer.json?["invalidated"]?.boolValue == true else {
            throw HarnessError(message: "feedback answered \(answer.status): \(answer.text)")
        }
    }
}

extension Answer {
    /// The member names of a JSON object answer, sorted.
    var keys: [String] { json?.objectMembers?.map(\.key).sorted() ?? [] }
}
