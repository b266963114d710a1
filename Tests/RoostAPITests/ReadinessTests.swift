import Glibc
import RoostEngine
import RoostHTTP
import RoostStorage
import RoostTelemetry
import RoostTesting
import Testing

@testable import RoostAPI

@Suite("GET /readyz (spec §11)")
struct ReadinessTests {
    /// A service over a real write-ahead log on a fault-injecting file system,
    /// opened as `roost serve` opens it. The caller closes the engine.
    static func durable(_ fileSystem: FaultInjectingFileSystem) async throws -> (Harness, DurableEngine) {
        var options = Harness.storageOptions
        options.fileSystem = fileSystem
        options.logger = Logger(output: .memory)
        // Small files: the in-memory file system copies whole files.
        options.recordPayloadBytesMax = 64 << 10
        options.segmentBytesMax = 128 << 10
        let (engine, _) = try DurableEngine.open(
            directory: "/data", policy: .always, shardCount: 2, options: options)
        let clock = ManualWallClock()
        // No legacy catalog files: the catalog lives in the (virtual) log only.
        let service = try RoostService(
            dataDirectory: "/nonexistent/roost-readyz-test", adminKey: Harness.adminKey, engine: engine,
            clock: clock)
        try await service.reconcile(dataDirectory: "/data")
        return (Harness(service: service, clock: clock, catalog: service.catalog), engine)
    }

    @Test("answers 200 {\"status\":\"ready\"} without a key once recovery is done")
    func readyAfterRecovery() async throws {
        let (harness, engine) = try await Self.durable(FaultInjectingFileSystem())
        defer { engine.close() }
        let answer = await harness.call(.get, "/readyz")
        #expect(answer.status == 200)
        #expect(String(decoding: answer.body, as: UTF8.self) == #"{"status":"ready"}"#)
        #expect(answer.header("Content-Type") == "application/json")
    }

    @Test(
        "after a failed fdatasync or a full disk the log takes no writes: 503 log_failed, /healthz still ok",
        arguments: [
            (FaultInjectingFileSystem.Operation.syncData, EIO),
            (FaultInjectingFileSystem.Operation.write, ENOSPC),
        ])
    func notReadyOnceTheLogFailed(operation: FaultInjectingFileSystem.Operation, code: Int32) async throws {
        let fileSystem = FaultInjectingFileSystem()
        let (harness, engine) = try await Self.durable(fileSystem)
        defer { engine.close() }
        #expect(try await harness.createApp("before") == 1)
        #expect(await harness.call(.get, "/readyz").status == 200)
        fileSystem.inject(.init(operation: operation, nth: 1, errno: code, pathContains: "/wal/"))
        let refused = await harness.call(.post, "/v1/apps", key: Harness.adminKey, body: #"{"name":"lost"}"#)
        #expect(refused.status == 503)
        let answer = await harness.call(.get, "/readyz")
        #expect(answer.status == 503)
        #expect(String(decoding: answer.body, as: UTF8.self) == #"{"status":"log_failed"}"#)
        let health = await harness.call(.get, "/healthz")
        #expect(health.status == 200)
        #expect(String(decoding: health.body, as: UTF8.self) == #"{"status":"ok"}"#)
    }

    @Test("once shutdown began: 503 shutting_down, /healthz still ok")
    func notReadyWhileShuttingDown() async throws {
        let (harness, engine) = try await Self.durable(FaultInjectingFileSystem())
        defer { engine.close() }
        harness.service.beginShutdown()
        let answer = await harness.call(.get, "/readyz")
        #expect(answer.status == 503)
        #expect(String(decoding: answer.body, as: UTF8.self) == #"{"status":"shutting_down"}"#)
        #expect(await harness.call(.get, "/healthz").status == 200)
    }
}
