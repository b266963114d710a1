import RoostCluster
import RoostStorage
import RoostTesting
import Testing

/// The replication state machine step by step against `FakeEtcd`, answered
/// at once (the seeded simulation covers the orders and faults).
@Suite("ReplicationMachine: roles, the fence, and acknowledgement")
struct ReplicationMachineTests {
    /// Drives one machine: etcd answers at once, except appends while `holdAppends`.
    struct Harness {
        var etcd = FakeEtcd(seed: 1)
        var machine: ReplicationMachine
        var now: Int64 = 0
        var local: [[UInt8]] = []
        var actions: [ReplicationAction] = []
        var holdAppends = false
        var held: [(EtcdRequestID, EtcdRequest)] = []
        var watch: (id: Int, token: WatchToken)?
        let keys = ClusterKeys(cluster: ClusterName("unit")!)

        init(node: String = "n1") {
            var configuration = ReplicationConfiguration(
                node: NodeID(node)!, advertiseURL: "http://\(node)", keys: ClusterKeys(cluster: ClusterName("unit")!))
            configuration.leaseTTLSeconds = 1
            machine = ReplicationMachine(configuration: configuration)
        }

        mutating func handle(_ event: ReplicationEvent) {
            var queue = machine.handle(event, now: now)
            while !queue.isEmpty {
                let action = queue.removeFirst()
                actions.append(action)
                switch action {
                case .sendEtcd(let id, let request):
                    if holdAppends, case .transaction(let compares, _, _) = request, compares.count == 2 {
                        held.append((id, request))
                    } else {
                        queue += machine.handle(.etcdAnswered(id, etcd.handle(request)), now: now)
                    }
                case .startWatch(let token, let range, let from):
                    if case .success(let id) = etcd.watch(range, from: from) { watch = (id, token) }
                case .appendLocal(let first, let records):
                    #expect(Int(first.rawValue) == local.count + 1)
                    local += records
                case .verifyLocalLog(let batches):
                    var difference: LogSequenceNumber?
                    for batch in batches where difference == nil {
                        for (offset, record) in batch.records.enumerated() where difference == nil {
                            let lsn = Int(batch.firstLSN.rawValue) + offset
                            if lsn <= local.count, local[lsn - 1] != record {
                                difference = LogSequenceNumber(UInt64(lsn))
                            }
                        }
                    }
                    queue += machine.handle(.localLogVerified(firstDifference: difference), now: now)
                case .truncateLocalLog(let after):
                    local.removeSubrange(Int(after.rawValue)...)
                default:
                    break
                }
            }
        }

        mutating func advance(_ milliseconds: Int64) {
            now += milliseconds
            etcd.advance(byMilliseconds: milliseconds)
            handle(.tick)
        }

        mutating func releaseHeld() {
            let requests = held
            held = []
            for (id, request) in requests { handle(.etcdAnswered(id, etcd.handle(request))) }
        }

        mutating func durable() {
            handle(.localDurable(through: LogSequenceNumber(UInt64(local.count))))
        }

        var acknowledged: [LogSequenceNumber] {
            actions.compactMap { if case .acknowledge(let through, _) = $0 { through } else { nil } }
        }

        /// Starts the machine on an empty log and runs until it takes writes.
        mutating func becomeLeader() throws {
            handle(.start(localLogEnd: 0, checkpoint: 0))
            #expect(machine.role == .candidate, "no leader key: it will try")
            for _ in 0..<20 where !machine.isTakingWrites {
                advance(10)
                durable()
            }
            try #require(machine.isTakingWrites)
        }
    }

