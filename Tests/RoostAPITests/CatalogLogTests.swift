import Glibc
import RoostEngine
import RoostModel
import RoostPlatform
import RoostStorage
import RoostTesting
import Synchronization
import Testing

@testable import RoostAPI

/// The catalog in the log (docs/decisions/0004-catalog-in-the-log.md): its
/// record codec, idempotent replay, the answer-after-durability rule, the
/// migration of an older release's files, and the start-up refusals.
@Suite("Catalog records in the log")
struct CatalogLogTests {
    static let digest = KeyDigest(bytes: Array(0..<32))!

    static let samples: [CatalogRecord] = [
        .app(
            AppRecord(
                id: AppID(7), name: "Exämple", createdAtMilliseconds: 1_790_000_000_123,
                settings: AppSettings(maxDevicesPerPerson: 3, requireKnownPerson: true))),
        .appDeleted(AppID(9)),
        .key(
            KeyRecord(
                id: "key_0123456789abcdef", appID: AppID(7), kind: .secret, mode: .test,
                capabilities: [.devicesRead, .setupWrite], label: "ops", createdAtMilliseconds: 5,
                rateLimitPerSecond: 250, digest: digest)),
        .key(
            KeyRecord(
                id: "key_fedcba9876543210", appID: AppID(7), kind: .mobile, mode: .live, capabilities: [],
                label: "", createdAtMilliseconds: -1, rateLimitPerSecond: nil, digest: digest)),
        .keyRevoked(id: "key_0123456789abcdef"),
        .nextAppID(42),
        .identityKey(
            IdentitySigningKey(
                id: "ik_0123456789abcdef", secret: Array(repeating: 7, count: 32), createdAtMilliseconds: 9),
            current: true),
        .identityKeyRemoved(id: "ik_0123456789abcdef"),
        .keyUsed(id: "key_fedcba9876543210", atMilliseconds: 1_790_000_000_456),
    ]

    @Test("every catalog record kind round-trips through its bytes, inside an EngineRecord too")
    func roundTrip() throws {
        for record in Self.samples {
            let bytes = record.encoded()
            #expect(try CatalogRecord.decode(bytes) == record)
            let framed = EngineRecord.catalog(bytes).encoded()
            #expect(try EngineRecord.decode(framed) == .catalog(bytes))
        }
    }

    @Test("a cut, extended or unknown catalog record is refused with a reason, never trapped")
    func badBytes() {
        for record in Self.samples {
            let bytes = record.encoded()
            for length in 0..<bytes.count {
                #expect(throws: CatalogRecordError.self) { try CatalogRecord.decode(Array(bytes[..<length])) }
            }
            #expect(throws: CatalogRecordError.self) { try CatalogRecord.decode(bytes + [0]) }
        }
        #expect(throws: CatalogRecordError.self) { try CatalogRecord.decode([2, 1]) }
        #expect(throws: CatalogRecordError.self) { try CatalogRecord.decode([1, 99]) }
        #expect(throws: CatalogRecordError.self) { try CatalogRecord.decode([1, 5, 0, 0, 0, 0]) }
        #expect(throws: CatalogRecordError.self) { try CatalogRecord.decode([1, 2, 0, 0, 0, 0]) }
        #expect(throws: EngineRecordError.self) { try EngineRecord.decode([1, 4]) }
    }

    /// A history of changes as the live catalog logs them.
    static func history() -> [CatalogRecord] {
        func app(_ id: UInt32, _ max: Int) -> CatalogRecord {
            .app(
                AppRecord(
                    id: AppID(id), name: "app \(id)", createdAtMilliseconds: Int64(id),
                    settings: AppSettings(maxDevicesPerPerson: max, requireKnownPerson: false)))
        }
        func key(_ id: String, _ app: UInt32, _ seed: UInt8) -> CatalogRecord {
            .key(
                KeyRecord(
                    id: id, appID: AppID(app), kind: .secret, mode: .live, capabilities: [.setupWrite], label: id,
                    createdAtMilliseconds: 1, rateLimitPerSecond: nil,
                    digest: KeyDigest(bytes: Array(repeating: seed, count: 32))!))
        }
        return [
            app(1, 10), app(2, 10), key("key_a", 1, 1), key("key_b", 2, 2), app(1, 4), .appDeleted(AppID(2)),
            app(3, 10), key("key_c", 3, 3), .keyRevoked(id: "key_a"), .appDeleted(AppID(3)),
        ]
    }

