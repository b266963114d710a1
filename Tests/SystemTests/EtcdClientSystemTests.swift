import Glibc
import RoostCluster
import RoostPlatform
import RoostTesting
import Testing

/// Whether the etcd suite runs: with `ROOST_TEST_PYTHON` (make test) or `CI`
/// set it always runs, and a missing etcd fails it; a plain `swift test`
/// without etcd skips it (as the console's browser test does).
enum EtcdTestGate {
    static var enabled: Bool {
        if getenv("ROOST_TEST_PYTHON") != nil || getenv("CI") != nil { return true }
        return EtcdProcess.isInstalled
    }
}

/// `EtcdClient` against a real etcd 3.4 (Debian `etcd-server`), one fresh
/// member per test on free loopback ports. Each etcd 3.4.23 quirk the client
/// relies on is shown on the wire here too (`raw`), so that an etcd upgrade
/// that changes one fails a test by name.
@Suite(
    "EtcdClient against a real etcd 3.4", .serialized,
    .enabled(if: EtcdTestGate.enabled, "no /usr/bin/etcd: run `make test-deps` (make test runs this)"))
struct EtcdClientSystemTests {
    static func key(_ text: String) -> [UInt8] { Array(text.utf8) }

    static func client(_ etcd: EtcdProcess, options: EtcdClientOptions = EtcdClientOptions()) throws -> EtcdClient {
        EtcdClient(endpoints: try EtcdEndpoint.parseList(etcd.clientURL), options: options)
    }

    /// One POST straight to the gateway, for the quirks' wire form.
    static func raw(_ etcd: EtcdProcess, _ path: String, _ body: String) throws -> LoopbackResponse {
        let connection = try LoopbackConnection(port: etcd.clientPort)
        defer { connection.close() }
        try connection.send(
            "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: \(body.utf8.count)\r\n\r\n" + body)
        return try connection.readResponse(timeout: .seconds(5))
    }

    static func put(_ key: [UInt8], _ value: [UInt8], lease: EtcdLeaseID? = nil) -> EtcdRequest {
        .transaction(compares: [], success: [.put(key: key, value: value, lease: lease)], failure: [])
    }

    /// Puts and returns the revision it made.
    @discardableResult
    static func put(_ client: EtcdClient, _ key: String, _ value: String) throws -> EtcdRevision {
        let answer = try client.send(put(Self.key(key), Self.key(value)))
        guard case .transaction(true, let revision, _) = answer else { throw TestFailure("put answered \(answer)") }
        return revision
    }

    static func grant(_ client: EtcdClient, seconds: Int64) throws -> EtcdLeaseID {
        let answer = try client.send(.grantLease(ttlSeconds: seconds))
        guard case .lease(let id, let ttl) = answer, ttl == seconds else {
            throw TestFailure("grant answered \(answer)")
        }
        return id
    }

    struct TestFailure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    // MARK: - Key-value

    /// The system calls a thread blocked in poll(2) can be in (Linux numbers).
    #if arch(x86_64)
        static let pollSystemCalls: Set<Int> = [7, 271]  // poll, ppoll
    #elseif arch(arm64)
        static let pollSystemCalls: Set<Int> = [73]  // ppoll
    #endif