    @Test("a lone node takes the key, appends its epoch record, and acknowledges only what is committed and durable")
    func leaderAcknowledgesCommittedAndDurable() throws {
        var harness = Harness()
        try harness.becomeLeader()
        let epoch = try #require(harness.machine.ownEpoch)
        #expect(harness.etcd.value(of: harness.keys.leader)?.createRevision == epoch.createRevision)
        #expect(ReplicationBatch.parseEpochRecord(harness.local[0])?.epoch == epoch, "LSN 1 is the epoch record")

        // Committed first, durable later.
        harness.handle(.submit([Array("a".utf8)]))
        #expect(harness.acknowledged.last == LogSequenceNumber(1), "only the epoch record so far")
        harness.durable()
        #expect(harness.acknowledged.last == LogSequenceNumber(2))

        // Durable first, committed later; writes submitted meanwhile go in the next batch.
        harness.holdAppends = true
        harness.handle(.submit([Array("b".utf8)]))
        harness.handle(.submit([Array("c".utf8), Array("d".utf8)]))
        #expect(harness.held.count == 1, "one append in flight")
        harness.durable()
        #expect(harness.acknowledged.last == LogSequenceNumber(2))
        harness.releaseHeld()
        #expect(harness.acknowledged.last == LogSequenceNumber(3))
        #expect(harness.held.count == 1, "c and d in one batch")
        harness.releaseHeld()
        harness.durable()
        #expect(harness.acknowledged.last == LogSequenceNumber(5))
        #expect(harness.etcd.values(in: .prefix(harness.keys.logPrefix)).count == 4)

        // Its member record, on its own lease, follows what it applied and checkpointed.
        harness.handle(.checkpointed(through: 4))
        for _ in 0..<12 { harness.advance(100) }  // past memberUpdateMilliseconds, keeping the leases alive
        let member = try #require(harness.etcd.value(of: harness.keys.memberKey(NodeID("n1")!)))
        #expect(
            MemberRecord.decode(member.value)
                == MemberRecord(url: "http://n1", role: .leader, appliedLSN: 5, checkpointLSN: 4))
        #expect(member.lease != nil && member.lease != harness.machine.lease)
    }

    @Test("the group log's bytes count each batch once and lose the batches a purge deleted")
    func groupLogBytesFollowPurges() throws {
        var harness = Harness()
        try harness.becomeLeader()
        for text in ["a", "bb", "ccc"] {
            harness.handle(.submit([Array(text.utf8)]))
            harness.durable()
        }
        let batches = harness.etcd.values(in: .prefix(harness.keys.logPrefix))
        #expect(batches.count == 4, "the epoch record and three appends")
        let total = batches.reduce(0) { $0 + $1.value.count }
        #expect(harness.machine.groupLogBytes == total)
        // A purge that kept the group log from LSN 3 (the "bb" batch) on.
        harness.machine.noteGroupLogStart(LogSequenceNumber(3))
        #expect(harness.machine.groupLogBytes == total - batches[0].value.count - batches[1].value.count)
        harness.machine.noteGroupLogStart(LogSequenceNumber(3))
        #expect(harness.machine.groupLogBytes == total - batches[0].value.count - batches[1].value.count, "once")
        harness.machine.noteGroupLogStart(LogSequenceNumber(5))
        #expect(harness.machine.groupLogBytes == 0)
    }

    @Test("retention: the purge follows every live checkpoint, and past --log-retain-bytes the furthest one")
    func retentionPurgePoint() {
        let checkpoints = [LogSequenceNumber(40), LogSequenceNumber(7), LogSequenceNumber(90)]
        #expect(GroupLogRetention.purgeThrough(checkpoints: checkpoints, groupLogBytes: 100, retainBytes: 100) == 7)
        #expect(GroupLogRetention.purgeThrough(checkpoints: checkpoints, groupLogBytes: 101, retainBytes: 100) == 90)
        #expect(GroupLogRetention.purgeThrough(checkpoints: [0, 12], groupLogBytes: 1, retainBytes: 100) == nil)
        #expect(GroupLogRetention.purgeThrough(checkpoints: [0, 12], groupLogBytes: 200, retainBytes: 100) == 12)
        #expect(GroupLogRetention.purgeThrough(checkpoints: [], groupLogBytes: 200, retainBytes: 100) == nil)
    }

    @Test("a leader whose lease is gone is deposed at its next keep-alive, and acknowledges nothing after")
    func deposedWhenTheLeaseIsGone() throws {
        var harness = Harness()
        try harness.becomeLeader()
        let lease = try #require(harness.machine.lease)
        _ = harness.etcd.handle(.revokeLease(lease))
        harness.holdAppends = true
        harness.handle(.submit([Array("late".utf8)]))
        harness.advance(400)  // past a third of the TTL: a keep-alive
        #expect(harness.machine.role == .deposed)
        #expect(harness.actions.contains(.deposed(.leaseLost)))
        Self.expectAcknowledgesNothingMore(&harness)
    }

    @Test("a leader whose own log failed lets go at once: its lease revoked, no batch appended, nothing acknowledged")
    func localLogFailureDeposes() throws {
        var harness = Harness()
        try harness.becomeLeader()
        harness.holdAppends = true
        harness.handle(.submit([Array("unwritten".utf8)]))
        harness.handle(.localLogFailed)
        #expect(harness.machine.role == .deposed)
        #expect(harness.actions.contains(.deposed(.localLogFailed)))
        let lease = try #require(harness.machine.lease)
        #expect(
            harness.actions.contains { if case .sendEtcd(_, .revokeLease(lease)) = $0 { true } else { false } },
            "the lease is revoked, so another node need not wait for its TTL")
        Self.expectAcknowledgesNothingMore(&harness)
        var follower = Harness(node: "n2")
        follower.handle(.localLogFailed)
        #expect(follower.actions.isEmpty, "a node that does not lead has no epoch to give up")
    }

    @Test("an append whose fence fails deposes the leader")
    func fencedAppendDeposes() throws {
        var harness = Harness()
        try harness.becomeLeader()
        harness.holdAppends = true
        harness.handle(.submit([Array("w".utf8)]))
        // Another node took the key meanwhile (the lease expired during a pause).
        let lease = try #require(harness.machine.lease)
        _ = harness.etcd.handle(.revokeLease(lease))
        guard case .lease(let other, _) = harness.etcd.handle(.grantLease(ttlSeconds: 5)) else {
            Issue.record("no lease")
            return
        }
        _ = harness.etcd.handle(
            .transaction(
                compares: [],
                success: [.put(key: harness.keys.leader, value: Array("n2 http://n2".utf8), lease: other)],
                failure: []))
        harness.releaseHeld()
        #expect(harness.actions.contains(.deposed(.fenced)))
        #expect(harness.etcd.values(in: .prefix(harness.keys.logPrefix)).count == 1)
    }

    /// Puts a batch in etcd as the leader of `epoch` would have.
    static func put(_ batch: ReplicationBatch, in harness: inout Harness) {
        _ = harness.etcd.handle(
            .transaction(
                compares: [],
                success: [.put(key: harness.keys.logKey(firstLSN: batch.firstLSN), value: batch.encoded(), lease: nil)],
                failure: []))
    }

    /// Puts `count` batches of one record (`record`) from `firstLSN` on, one LSN each.
    static func putSmallBatches(_ count: Int, from firstLSN: UInt64, record: [UInt8] = [1], in harness: inout Harness) {
        for index in 0..<UInt64(count) {
            put(
                ReplicationBatch(
                    epoch: ClusterEpoch(2), firstLSN: LogSequenceNumber(firstLSN + index), records: [record]),
                in: &harness)
        }
    }

    /// The leader in `harness` is deposed with writes in flight: releasing
    /// and making them durable acknowledges nothing more, and etcd holds
    /// only its epoch record.
    static func expectAcknowledgesNothingMore(
        _ harness: inout Harness, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let acknowledgedBefore = harness.acknowledged.count
        harness.releaseHeld()
        harness.durable()
        #expect(
            harness.acknowledged.count == acknowledgedBefore, "deposed: never acknowledges again",
            sourceLocation: sourceLocation)
        #expect(
            harness.etcd.values(in: .prefix(harness.keys.logPrefix)).count == 1, "only the epoch record",
            sourceLocation: sourceLocation)
    }

    @Test("a restart cuts the records after the checkpoint that etcd does not hold, then follows")
    func restartCutsWhatEtcdDoesNotHold() {
        var harness = Harness(node: "n3")
        Self.put(ReplicationBatch(epoch: ClusterEpoch(2), firstLSN: 1, records: [[1], [2]]), in: &harness)
        Self.put(ReplicationBatch(epoch: ClusterEpoch(7), firstLSN: 3, records: [[3], [4]]), in: &harness)
        // Deposed in epoch 2 with two records that never committed at LSNs 3 and 4.
        harness.local = [[1], [2], [30], [40]]
        harness.handle(.start(localLogEnd: 4, checkpoint: 1))
        #expect(harness.actions.contains(.truncateLocalLog(after: 2)))
        #expect(harness.local == [[1], [2], [3], [4]])
        #expect(harness.machine.applied == LogSequenceNumber(4))
    }

    @Test("a restart whose records after the checkpoint etcd no longer holds re-seeds")
    func restartBehindThePurgeReseeds() {
        var harness = Harness(node: "n3")
        Self.put(ReplicationBatch(epoch: ClusterEpoch(7), firstLSN: 4, records: [[4]]), in: &harness)
        harness.local = [[1], [2], [3]]
        harness.handle(.start(localLogEnd: 3, checkpoint: 1))
        #expect(harness.actions.contains(.reseedNeeded(groupLogStart: 4)))
        #expect(harness.machine.role == .seeding)
        #expect(harness.local.count == 3, "nothing cut: the snapshot replaces it")

        var checkpointed = Harness(node: "n4")
        Self.put(ReplicationBatch(epoch: ClusterEpoch(7), firstLSN: 4, records: [[4]]), in: &checkpointed)
        checkpointed.local = [[1], [2], [3]]
        checkpointed.handle(.start(localLogEnd: 3, checkpoint: 3))
        #expect(checkpointed.local == [[1], [2], [3], [4]], "all of it checkpointed: it goes on")
    }

    @Test(
        "the group log is read a page at a time: the end is known only after a page that is not full; the start-up comparison goes page by page and cuts at the first difference"
    )
    func pagedReads() {
        let batches = (0..<30).map { index in
            ReplicationBatch(
                epoch: ClusterEpoch(2), firstLSN: LogSequenceNumber(UInt64(index + 1)), records: [[UInt8(index)]])
        }
        // A new follower: the first read takes readBatchesMin batches after its position, each
        // next one twice as many while they are small.
        var follower = Harness(node: "n2")
        for batch in batches { Self.put(batch, in: &follower) }
        var reads = 0
        var pageLimits: [Int] = []
        var events = follower.machine.handle(.start(localLogEnd: 0, checkpoint: 0), now: 1)
        while let read = events.first(where: { if case .sendEtcd = $0 { true } else { false } }),
            case .sendEtcd(let id, let request) = read
        {
            reads += 1
            if case .transaction(_, let success, _) = request, case .range(_, let limit) = success.last {
                pageLimits.append(limit)
            }
            let wasEnd = follower.machine.hasReadToEnd
            events = follower.machine.handle(.etcdAnswered(id, follower.etcd.handle(request)), now: Int64(1 + reads))
            for case .appendLocal(_, let records) in events { follower.local += records }
            if follower.local.count < 30 {
                #expect(!follower.machine.hasReadToEnd, "read \(reads): a full page is not the end")
                #expect(follower.machine.groupEndLearnedAt == 0, "a full page did not learn the end")
            }
            if wasEnd { break }
            events = events.filter {
                if case .sendEtcd(_, .transaction(_, let success, _)) = $0 { success.count == 4 } else { false }
            }
        }
        #expect(follower.local.count == 30)
        #expect(follower.machine.hasReadToEnd)
        #expect(pageLimits == [8, 16, 32], "pages of 8, 16 and 32 batches (30 batches: the third is not full)")

        // A restart with 30 local records after its checkpoint, the 25th of which etcd holds otherwise.
        var restarted = Harness(node: "n3")
        for batch in batches { Self.put(batch, in: &restarted) }
        restarted.local = (0..<30).map { [UInt8($0)] }
        restarted.local[24] = [200]
        restarted.handle(.start(localLogEnd: 30, checkpoint: 0))
        let verifications = restarted.actions.filter { if case .verifyLocalLog = $0 { true } else { false } }
        #expect(verifications.count >= 2, "compared page by page")
        #expect(restarted.actions.contains(.truncateLocalLog(after: 24)))
        #expect(restarted.local == (0..<30).map { [UInt8($0)] })
    }

    @Test(
        "a page is sized by the largest batch the last one held; an answer over the client's limit falls back to the smallest page; a node reads ahead of its log by at most readAheadRecordsMax records"
    )
    func pageSizing() throws {
        func pageLimit(_ actions: [ReplicationAction]) -> (EtcdRequestID, EtcdRequest, Int)? {
            for case .sendEtcd(let id, let request) in actions {
                if case .transaction(_, let success, _) = request, success.count == 4,
                    case .range(_, let limit) = success[3]
                {
                    return (id, request, limit)
                }
            }
            return nil
        }
        // Eight batches of one byte, then one of 1 MB: the page after it asks for 11 (not 16).
        var harness = Harness(node: "n2")
        Self.putSmallBatches(8, from: 1, in: &harness)
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        let large = (0..<1_000_000).map { _ -> UInt8 in  // incompressible: the batch stays 1 MB
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: state >> 56)
        }
        Self.put(
            ReplicationBatch(epoch: ClusterEpoch(2), firstLSN: LogSequenceNumber(9), records: [large]), in: &harness)
        var actions = harness.machine.handle(.start(localLogEnd: 0, checkpoint: 0), now: 1)
        var read = try #require(pageLimit(actions))
        #expect(read.2 == ReplicationMachine.readBatchesMin)
        actions = harness.machine.handle(.etcdAnswered(read.0, harness.etcd.handle(read.1)), now: 2)
        read = try #require(pageLimit(actions), "a full page reads the next at once")
        #expect(read.2 == 11, "the page held a batch of 1 MB: 11 of them in 8 × 1.4 MB")

        // An answer over the client's limit: the next read asks for the smallest page, at once.
        var other = Harness(node: "n3")
        Self.putSmallBatches(40, from: 1, in: &other)
        actions = other.machine.handle(.start(localLogEnd: 0, checkpoint: 0), now: 1)
        read = try #require(pageLimit(actions))
        actions = other.machine.handle(.etcdAnswered(read.0, other.etcd.handle(read.1)), now: 2)
        read = try #require(pageLimit(actions))
        #expect(read.2 == 16)
        actions = other.machine.handle(.etcdAnswered(read.0, .failed(.answerTooLarge)), now: 3)
        #expect(other.machine.readPageLimit == ReplicationMachine.readBatchesMin)
        actions += other.machine.handle(.tick, now: 3)
        read = try #require(pageLimit(actions), "read again without waiting for the retry delay")
        #expect(read.2 == ReplicationMachine.readBatchesMin)

        // A page that leaves more than readAheadRecordsMax records not yet durable waits for the log.
        let half = (0..<60_000).map { _ in [UInt8(1)] }
        var ahead = Harness(node: "n2")
        Self.put(ReplicationBatch(epoch: ClusterEpoch(2), firstLSN: LogSequenceNumber(1), records: half), in: &ahead)
        Self.put(
            ReplicationBatch(epoch: ClusterEpoch(2), firstLSN: LogSequenceNumber(60_001), records: half), in: &ahead)
        Self.putSmallBatches(12, from: 120_001, record: [2], in: &ahead)
        actions = ahead.machine.handle(.start(localLogEnd: 0, checkpoint: 0), now: 1)
        read = try #require(pageLimit(actions))
        actions = ahead.machine.handle(.etcdAnswered(read.0, ahead.etcd.handle(read.1)), now: 2)
        #expect(ahead.machine.localEnd.rawValue > ReplicationMachine.readAheadRecordsMax)
        #expect(pageLimit(actions) == nil, "the next page waits for the local log")
        actions = ahead.machine.handle(.localDurable(through: ahead.machine.localEnd), now: 3)
        #expect(pageLimit(actions) != nil, "the log caught up: the next page is read")
    }

    @Test("a follower takes batches once, in order, and refuses a batch of an older epoch after a newer one")
    func followerOrderAndEpochs() throws {
        var harness = Harness(node: "n2")
        harness.handle(.start(localLogEnd: 0, checkpoint: 0))
        let token = try #require(harness.watch?.token)
        func event(_ batch: ReplicationBatch, revision: Int64) -> EtcdEvent {
            EtcdEvent(
                kind: .put,
                keyValue: EtcdKeyValue(
                    key: harness.keys.logKey(firstLSN: batch.firstLSN), value: batch.encoded(),
                    createRevision: EtcdRevision(revision), modRevision: EtcdRevision(revision), version: 1, lease: nil)
            )
        }
        let first = ReplicationBatch(epoch: ClusterEpoch(5), firstLSN: 1, records: [[1], [2]])
        let second = ReplicationBatch(epoch: ClusterEpoch(9), firstLSN: 3, records: [[3]])
        let stale = ReplicationBatch(epoch: ClusterEpoch(5), firstLSN: 4, records: [[4]])
        let base = harness.machine.watchRevision.rawValue
        harness.handle(.watchDelivered(token, [event(first, revision: base + 1), event(first, revision: base + 1)]))
        harness.handle(.watchDelivered(token, [event(second, revision: base + 2)]))
        harness.handle(.watchDelivered(token, [event(first, revision: base + 1)]))  // rewound
        #expect(harness.local == [[1], [2], [3]])
        #expect(harness.machine.applied == LogSequenceNumber(3))
        harness.handle(.watchDelivered(token, [event(stale, revision: base + 3)]))
        #expect(harness.local.count == 3)
        #expect(harness.actions.contains { if case .refusedBatch(_, .olderEpoch) = $0 { true } else { false } })
    }
}