    @Test("replay is idempotent: the log twice, or a snapshot taken at any point plus the log from any earlier point")
    func fuzzyReplayIsExact() throws {
        let history = Self.history()
        var expected = CatalogContents()
        for record in history { expected.apply(record) }
        #expect(expected.catalog.nextAppID == 4)
        #expect(expected.catalog.apps.keys.sorted() == [AppID(1)])
        #expect(expected.catalog.keysByDigest.isEmpty)
        for snapshotAt in 0...history.count {
            var snapshotState = CatalogContents()
            for record in history[..<snapshotAt] { snapshotState.apply(record) }
            let snapshot = snapshotState.records()
            for startLSN in 0...snapshotAt {
                let payloads = (snapshot + history[startLSN...]).map { $0.encoded() }
                let rebuilt = try CatalogContents.rebuild(payloads)
                #expect(rebuilt.catalog == expected.catalog, "snapshot at \(snapshotAt), replay from \(startLSN)")
            }
        }
    }

    @Test("the id counter is a record: deleting the newest app never gives its id again")
    func counterSurvivesDeletion() throws {
        let catalog = Catalog(log: VolatileLog(), clock: ManualWallClock())
        _ = try catalog.createApp(name: "one")
        let (two, _) = try catalog.createApp(name: "two")
        _ = try catalog.deleteApp(two.id)
        let rebuilt = try CatalogContents.rebuild(catalog.snapshotRecords().map { $0.encoded() })
        let again = Catalog(state: rebuilt.catalog, log: VolatileLog(), clock: ManualWallClock())
        #expect(try again.createApp(name: "three").0.id == AppID(3))
    }

    @Test("an end state no acknowledged history makes (a key of an app never created) stops recovery")
    func orphanKeyRefused() {
        let payloads = [Self.samples[2].encoded()]
        #expect(throws: CatalogRecoveryError.self) { try CatalogContents.rebuild(payloads) }
    }

    /// A log whose acknowledged LSN moves only when the test releases it.
    final class HeldLog: MutationLog {
        struct State {
            var appended: UInt64 = 0
            var acknowledged: UInt64 = 0
            var accepts = true
        }

        let state = Mutex(State())

        var acceptsWrites: Bool { state.withLock { $0.accepts } }

        func append(_ records: [[UInt8]]) -> LogSequenceNumber? {
            state.withLock { state in
                guard state.accepts else { return nil }
                state.appended += UInt64(records.count)
                return LogSequenceNumber(state.appended)
            }
        }

        var appendedThrough: LogSequenceNumber { LogSequenceNumber(state.withLock { $0.appended }) }
        var acknowledgedThrough: LogSequenceNumber { LogSequenceNumber(state.withLock { $0.acknowledged }) }
        func wakeWhenAcknowledged(_ lsn: LogSequenceNumber, _ executor: LoopExecutor) { executor.wake() }

        /// Acknowledges everything appended (`durable`), or fails the log.
        func release(durable: Bool) {
            state.withLock { state in
                if durable { state.acknowledged = state.appended } else { state.accepts = false }
            }
        }

        /// True once the change of `ticket` is acknowledged.
        func isAcknowledged(_ ticket: CommitTicket) -> Bool {
            switch ticket {
            case .acknowledged: true
            case .refused: false
            case .pending(let lsn): lsn <= acknowledgedThrough
            }
        }
    }

