import Glibc
import RoostCluster
import RoostJSON
import RoostPlatform
import RoostTesting
import Synchronization
import Testing

/// One etcd member and `roost serve --cluster` processes on loopback (spec
/// §13): the real binary, killed and paused for real.
final class ClusterHarness {
    static let name = "systest"
    /// The lease of every node: failover within about a second (spec §13.5).
    static let leaseTTLSeconds = 1
    /// The longest a test waits for a leader, a catch-up or an exit: far
    /// beyond spec §13.5's 2 s, for a loaded CI machine.
    static let waitLimit = Duration.seconds(20)

    let etcd: EtcdProcess
    let directory: String
    private(set) var nodes: [Int: RoostProcess] = [:]
    /// `--lease-ttl-s` of the nodes started from now on.
    var leaseTTLSeconds = ClusterHarness.leaseTTLSeconds
    /// More flags for the nodes started from now on.
    var extraArguments: [String] = []

    init() throws {
        etcd = try EtcdProcess.start()
        directory = try TemporaryDirectory.make(prefix: "roost-cluster")
        let made = OperatorCLITests.run(
            ["cluster", "init", "--etcd", etcd.clientURL, "--cluster", Self.name], in: directory)
        guard made.code == 0 else { throw ClusterTestFailure("cluster init: \(made.code) \(made.err)") }
    }

    deinit {
        for (_, process) in nodes { process.stop(signal: SIGKILL) }
        etcd.stop()
        TemporaryDirectory.remove(directory)
    }

    func dataDirectory(_ index: Int) -> String { directory + "/n\(index)" }

    func arguments(_ index: Int, cluster: String = ClusterHarness.name) -> [String] {
        [
            "serve", "--listen", "127.0.0.1:0", "--data", dataDirectory(index), "--fsync", "always", "--shards", "2",
            "--cluster", cluster, "--node-id", "n\(index)", "--etcd", etcd.clientURL,
            "--lease-ttl-s", String(leaseTTLSeconds),
        ] + extraArguments
    }

    /// Starts node `index` (its directory kept across restarts) and waits for its listening line.
    @discardableResult
    func start(_ index: Int) throws -> RoostProcess {
        precondition(nodes[index] == nil, "node \(index) runs already")
        let process = try RoostProcess(
            binary: RoostProcess.builtProduct("roost"), arguments: arguments(index),
            environment: ["ROOST_ADMIN_KEY=\(ServeTests.adminKey)"], notInherited: [],
            standardError: .appended(directory + "/n\(index).log"))
        nodes[index] = process
        return process
    }

    func port(_ index: Int) -> UInt16 { nodes[index]!.port }

    /// Kills node `index` with `signal` and returns its exit code.
    @discardableResult
    func stop(_ index: Int, signal: Int32) -> Int32 {
        let code = nodes[index]!.stop(signal: signal)
        nodes[index] = nil
        return code
    }

    /// Waits for node `index` to exit on its own; returns its exit code.
    func waitForExit(_ index: Int) -> Int32? {
        let code = nodes[index]!.waitForExit(within: Self.waitLimit)
        if code != nil { nodes[index] = nil }
        return code
    }

    /// Forgets a process the test stopped with SIGSTOP and will wait for itself.
    func process(_ index: Int) -> RoostProcess { nodes[index]! }

    /// `GET /v1/cluster` of node `index`.
    func status(_ index: Int) throws -> JSONValue {
        let answer = try ServeTests.request(port(index), "GET", "/v1/cluster", key: ServeTests.adminKey)
        guard answer.status == 200 else { throw ClusterTestFailure("/v1/cluster of n\(index): \(answer.status)") }
        return try JSONReader.parse(answer.body)
    }

