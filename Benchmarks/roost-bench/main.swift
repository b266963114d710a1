import Glibc
import RoostHTTP
import RoostJSON
import RoostPlatform
import RoostTesting

/// Answers GET /healthz and echoes the size of any POST body: the smallest
/// responder, so a load generator measures the HTTP layer alone.
struct BenchResponder: HTTPResponder {
    func bodyLimitBytes(for head: HTTPRequestHead) -> Int { 64 * 1024 }

    func respond(to request: HTTPRequest, sink: any HTTPReplySink) -> HTTPResponderResult {
        if request.head.method == .post {
            return .respond(
                HTTPResponse(
                    status: 201, headers: [("Content-Type", "application/json")],
                    body: Array("{\"ok\":true,\"bytes\":\(request.body.count)}".utf8)))
        }
        return .respond(
            HTTPResponse(status: 200, headers: [("Content-Type", "text/plain")], body: Array("ok".utf8)))
    }

    func response(for failure: HTTPRequestFailure) -> HTTPResponse {
        HTTPResponse(status: failure.status, body: Array("refused".utf8))
    }
}

let arguments = CommandLine.arguments
if arguments.count >= 2 && arguments[1] == "http-serve" {
    // roost-bench http-serve [port]: serve BenchResponder until killed (for wrk).
    let port = arguments.count >= 3 ? UInt16(arguments[2]) ?? 8080 : 8080
    let server = try HTTPServer(
        configuration: HTTPServerConfiguration(host: "127.0.0.1", port: port), responder: BenchResponder())
    let bound = try server.start()
    print("roost-bench: serving on 127.0.0.1:\(bound)")
    server.waitUntilStopped()
} else if arguments.count >= 2 && arguments[1] == "api-micro" {
    await APIMicroBenchmark.run(iterations: arguments.count >= 3 ? Int(arguments[2]) ?? 200_000 : 200_000)
} else if arguments.count >= 2 && arguments[1] == "registry" {
    await RegistryBenchmark.run(
        devices: arguments.count >= 3 ? Int(arguments[2]) ?? 1_000_000 : 1_000_000,
        shards: arguments.count >= 4 ? Int(arguments[3]) ?? 1 : 1)
} else if arguments.count >= 3 && arguments[1] == "snapshot" {
    try await DurabilityBenchmark.run(
        directory: arguments[2],
        devices: arguments.count >= 4 ? Int(arguments[3]) ?? 1_000_000 : 1_000_000,
        logRecords: arguments.count >= 5 ? Int(arguments[4]) ?? 1_000_000 : 1_000_000)
} else if arguments.count >= 3 && arguments[1] == "recover" {
    try DurabilityBenchmark.recover(
        directory: arguments[2], shardCount: arguments.count >= 5 ? Int(arguments[4]) ?? 1 : 1,
        runs: arguments.count >= 4 ? Int(arguments[3]) ?? 1 : 1)
} else if arguments.count >= 2 && arguments[1] == "load" {
    exit(LoadCommand.run(arguments.dropFirst(2)))
} else if arguments.count >= 2 && arguments[1] == "selftest-load" {
    exit(LoadSelfTest.run().isEmpty ? 0 : 1)
} else if arguments.count >= 2 && arguments[1] == "selftest-histogram" {
    exit(LatencyHistogramSelfTest.run(seed: arguments.count >= 3 ? UInt64(arguments[2]) ?? 42 : 42).isEmpty ? 0 : 1)
} else {
    print(
        "roost-bench: no benchmark selected (try: roost-bench http-serve 8080 | api-micro [iterations] | registry [devices] [shards] | snapshot DIR [devices] [log-records] | recover DIR [runs] [shards] | load --url http://127.0.0.1:PORT --key KEY [--rate R] [--seconds S] | selftest-histogram [seed] | selftest-load)"
    )
}