    @Test("a change is answered only once durable; listings show only acknowledged apps")
    func answeredAfterDurability() throws {
        let log = HeldLog()
        let catalog = Catalog(log: log, clock: ManualWallClock())
        let (app, ticket) = try catalog.createApp(name: "pending")
        guard case .pending = ticket else {
            Issue.record("ticket \(ticket)")
            return
        }
        #expect(!log.isAcknowledged(ticket))
        #expect(catalog.app(app.id) != nil)
        #expect(catalog.apps().isEmpty)
        log.release(durable: true)
        #expect(log.isAcknowledged(ticket))
        #expect(catalog.apps().map(\.id) == [app.id])
    }

    @Test("when the log fails, every change in flight is undone in memory and no later change is taken")
    func failureUndoes() throws {
        let log = HeldLog()
        let catalog = Catalog(log: log, clock: ManualWallClock())
        _ = try catalog.createApp(name: "kept")
        log.release(durable: true)
        let (lost, first) = try catalog.createApp(name: "lost")
        let (_, second) = try catalog.updateApp(
            AppID(1), name: "renamed", maxDevicesPerPerson: 2, requireKnownPerson: nil)
        log.release(durable: false)
        #expect(!log.isAcknowledged(first))
        #expect(!log.isAcknowledged(second))
        #expect(catalog.app(lost.id) == nil)
        #expect(catalog.app(AppID(1))?.name == "kept")
        #expect(catalog.app(AppID(1))?.settings == .defaults)
        #expect(throws: APIError.self) { try catalog.createApp(name: "refused") }
    }

    /// A log that says it accepts writes but refuses the append itself, at
    /// once (a write that fails between the check and the append).
    struct RefusingLog: MutationLog {

        var acceptsWrites: Bool { true }

        func append(_ records: [[UInt8]]) -> LogSequenceNumber? { nil }
        var appendedThrough: LogSequenceNumber { LogSequenceNumber(1) }
        var acknowledgedThrough: LogSequenceNumber { LogSequenceNumber(1) }
        func wakeWhenAcknowledged(_ lsn: LogSequenceNumber, _ executor: LoopExecutor) { executor.wake() }
    }

    @Test("an append refused inside the critical section answers 503, applies nothing and stops later changes")
    func refusedInsideTheCriticalSection() throws {
        let catalog = Catalog(log: RefusingLog(), clock: ManualWallClock())
        #expect(throws: APIError.logUnavailable) { try catalog.createApp(name: "no") }
        #expect(catalog.currentState() == CatalogState())
        #expect(throws: APIError.logUnavailable) { try catalog.createApp(name: "still no") }
    }

    @Test("a log that refuses at once answers 503 and applies nothing")
    func refusedAtOnce() async throws {
        let log = SwitchableLog()
        let harness = Harness(log: log)
        let app = try await harness.createApp()
        log.failing.withLock { $0 = true }
        let refused = await harness.call(.post, "/v1/apps", key: Harness.adminKey, body: #"{"name":"no"}"#)
        #expect(refused.status == 503)
        #expect(refused.errorCode == "unavailable")
        #expect(refused.header("Retry-After") != nil)
        #expect(harness.catalog.currentState().apps.keys.sorted() == [AppID(UInt32(app))])
        #expect(await harness.call(.delete, "/v1/apps/\(app)", key: Harness.adminKey).status == 503)
        #expect(harness.catalog.app(AppID(UInt32(app))) != nil)
    }
}

/// Start-up: migration of an older release's files and the refusals.
@Suite("Catalog at start-up", .serialized)
struct CatalogStartupTests {
    static let digestHex = String(repeating: "ab", count: 32)
    static let legacyCatalog = """
        {"version":1,"next_app_id":4,"apps":[{"id":1,"name":"Legacy","created_at_ms":1790000000000,\
        "max_devices_per_person":3,"require_known_person":false}],"keys":[{"id":"key_0123456789abcdef","app":1,\
        "kind":"secret","mode":"live","capabilities":["setup:write"],"label":"ops","created_at_ms":1790000000001,\
        "sha256":"\(digestHex)"}]}

        """
    static let legacyIdentity = """
        {"version":1,"current":"ik_0123456789abcdef","keys":[{"id":"ik_0123456789abcdef",\
        "secret":"\(String(repeating: "11", count: 32))","created_at_ms":1790000000000}]}

        """