    /// The calling thread's path under /proc (`/proc/PID/task/TID`).
    static func currentThreadPath() -> String {
        var target = [CChar](repeating: 0, count: 64)
        let length = readlink("/proc/thread-self", &target, target.count - 1)
        precondition(length > 0, "cannot read /proc/thread-self: errno \(errno)")
        return "/proc/" + String(decoding: target.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Whether the thread at `threadPath` (`currentThreadPath()`) is inside
    /// poll(2): its `syscall` file names the system call it is blocked in.
    static func isBlockedInPoll(_ threadPath: String) -> Bool {
        guard let bytes = try? DurableFile.readIfExists(path: threadPath + "/syscall", limitBytes: 4096),
            let number = String(decoding: bytes, as: UTF8.self).split(separator: " ").first.flatMap({ Int($0) })
        else { return false }
        return pollSystemCalls.contains(number)
    }

    @Test("put, range of one key, of a prefix in key order with a limit, an empty range, status; one connection")
    func putAndRange() throws {
        let etcd = try EtcdProcess.start()
        let client = try Self.client(etcd)
        try Self.put(client, "/t/b", "2")
        try Self.put(client, "/t/a", "1")
        let last = try Self.put(client, "/u", "3")
        let one = try client.range(.key(Self.key("/t/a")))
        #expect(one.keyValues.map(\.value) == [Self.key("1")])
        #expect(one.revision == last && one.count == 1 && !one.more)
        let prefix = try client.range(.prefix(Self.key("/t/")))
        #expect(prefix.keyValues.map(\.key) == [Self.key("/t/a"), Self.key("/t/b")])
        #expect(prefix.keyValues[0].version == 1 && prefix.keyValues[0].lease == nil)
        let limited = try client.range(.prefix(Self.key("/t/")), limit: 1)
        #expect(limited.keyValues.count == 1 && limited.more && limited.count == 2)
        // etcd 3.4: an empty range has no `kvs` (and no `count`).
        #expect(try !Self.raw(etcd, "/v3/kv/range", #"{"key":"L25vbmU="}"#).bodyText.contains("kvs"))
        let none = try client.range(.key(Self.key("/none")))
        #expect(none.keyValues.isEmpty && none.count == 0)
        let everything = try client.range(.prefix([]))
        #expect(everything.keyValues.count == 3)
        let status = try client.status()
        #expect(status.leader == status.member && status.version.hasPrefix("3.4."))
        #expect(status.databaseBytes > 0 && status.raftIndex > 0 && status.revision == last && status.errors.isEmpty)
        #expect(client.connectionsOpened == 1, "keep-alive: every request on one connection")
    }

    @Test("a span reads [from, to) in key order with a limit; rangeLast is the span's last key (sort_order DESCEND)")
    func spansAndLastKey() throws {
        let etcd = try EtcdProcess.start()
        let client = try Self.client(etcd)
        for index in 1...5 { try Self.put(client, "/log/\(index)", "v\(index)") }
        let read = EtcdRequest.transaction(
            compares: [],
            success: [
                .range(.span(from: Self.key("/log/2"), to: Self.key("/log/5")), limit: 2),
                .rangeLast(.span(from: Self.key("/log/"), to: Self.key("/log/4"))),
                .rangeLast(.span(from: Self.key("/log/"), to: Self.key("/log/1"))),
            ],
            failure: [])
        guard case .transaction(true, _, let results) = try client.send(read), results.count == 3,
            case .range(let page) = results[0], case .range(let last) = results[1], case .range(let none) = results[2]
        else { throw TestFailure("the read answered otherwise") }
        #expect(page.map(\.key) == [Self.key("/log/2"), Self.key("/log/3")])
        #expect(last.map(\.key) == [Self.key("/log/3")])
        #expect(none.isEmpty)
    }

    @Test("a transaction whose compares fail answers without `succeeded`: read as false, the failure branch's results")
    func transactionFailure() throws {
        let etcd = try EtcdProcess.start()
        let client = try Self.client(etcd)
        let revision = try Self.put(client, "/k", "b")
        let key = Self.key("/k")
        let holding: [EtcdCompare] = [
            EtcdCompare(key: key, .equal, .value(Self.key("b"))), EtcdCompare(key: key, .notEqual, .version(2)),
            EtcdCompare(key: key, .less, .value(Self.key("c"))), EtcdCompare(key: key, .greater, .version(0)),
            EtcdCompare(key: key, .equal, .modRevision(revision)),
            EtcdCompare(key: key, .equal, .createRevision(revision)),
        ]
        let success = try client.send(
            .transaction(compares: holding, success: [.range(.key(key), limit: 0)], failure: []))
        guard case .transaction(true, let seen, let results) = success else {
            Issue.record("compares that hold answered \(success)")
            return
        }
        #expect(seen == revision && results.count == 1)
        let failing: EtcdRequest = .transaction(
            compares: [EtcdCompare(key: key, .greater, .modRevision(revision))],
            success: [.put(key: key, value: [], lease: nil)],
            failure: [.range(.key(key), limit: 0), .delete(.key(Self.key("/absent"))), .delete(.key(key))])
        let failed = try client.send(failing)
        guard case .transaction(false, let after, let branch) = failed else {
            Issue.record("compares that fail answered \(failed)")
            return
        }
        #expect(after == revision.next, "the failure branch's delete wrote one revision")
        guard branch.count == 3, case .range(let found) = branch[0] else {
            Issue.record("failure branch results \(branch)")
            return
        }
        #expect(found.map(\.value) == [Self.key("b")])
        #expect(branch[1] == .deleted(count: 0) && branch[2] == .deleted(count: 1))
        // The wire: no `succeeded` at all when false.
        let wire = try Self.raw(
            etcd, "/v3/kv/txn", #"{"compare":[{"key":"L2s=","target":"VERSION","result":"EQUAL","version":"9"}]}"#)
        #expect(wire.status == 200 && !wire.bodyText.contains("succeeded"))
    }

    @Test("the leader key's create revision fences: a second campaign fails, an old epoch cannot append")
    func createRevisionFence() throws {
        let etcd = try EtcdProcess.start()
        let client = try Self.client(etcd)
        let leader = Self.key("/roost/c/leader")
        func campaign(_ node: String, _ lease: EtcdLeaseID) throws -> EtcdResponse {
            try client.send(
                .transaction(
                    compares: [EtcdCompare(key: leader, .equal, .createRevision(EtcdRevision(0)))],
                    success: [.put(key: leader, value: Self.key(node), lease: lease)],
                    failure: [.range(.key(leader), limit: 1)]))
        }
        func append(_ number: Int, epoch: EtcdRevision) throws -> Bool {
            let answer = try client.send(
                .transaction(
                    compares: [EtcdCompare(key: leader, .equal, .createRevision(epoch))],
                    success: [.put(key: Self.key("/roost/c/log/\(number)"), value: [UInt8(number)], lease: nil)],
                    failure: []))
            guard case .transaction(let succeeded, _, _) = answer else {
                throw TestFailure("append answered \(answer)")
            }
            return succeeded
        }
        let first = try Self.grant(client, seconds: 10)
        guard case .transaction(true, let epoch, _) = try campaign("n1", first) else {
            Issue.record("the first campaign failed")
            return
        }
        let second = try Self.grant(client, seconds: 10)
        let lost = try campaign("n2", second)
        guard case .transaction(false, _, let results) = lost, case .range(let holder) = results.first else {
            Issue.record("the second campaign answered \(lost)")
            return
        }
        #expect(holder.first?.value == Self.key("n1") && holder.first?.createRevision == epoch)
        #expect(holder.first?.lease == first)
        #expect(try append(1, epoch: epoch))
        #expect(try client.send(.revokeLease(first)) != .failed(.leaseNotFound))
        guard case .transaction(true, let newEpoch, _) = try campaign("n2", second) else {
            Issue.record("the campaign after the revoke failed")
            return
        }
        #expect(newEpoch > epoch)
        #expect(try !append(2, epoch: epoch), "the deposed epoch's append is refused")
        #expect(try append(3, epoch: newEpoch))
    }

    // MARK: - Leases

    @Test("grant, keep-alive, revoke; a keep-alive after the revoke answers 200 without TTL and is leaseNotFound")
    func leases() throws {
        let etcd = try EtcdProcess.start()
        let client = try Self.client(etcd)
        let lease = try Self.grant(client, seconds: 5)
        #expect(try client.send(.keepAlive(lease)) == .keptAlive(lease, ttlSeconds: 5))
        #expect(try client.send(Self.put(Self.key("/leased"), [1], lease: lease)) != .failed(.leaseNotFound))
        guard case .revoked(let revision) = try client.send(.revokeLease(lease)) else {
            Issue.record("revoke failed")
            return
        }
        #expect(try client.range(.key(Self.key("/leased"))).keyValues.isEmpty)
        #expect(try client.range(.key(Self.key("/leased"))).revision == revision)
        // The wire: 200, chunked, a result without TTL.
        let wire = try Self.raw(etcd, "/v3/lease/keepalive", "{\"ID\":\"\(lease.rawValue)\"}")
        #expect(wire.status == 200 && wire.header("Transfer-Encoding") == "chunked")
        #expect(wire.bodyText.contains("\"ID\"") && !wire.bodyText.contains("TTL"))
        #expect(client.perform(.keepAlive(lease)) == .failed(.leaseNotFound))
        #expect(client.lastError?.reason == .leaseLost)
        #expect(client.perform(.revokeLease(lease)) == .failed(.leaseNotFound))
        #expect(client.perform(Self.put(Self.key("/leased"), [2], lease: lease)) == .failed(.leaseNotFound))
        guard case .etcd(404, 5, _)? = client.lastError?.reason else {
            Issue.record("a put on a revoked lease: \(String(describing: client.lastError))")
            return
        }
    }

    @Test("a key attached to a lease of TTL 1 s is deleted once the lease expires")
    func leaseExpiry() throws {
        let etcd = try EtcdProcess.start()
        let client = try Self.client(etcd)
        let lease = try Self.grant(client, seconds: 1)
        _ = try client.send(Self.put(Self.key("/ephemeral"), [1], lease: lease))
        #expect(try client.range(.key(Self.key("/ephemeral"))).keyValues.first?.lease == lease)
        let started = ContinuousClock.now
        let deadline = started + .seconds(6)
        // Each check is a request that blocks on the socket: no sleep.
        while try !client.range(.key(Self.key("/ephemeral"))).keyValues.isEmpty {
            guard ContinuousClock.now < deadline else {
                Issue.record("the key outlived its 1 s lease by 6 s")
                return
            }
        }
        #expect(ContinuousClock.now - started >= .milliseconds(900), "not before the TTL")
        #expect(client.perform(.keepAlive(lease)) == .failed(.leaseNotFound))
    }

    // MARK: - Watch and compaction

    @Test("a watch from a revision delivers puts and deletes in revision order; a cancel from another thread ends it")
    func watchInOrder() throws {
        let etcd = try EtcdProcess.start()
        let client = try Self.client(etcd)
        let first = try Self.put(client, "/w/1", "a")
        try Self.put(client, "/other", "x")
        let watch = try client.watch(.prefix(Self.key("/w/")), from: first)
        try Self.put(client, "/w/1", "b")
        _ = try client.send(.transaction(compares: [], success: [.delete(.key(Self.key("/w/1")))], failure: []))
        _ = try client.send(
            .transaction(
                compares: [],
                success: [
                    .put(key: Self.key("/w/2"), value: [], lease: nil),
                    .put(key: Self.key("/w/3"), value: [7], lease: nil),
                ],
                failure: []))
        var events: [EtcdEvent] = []
        let deadline = ContinuousClock.now + .seconds(5)
        while events.count < 5 && ContinuousClock.now < deadline {
            events += try watch.next(timeout: .milliseconds(200))
        }
        #expect(events.map(\.kind) == [.put, .put, .delete, .put, .put])
        #expect(
            events.map { String(decoding: $0.keyValue.key, as: UTF8.self) } == ["/w/1", "/w/1", "/w/1", "/w/2", "/w/3"])
        #expect(events.map(\.keyValue.value) == [Self.key("a"), Self.key("b"), [], [], [7]])
        #expect(events.map(\.revision.rawValue) == [0, 2, 3, 4, 4].map { first.rawValue + Int64($0) })
        #expect(events[1].keyValue.version == 2 && events[1].keyValue.createRevision == first)
        #expect(try watch.next(timeout: .milliseconds(100)).isEmpty, "nothing more: a timeout, not an error")
        let canceller = watch.canceller
        let reader = Self.currentThreadPath()
        let thread = try PlatformThread.spawn {
            // Cancels once the reading thread is blocked in poll(2) on the stream.
            _ = ConditionWait.until { Self.isBlockedInPoll(reader) }
            canceller.cancel()
        }
        let waited = ContinuousClock.now
        #expect(throws: EtcdClientError(.unavailable, .http(.cancelled), endpoint: etcd.clientURL)) {
            try watch.next(timeout: .seconds(10))
        }
        thread.join()
        #expect(ContinuousClock.now - waited < .seconds(5), "the cancel woke the blocked read")
        #expect(throws: EtcdClientError.self) { try watch.next(timeout: .milliseconds(10)) }
    }

    @Test("compaction; again or to the future fails; reads and watches from before it fail compacted")
    func compaction() throws {
        let etcd = try EtcdProcess.start()
        let client = try Self.client(etcd)
        let early = try Self.put(client, "/c/1", "a")
        try Self.put(client, "/c/1", "b")
        let late = try Self.put(client, "/c/2", "c")
        #expect(try client.send(.compact(late)) == .compacted(late))
        #expect(client.perform(.compact(late)) == .failed(.compacted(compactRevision: late)))
        #expect(client.perform(.compact(late.next.next)) == .failed(.futureRevision))
        #expect(throws: EtcdClientError.self) { try client.range(.key(Self.key("/c/1")), revision: early) }
        #expect(try client.range(.key(Self.key("/c/1")), revision: late).keyValues.map(\.value) == [Self.key("b")])
        let watch = try client.watch(.prefix(Self.key("/c/")), from: early)
        do {
            let events = try watch.next(timeout: .seconds(5))
            Issue.record("a watch from a compacted revision delivered \(events)")
        } catch {
            #expect(error.failure == .compacted(compactRevision: late))
        }
        let current = try client.watch(.prefix(Self.key("/c/")), from: late)
        let events = try current.next(timeout: .seconds(5))
        #expect(events.map(\.revision) == [late], "the compact revision itself is kept")
    }

    // MARK: - Limits and failures

    @Test("a request over --max-request-bytes fails requestTooLarge (etcd's check and gRPC's); the client goes on")
    func requestTooLarge() throws {
        let etcd = try EtcdProcess.start(arguments: ["--max-request-bytes", "65536"])
        let client = try Self.client(etcd)
        let big = [UInt8](repeating: 7, count: 100_000)
        #expect(client.perform(Self.put(Self.key("/big"), big)) == .failed(.requestTooLarge))
        guard case .etcd(400, _, _)? = client.lastError?.reason else {
            Issue.record("etcd's check: \(String(describing: client.lastError))")
            return
        }
        // Beyond --max-request-bytes + 512 KiB, gRPC refuses it first (429).
        let huge = [UInt8](repeating: 7, count: 700_000)
        #expect(client.perform(Self.put(Self.key("/big"), huge)) == .failed(.requestTooLarge))
        guard case .etcd(429, _, _)? = client.lastError?.reason else {
            Issue.record("gRPC's check: \(String(describing: client.lastError))")
            return
        }
        try Self.put(client, "/small", "ok")
        #expect(try client.range(.key(Self.key("/big"))).keyValues.isEmpty)
        #expect(client.connectionsOpened == 1, "error answers (chunked, with a trailer) keep the connection")
    }

    @Test("a space alarm (--quota-backend-bytes): writes fail unavailable (429, code 8), reads go on, status names it")
    func spaceAlarm() throws {
        let etcd = try EtcdProcess.start(arguments: ["--quota-backend-bytes", "262144"])
        let client = try Self.client(etcd)
        var random = SeededRandom(seed: 0x5AACE)
        var written = 0
        var answer = EtcdResponse.failed(.unavailable)
        repeat {
            // Random bytes: bbolt stores values as they are, so each put grows the file.
            let value = (0..<60_000).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            answer = client.perform(Self.put(Self.key("/fill/\(written)"), value))
            written += 1
        } while answer != .failed(.unavailable) && written < 40
        #expect(answer == .failed(.unavailable), "seed \(random.seed): the quota never filled")
        guard case .etcd(429, 8, let message)? = client.lastError?.reason else {
            Issue.record("space alarm: \(String(describing: client.lastError))")
            return
        }
        #expect(message.contains("database space exceeded"))
        // Every acknowledged put reads back (the refused one may or may not have
        // landed: etcd 3.4 checks the quota before the proposal and again at
        // apply, and raises the alarm after the apply that crossed it).
        let kept = try client.range(.prefix(Self.key("/fill/"))).keyValues.count
        #expect(
            kept == written - 1 || kept == written, "\(kept) of \(written) puts read back; \(written - 1) acknowledged")
        let status = try client.status()
        #expect(status.errors.contains { $0.contains("NOSPACE") })
    }

