import RoostAPI
import RoostEngine
import RoostHTTP
import RoostStorage
import RoostTesting

/// `roost serve` inside this process, put together as Sources/roost/main.swift
/// does it: a durable engine over a fresh data directory (`--fsync never`, so
/// no fdatasync timing enters the counts; the log thread still writes every
/// record), the service, and one event loop on 127.0.0.1 that runs the one
/// shard. Not started, as they add work on timers rather than per request: the
/// inactivity sweep and the snapshot scheduler.
final class InProcessServer {
    /// The operator key of this run (never leaves the process).
    static let adminKey = "alloc-count-admin-key-0123456789abcdef"

    let directory: String
    let port: UInt16
    private let engine: DurableEngine
    private let server: HTTPServer

    /// Starts the service on a free loopback port, one shard on one loop:
    /// every request stays on the loop that read it, as it does for one
    /// connection of a server whose app lives on that connection's loop.
    init() throws {
        directory = try TemporaryDirectory.make(prefix: "roost-alloc-count")
        let (engine, _) = try DurableEngine.open(
            directory: directory, policy: .never, shardCount: 1, loopCount: 1)
        self.engine = engine
        // A fresh directory holds no index, so `reconcile` (which serve runs
        // before serving) has nothing to do and is left out.
        let service = try RoostService(dataDirectory: directory, adminKey: Self.adminKey, engine: engine)
        let registry = engine.registry
        registry.shardSet.stopOwnThreads()
        server = try HTTPServer(
            configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, eventLoopCount: 1),
            responder: service, executors: registry.shardSet.executors)
        service.metrics.attach(server: server)
        port = try server.start()
    }

    /// Stops the loop, closes the log and removes the data directory.
    func stop() {
        server.beginShutdown()
        server.waitUntilStopped()
        engine.registry.shardSet.startOwnThreads()
        engine.close()
        TemporaryDirectory.remove(directory)
    }
}
