import Glibc
import RoostPlatform
import RoostTesting
import Testing

/// The web console in a real browser (docs/console.md, "Tests"): the real
/// `roost` binary, and Tests/SystemTests/Fixtures/console_browser.py driving
/// headless Chromium through Selenium (from `.venv-test`, `make test-venv`;
/// Chromium and chromedriver from `make test-deps`). The script waits on
/// conditions, never sleeps, and runs axe-core on every view; screenshots of
/// every view land in `.build/console/`.
@Suite("web console in Chromium (system)", .serialized)
struct ConsoleBrowserSystemTests {
    static let chromedriver = MetricsParser.environment("ROOST_TEST_CHROMEDRIVER") ?? "/usr/bin/chromedriver"

    /// Whether the browser test runs: with `ROOST_TEST_PYTHON` (make test) or
    /// `CI` set it always runs, and a missing browser fails it; a plain
    /// `swift test` without the venv or the browser skips it.
    static var enabled: Bool {
        if MetricsParser.environment("ROOST_TEST_PYTHON") != nil || MetricsParser.environment("CI") != nil {
            return true
        }
        return MetricsParser.python != nil && access(chromedriver, X_OK) == 0
    }

    @Test(
        "sign in, search user_42, read the old phone's history, Changes live, 401, 403 named, sign-out traces, axe",
        .enabled(if: enabled, "no .venv-test or chromium: run `make test-venv test-deps` (make test runs this)"),
        .timeLimit(.minutes(2)))
    func consoleFlows() throws {
        let python = try #require(MetricsParser.python, "no Python: run `make test-venv`")
        #expect(access(Self.chromedriver, X_OK) == 0, "no \(Self.chromedriver): run `make test-deps`")
        let directory = try TemporaryDirectory.make(prefix: "roost-console")
        defer { TemporaryDirectory.remove(directory) }
        let process = try RoostProcess(
            arguments: ["serve", "--listen", "127.0.0.1:0", "--data", directory + "/data"],
            environment: ["ROOST_ADMIN_KEY=\(ServeTests.adminKey)"], standardErrorPath: directory + "/stderr.log")
        let script = MetricsParser.packageRoot + "/Tests/SystemTests/Fixtures/console_browser.py"
        let screenshots = MetricsParser.packageRoot + "/.build/console"
        let output = directory + "/browser.out"
        let errors = directory + "/browser.err"
        let status = system(
            "'\(python)' '\(script)' --port \(process.port) --admin '\(ServeTests.adminKey)' "
                + "--screenshots '\(screenshots)' > '\(output)' 2> '\(errors)'")
        let said = (try? DurableFile.readIfExists(path: output, limitBytes: 1 << 20)).flatMap { $0 } ?? []
        let complaint = (try? DurableFile.readIfExists(path: errors, limitBytes: 1 << 20)).flatMap { $0 } ?? []
        #expect(
            status == 0,
            "the console's browser test failed (status \(status)): \(String(decoding: complaint.suffix(4000), as: UTF8.self))"
        )
        if status == 0 {
            let summary = String(decoding: said, as: UTF8.self)
            for view in ["sign-in", "apps", "overview", "metrics", "person", "device", "changes", "inactivity"] {
                #expect(summary.contains("\"\(view)\""), "axe did not check \(view): \(summary)")
            }
        }
        #expect(process.stop(signal: SIGTERM) == 0)
    }

    @Test(
        "a cluster's console: Cluster in the navigation, the node's role, the members; on a follower a device change is refused naming the leader; axe",
        .enabled(
            if: enabled && EtcdTestGate.enabled, "no .venv-test, chromium or etcd: run `make test-venv test-deps`"),
        .timeLimit(.minutes(2)))
    func clusterView() throws {
        let python = try #require(MetricsParser.python, "no Python: run `make test-venv`")
        let cluster = try ClusterHarness()
        let node = try cluster.start(1)
        _ = try cluster.leader()
        let follower = try cluster.start(2)
        let script = MetricsParser.packageRoot + "/Tests/SystemTests/Fixtures/console_browser.py"
        let screenshots = MetricsParser.packageRoot + "/.build/console"
        let output = cluster.directory + "/browser.out"
        let errors = cluster.directory + "/browser.err"
        let status = system(
            "'\(python)' '\(script)' --port \(node.port) --admin '\(ServeTests.adminKey)' --cluster-view "
                + "--follower-port \(follower.port) --screenshots '\(screenshots)' > '\(output)' 2> '\(errors)'")
        let said = (try? DurableFile.readIfExists(path: output, limitBytes: 1 << 20)).flatMap { $0 } ?? []
        let complaint = (try? DurableFile.readIfExists(path: errors, limitBytes: 1 << 20)).flatMap { $0 } ?? []
        #expect(
            status == 0,
            "the console's cluster view failed (status \(status)): \(String(decoding: complaint.suffix(4000), as: UTF8.self))"
        )
        let summary = String(decoding: said, as: UTF8.self)
        for view in ["cluster", "cluster-follower-refusal"] {
            #expect(summary.contains("\"\(view)\""), "axe did not check \(view): \(summary)")
        }
    }
}