    /// The running node whose `/readyz` is 200 (the leader taking writes), waiting for one.
    func leader(excluding excluded: Set<Int> = []) throws -> Int {
        var found: Int?
        let seen = HTTPAbuseSystemTests.eventually(within: Self.waitLimit) {
            for index in nodes.keys.sorted() where !excluded.contains(index) {
                if (try? ServeTests.request(port(index), "GET", "/readyz"))?.status == 200 {
                    found = index
                    return true
                }
            }
            return false
        }
        guard seen, let found else { throw ClusterTestFailure("no node leads within \(Self.waitLimit)") }
        return found
    }

    /// Waits until every running node applied what the leader committed.
    func waitForConvergence(leader: Int) throws {
        let committed = try status(leader)["committed_lsn"]?.intValue ?? -1
        for index in nodes.keys.sorted() where index != leader {
            let caughtUp = HTTPAbuseSystemTests.eventually(within: Self.waitLimit) {
                ((try? status(index))?["applied_lsn"]?.intValue ?? -1) >= committed
            }
            guard caughtUp else { throw ClusterTestFailure("n\(index) did not reach LSN \(committed)") }
        }
    }

    /// The export of node `index` (NDJSON body).
    func export(_ index: Int, key: String) throws -> String {
        let answer = try ServeTests.request(port(index), "GET", "/v1/devices/export", key: key)
        guard answer.status == 200 else { throw ClusterTestFailure("export of n\(index): \(answer.status)") }
        return answer.bodyText
    }

    /// The last lines of node `index`'s log, for a failure's message.
    func logTail(_ index: Int) -> String {
        let bytes = (try? DurableFile.readIfExists(path: directory + "/n\(index).log", limitBytes: 1 << 22)) ?? nil
        return String(String(decoding: bytes ?? [], as: UTF8.self).suffix(3000))
    }
}

struct ClusterTestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Spec §13 against the real binary: three nodes on one etcd member.
@Suite(
    "roost serve --cluster (system)", .serialized,
    .enabled(if: EtcdTestGate.enabled, "no /usr/bin/etcd: run `make test-deps` (make test runs this)"))
struct ClusterSystemTests {
    static func register(
        _ port: UInt16, key: String, token: String, person: String, idempotencyKey: String? = nil
    ) throws -> LoopbackResponse {
        let body = #"{"platform":"ios","token":"\#(token)","external_id":"\#(person)"}"#
        if let idempotencyKey {
            return try IdempotencySystemTests.request(
                port, "/v1/devices", key: key, idempotencyKey: idempotencyKey, body: body)
        }
        return try ServeTests.request(port, "POST", "/v1/devices", key: key, body: body)
    }

    /// A GET with extra header lines (`Name: value` each).
    static func get(_ port: UInt16, _ path: String, key: String, headers: [String]) throws -> LoopbackResponse {
        let connection = try LoopbackConnection(port: port)
        var head = "GET \(path) HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer \(key)\r\n"
        for header in headers { head += header + "\r\n" }
        try connection.send(head + "\r\n")
        return try connection.readResponse(timeout: .seconds(10))
    }

