import RoostEngine
import RoostHTTP
import RoostJSON
import Synchronization
import Testing

@testable import RoostAPI

@Suite("Device routes when the log cannot be written")
struct DeviceLogFailureTests {
    @Test("writes, reads, the export and the import answer 503 unavailable with Retry-After; nothing is acknowledged")
    func unavailable() async throws {
        let log = SwitchableLog()
        let clock = ManualClock()
        let catalog = Catalog(store: nil, clock: clock)
        let service = RoostService(
            catalog: catalog, adminKey: Harness.adminKey, clock: clock,
            registry: Registry(shardCount: 1, log: log))
        let harness = Harness(service: service, clock: clock, catalog: catalog)
        let app = try await DeviceApp.make(harness)
        log.failing.withLock { $0 = true }
        let answers = [
            await app.registerIOS(1),
            await app.call(.get, "/v1/stats"),
            await app.call(.get, "/v1/devices/export"),
            await app.importCSV("platform,token\nios,\(apnsToken(2))\n"),
            await app.call(.put, "/v1/people/p"),
        ]
        for answer in answers {
            #expect(answer.status == 503)
            #expect(answer.errorCode == "unavailable")
            #expect(answer.header("Retry-After") == "1")
        }
    }
}

extension Harness {
    /// A harness around a service built by the test (another registry or log).
    init(service: RoostService, clock: ManualClock, catalog: Catalog) {
        self.service = service
        self.clock = clock
        self.catalog = catalog
    }
}