    static func writeLegacy(_ directory: String, catalog: String = legacyCatalog, identity: String = legacyIdentity)
        throws
    {
        try DurableFile.replace(path: directory + "/catalog.json", with: Array(catalog.utf8))
        try DurableFile.replace(path: directory + "/identity-keys.json", with: Array(identity.utf8))
    }

    @Test("an older release's files are imported into the log, then renamed aside; the next start needs neither")
    func migrates() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        try Self.writeLegacy(directory)
        let (first, engine) = try await Harness.durable(directory)
        #expect(first.catalog.app(AppID(1))?.settings.maxDevicesPerPerson == 3)
        #expect(first.service.identityKeys.currentKey().id == "ik_0123456789abcdef")
        engine.close()
        for name in ["catalog.json", "identity-keys.json"] {
            #expect(!DurableFile.exists(directory + "/" + name))
            #expect(DurableFile.exists(directory + "/" + name + ".migrated"))
        }
        let (second, again) = try await Harness.durable(directory)
        defer { again.close() }
        #expect(second.catalog.currentState() == first.catalog.currentState())
        #expect(second.service.identityKeys.currentState() == first.service.identityKeys.currentState())
        #expect(try await second.createApp("Next") == 4)
    }

    @Test("a crash after the import's sync but before the rename: the next start imports nothing again and renames")
    func interruptedMigration() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        try Self.writeLegacy(directory)
        let (_, engine) = try await Harness.durable(directory)
        engine.close()
        // Put the files back as the crash would have left them.
        for name in ["catalog.json", "identity-keys.json"] {
            try DurableFile.rename(directory + "/" + name + ".migrated", to: directory + "/" + name)
        }
        let before = try Self.catalogRecordCount(directory)
        let (second, again) = try await Harness.durable(directory)
        again.close()
        #expect(try Self.catalogRecordCount(directory) == before)
        #expect(!DurableFile.exists(directory + "/catalog.json"))
        #expect(second.catalog.app(AppID(1))?.name == "Legacy")
    }

    @Test("a catalog.json beside a log that already holds a different catalog is ambiguous: refused, nothing changed")
    func ambiguous() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (first, engine) = try await Harness.durable(directory)
        _ = try await first.createApp("New")
        engine.close()
        try Self.writeLegacy(directory)
        await #expect {
            _ = try await Harness.durable(directory)
        } throws: { error in
            "\(error)".contains(directory + "/catalog.json") && "\(error)".contains("already holds")
        }
        #expect(DurableFile.exists(directory + "/catalog.json"))
    }

    @Test(
        "an unreadable or foreign catalog.json stops the migration naming the file; nothing is imported or renamed",
        arguments: [
            "{not json", #"{"version":2,"next_app_id":1}"#, #"{"version":1,"next_app_id":1,"apps":[{"id":5}]}"#,
        ])
    func unreadable(contents: String) async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        try Self.writeLegacy(directory, catalog: contents)
        await #expect {
            _ = try await Harness.durable(directory)
        } throws: { error in
            "\(error)".contains(directory + "/catalog.json")
        }
        #expect(DurableFile.exists(directory + "/catalog.json"))
        #expect(DurableFile.exists(directory + "/identity-keys.json"))
        #expect(try Self.catalogRecordCount(directory) == 0)
    }

    @Test("catalog.json.migrated beside a log without a catalog: the log was lost or replaced, so start-up refuses")
    func migratedButLogLost() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        try DurableFile.replace(path: directory + "/catalog.json.migrated", with: Array(Self.legacyCatalog.utf8))
        await #expect {
            _ = try await Harness.durable(directory)
        } throws: { error in
            "\(error)".contains("catalog.json.migrated") && "\(error)".contains("holds no catalog")
        }
    }

    @Test("devices of an app the catalog never created (catalog.json of an older release deleted) stop start-up")
    func devicesWithoutTheirApp() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (engine, _) = try DurableEngine.open(
            directory: directory, policy: .always, shardCount: 2, options: Harness.storageOptions)
        let stored = await engine.registry.perform(IndexKey(app: AppID(1), mode: .live)) { index in
            (true, index.putPerson(try! ExternalID("someone"), at: Timestamp(millisecondsSinceEpoch: 1)).mutations)
        }
        #expect(stored == true)
        engine.close()
        await #expect {
            _ = try await Harness.durable(directory)
        } throws: { error in
            "\(error)".contains("app 1, which the catalog never created") && "\(error)".contains("catalog.json")
        }
    }

    @Test("the catalog and the id counter are in every snapshot: snapshot plus log gives them back exactly")
    func snapshotKeepsCounter() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (first, engine) = try await Harness.durable(directory)
        let kept = try await first.createApp("kept")
        let key = try await first.createKey(app: kept, #"{"kind":"secret","capabilities":["setup:write"]}"#)
        let gone = try await first.createApp("gone")
        #expect(await first.call(.delete, "/v1/apps/\(gone)", key: Harness.adminKey).status == 200)
        #expect(try await engine.snapshot() != nil)
        _ = await first.call(.patch, "/v1/apps/\(kept)", key: key.key, body: #"{"name":"kept again"}"#)
        #expect(try await engine.snapshot() != nil)
        engine.close()
        let (second, again) = try await Harness.durable(directory)
        defer { again.close() }
        #expect(await second.call(.get, "/v1/apps/\(kept)", key: key.key).json?["name"]?.stringValue == "kept again")
        #expect(try await second.createApp("next") == gone + 1)
    }

    @Test("after a crash, the indexes use the catalog's settings, and a deleted app's data is dropped at start-up")
    func reconcileRepairs() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (first, engine) = try await Harness.durable(directory)
        let kept = AppID(UInt32(try await first.createApp("kept")))
        let gone = AppID(UInt32(try await first.createApp("gone")))
        for app in [kept, gone] {
            let stored = await engine.registry.perform(IndexKey(app: app, mode: .live)) { index in
                (true, index.putPerson(try! ExternalID("p"), at: Timestamp(millisecondsSinceEpoch: 1)).mutations)
            }
            #expect(stored == true)
        }
        // The catalog's records only, as if the process died before the indexes' records.
        _ = try first.catalog.updateApp(kept, name: nil, maxDevicesPerPerson: 2, requireKnownPerson: true)
        _ = try first.catalog.deleteApp(gone)
        engine.close()

        let (second, again) = try await Harness.durable(directory)
        defer { again.close() }
        // The catalog owns the settings: the index logs none of its own and adopts the catalog's in its turn.
        let used = await again.registry.perform(IndexKey(app: kept, mode: .live)) { index in (index.settings, []) }
        #expect(used == AppSettings(maxDevicesPerPerson: 2, requireKnownPerson: true))
        var keys: [IndexKey] = []
        for shard in again.registry.shardSet.shards { keys += await shard.keys() }
        #expect(!keys.contains(IndexKey(app: gone, mode: .live)))
        #expect(second.catalog.app(gone) == nil)
    }

    /// Returns how many catalog records the directory's log and snapshot hold.
    static func catalogRecordCount(_ directory: String) throws -> Int {
        let (engine, report) = try DurableEngine.open(
            directory: directory, policy: .always, shardCount: 1, options: Harness.storageOptions)
        engine.close()
        return report.catalogRecords
    }
}
