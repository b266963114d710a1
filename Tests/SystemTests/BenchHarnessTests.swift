import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting
import Testing

/// The `roost-bench` binary as a user meets it: exit codes and usage, the
/// self-checks, and the crash harness passing on the real server and failing
/// on one that loses acknowledged writes (docs/benchmarking.md, docs/crash-testing.md).
@Suite("roost-bench command line and harnesses (system)", .serialized)
struct BenchHarnessTests {
    /// What a finished `roost-bench` run printed and how it ended.
    struct Finished {
        var status: Int32
        var output: String
        var errors: String
    }

    /// Runs the built roost-bench with `arguments`, killing it after `timeoutSeconds`.
    static func run(_ arguments: [String], timeoutSeconds: Int = 120, stopAfterFirstLine: Bool = false) throws
        -> Finished
    {
        let directory = try TemporaryDirectory.make(prefix: "roost-bench-cli")
        defer { TemporaryDirectory.remove(directory) }
        let binary = RoostProcess.builtProduct("roost-bench")
        let outPath = directory + "/stdout"
        let errPath = directory + "/stderr"
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, outPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, errPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        let argv = ([binary] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var child: pid_t = 0
        let spawned = posix_spawn(&child, binary, &actions, nil, argv, environ)
        #expect(spawned == 0, "cannot start \(binary)")
        var status: Int32 = 0
        var exited = false
        _ = ConditionWait.until(within: .seconds(timeoutSeconds)) {
            exited = waitpid(child, &status, WNOHANG) != 0
            return exited || (stopAfterFirstLine && (read(outPath).contains("\n") || !read(errPath).isEmpty))
        }
        if !exited {
            kill(child, SIGKILL)
            waitpid(child, &status, 0)
        }
        let signal = status & 0x7F
        return Finished(
            status: signal == 0 ? (status >> 8) & 0xFF : 128 + signal, output: read(outPath), errors: read(errPath))
    }

    static func read(_ path: String) -> String {
        let descriptor = open(path, O_RDONLY)
        guard descriptor >= 0 else { return "" }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = Glibc.read(descriptor, &chunk, chunk.count)
            guard count > 0 else { break }
            bytes += chunk[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    @Test("no arguments prints the usage to stderr and exits 2; --help prints it to stdout and exits 0")
    func usageAndExitCodes() throws {
        let bare = try Self.run([])
        #expect(bare.status == 2)
        #expect(bare.errors.contains("usage: roost-bench COMMAND"))
        let help = try Self.run(["--help"])
        #expect(help.status == 0)
        for command in ["load", "crash", "cluster", "compare", "registry", "selftest-crash", "selftest-cluster"] {
            #expect(help.output.contains("  \(command) "), "--help does not list \(command)")
        }
        #expect(try Self.run(["no-such-command"]).status == 2)
    }

    @Test(
        "every subcommand answers --help with exit 0",
        arguments: [
            "load", "crash", "cluster", "compare", "registry", "api-micro", "snapshot", "recover", "http-serve",
            "selftest-cluster",
        ])
    func subcommandHelp(_ command: String) throws {
        let help = try Self.run([command, "--help"])
        #expect(help.status == 0)
        #expect(help.output.hasPrefix("usage: roost-bench \(command)"))
    }

    @Test("load --batch N registers through POST /v1/devices/batch, checking each item's status")
    func batchLoad() throws {
        let (server, directory) = try ServeTests.start(extra: ["--fsync", "always"])
        defer {
            _ = server.stop(signal: SIGTERM)
            TemporaryDirectory.remove(directory)
        }
        let finished = try Self.run([
            "load", "--url", "http://127.0.0.1:\(server.port)", "--setup", "--admin-key", ServeTests.adminKey,
            "--batch", "50", "--mix", "register=1", "--tokens", "2000", "--people", "500", "--connections", "4",
            "--requests", "60", "--quiet",
        ])
        #expect(finished.status == 0, "\(finished.output)\n\(finished.errors)")
        #expect(finished.output.contains("register-batch"), "\(finished.output)")
        // The setup's app is 1; its key is not printed, so count through the operator.
        let app = try ServeTests.request(server.port, "GET", "/v1/apps/1", key: ServeTests.adminKey)
        let devices = try #require(try JSONReader.parse(app.body)["counts"]?["devices"]?.intValue)
        #expect(devices > 50 && devices <= 2000, "\(devices) devices after 60 batches of 50")
    }

    @Test("load --pipeline N keeps N requests out per connection, answered in order, every status checked")
    func pipelinedLoad() throws {
        let (server, directory) = try ServeTests.start(extra: ["--fsync", "never"])
        defer {
            _ = server.stop(signal: SIGTERM)
            TemporaryDirectory.remove(directory)
        }
        let result = directory + "/pipelined.json"
        let finished = try Self.run([
            "load", "--url", "http://127.0.0.1:\(server.port)", "--setup", "--admin-key", ServeTests.adminKey,
            "--pipeline", "8", "--connections", "2", "--mix", "register=80,read=10,refresh=10", "--tokens", "3000",
            "--people", "500", "--requests", "2000", "--quiet", "--out", result,
        ])
        #expect(finished.status == 0, "\(finished.output)\n\(finished.errors)")
        #expect(finished.output.contains("pipelining 8 (at most 8 seen out)"), "\(finished.output)")
        let json = try JSONReader.parse(Self.readFile(result))
        #expect(json["config"]?["pipeline"]?.intValue == 8)
        let summary = try #require(json["summary"])
        #expect(summary["in_flight_per_connection_max"]?.intValue == 8, "\(finished.output)")
        #expect(summary["expected"]?.intValue == 2000, "\(finished.output)")
        #expect(summary["connection_failures"]?.intValue == 0)
        // The registrations really happened: the app holds devices (the setup's app is 1).
        let app = try ServeTests.request(server.port, "GET", "/v1/apps/1", key: ServeTests.adminKey)
        let devices = try #require(try JSONReader.parse(app.body)["counts"]?["devices"]?.intValue)
        #expect(devices > 500 && devices <= 3000, "\(devices) devices after 1,600 registrations")
    }

    @Test(
        "misuse exits 2 and names the fault",
        arguments: [
            (["load", "--url", "http://127.0.0.1:1", "--key", "k", "--secnds", "3"], "unknown option --secnds"),
            (["load", "--url", "http://127.0.0.1:1", "--key"], "--key needs a value"),
            (["load", "--url", "http://127.0.0.1:1", "--key", "k", "--seconds", "1", "--requests", "5"], "exclude"),
            (["load", "--url", "http://127.0.0.1:1", "--key", "k", "--mix", "register=1,fly=2"], "unknown operation"),
            (["load", "--url", "http://127.0.0.1:1", "--key", "k", "--dialect", "barua", "--android", "5"], "APNs"),
            (["load", "--url", "http://127.0.0.1:1", "--setup"], "--admin-key"),
            (["load", "--url", "http://127.0.0.1:1", "--key", "k", "--batch", "1001"], "--batch"),
            (["load", "--url", "http://127.0.0.1:1", "--key", "k", "--pipeline", "65"], "--pipeline"),
            (["load", "--url", "http://127.0.0.1:1", "--key", "k", "--dialect", "barua", "--batch", "5"], "native"),
            (["registry", "--devices", "1000", "--shards", "1000"], "--shards 1000"),
            (["registry", "--devices", "10", "20"], "both by name and by position"),
            (["crash"], "--bin PATH is required"),
            (["crash", "--bin", "/no/such/roost"], "not an executable"),
            (["cluster"], "--roost PATH is required"),
            (["cluster", "--roost", "/no/such/roost"], "not an executable"),
            (["cluster", "--roost", "/bin/true", "--etcd-members", "2"], "--etcd-members 2"),
            (["selftest-cluster", "extra"], "unexpected argument"),
            (["compare"], "at least one result file"),
            (["selftest-load", "extra"], "unexpected argument"),
        ])
    func misuse(_ arguments: [String], _ message: String) throws {
        let finished = try Self.run(arguments)
        #expect(finished.status == 2, "\(arguments): exit \(finished.status)")
        #expect(finished.errors.contains(message), "\(arguments): \(finished.errors)")
    }

    @Test("registry --devices 1000 populates 1000 devices (the value is the device count, not the shard count)")
    func registryDevicesFlag() throws {
        let finished = try Self.run(["registry", "--devices", "1000"], stopAfterFirstLine: true)
        #expect(finished.output.hasPrefix("populate (new devices): 1000 in"), "\(finished.output)\(finished.errors)")
        #expect(!finished.errors.contains("precondition"), "\(finished.errors)")
    }

    @Test("registry --shape issue12 holds every device it registered (25 a person) and prints its memory line")
    func registryIssueShape() throws {
        let finished = try Self.run(["registry", "--devices", "5000", "--shape", "issue12"])
        #expect(finished.status == 0, "\(finished.output)\(finished.errors)")
        #expect(finished.output.contains("populate (new devices, issue 12 shape): 5000 in"), "\(finished.output)")
        #expect(finished.output.contains("at 5000 devices"), "\(finished.output)")
        let refused = try Self.run(["registry", "--shape", "round"])
        #expect(refused.status == 2, "\(refused.errors)")
    }

    @Test(
        "the self-checks pass",
        arguments: ["selftest-histogram", "selftest-load", "selftest-crash", "selftest-cluster"])
    func selfChecks(_ command: String) throws {
        let finished = try Self.run([command])
        #expect(finished.status == 0, "\(finished.output)\(finished.errors)")
        #expect(finished.output.contains(": ok"))
    }

    /// The bytes of `path` (empty when it cannot be read, which the caller's parse then refuses).
    static func readFile(_ path: String) -> [UInt8] {
        let descriptor = open(path, O_RDONLY)
        #expect(descriptor >= 0, "cannot read \(path)")
        guard descriptor >= 0 else { return [] }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += chunk[0..<count]
        }
        return bytes
    }

    /// Writes `text` to `path` (0600).
    static func writeFile(_ text: String, to path: String) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        #expect(descriptor >= 0, "cannot write \(path)")
        _ = text.withCString { Glibc.write(descriptor, $0, strlen($0)) }
        close(descriptor)
    }

    @Test("compare puts peer result files (Redis, PostgreSQL) in the same table as load results")
    func compareReadsPeerFiles() throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-bench-compare")
        defer { TemporaryDirectory.remove(directory) }
        Self.writeFile(
            #"{"roost_bench":"load","label":"roost always","config":{"mode":"closed","rate":null},"#
                + #""summary":{"rate":1000,"passed":true,"unexpected":0,"#
                + #""latency_us":{"p50":500,"p90":800,"p99":1000,"p99.9":2000,"max":3000}}}"#,
            to: directory + "/roost.json")
        // redis-benchmark reports no p90 and no p99.9.
        Self.writeFile(
            #"{"roost_bench":"peer","label":"redis always","config":{"mode":"closed","rate":null},"#
                + #""summary":{"rate":2000,"passed":true,"unexpected":0,"#
                + #""latency_us":{"p50":250,"p95":400,"p99":500,"max":900}}}"#,
            to: directory + "/redis.json")
        Self.writeFile(
            #"{"roost_bench":"peer","label":"postgres on","config":{"mode":"closed","rate":null},"#
                + #""summary":{"rate":500,"passed":false,"unexpected":7,"#
                + #""latency_us":{"p50":1000,"p90":1500,"p99":2000,"p99.9":4000,"max":5000}}}"#,
            to: directory + "/postgres.json")
        Self.writeFile(#"{"roost_bench":"crash","summary":{"rate":1}}"#, to: directory + "/other.json")
        let compared = try Self.run([
            "compare", directory + "/roost.json", directory + "/redis.json", directory + "/postgres.json",
        ])
        #expect(compared.status == 0, "\(compared.output)\(compared.errors)")
        let redisRow = "| redis always | closed | 2,000 | 2.00× | 0.25 | - | 0.50 | 0.50× | - | 0.90 | 0 |"
        #expect(compared.output.contains(redisRow), "\(compared.output)")
        #expect(
            compared.output.contains("| postgres on (FAILED) | closed | 500 | 0.50× | 1.00 | 1.50 | 2.00 | 2.00× |"),
            "\(compared.output)")
        let refused = try Self.run(["compare", directory + "/roost.json", directory + "/other.json"])
        #expect(refused.status == 1)
        #expect(refused.errors.contains("is not a `roost-bench load --out` result or a peer result file"))
    }

