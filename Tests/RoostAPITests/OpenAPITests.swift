import Glibc
import RoostEngine
import RoostPlatform
import RoostStorage
import RoostTesting
import Testing

@testable import RoostAPI

/// docs/openapi.yaml against the server's route table (every route of the
/// native API and the dialects, `RoostService.routes`) and against the
/// OpenAPI 3.1 schema (`openapi-spec-validator` of `.venv-test`).
@Suite("docs/openapi.yaml (spec §11, decision 0053)")
struct OpenAPITests {
    static let root = FuzzInputs.repositoryRoot(testFile: "\(#filePath)")
    static let document = root + "/docs/openapi.yaml"
    static let methods: Set<String> = ["get", "put", "post", "delete", "patch", "head", "options", "trace"]

    /// The `METHOD /path` operations under `paths:` (two-space path keys,
    /// four-space method keys, as the file is written).
    static func documentedOperations(_ text: String) -> [String] {
        var operations: [String] = []
        var inPaths = false
        var path: String?
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = raw.hasSuffix("\r") ? raw.dropLast() : raw
            if line.isEmpty || line.hasPrefix("#") { continue }
            if !line.hasPrefix(" ") {
                inPaths = line == "paths:"
                path = nil
                continue
            }
            guard inPaths else { continue }
            if line.hasPrefix("  /") && !line.hasPrefix("   ") && line.hasSuffix(":") {
                path = String(line.dropFirst(2).dropLast())
            } else if let path, line.hasPrefix("    ") && !line.hasPrefix("     ") {
                let key = line.dropFirst(4).prefix { $0 != ":" }
                if methods.contains(String(key)) { operations.append(key.uppercased() + " " + path) }
            }
        }
        return operations
    }

    /// What differs between the route table and the document, one sentence per
    /// operation, naming it exactly.
    static func differences(routes: [String], documented: [String]) -> [String] {
        let table = Set(routes)
        let listed = Set(documented)
        var problems: [String] = []
        for operation in routes where !listed.contains(operation) {
            problems.append("\(operation) is a route of the server but missing from docs/openapi.yaml")
        }
        for operation in documented where !table.contains(operation) {
            problems.append("\(operation) is in docs/openapi.yaml but the server has no such route")
        }
        var seen: Set<String> = []
        for operation in documented where !seen.insert(operation).inserted {
            problems.append("\(operation) appears twice in docs/openapi.yaml")
        }
        return problems
    }

    static func read() throws -> String {
        let bytes = try #require(try DurableFile.readIfExists(path: document, limitBytes: 4 << 20), "no \(document)")
        return String(decoding: bytes, as: UTF8.self)
    }

    @Test("every route of the route table is in docs/openapi.yaml, and it lists no route that does not exist")
    func matchesRouteTable() throws {
        let harness = try Harness()
        // The cluster routes are registered only with `--cluster` (spec §13.9): added here from their table.
        let clusterRoutes = ClusterRoutes(cluster: RouteTableCluster()).routes
        let routes = (harness.service.routes + clusterRoutes).map { "\($0.method.name) \($0.path)" }
        #expect(routes.count >= 41)
        let documented = Self.documentedOperations(try Self.read())
        let problems = Self.differences(routes: routes, documented: documented)
        #expect(problems.isEmpty, "\(problems.joined(separator: "; "))")
    }

    @Test("the comparison names exactly the route that is missing, or extra")
    func differencesNameTheRoute() {
        let problems = Self.differences(
            routes: ["GET /v1/people", "POST /v1/devices/batch"],
            documented: ["GET /v1/people", "GET /v1/changes", "GET /v1/people"])
        #expect(
            problems == [
                "POST /v1/devices/batch is a route of the server but missing from docs/openapi.yaml",
                "GET /v1/changes is in docs/openapi.yaml but the server has no such route",
                "GET /v1/people appears twice in docs/openapi.yaml",
            ])
        let text =
            "openapi: 3.1.0\npaths:\n  /a/{x}:\n    parameters: []\n    get:\n      x: 1\n    post:\n"
            + "  /b:\n    delete:\ncomponents:\n  /c:\n    get:\n"
        #expect(Self.documentedOperations(text) == ["GET /a/{x}", "POST /a/{x}", "DELETE /b"])
    }

    /// The interpreter of `.venv-test`; nil only when the test may be skipped.
    static var python: String? {
        if let configured = getenv("ROOST_TEST_PYTHON") { return String(cString: configured) }
        let local = root + "/.venv-test/bin/python"
        if access(local, X_OK) == 0 { return local }
        return getenv("CI") != nil ? local : nil
    }

    @Test(
        "openapi-spec-validator accepts docs/openapi.yaml as OpenAPI 3.1",
        .enabled(if: OpenAPITests.python != nil, "no .venv-test: run `make test-venv` (make test always runs this)"))
    func validates() throws {
        let python = try #require(Self.python)
        #expect(access(python, X_OK) == 0, "no Python at \(python): run `make test-venv`")
        let directory = try TemporaryDirectory.make(prefix: "roost-openapi")
        defer { TemporaryDirectory.remove(directory) }
        let output = directory + "/validator.txt"
        let status = system("'\(python)' -m openapi_spec_validator '\(Self.document)' > '\(output)' 2>&1")
        let said = (try? DurableFile.readIfExists(path: output, limitBytes: 1 << 20)).flatMap { $0 } ?? []
        #expect(status == 0, "openapi-spec-validator: \(String(decoding: said, as: UTF8.self))")
    }
}

/// A cluster node that never runs: only the cluster routes' table is read.
final class RouteTableCluster: ClusterControl {
    var status: ClusterNodeStatus { ClusterNodeStatus(cluster: "c", node: "n", endpoints: []) }
    var localStatus: ClusterNodeStatus { status }
    var readLagMillisecondsMax: Int64 { 2_000 }
    var metrics: ClusterMetrics { ClusterMetrics() }
    var newestSnapshot: (checkpoint: Checkpoint, path: String)? { nil }
    let positions = PositionBoard()

    func stepDown() -> StepDownOutcome { .notLeader }

    func waitUntilApplied(_ lsn: LogSequenceNumber, timeout: Duration) async -> Bool { false }
}
