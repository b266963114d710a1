import RoostModel
import RoostPlatform
import RoostStorage
import RoostTesting
import Synchronization
import Testing

@testable import RoostEngine

/// The catalog as engine state: recovery rebuilds it, commands change it
/// through the log, and every snapshot writes it first, with no API above.
@Suite("Catalog store (engine state)")
struct CatalogStoreEngineTests {
    private static func createApp(_ store: CatalogStore, _ name: String) throws -> AppRecord {
        let (outcome, ticket) = try store.execute(
            .createApp(name: name, settings: AppSettingsChange(maxDevicesPerPerson: 4), atMilliseconds: 1_000))
        guard case .app(let app) = outcome else { preconditionFailure("\(outcome)") }
        guard case .pending = ticket else { preconditionFailure("a durable engine acknowledged at once: \(ticket)") }
        return app
    }

    @Test("catalog changes made on the engine alone come back after a restart, from the log and from a snapshot")
    func recoveredWithoutService() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = DurableEngineTests.options(fileSystem)
        let (engine, opened) = try DurableEngine.open(
            directory: "/data", policy: .always, shardCount: 2, options: options)
        #expect(opened.catalogRecords == 0)
        let first = try Self.createApp(engine.catalog, "one")
        let second = try Self.createApp(engine.catalog, "two")
        _ = try engine.catalog.execute(.deleteApp(first.id))
        _ = try engine.catalog.execute(.rotateIdentityKey(IdentitySigningKey.mint(at: 5)))
        _ = try engine.log.wal.sync()
        let before = engine.catalog.read { $0 }
        engine.close()

        let (fromLog, report) = try DurableEngine.open(
            directory: "/data", policy: .always, shardCount: 2, options: options)
        #expect(report.catalogRecords == 4)
        #expect(fromLog.catalog.read { $0.catalog } == before.catalog)
        #expect(fromLog.catalog.read { $0.identityKeys } == before.identityKeys)
        // A snapshot writes the catalog first: a registration makes the log non-empty since the open.
        _ = try await register(fromLog.registry, try apnsToken(1))
        #expect(try await fromLog.snapshot() != nil)
        fromLog.close()

        let (fromSnapshot, again) = try DurableEngine.open(
            directory: "/data", policy: .always, shardCount: 2, options: options)
        defer { fromSnapshot.close() }
        #expect(again.snapshotRecords > 0)
        let recovered = fromSnapshot.catalog.read { $0 }
        #expect(recovered.catalog == before.catalog)
        #expect(recovered.identityKeys == before.identityKeys)
        #expect(recovered.catalog.apps.keys.sorted() == [second.id])
        #expect(recovered.catalog.nextAppID == 3)
    }

    @Test("a rejection changes nothing and logs nothing; an update that changes nothing logs nothing")
    func rejectionsLogNothing() throws {
        let log = VolatileCatalogLog()
        let store = CatalogStore(CatalogContents(), log: log)
        let app = try Self.createApp(store, "one")
        let appended = log.appended
        #expect(throws: CatalogChangeFailure.rejected(.appNotFound)) { try store.execute(.deleteApp(AppID(9))) }
        let (_, ticket) = try store.execute(.updateApp(app.id, name: "one", settings: AppSettingsChange()))
        #expect(ticket == .acknowledged)
        #expect(log.appended == appended)
        // Not acknowledged yet: listings (acknowledged reads) do not show it; authentication (visible) does.
        #expect(store.readAcknowledged { $0.catalog.apps[app.id] } == nil)
        #expect(store.read { $0.catalog.apps[app.id] } == app)
    }
}

/// A log that takes every append and acknowledges nothing (a disk that never syncs).
private final class VolatileCatalogLog: MutationLog {
    private let records = Mutex(0)

    /// How many records were appended.
    var appended: Int { records.withLock { $0 } }

    func append(_ batch: [[UInt8]]) -> LogSequenceNumber? {
        LogSequenceNumber(
            UInt64(
                records.withLock { count in
                    count += batch.count
                    return count
                }))
    }

    var appendedThrough: LogSequenceNumber { LogSequenceNumber(UInt64(appended)) }
    var acknowledgedThrough: LogSequenceNumber { LogSequenceNumber(0) }
    var acceptsWrites: Bool { true }

    func wakeWhenAcknowledged(_ lsn: LogSequenceNumber, _ executor: LoopExecutor) {}
}