    @Test(
        "writes on the leader reach every follower and a node that joins empty; followers refuse writes naming the leader, answer reads and /readyz?reads=1; exports are byte-identical"
    )
    func leaderAndFollowers() throws {
        let cluster = try ClusterHarness()
        try cluster.start(1)
        try cluster.start(2)
        let leader = try cluster.leader()
        let follower = leader == 1 ? 2 : 1
        let key = try CrashRecoveryTests.setUp(port: cluster.port(leader))
        var lastPosition = ""
        for slot in 0..<20 {
            let answer = try Self.register(
                cluster.port(leader), key: key, token: CrashRecoveryTests.token(client: 1, slot: slot),
                person: "user_\(slot % 5)")
            #expect(answer.status == 201, "\(answer.bodyText)")
            #expect(answer.header("Roost-Node") == "n\(leader)")
            #expect(answer.header("Roost-Position")?.hasPrefix("c") == true)
            lastPosition = answer.header("Roost-Position") ?? ""
        }
        // Read-your-writes on a follower (spec §13.3): it answers once it applied the write's position.
        let own = try Self.get(
            cluster.port(follower), "/v1/people/user_1", key: key, headers: ["Roost-Min-Position: \(lastPosition)"])
        #expect(own.status == 200, "\(own.bodyText)")
        #expect(try JSONReader.parse(own.body)["devices"]?.arrayValue?.count == 4)
        let unreached = try Self.get(
            cluster.port(follower), "/v1/people/user_1", key: key, headers: ["Roost-Min-Position: c00000000ffffffff"])
        #expect(unreached.status == 503)
        #expect(try JSONReader.parse(unreached.body)["error"]?["code"]?.stringValue == "position_not_reached")
        let malformed = try Self.get(
            cluster.port(follower), "/v1/people/user_1", key: key, headers: ["Roost-Max-Staleness-Ms: soon"])
        #expect(malformed.status == 400)
        // Positions count the app's own records (spec §13.1, issue 24 L-2):
        // another app's writes move none of them, on the leader or a follower.
        _ = try ServeTests.request(
            cluster.port(leader), "POST", "/v1/apps", key: ServeTests.adminKey, body: #"{"name":"other"}"#)
        let otherKey = try #require(
            try JSONReader.parse(
                try ServeTests.request(
                    cluster.port(leader), "POST", "/v1/apps/2/keys", key: ServeTests.adminKey,
                    body: #"{"kind":"secret","capabilities":["devices:write","devices:read"]}"#
                ).body)["key"]?.stringValue)
        var otherPosition = ""
        for slot in 0..<10 {
            let answer = try Self.register(
                cluster.port(leader), key: otherKey, token: CrashRecoveryTests.token(client: 2, slot: slot),
                person: "other_\(slot)")
            #expect(answer.status == 201, "\(answer.bodyText)")
            otherPosition = answer.header("Roost-Position") ?? ""
        }
        let quiet = try Self.get(cluster.port(leader), "/v1/stats", key: key, headers: [])
        #expect(quiet.header("Roost-Position") == lastPosition, "app 2's writes moved app 1's position")
        let quietFollower = try Self.get(
            cluster.port(follower), "/v1/stats", key: otherKey, headers: ["Roost-Min-Position: \(otherPosition)"])
        #expect(quietFollower.status == 200 && quietFollower.header("Roost-Position") == otherPosition)
        // A streamed answer (the export) carries the cluster's headers too, with the app's position.
        let streamed = try Self.get(cluster.port(follower), "/v1/devices/export", key: otherKey, headers: [])
        #expect(streamed.status == 200 && streamed.header("Roost-Node") == "n\(follower)")
        #expect(streamed.header("Roost-Position") == otherPosition && streamed.header("Roost-Lag-Ms") != nil)
        let operatorPosition = try ServeTests.request(
            cluster.port(leader), "GET", "/v1/cluster", key: ServeTests.adminKey)
        #expect(
            (operatorPosition.header("Roost-Position").flatMap { UInt64($0.dropFirst(), radix: 16) } ?? 0)
                > (UInt64(lastPosition.dropFirst(), radix: 16) ?? .max), "the operator key sees the raw LSN")
        // A node that joins with an empty directory reads the group log from
        // its start, a page at a time, and serves only once it read to the end.
        let committedBefore = try #require(try cluster.status(leader)["committed_lsn"]?.intValue)
        try cluster.start(3)
        let joinedAt = try #require(try cluster.status(3)["applied_lsn"]?.intValue)
        #expect(joinedAt >= committedBefore, "n3 served at LSN \(joinedAt), the group log held \(committedBefore)")
        try cluster.waitForConvergence(leader: leader)

        let leaderStatus = try cluster.status(leader)
        #expect(leaderStatus["role"]?.stringValue == "leader")
        #expect(leaderStatus["cluster"]?.stringValue == ClusterHarness.name)
        let leaderURL = try #require(leaderStatus["leader"]?["url"]?.stringValue)
        #expect(leaderURL == "http://127.0.0.1:\(cluster.port(leader))")
        let followerStatus = try cluster.status(follower)
        #expect(followerStatus["role"]?.stringValue == "follower")
        #expect(followerStatus["epoch"]?.intValue == leaderStatus["epoch"]?.intValue)
        #expect(followerStatus["leader"]?["node"]?.stringValue == "n\(leader)")

