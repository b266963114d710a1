import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting
import Synchronization

/// Everything `roost-bench cluster` was asked to do.
struct ClusterOptions {
    var binary = ""
    var nodes = 3
    var etcdMembers = 1
    var faults = 20
    var seed: UInt64 = 1
    var directory: String? = nil
    var writers = 2
    var readers = 2
    var out: String? = nil
    var keepData = false

    /// The cluster's name in etcd.
    static let clusterName = "bench"
    /// `--lease-ttl-s` of every node: failover within about 2 s (spec §13.5).
    static let leaseTTLSeconds = 1
    /// `--changes-retained` of every node: the whole run's feed stays readable, so the final feed is complete.
    static let changesRetained = 1_000_000
    /// The operator key of every node.
    static let adminKey = "roost-bench-cluster-admin-key-0123456789"
    /// How long a node's start (recovery, catch-up, re-seed) may take: a
    /// node reconciles its log with the group log page by page before it
    /// serves, which takes tens of seconds on this 2-core machine under load.
    static let startTimeoutMilliseconds = 180_000
    /// `--snapshot-log-bytes` of every node (as `make cluster-soak`): snapshots
    /// every MiB of log, so that the group log is purged and a node that was
    /// down long re-seeds, and a restart reconciles only what follows its checkpoint.
    static let snapshotLogBytes = 1_048_576
    static let nodesMax = 7
    static let writersMax = 16
    static let readersMax = 16
    static let faultsMax = 100_000
    /// The pause before each fault.
    static let faultGapMilliseconds = 500...1_500
    /// How long a paused leader stays stopped: past its lease.
    static let pausePastLeaseMilliseconds = 2_000
    /// A killed etcd member starts again this long after (never two down at once).
    static let etcdRestartAfter = Duration.seconds(2)
    /// The longest wait for a leader before a fault (spec §13.5 promises 2 s).
    static let leaderWait = Duration.seconds(30)
    /// The longest wait, at the end, for every node to apply what the leader committed.
    static let settleLimit = Duration.seconds(120)
    /// The largest node log read for its `cluster.elected` lines.
    static let logBytesMax = 256 << 20
    /// `roost cluster init` attempts (etcd may still be electing), 100 ms apart.
    static let initAttemptsMax = 100
    /// Attempts to read a node's final export and feed while the nodes agree on no cursor.
    static let finalReadAttemptsMax = 10

    static let usage = """
        usage: roost-bench cluster --roost PATH [options]
          --roost PATH          the roost binary to test (e.g. .build/release/roost)
          --nodes N             roost serve --cluster nodes (3; 2 to \(nodesMax))
          --etcd-members 1|3    etcd members (1); with 3, faults kill etcd members too
          --faults N            faults injected, one every 0.5-1.5 s (20)
          --seed S              random seed of the schedule and the clients (1); printed, so a run can be repeated
          --writers K           writer threads (2; each registers new tokens with an Idempotency-Key)
          --readers K           reader threads (2; person and device reads on every node)
          --dir DIR             directory for etcd, the nodes' data and logs (empty or absent; default: a new one
                                under $TMPDIR or /var/tmp, removed when the run passes)
          --keep-data           keep the directory even when the run passes
          --out FILE            write the recorded history (every operation, every fault) as JSON
        faults: kill -9 of the leader, SIGSTOP of the leader past its lease then SIGCONT, kill -9 of a follower,
        POST /v1/cluster/step-down, and kill -9 of an etcd member (with 3); nodes that exit are started again.
        checks: nothing acknowledged is lost, nothing duplicated or invented, one writer per epoch, positions
        not reused, no read shows uncommitted data, nodes converge byte for byte, the change feed is continuous
        across failovers. Exits 0 when all hold, 1 otherwise, 2 on misuse.
        """

