import RoostAPI
import RoostEngine
import RoostHTTP
import RoostModel

/// `roost-bench api-micro [iterations]`: the in-process cost of the request
/// path behind the HTTP layer (route, authenticate, parse, validate, render),
/// per request, for GET /healthz and the PATCH /v1/apps/1 of the HTTP benchmark
/// (which reads the app's counts from the engine: two shard jobs and a hop).
enum APIMicroBenchmark {
    static func run(iterations: Int) async {
        let adminKey = "bench-admin-key-0123456789abcdef"
        let service = RoostService(
            catalog: Catalog(state: CatalogState(), log: nil, clock: SystemClock()), adminKey: adminKey,
            clock: SystemClock(), registry: Registry(shardCount: 1, log: VolatileLog()))
        func request(_ method: HTTPMethod, _ target: String, _ body: String) -> HTTPRequest {
            let headers = HTTPHeaders([
                ("Host", "bench"), ("Authorization", "Bearer \(adminKey)"), ("Content-Type", "application/json"),
            ])
            let head = HTTPRequestHead(
                method: method, target: target, version: .http11, headers: headers, keepAlive: true)
            return HTTPRequest(head: head, body: Array(body.utf8))
        }
        let created = await service.handle(request(.post, "/v1/apps", #"{"name":"Example"}"#))
        precondition(created.status == 201)
        let cases: [(String, HTTPRequest)] = [
            ("GET /healthz", request(.get, "/healthz", "")),
            (
                "PATCH /v1/apps/1",
                request(
                    .patch, "/v1/apps/1",
                    #"{"name":"Example","settings":{"max_devices_per_person":10,"require_known_person":false}}"#)
            ),
        ]
        let clock = ContinuousClock()
        for (name, request) in cases {
            var samples: [Double] = []
            for _ in 0..<5 {
                var bytes = 0
                let started = clock.now
                for _ in 0..<iterations { bytes &+= await service.handle(request).body.count }
                let elapsed = clock.now - started
                let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                samples.append(seconds / Double(iterations) * 1e9)
                precondition(bytes > 0)
            }
            samples.sort()
            print("\(name): median \(Int(samples[2])) ns/request (5 runs of \(iterations))")
        }
    }
}
