import RoostEngine
import RoostHTTP
import RoostStorage
import RoostTesting
import Testing

@testable import RoostAPI

/// Spec §13.4 on a node whose log follows (`ClusterLog`): every write is
/// refused before anything applies, naming the leader when one is known;
/// reads are served.
@Suite("A cluster follower's routes: writes refused with the leader named, reads served")
struct ClusterFollowerRoutesTests {
    @Test(
        "POST, PUT, PATCH and DELETE → 503 no_leader, then not_leader with Roost-Leader once a leader is known; GET served; an unknown route is still 404"
    )
    func writesRefused() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (engine, _) = try DurableEngine.open(
            directory: directory, policy: .always, shardCount: 2, options: Harness.storageOptions, cluster: true)
        defer { engine.close() }
        let clusterLog = try #require(engine.clusterLog)
        let clock = ManualWallClock()
        let service = try RoostService(
            dataDirectory: directory, adminKey: Harness.adminKey, engine: engine, clock: clock)
        let harness = Harness(service: service, clock: clock, catalog: service.catalog)

        let noLeader = await harness.call(.post, "/v1/apps", key: Harness.adminKey, body: #"{"name":"a"}"#)
        #expect(noLeader.status == 503)
        #expect(noLeader.errorCode == "no_leader")
        #expect(noLeader.header("Retry-After") == "1")
        #expect(noLeader.header("Roost-Leader") == nil)

        clusterLog.noteLeader(url: "http://10.0.0.2:8080")
        for (method, path) in [
            (HTTPMethod.post, "/v1/apps"), (.patch, "/v1/apps/1"), (.delete, "/v1/apps/1"),
            (.post, "/v1/devices"), (.put, "/v1/me/devices"), (.delete, "/v1/people/ada"),
        ] {
            let refused = await harness.call(method, path, key: Harness.adminKey, body: "{}")
            #expect(refused.status == 503, "\(method.name) \(path)")
            #expect(refused.errorCode == "not_leader", "\(method.name) \(path)")
            #expect(refused.header("Roost-Leader") == "http://10.0.0.2:8080", "\(method.name) \(path)")
            #expect(refused.header("Retry-After") == "1", "\(method.name) \(path)")
        }
        #expect(engine.log.appendedThrough == LogSequenceNumber(0), "nothing was written")

        let read = await harness.call(.get, "/v1/apps", key: Harness.adminKey)
        #expect(read.status == 200)
        let unknown = await harness.call(.post, "/v1/no-such-route", key: Harness.adminKey, body: "{}")
        #expect(unknown.status == 404)
    }
}