    static func parse(_ arguments: ArraySlice<String>) throws(UsageError) -> ClusterOptions {
        let flags = try Arguments(
            arguments,
            valued: [
                "--roost", "--nodes", "--etcd-members", "--faults", "--seed", "--dir", "--writers", "--readers",
                "--out",
            ],
            switches: ["--keep-data"])
        var options = ClusterOptions()
        guard let binary = flags.string("--roost") else { throw UsageError("--roost PATH is required") }
        guard access(binary, X_OK) == 0 else { throw UsageError("--roost \(binary): not an executable file") }
        guard access(ClusterEtcdMember.binaryPath, X_OK) == 0 else {
            throw UsageError("\(ClusterEtcdMember.binaryPath) is missing: install Debian's etcd-server (make deps)")
        }
        options.binary = binary
        options.nodes = try flags.int("--nodes", in: 2...nodesMax) ?? 3
        options.etcdMembers = Int(try flags.choice("--etcd-members", ["1", "3"]) ?? "1") ?? 1
        options.faults = try flags.int("--faults", in: 0...faultsMax) ?? 20
        if let seed = try flags.int("--seed", in: 0...Int.max) { options.seed = UInt64(seed) }
        options.directory = flags.string("--dir")
        options.writers = try flags.int("--writers", in: 1...writersMax) ?? 2
        options.readers = try flags.int("--readers", in: 0...readersMax) ?? 2
        options.out = flags.string("--out")
        options.keepData = flags.has("--keep-data")
        return options
    }
}

/// `roost-bench cluster …`: the cluster history checker (docs/crash-testing.md).
enum ClusterCommand {
    static func run(_ arguments: ArraySlice<String>) -> Int32 {
        if Arguments.wantsHelp(arguments) {
            StandardStreams.out(ClusterOptions.usage)
            return 0
        }
        let options: ClusterOptions
        do {
            options = try ClusterOptions.parse(arguments)
        } catch {
            StandardStreams.error("roost-bench cluster: \(error)")
            StandardStreams.error(ClusterOptions.usage)
            return 2
        }
        do {
            return try ClusterRun(options: options).run()
        } catch let error as UsageError {
            StandardStreams.error("roost-bench cluster: \(error)")
            return 2
        } catch {
            StandardStreams.error("roost-bench cluster: \(error)")
            return 1
        }
    }
}

/// One run: etcd, the nodes, the clients, the fault schedule, the check.
final class ClusterRun {
    private let options: ClusterOptions
    private var random: SeededRandom
    private let directory: String
    private let createdDirectory: Bool
    private var members: [ClusterEtcdMember] = []
    private var nodes: [ClusterRoostNode] = []
    private let ports: ClusterPorts
    private let origin = ContinuousClock.now
    private var faults: [ClusterFault] = []
    /// Things that went wrong outside the history: no leader in time, a node that would not start.
    private var incidents: [String] = []
    private var key = ""

    init(options: ClusterOptions) throws {
        self.options = options
        random = SeededRandom(seed: options.seed)
        ports = ClusterPorts(count: options.nodes)
        if let given = options.directory {
            var info = stat()
            if stat(given, &info) == 0 {
                guard (info.st_mode & S_IFMT) == S_IFDIR else { throw UsageError("--dir \(given) is not a directory") }
                guard CrashRun.entries(given).isEmpty else { throw UsageError("--dir \(given) is not empty") }
            } else {
                guard mkdir(given, 0o700) == 0 else { throw LoadError("cannot create \(given): errno \(errno)") }
            }
            directory = given
            createdDirectory = false
        } else {
            let base = getenv("TMPDIR").map { String(cString: $0) } ?? "/var/tmp"
            do {
                directory = try TemporaryDirectory.make(prefix: "roost-cluster", under: base)
            } catch {
                throw LoadError("cannot create a directory under \(base): \(error)")
            }
            createdDirectory = true
        }
    }

    deinit {
        for node in nodes { node.stop(SIGKILL, ports: ports) }
        for member in members { member.kill(SIGKILL) }
    }

    private var etcdURLs: String { members.map(\.clientURL).joined(separator: ",") }
    private var now: Int64 { ClusterWire.microseconds(since: origin) }