        let leaderMetrics = try ServeTests.request(cluster.port(leader), "GET", "/metrics", key: ServeTests.adminKey)
        #expect(leaderMetrics.bodyText.contains(#"roost_cluster_role{role="leader"} 1"#))
        #expect(leaderMetrics.bodyText.contains("roost_cluster_elections_total 1"))
        #expect(leaderMetrics.bodyText.contains("roost_cluster_commit_seconds_count"))
        #expect(!leaderMetrics.bodyText.contains("roost_cluster_commit_seconds_count 0\n"))
        let followerMetrics = try ServeTests.request(
            cluster.port(follower), "GET", "/metrics", key: ServeTests.adminKey)
        #expect(followerMetrics.bodyText.contains(#"roost_cluster_role{role="follower"} 1"#))
        #expect(followerMetrics.bodyText.contains("roost_cluster_epoch \(leaderStatus["epoch"]?.intValue ?? -1)"))

        let reference = try cluster.export(leader, key: key)
        #expect(reference.split(separator: "\n").count == 20)
        for index in [1, 2, 3] where index != leader {
            #expect(try cluster.export(index, key: key) == reference, "n\(index)'s export differs from the leader's")
            let person = try ServeTests.request(cluster.port(index), "GET", "/v1/people/user_1", key: key)
            #expect(person.status == 200)
            #expect(person.header("Roost-Lag-Ms") != nil)
            // Spec §13.4: refused, naming the leader; nothing applied.
            let refused = try Self.register(
                cluster.port(index), key: key, token: CrashRecoveryTests.token(client: 9, slot: index), person: "x")
            #expect(refused.status == 503)
            #expect(try JSONReader.parse(refused.body)["error"]?["code"]?.stringValue == "not_leader")
            #expect(refused.header("Roost-Leader") == leaderURL)
            #expect(refused.header("Retry-After") == "1")
            let stepDown = try ServeTests.request(
                cluster.port(index), "POST", "/v1/cluster/step-down", key: ServeTests.adminKey)
            #expect(stepDown.status == 409)
            #expect(try ServeTests.request(cluster.port(index), "GET", "/readyz").status == 503)
            #expect(try ServeTests.request(cluster.port(index), "GET", "/readyz?reads=1").status == 200)
        }
        #expect(try cluster.export(leader, key: key) == reference, "a refused write changed the leader")
        let stale = try ServeTests.request(cluster.port(follower), "GET", "/v1/cluster", key: nil)
        #expect(stale.status == 401)
    }

    @Test(
        "kill -9 of the leader under writes: another node takes writes, no acknowledged write is lost, an idempotent retry across the failover gets one device, and the old leader rejoins and converges"
    )
    func killTheLeader() throws {
        let cluster = try ClusterHarness()
        for index in 1...3 { try cluster.start(index) }
        var leader = try cluster.leader()
        let key = try CrashRecoveryTests.setUp(port: cluster.port(leader))
        var acknowledged: [String] = []
        var killedLeader: Int?
        var killedAt: ContinuousClock.Instant?
        var failover: Duration?
        let clock = ContinuousClock()
        var slot = 0
        while acknowledged.count < 60 {
            if acknowledged.count == 30, killedLeader == nil {
                killedLeader = leader
                killedAt = clock.now
                #expect(cluster.stop(leader, signal: SIGKILL) == 128 + SIGKILL)
            }
            let token = CrashRecoveryTests.token(client: 2, slot: slot)
            // The same Idempotency-Key on every try of one token (spec §13.5, 3).
            let answer = cluster.nodes[leader].flatMap { process in
                try? Self.register(
                    process.port, key: key, token: token, person: "user_\(slot % 7)", idempotencyKey: "write-\(slot)")
            }
            if let answer, answer.status == 201 || answer.status == 200 {
                acknowledged.append(token)
                if let killedAt, failover == nil { failover = clock.now - killedAt }
                slot += 1
                continue
            }
            if let answer { #expect(answer.status == 503, "\(answer.status) \(answer.bodyText)") }
            leader = try cluster.leader(excluding: killedLeader.map { [$0] } ?? [])
        }
        let took = try #require(failover)
        #expect(took < ClusterHarness.waitLimit)
        let old = try #require(killedLeader)
        try cluster.start(old)
        // A restarted node applies what comes after the records it recovered.
        for extra in 0..<5 {
            let token = CrashRecoveryTests.token(client: 2, slot: 1_000 + extra)
            let answer = try Self.register(cluster.port(leader), key: key, token: token, person: "user_late")
            #expect(answer.status == 201)
            acknowledged.append(token)
        }
        try cluster.waitForConvergence(leader: leader)
        let reference = try cluster.export(leader, key: key)
        let tokens = Set(
            try reference.split(separator: "\n").compactMap {
                try JSONReader.parse(Array($0.utf8))["token"]?.stringValue
            })
        #expect(tokens == Set(acknowledged), "acknowledged \(acknowledged.count), exported \(tokens.count)")
        for index in 1...3 where index != leader {
            #expect(try cluster.export(index, key: key) == reference, "n\(index) differs: \(cluster.logTail(index))")
        }
    }

    @Test(
        "a leader paused past its lease acknowledges nothing once resumed and exits 75; step-down hands over and exits 75"
    )
    func pausedLeaderAndStepDown() throws {
        let cluster = try ClusterHarness()
        for index in 1...3 { try cluster.start(index) }
        let first = try cluster.leader()
        let key = try CrashRecoveryTests.setUp(port: cluster.port(first))
        let paused = cluster.process(first)
        kill(paused.pid, SIGSTOP)
        // SIGSTOP is delivered asynchronously: wait until the process is stopped
        // (state T), or it may still take the write below before it stops.
        #expect(
            HTTPAbuseSystemTests.eventually(within: ClusterHarness.waitLimit) { StoppedProcess.isStopped(paused.pid) })
        // Sent while it is stopped: the kernel queues it; the answer comes after the resume.
        let connection = try LoopbackConnection(port: cluster.port(first))
        let body = #"{"platform":"ios","token":"\#(CrashRecoveryTests.token(client: 3, slot: 1))"}"#
        try connection.send(
            "POST /v1/devices HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer \(key)\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        )
        let second = try cluster.leader(excluding: [first])
        let written = try Self.register(
            cluster.port(second), key: key, token: CrashRecoveryTests.token(client: 3, slot: 2), person: "user_1")
        #expect(written.status == 201)
        kill(paused.pid, SIGCONT)
        let late = try? connection.readResponse(timeout: ClusterHarness.waitLimit)
        #expect(late.map { $0.status >= 500 } ?? true, "the deposed leader answered \(late?.status ?? 0)")
        #expect(cluster.waitForExit(first) == 75, "\(cluster.logTail(first))")
        let tokens = try cluster.export(second, key: key)
        #expect(!tokens.contains(CrashRecoveryTests.token(client: 3, slot: 1)))
        #expect(tokens.contains(CrashRecoveryTests.token(client: 3, slot: 2)))

        let stepped = try ServeTests.request(
            cluster.port(second), "POST", "/v1/cluster/step-down", key: ServeTests.adminKey)
        #expect(stepped.status == 200, "\(stepped.bodyText)")
        #expect(try JSONReader.parse(stepped.body)["stepped_down"]?.boolValue == true)
        #expect(cluster.waitForExit(second) == 75, "\(cluster.logTail(second))")
        let third = try cluster.leader()
        #expect(third != first && third != second)
        // Started again, a deposed node joins as a follower with nothing its log should not hold.
        try cluster.start(first)
        try cluster.start(second)
        try cluster.waitForConvergence(leader: third)
        let reference = try cluster.export(third, key: key)
        for index in [first, second] {
            #expect(try cluster.export(index, key: key) == reference, "\(cluster.logTail(index))")
        }
    }

    @Test(
        "a leader whose disk fills (ENOSPC injected into its log's writes) gives up its lease and exits 1: another node takes writes, nothing acknowledged is lost",
        .enabled(if: InjectedFault.isAvailable))
    func leaderDiskFull() throws {
        let cluster = try ClusterHarness()
        for index in 1...3 { try cluster.start(index) }
        let first = try cluster.leader()
        let key = try CrashRecoveryTests.setUp(port: cluster.port(first))
        var acknowledged: [String] = []
        for slot in 0..<5 {
            let token = CrashRecoveryTests.token(client: 6, slot: slot)
            #expect(
                try Self.register(cluster.port(first), key: key, token: token, person: "user_\(slot)").status == 201)
            acknowledged.append(token)
        }
        let (fault, attached) = try InjectedFault.start(
            pid: cluster.process(first).pid, options: "-e trace=pwrite64 -e inject=pwrite64:error=ENOSPC",
            scratch: cluster.directory + "/strace.pid")
        defer { fault.stop() }
        #expect(attached)
        let refused = try Self.register(
            cluster.port(first), key: key, token: CrashRecoveryTests.token(client: 6, slot: 100), person: "user_x")
        #expect(refused.status == 503, "\(refused.status) \(refused.bodyText)")
        // Without its lease revoked, no other node could lead while this one lived.
        let second = try cluster.leader(excluding: [first])
        #expect(cluster.waitForExit(first) == 1, "\(cluster.logTail(first))")
        for slot in 5..<10 {
            let token = CrashRecoveryTests.token(client: 6, slot: slot)
            #expect(
                try Self.register(cluster.port(second), key: key, token: token, person: "user_\(slot)").status == 201)
            acknowledged.append(token)
        }
        try cluster.waitForConvergence(leader: second)
        let reference = try cluster.export(second, key: key)
        for token in acknowledged { #expect(reference.contains(token), "acknowledged \(token) is gone") }
        for index in 1...3 where index != first && index != second {
            #expect(try cluster.export(index, key: key) == reference, "n\(index) differs: \(cluster.logTail(index))")
        }
    }

    @Test("serve --cluster refuses (exit 2, one line) a cluster not initialised and a directory of another cluster")
    func refusals() throws {
        let cluster = try ClusterHarness()
        var arguments = cluster.arguments(1, cluster: "nosuch")
        let missing = OperatorCLITests.run(arguments, in: cluster.directory)
        #expect(missing.code == 2)
        #expect(missing.err.contains("was not initialised"), "\(missing.err)")
        try cluster.start(1)
        _ = try cluster.leader()
        // SIGTERM on a leader: it steps down (lease revoked) and drains; exit 0.
        #expect(cluster.stop(1, signal: SIGTERM) == 0, "\(cluster.logTail(1))")
        let other = OperatorCLITests.run(
            ["cluster", "init", "--etcd", cluster.etcd.clientURL, "--cluster", "other"], in: cluster.directory)
        #expect(other.code == 0, "\(other.err)")
        arguments = cluster.arguments(1, cluster: "other")
        let foreign = OperatorCLITests.run(arguments, in: cluster.directory)
        #expect(foreign.code == 2)
        #expect(foreign.err.contains("belongs to cluster '\(ClusterHarness.name)'"), "\(foreign.err)")
        let again = OperatorCLITests.run(
            ["cluster", "init", "--etcd", cluster.etcd.clientURL, "--cluster", "other"], in: cluster.directory)
        #expect(again.code == 2)
    }

    @Test(
        "with etcd paused, the leader's write is 503 unavailable within --etcd-timeout-ms, followers answer reads within Roost-Max-Staleness-Ms and 503 stale_replica beyond --read-lag-ms; etcd back within the lease, the leader goes on"
    )
    func etcdPaused() throws {
        let cluster = try ClusterHarness()
        // A lease far longer than the etcd timeout (the 503 comes from the
        // timeout, not from a deposition) and than the pause below (about 4 s:
        // the write's timeout, then a follower's lag past --read-lag-ms).
        cluster.leaseTTLSeconds = 12
        for index in 1...2 { try cluster.start(index) }
        let leader = try cluster.leader()
        let follower = leader == 1 ? 2 : 1
        let key = try CrashRecoveryTests.setUp(port: cluster.port(leader))
        try cluster.waitForConvergence(leader: leader)
        cluster.etcd.pause()
        defer { cluster.etcd.resume() }
        let write = try Self.register(
            cluster.port(leader), key: key, token: CrashRecoveryTests.token(client: 4, slot: 1), person: "user_1")
        #expect(write.status == 503, "\(write.status) \(write.bodyText)")
        #expect(try JSONReader.parse(write.body)["error"]?["code"]?.stringValue == "unavailable")
        #expect(cluster.process(leader).waitForExit(within: .zero) == nil, "the 503 came from the deposition")
        let staleSeen = HTTPAbuseSystemTests.eventually(within: ClusterHarness.waitLimit) {
            (try? ServeTests.request(cluster.port(follower), "GET", "/v1/stats", key: key))?.status == 503
        }
        #expect(staleSeen)
        let refused = try ServeTests.request(cluster.port(follower), "GET", "/v1/stats", key: key)
        #expect(try JSONReader.parse(refused.body)["error"]?["code"]?.stringValue == "stale_replica")
        #expect(try ServeTests.request(cluster.port(follower), "GET", "/readyz?reads=1").status == 503)
        let accepted = try Self.get(
            cluster.port(follower), "/v1/stats", key: key, headers: ["Roost-Max-Staleness-Ms: 3600000"])
        #expect(accepted.status == 200, "\(accepted.bodyText)")
        cluster.etcd.resume()
        // Spec §13.7: etcd back, the leader goes on — or, if its lease ran out
        // meanwhile (a loaded machine can stretch the pause past it), it exits
        // 75 and another node takes writes.
        var exited: Int32?
        var statuses: [String] = []
        var slot = 1
        let resumed = HTTPAbuseSystemTests.eventually(within: ClusterHarness.waitLimit) {
            if exited == nil, let code = cluster.process(leader).waitForExit(within: .zero) { exited = code }
            let port = exited == nil ? cluster.port(leader) : cluster.port(follower)
            // A new token each try: retries of one token meet its registration rate (429).
            slot += 1
            let answer = try? Self.register(
                port, key: key, token: CrashRecoveryTests.token(client: 4, slot: slot), person: "user_2")
            statuses.append(answer.map { "\($0.status) \($0.bodyText.prefix(120))" } ?? "no answer")
            return answer?.status == 201
        }
        let status = (try? ServeTests.request(cluster.port(leader), "GET", "/v1/cluster", key: ServeTests.adminKey))?
            .bodyText
        #expect(
            resumed,
            "answers \(statuses.suffix(4)); leader's /v1/cluster \(status ?? "none"); \(cluster.logTail(leader))")
        #expect(exited == nil || exited == 75, "the leader exited \(exited ?? 0)")
        guard exited == nil else { return }
        let fresh = HTTPAbuseSystemTests.eventually(within: ClusterHarness.waitLimit) {
            (try? ServeTests.request(cluster.port(follower), "GET", "/readyz?reads=1"))?.status == 200
        }
        #expect(fresh)
    }

    @Test(
        "the leader purges what every live member checkpointed and compacts etcd; a node that joins empty after the purge re-seeds from a live node's snapshot and converges"
    )
    func purgeAndReseed() throws {
        let cluster = try ClusterHarness()
        // A snapshot (and so a checkpoint) every second while writes come.
        cluster.extraArguments = ["--snapshot-log-bytes", "1"]
        for index in 1...3 { try cluster.start(index) }
        let leader = try cluster.leader()
        let key = try CrashRecoveryTests.setUp(port: cluster.port(leader))
        var slot = 0
        let purged = HTTPAbuseSystemTests.eventually(within: ClusterHarness.waitLimit) {
            for _ in 0..<5 {
                _ = try? Self.register(
                    cluster.port(leader), key: key, token: CrashRecoveryTests.token(client: 5, slot: slot),
                    person: "user_\(slot % 3)")
                slot += 1
            }
            let first = (try? cluster.status(leader))?["log"]?["first_position"]?.stringValue ?? ""
            return first > "c0000000000000001"
        }
        #expect(purged, "the group log was never purged: \(cluster.logTail(leader))")
        // etcd's history before the purge is compacted away.
        let client = EtcdClient(endpoints: try EtcdEndpoint.parseList(cluster.etcd.clientURL))
        defer { client.close() }
        #expect(throws: EtcdClientError.self) {
            try client.range(.prefix(Array("/roost/".utf8)), revision: EtcdRevision(2))
        }
        // A new node: the group log no longer starts at 1, so it installs a live node's snapshot.
        do {
            try cluster.start(4)
        } catch {
            Issue.record("n4 did not start: \(error)\n\(cluster.logTail(4))")
            return
        }
        do {
            try cluster.waitForConvergence(leader: leader)
        } catch {
            Issue.record("n4 did not converge: \(error)\n\(cluster.logTail(4))")
            return
        }
        #expect(cluster.logTail(4).contains("cluster.reseeded"), "\(cluster.logTail(4))")
        let reference = try cluster.export(leader, key: key)
        #expect(reference.split(separator: "\n").count == slot)
        #expect(try cluster.export(4, key: key) == reference)
    }

    @Test(
        "past --log-retain-bytes the leader purges through the furthest live checkpoint, beyond a live member that never checkpointed; that member, at the group log's end, goes on"
    )
    func retentionPastAMemberBehind() throws {
        let cluster = try ClusterHarness()
        // n1 checkpoints every second while writes come; n2 keeps the default
        // --snapshot-log-bytes (256 MiB), so its checkpoint stays behind.
        cluster.extraArguments = ["--snapshot-log-bytes", "1", "--log-retain-bytes", "4096"]
        try cluster.start(1)
        let leader = try cluster.leader()
        cluster.extraArguments = ["--log-retain-bytes", "4096"]
        try cluster.start(2)
        let key = try CrashRecoveryTests.setUp(port: cluster.port(leader))
        func number(_ position: String?) -> UInt64 { position.flatMap { UInt64($0.dropFirst(), radix: 16) } ?? 0 }
        var slot = 0
        var behind: UInt64 = 0
        var firstKept: UInt64 = 0
        let purged = HTTPAbuseSystemTests.eventually(within: ClusterHarness.waitLimit) {
            for _ in 0..<5 {
                _ = try? Self.register(
                    cluster.port(leader), key: key, token: CrashRecoveryTests.token(client: 6, slot: slot),
                    person: "user_\(slot % 3)")
                slot += 1
            }
            guard let status = try? cluster.status(leader) else { return false }
            behind = number(
                status["members"]?.arrayValue?.first { $0["node"]?.stringValue == "n2" }?["checkpoint_position"]?
                    .stringValue)
            firstKept = number(status["log"]?["first_position"]?.stringValue)
            // Without retention the purge stops at the batch holding n2's checkpoint + 1.
            return firstKept > behind + 1
        }
        #expect(purged, "first kept \(firstKept), n2's checkpoint \(behind): \(cluster.logTail(leader))")
        try cluster.waitForConvergence(leader: leader)
        #expect(try cluster.export(2, key: key) == cluster.export(leader, key: key))
        #expect(!cluster.logTail(2).contains("cluster.reseeded"), "n2 was at the group log's end: no re-seed")
    }
}