    @Test("roost-bench crash passes on the real binary and prints what it checked")
    func crashHarnessPasses() throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-bench-crash", under: "/var/tmp")
        defer { TemporaryDirectory.remove(directory) }
        let finished = try Self.run([
            "crash", "--bin", RoostProcess.builtProduct("roost"), "--data", directory + "/data", "--cycles", "3",
            "--populate", "2000", "--clients", "3", "--slots", "100", "--snapshot-kill-every", "3", "--seed", "11",
        ])
        #expect(finished.status == 0, "\(finished.output)\(finished.errors)")
        #expect(finished.output.contains("lost 0, extra 0, half-applied 0"))
        #expect(finished.output.contains(": PASS"))
        let totals = finished.output.split(separator: "\n").first { $0.hasPrefix("crash total:") } ?? ""
        #expect(!totals.contains("acknowledged 0 "), "\(totals)")
    }

    @Test("roost-bench crash fails (exit 1) on a server that loses acknowledged writes")
    func crashHarnessCatchesLoss() throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-bench-crash", under: "/var/tmp")
        defer { TemporaryDirectory.remove(directory) }
        // A roost that serves from a new directory at every start: each restart forgets everything.
        let wrapper = directory + "/forgetful-roost"
        let script =
            "#!/bin/sh\nexec \(RoostProcess.builtProduct("roost")) \"$@\" --data \"$(mktemp -d \(directory)/fresh.XXXXXX)\"\n"
        let descriptor = open(wrapper, O_WRONLY | O_CREAT | O_TRUNC, 0o700)
        #expect(descriptor >= 0)
        _ = script.withCString { write(descriptor, $0, strlen($0)) }
        close(descriptor)
        let finished = try Self.run([
            "crash", "--bin", wrapper, "--data", directory + "/data", "--cycles", "1", "--populate", "50",
            "--clients", "2", "--slots", "20", "--snapshot-kill-every", "0", "--kill-after-ms", "300-300",
        ])
        // Each start's fresh directory (under the test's own) goes with it.
        #expect(finished.status == 1, "\(finished.output)\(finished.errors)")
        #expect(finished.output.contains(": FAIL"))
        #expect(finished.output.contains("PROBLEM: the key made at the start answers 401 after the restart"))
        #expect(!finished.output.contains(" lost 0,"), "\(finished.output)")
    }
}