    func run() throws -> Int32 {
        let version = Subprocess.output([options.binary, "--version"]).flatMap { $0.split(separator: "\n").first }
        StandardStreams.out(
            "cluster: \(options.binary) (\(version.map(String.init) ?? "version unknown")), \(options.nodes) nodes, "
                + "\(options.etcdMembers) etcd member\(options.etcdMembers == 1 ? "" : "s"), \(options.faults) faults, "
                + "seed \(options.seed), \(options.writers) writers, \(options.readers) readers; directory \(directory)"
        )
        try startCluster()
        let leader = try waitForLeader()
        let firstCursor = try setUp(port: ports.current[leader])
        let progress = ClusterProgress(writers: options.writers)
        let stop = StopFlag()
        let results = ClientResults()
        let threads = try startClients(progress: progress, stop: stop, cursor: firstCursor, results: results)
        var counts: [ClusterFault.Kind: Int] = [:]
        for number in 1...max(1, options.faults) where options.faults > 0 {
            usleep(UInt32(Self.draw(ClusterOptions.faultGapMilliseconds, &random)) * 1_000)
            restartWhatIsDown()
            guard let leader = try? waitForLeader() else {
                incidents.append("no leader within \(ClusterOptions.leaderWait) before fault \(number)")
                StandardStreams.out("fault \(number)/\(options.faults): NO LEADER within \(ClusterOptions.leaderWait)")
                continue
            }
            let fault = inject(leader: leader)
            counts[fault.kind, default: 0] += 1
            faults.append(fault)
            StandardStreams.out(
                "fault \(number)/\(options.faults): \(fault.kind.rawValue) \(fault.subject) at "
                    + "\(ClusterOperation.seconds(fault.atMicroseconds)) s (registrations acknowledged so far "
                    + "\(progress.acknowledgedCount))")
        }
        stop.set()
        for thread in threads { thread.join() }
        var operations = results.operations.withLock { $0 }
        let settled = try settle()
        var follower = results.follower.withLock { $0 }
        if var consumer = follower {
            try consumer.catchUp(ports.current)
            follower = consumer
        }
        operations += follower?.operations ?? []
        let final = try finalState(leader: settled)
        let stopExits = nodes.map { node -> Int32 in
            node.stop(SIGTERM, ports: ports)
            return node.exits.last ?? -1
        }
        for member in members { member.kill(SIGTERM) }
        let history = ClusterHistory(operations, faults: faults)
        let report = ClusterChecker.check(history, final)
        if let out = options.out { try FileOutput.write(history.json(), to: out) }
        for line in report.lines(history) { StandardStreams.out(line) }
        // The checker again, on this run's history with its final state damaged: it must name each damage.
        let proof = ClusterCheckerProof.run(history, final)
        for line in proof.lines { StandardStreams.out(line) }
        for incident in incidents { StandardStreams.out("  INCIDENT: \(incident)") }
        let passed = report.passed && incidents.isEmpty && proof.passed
        printTotals(report: report, counts: counts, stopExits: stopExits, passed: passed)
        if passed && createdDirectory && !options.keepData {
            TemporaryDirectory.remove(directory)
        } else {
            StandardStreams.out("cluster: directory kept: \(directory) (node logs n*.log, etcd logs e*.log)")
        }
        return passed ? 0 : 1
    }

    private func printTotals(
        report: ClusterCheckReport, counts: [ClusterFault.Kind: Int], stopExits: [Int32], passed: Bool
    ) {
        var exits: [Int32: Int] = [:]
        for node in nodes {
            for code in node.exits.dropLast() { exits[code, default: 0] += 1 }
        }
        let elected = nodes.reduce(0) { $0 + $1.logEvents().elected.count }
        let deposed = nodes.reduce(0) { $0 + $1.logEvents().deposed }
        let drawn = ClusterFault.Kind.allCases.filter { counts[$0] != nil }.map { "\(counts[$0]!) \($0.rawValue)" }
        StandardStreams.out(
            "cluster total: seed \(options.seed), \(faults.count) faults (\(drawn.joined(separator: ", "))), "
                + "node exits during the run \(exits.sorted { $0.key < $1.key }.map { "\($0.value)× \($0.key)" }.joined(separator: ", ")), "
                + "elections \(elected), depositions \(deposed), final SIGTERM exits \(stopExits.map(String.init).joined(separator: " ")); "
                + "operations \(report.operations), registrations acknowledged \(report.acknowledgedRegistrations), "
                + "deletions acknowledged \(report.acknowledgedDeletions), violations \(report.violations.count), "
                + "incidents \(incidents.count), \(ClusterOperation.seconds(now)) s: " + (passed ? "PASS" : "FAIL"))
    }

