import RoostEngine
import RoostHTTP
import RoostJSON
import RoostTesting
import Synchronization
import Testing

@testable import RoostAPI

@Suite("Device routes when the log cannot be written")
struct DeviceLogFailureTests {
    @Test(
        "once the log has failed, writes and the import answer 503 with Retry-After, are not applied, and reads go on")
    func unavailable() async throws {
        let log = SwitchableLog()
        let clock = ManualWallClock()
        let catalog = Catalog(log: log, clock: clock)
        let service = RoostService(
            catalog: catalog, adminKey: Harness.adminKey, clock: clock,
            registry: Registry(shardCount: 1, log: log))
        let harness = Harness(service: service, clock: clock, catalog: catalog)
        let app = try await DeviceApp.make(harness)
        #expect(await app.registerIOS(0).status == 201)
        log.failing.withLock { $0 = true }
        let writes = [
            await app.registerIOS(1),
            await app.importCSV("platform,token\nios,\(TestTokens.apns(2))\n"),
            await app.call(.put, "/v1/people/p"),
        ]
        for answer in writes {
            #expect(answer.status == 503)
            #expect(answer.errorCode == "unavailable")
            #expect(answer.header("Retry-After") == "1")
        }
        let stats = await app.call(.get, "/v1/stats")
        #expect(stats.status == 200)
        #expect(stats.json?["devices"]?.intValue == 1, "a refused write must not show in a read")
        #expect(await app.call(.get, "/v1/devices/export").status == 200)
    }
}

extension Harness {
    /// A harness around a service built by the test (another registry or log).
    init(service: RoostService, clock: ManualWallClock, catalog: Catalog) {
        self.service = service
        self.clock = clock
        self.catalog = catalog
    }
}