    @Test("failover: a dead first endpoint is skipped; a paused one times out and the next request moves on")
    func failover() throws {
        let live = try EtcdProcess.start()
        let paused = try EtcdProcess.start()
        let deadPort = try {
            let socket = try TCPSocket.listen(host: "127.0.0.1", port: 0, backlog: 1, reusePort: false)
            defer { socket.close() }
            return try TCPSocket.localPort(of: socket)
        }()
        let options = EtcdClientOptions(requestTimeout: .milliseconds(500))
        let refused = EtcdClient(
            endpoints: try EtcdEndpoint.parseList("http://127.0.0.1:\(deadPort),\(live.clientURL)"), options: options)
        try Self.put(refused, "/f", "1")
        #expect(refused.currentEndpoint.description == live.clientURL && refused.endpointChanges == 1)

        paused.pause()
        let client = EtcdClient(
            endpoints: try EtcdEndpoint.parseList("\(paused.clientURL),\(live.clientURL)"), options: options)
        let started = ContinuousClock.now
        #expect(client.perform(.grantLease(ttlSeconds: 5)) == .failed(.unavailable))
        let waited = ContinuousClock.now - started
        #expect(waited >= .milliseconds(450) && waited < .seconds(3), "failed after the request timeout: \(waited)")
        #expect(client.lastError?.reason == .http(.answerTimedOut))
        #expect(client.lastError?.endpoint == paused.clientURL)
        #expect(try client.range(.key(Self.key("/f"))).keyValues.map(\.value) == [Self.key("1")])
        paused.resume()

        live.stop()
        let down = ContinuousClock.now
        #expect(refused.perform(.grantLease(ttlSeconds: 5)) == .failed(.unavailable))
        #expect(ContinuousClock.now - down < .seconds(2), "a stopped etcd fails within the timeout")
    }
}