    static func draw(_ range: ClosedRange<Int>, _ random: inout SeededRandom) -> Int {
        range.lowerBound + Int(random.next() % UInt64(range.count))
    }

    // MARK: Start-up

    /// etcd members, the cluster's record, the nodes.
    private func startCluster() throws {
        let etcdPorts = try FreePorts.take(2 * options.etcdMembers)
        for index in 0..<options.etcdMembers {
            members.append(
                ClusterEtcdMember(
                    index: index, clientPort: etcdPorts[2 * index], peerPort: etcdPorts[2 * index + 1],
                    directory: directory))
        }
        for member in members { try member.start(initialCluster: initialCluster) }
        let deadline = ContinuousClock.now + ClusterEtcdMember.healthyWithin
        while !members.allSatisfy({ $0.isHealthy() }) {
            guard ContinuousClock.now < deadline else {
                throw LoadError("etcd did not become healthy (logs in \(directory))")
            }
            usleep(50_000)
        }
        var initialised = false
        for _ in 0..<ClusterOptions.initAttemptsMax where !initialised {
            initialised =
                Subprocess.output([
                    options.binary, "cluster", "init", "--etcd", etcdURLs, "--cluster", ClusterOptions.clusterName,
                ]) != nil
            if !initialised { usleep(100_000) }
        }
        guard initialised else { throw LoadError("roost cluster init failed \(ClusterOptions.initAttemptsMax) times") }
        for index in 0..<options.nodes {
            let node = ClusterRoostNode(index: index, directory: directory)
            nodes.append(node)
            try node.start(options, etcd: etcdURLs, ports: ports)
        }
    }

    private var initialCluster: String { members.map { "\($0.name)=\($0.peerURL)" }.joined(separator: ",") }

    /// An app (`max_devices_per_person` 1000) and a secret key; returns the cursor of the empty app's export.
    private func setUp(port: UInt16) throws -> ClusterPosition {
        let client = BlockingHTTPClient(host: "127.0.0.1", port: port)
        let app = try client.expect(
            201, "POST", "/v1/apps", key: ClusterOptions.adminKey,
            body: #"{"name":"roost-bench cluster","settings":{"max_devices_per_person":1000}}"#)
        guard let appID = app["id"]?.intValue else { throw LoadError("POST /v1/apps: no id") }
        let made = try client.expect(
            201, "POST", "/v1/apps/\(appID)/keys", key: ClusterOptions.adminKey,
            body: #"{"kind":"secret","capabilities":["devices:write","devices:read","devices:delete"]}"#)
        guard let secret = made["key"]?.stringValue else { throw LoadError("POST /v1/apps/\(appID)/keys: no key") }
        key = secret
        let export = try get(port: port, "/v1/devices/export", key: key, timeout: .seconds(10))
        guard export.status == 200, let cursor = ClusterPosition(cursor: export.header("Roost-Cursor")) else {
            throw LoadError("the first export answered \(export.status) without a Roost-Cursor: \(export.bodyText)")
        }
        return cursor
    }

    /// What the client threads hand back when they end.
    final class ClientResults: Sendable {
        let operations = Mutex<[ClusterOperation]>([])
        let follower = Mutex<ClusterFeedFollower?>(nil)
    }

    /// Starts the writers, the readers and the feed follower, each on its own thread.
    private func startClients(
        progress: ClusterProgress, stop: StopFlag, cursor: ClusterPosition, results: ClientResults
    )
        throws -> [PlatformThread]
    {
        var threads: [PlatformThread] = []
        let ports = self.ports
        for writer in 0..<options.writers {
            let plan = ClusterClientPlan(number: writer, key: key, seed: random.next(), origin: origin)
            threads.append(
                try PlatformThread.spawn(name: "cluster-write") {
                    let operations = ClusterWriter.run(plan, stop: stop, ports: ports, progress: progress)
                    results.operations.withLock { $0 += operations }
                })
        }
        for reader in 0..<options.readers {
            let plan = ClusterClientPlan(number: reader, key: key, seed: random.next(), origin: origin)
            threads.append(
                try PlatformThread.spawn(name: "cluster-read") {
                    let operations = ClusterReader.run(plan, stop: stop, ports: ports, progress: progress)
                    results.operations.withLock { $0 += operations }
                })
        }
        let follower = ClusterFeedFollower(cursor: cursor, key: key, origin: origin)
        threads.append(
            try PlatformThread.spawn(name: "cluster-feed") {
                var consumer = follower
                consumer.tail(stop: stop, ports: ports)
                results.follower.withLock { $0 = consumer }
            })
        return threads
    }

    // MARK: Faults

    /// Starts every node that exited and every etcd member killed long enough ago.
    private func restartWhatIsDown() {
        for member in members where !member.isRunning {
            guard let killed = member.killedAt, ContinuousClock.now - killed >= ClusterOptions.etcdRestartAfter else {
                continue
            }
            do {
                try member.start(initialCluster: initialCluster)
            } catch {
                incidents.append("etcd member \(member.name) did not start again: \(error)")
            }
        }
        for node in nodes {
            _ = node.reapIfExited(ports: ports)
            guard node.process == nil else { continue }
            do {
                try node.start(options, etcd: etcdURLs, ports: ports)
            } catch {
                StandardStreams.out("  \(node.name) did not start again (retried before the next fault): \(error)")
            }
        }
    }

    /// The node whose `/readyz` answers 200 (the leader taking writes), waiting up to `leaderWait`.
    private func waitForLeader(within limit: Duration = ClusterOptions.leaderWait) throws -> Int {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            for node in nodes {
                _ = node.reapIfExited(ports: ports)
                guard let port = node.port else { continue }
                if let answer = try? get(port: port, "/readyz", key: nil, timeout: .milliseconds(300)),
                    answer.status == 200
                {
                    return node.index
                }
            }
            usleep(50_000)
        }
        throw LoadError("no node led within \(limit)")
    }

    /// Draws a fault that applies now and injects it.
    private func inject(leader: Int) -> ClusterFault {
        var kinds: [ClusterFault.Kind] = [.killLeader, .stopLeader, .stepDown]
        let followers = nodes.filter { $0.index != leader && $0.process != nil }
        if !followers.isEmpty { kinds.append(.killFollower) }
        if members.count == 3 && members.allSatisfy(\.isRunning) { kinds.append(.killEtcd) }
        let kind = kinds[Int(random.next() % UInt64(kinds.count))]
        let target = nodes[leader]
        let at = now
        switch kind {
        case .killLeader:
            target.stop(SIGKILL, ports: ports)
            return ClusterFault(kind: kind, subject: target.name.rawValue, atMicroseconds: at)
        case .stopLeader:
            target.signal(SIGSTOP)
            if let pid = target.process?.pid { StoppedProcess.waitUntilStopped(pid) }
            usleep(UInt32(ClusterOptions.pausePastLeaseMilliseconds) * 1_000)
            target.signal(SIGCONT)
            return ClusterFault(kind: kind, subject: target.name.rawValue, atMicroseconds: at)
        case .killFollower:
            let victim = followers[Int(random.next() % UInt64(followers.count))]
            victim.stop(SIGKILL, ports: ports)
            return ClusterFault(kind: kind, subject: victim.name.rawValue, atMicroseconds: at)
        case .stepDown:
            let answer = target.port.flatMap {
                try? request(
                    port: $0, "POST", "/v1/cluster/step-down", key: ClusterOptions.adminKey, timeout: .seconds(3))
            }
            let outcome = answer.map { String($0.status) } ?? "no answer"
            return ClusterFault(kind: kind, subject: "\(target.name.rawValue) (\(outcome))", atMicroseconds: at)
        case .killEtcd:
            let victim = members[Int(random.next() % UInt64(members.count))]
            victim.kill(SIGKILL)
            return ClusterFault(kind: kind, subject: victim.name, atMicroseconds: at)
        }
    }

    // MARK: The end

    /// Starts everything that is down and waits until every node applied
    /// what the leader committed; returns the leader.
    private func settle() throws -> Int {
        let deadline = ContinuousClock.now + ClusterOptions.settleLimit
        while ContinuousClock.now < deadline {
            for member in members where !member.isRunning {
                try? member.start(initialCluster: initialCluster)
            }
            restartWhatIsDown()
            if nodes.allSatisfy({ $0.process != nil }), let leader = try? waitForLeader(within: .seconds(5)),
                let committed = status(leader)?["committed_lsn"]?.intValue,
                nodes.allSatisfy({ (status($0.index)?["applied_lsn"]?.intValue ?? -1) >= committed })
            {
                return leader
            }
            usleep(200_000)
        }
        throw LoadError("the cluster did not settle within \(ClusterOptions.settleLimit) (logs in \(directory))")
    }

    /// `GET /v1/cluster` of node `index`.
    private func status(_ index: Int) -> JSONValue? {
        guard let port = nodes[index].port,
            let answer = try? get(port: port, "/v1/cluster", key: ClusterOptions.adminKey, timeout: .seconds(3)),
            answer.status == 200
        else { return nil }
        return try? JSONReader.parse(answer.body)
    }

    /// Every node's export, whole feed and won epochs, read again until the exports agree on one cursor.
    private func finalState(leader: Int) throws -> ClusterFinalState {
        var final = ClusterFinalState(nodes: [])
        for _ in 0..<ClusterOptions.finalReadAttemptsMax {
            final.nodes = try nodes.map { node in try finalNode(node) }
            if Set(final.nodes.map { $0.exportCursor?.rawValue ?? 0 }).count == 1 { return final }
            usleep(500_000)
        }
        return final
    }

    private func finalNode(_ node: ClusterRoostNode) throws -> ClusterFinalNode {
        guard let port = node.port else { throw LoadError("\(node.name) is down at the end") }
        let export = try readable { () throws(LoadError) in
            try self.get(port: port, "/v1/devices/export", key: self.key, timeout: .seconds(120))
        }
        var feed: [ClusterChange] = []
        var after: ClusterPosition? = nil
        for _ in 0..<ClusterFeedFollower.catchUpPagesMax {
            let path = "/v1/changes?limit=\(ClusterFeedFollower.pageLimit)" + (after.map { "&after=\($0)" } ?? "")
            let answer = try readable { () throws(LoadError) in
                try self.get(port: port, path, key: self.key, timeout: .seconds(30))
            }
            let page = try ClusterChange.parsePage(answer.body)
            feed += page.changes
            after = page.next
            if page.changes.isEmpty { break }
        }
        return ClusterFinalNode(
            node: node.name, exportBody: export.body,
            exportCursor: ClusterPosition(cursor: export.header("Roost-Cursor")),
            feed: feed, electedEpochs: node.logEvents().elected)
    }

    /// Retries a read answered 503 (a follower still within its lag); any other non-200 is an error.
    private func readable(_ read: () throws(LoadError) -> LoopbackResponse) throws(LoadError) -> LoopbackResponse {
        var answer = try read()
        for _ in 0..<ClusterOptions.finalReadAttemptsMax where answer.status == 503 {
            usleep(200_000)
            answer = try read()
        }
        guard answer.status == 200 else {
            throw LoadError("a final read answered \(answer.status): \(String(answer.bodyText.prefix(300)))")
        }
        return answer
    }

    // MARK: HTTP

    private func get(port: UInt16, _ path: String, key: String?, timeout: Duration) throws(LoadError)
        -> LoopbackResponse
    {
        try request(port: port, "GET", path, key: key, timeout: timeout)
    }

    /// One request on a new connection.
    private func request(port: UInt16, _ method: String, _ path: String, key: String?, timeout: Duration)
        throws(LoadError) -> LoopbackResponse
    {
        var text = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        if let key { text += "Authorization: Bearer \(key)\r\n" }
        text += method == "POST" ? "Content-Length: 0\r\n\r\n" : "\r\n"
        do {
            let connection = try LoopbackConnection(port: port)
            defer { connection.close() }
            try connection.send(text)
            return try connection.readResponse(timeout: timeout)
        } catch {
            throw LoadError("\(method) \(path) on port \(port): \(error)")
        }
    }
}
