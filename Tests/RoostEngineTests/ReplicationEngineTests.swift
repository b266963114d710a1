import RoostModel
import RoostStorage
import RoostTesting
import Synchronization
import Testing

@testable import RoostEngine

/// Issue 22 at the engine's level, without etcd: a leader whose log is a
/// `LeaderLog` and a follower that applies the leader's records through the
/// `FollowerApplier`. The test stands in for the group log: it takes the
/// leader's batches, hands them to the follower, and reports the commit.
@Suite("Replication in the engine: a leader's log and a follower's applier")
struct ReplicationEngineTests {
    /// A leader: its own write-ahead log under a `ClusterLog` promoted at
    /// once (an empty group log), two shards, and a catalog.
    struct Leader {
        let wal: WriteAheadLog
        let log: ClusterLog
        let registry: Registry
        let catalog: CatalogStore

        init(directory: String) throws {
            wal = try WriteAheadLog.open(directory: directory, policy: .always).0
            log = ClusterLog(local: WALMutationLog(wal: wal))
            log.promote()
            registry = Registry(shardCount: 2, log: log)
            catalog = CatalogStore(CatalogContents(), log: log)
        }
    }

    /// Waits (yielding to the loops) for the next batch a leader's log holds.
    static func nextBatch(of log: ClusterLog) async -> [ReplicatedRecord] {
        while true {
            let batch = log.takeBatch(bytesMax: 1 << 20)
            if !batch.isEmpty { return batch }
            await Task.yield()
        }
    }

    /// The applier of a follower engine opened in cluster mode.
    static func follower(of engine: DurableEngine) throws -> FollowerApplier {
        let log = try #require(engine.clusterLog)
        #expect(log.role == .follower)
        return FollowerApplier(registry: engine.registry, catalog: engine.catalog, log: log)
    }

    /// Every index's state (its after-images) and change feed, by key.
    static func state(of registry: Registry, keys: [IndexKey]) async -> [IndexKey: [String]] {
        var state: [IndexKey: [String]] = [:]
        for key in keys {
            state[key] = await registry.perform(key) { index -> (value: [String], mutations: [Mutation]) in
                var lines = index.snapshotMutations().map { "\($0)" }
                if case .success(let page) = index.changesPage(after: nil, limit: 10_000) {
                    lines += page.changes.map { "change \($0.position) \($0)" }
                }
                return (lines, [])
            }
        }
        return state
    }

    /// Writes through `leader` from a task while the test replicates: takes
    /// each batch, applies it on `follower`, then commits it on the leader.
    static func replicate(
        _ leader: Leader, to follower: FollowerApplier, while writes: @escaping @Sendable () async throws -> Void
    ) async throws {
        let done = AnsweredFlag()
        let writer = Task {
            defer { done.value.store(true, ordering: .releasing) }
            try await writes()
        }
        var batches = 0
        while true {
            // Read before taking: once the writer is done, one more take empties the outbox.
            let writerDone = done.value.load(ordering: .acquiring)
            let batch = leader.log.takeBatch(bytesMax: 4 << 10)
            if let last = batch.last {
                let applied = try await follower.apply(batch)
                #expect(applied == last.lsn)
                leader.log.commit(through: last.lsn)
                batches += 1
            } else if writerDone {
                break
            } else {
                await Task.yield()
            }
        }
        try await writer.value
        #expect(batches > 1, "one batch only: the test did not interleave")
    }

    @Test("a follower fed the leader's batches ends with the leader's indexes, change feed and catalog, at its LSNs")
    func followerEqualsLeader() async throws {
        let leaderDirectory = try TemporaryDirectory.make()
        let followerDirectory = try TemporaryDirectory.make()
        defer {
            TemporaryDirectory.remove(leaderDirectory)
            TemporaryDirectory.remove(followerDirectory)
        }
        let leader = try Leader(directory: leaderDirectory)
        defer { leader.wal.close() }
        // Three shards on the follower against the leader's two: the LSNs are the group log's, not a layout's.
        let (engine, _) = try DurableEngine.open(
            directory: followerDirectory, policy: .always, shardCount: 3, cluster: true)
        defer { engine.close() }
        let follower = try Self.follower(of: engine)
        let keys = [AppID(1), AppID(2), AppID(3)].flatMap { app in AppMode.allCases.map { IndexKey(app: app, mode: $0) }
        }
        let registry = leader.registry
        let catalog = leader.catalog
        try await Self.replicate(leader, to: follower) {
            for round in 0..<3 {
                _ = try catalog.execute(
                    .createApp(
                        name: "app \(round)", settings: AppSettingsChange(), atMilliseconds: 1_000 + Int64(round)))
            }
            var devices: [(IndexKey, DeviceID)] = []
            for seed in 0..<60 {
                let key = keys[seed % keys.count]
                var request = RegisterRequest(token: try apnsToken(seed % 40))
                request.externalID = .set(try ExternalID("person \(seed % 9)"))
                let sent = request
                let id = await registry.perform(key) { index -> (value: DeviceID?, mutations: [Mutation]) in
                    guard case .success(let outcome) = index.register(sent, at: now) else { return (nil, []) }
                    return (outcome.device.id, outcome.mutations)
                }
                if let id = id ?? nil { devices.append((key, id)) }
            }
            for (key, id) in devices.prefix(10) {
                _ = await registry.execute(key, .deleteDevice(id))
            }
            _ = await registry.removeApp(AppID(3))
        }
        #expect(engine.log.appendedThrough == leader.log.appendedThrough)
        #expect(leader.log.acknowledgedThrough == leader.log.appendedThrough)
        let leaderState = await Self.state(of: leader.registry, keys: keys)
        let followerState = await Self.state(of: engine.registry, keys: keys)
        for key in keys {
            let (ours, theirs) = (leaderState[key] ?? [], followerState[key] ?? [])
            let firstDifference = zip(ours, theirs).first { $0 != $1 }
            #expect(
                ours == theirs,
                "\(key): \(ours.count) lines on the leader, \(theirs.count) on the follower; first difference: \(String(describing: firstDifference))"
            )
        }
        #expect(leaderState.values.contains { !$0.isEmpty })
        #expect(engine.catalog.read { $0.records() } == leader.catalog.read { $0.records() })
    }
}

extension ReplicationEngineTests {
    @Test("a leader's write is answered only once the group log committed it, though its own log acknowledged it")
    func answeredOnlyAfterTheCommit() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let leader = try Leader(directory: directory)
        defer { leader.wal.close() }
        let answered = AnsweredFlag()
        let registry = leader.registry
        let write = Task {
            let outcome = await registry.execute(liveKey, .register(RegisterRequest(token: try apnsToken(1)), at: now))
            answered.value.store(true, ordering: .releasing)
            return outcome
        }
        // The record reaches the outbox, then this node's log acknowledges it.
        let batch = await Self.nextBatch(of: leader.log)
        let last = try #require(batch.last).lsn
        while leader.log.local.acknowledgedThrough < last { await Task.yield() }
        // The loop that holds the answer is woken by the local acknowledgement
        // and by every turn below; the answer stays held. (A read would wait
        // too: it may show the write, which is not committed.)
        for round in 0..<20 { _ = leader.log.append([EngineRecord.appRemoved(AppID(100 + UInt32(round))).encoded()]) }
        while leader.log.local.acknowledgedThrough < leader.log.appendedThrough { await Task.yield() }
        let answeredEarly = answered.value.load(ordering: .acquiring)
        #expect(!answeredEarly)
        #expect(leader.log.acknowledgedThrough < last)
        leader.log.commit(through: last)
        let outcome = try await write.value
        #expect(outcome != nil)
        let answeredLate = answered.value.load(ordering: .acquiring)
        #expect(answeredLate)
    }

    @Test(
        "a leader's write the group log did not confirm in time is refused (503) without closing the log; later writes are answered once committed"
    )
    func unconfirmedWritesAreRefused() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let leader = try Leader(directory: directory)
        defer { leader.wal.close() }
        let registry = leader.registry
        let first = Task {
            await registry.execute(liveKey, .register(RegisterRequest(token: try apnsToken(1)), at: now))
        }
        let batch = await Self.nextBatch(of: leader.log)
        let last = try #require(batch.last).lsn
        leader.log.markUnconfirmed(through: last)
        let refused = try await first.value
        #expect(refused == nil)
        #expect(leader.log.acceptsWrites)
        // etcd commits it after all (a retry with the same idempotency key would find it); the next write is answered.
        leader.log.commit(through: last)
        let second = Task {
            await registry.execute(liveKey, .register(RegisterRequest(token: try apnsToken(2)), at: now))
        }
        let next = await Self.nextBatch(of: leader.log)
        leader.log.commit(through: try #require(next.last).lsn)
        let answered = try await second.value
        #expect(answered != nil)
    }

    @Test(
        "records that do not continue the follower's log are refused and change nothing; a deposed leader's waiting write is refused"
    )
    func gapsAndDeposition() async throws {
        let directory = try TemporaryDirectory.make()
        let followerDirectory = try TemporaryDirectory.make()
        defer {
            TemporaryDirectory.remove(directory)
            TemporaryDirectory.remove(followerDirectory)
        }
        let leader = try Leader(directory: directory)
        defer { leader.wal.close() }
        let (engine, _) = try DurableEngine.open(
            directory: followerDirectory, policy: .always, shardCount: 1, cluster: true)
        defer { engine.close() }
        let follower = try Self.follower(of: engine)
        let registry = leader.registry
        let write = Task {
            await registry.execute(liveKey, .register(RegisterRequest(token: try apnsToken(2)), at: now))
        }
        let batch = await Self.nextBatch(of: leader.log)
        // A gap: the batch without its first record.
        await #expect(throws: ReplicationApplyError.notContinuous(expected: LogSequenceNumber(1), got: batch[1].lsn)) {
            _ = try await follower.apply(Array(batch.dropFirst()))
        }
        #expect(engine.log.appendedThrough == LogSequenceNumber(0))
        // Deposed before the commit: the write is never acknowledged.
        leader.log.close()
        #expect(try await write.value == nil)
        #expect(!leader.log.acceptsWrites)
        #expect(leader.log.append([[1]]) == nil)
    }
}

/// A flag set on one task and read on another.
final class AnsweredFlag: Sendable {
    let value = Atomic<Bool>(false)
}

extension ReplicationEngineTests {
    @Test("a follower's shards take no write; promoted, it leads from the end of what it applied")
    func followerThenLeader() async throws {
        let leaderDirectory = try TemporaryDirectory.make()
        let followerDirectory = try TemporaryDirectory.make()
        defer {
            TemporaryDirectory.remove(leaderDirectory)
            TemporaryDirectory.remove(followerDirectory)
        }
        let leader = try Leader(directory: leaderDirectory)
        defer { leader.wal.close() }
        let (engine, _) = try DurableEngine.open(
            directory: followerDirectory, policy: .always, shardCount: 2, cluster: true)
        defer { engine.close() }
        let follower = try Self.follower(of: engine)
        let log = try #require(engine.clusterLog)
        let registry = leader.registry
        try await Self.replicate(leader, to: follower) {
            for seed in 0..<5 {
                _ = await registry.execute(liveKey, .register(RegisterRequest(token: try apnsToken(seed)), at: now))
            }
        }
        // A write that reaches a follower's shard is refused before it applies
        // (it never reaches the log), and nothing changes; a read is served.
        let refused = await engine.registry.execute(
            liveKey, .register(RegisterRequest(token: try apnsToken(99)), at: now))
        #expect(refused == nil)
        #expect(log.appendsRefusedAsFollower == 0)
        let stateAfter = await Self.state(of: engine.registry, keys: [liveKey])
        #expect(stateAfter == (await Self.state(of: leader.registry, keys: [liveKey])))
        #expect(log.appendedThrough == leader.log.appendedThrough)
        // Promoted: the next write takes the LSN after the last one applied.
        let end = log.appendedThrough
        log.promote()
        #expect(log.role == .leader)
        let followerRegistry = engine.registry
        let write = Task {
            await followerRegistry.execute(liveKey, .register(RegisterRequest(token: try apnsToken(7)), at: now))
        }
        let batch = await Self.nextBatch(of: log)
        #expect(batch.first?.lsn == LogSequenceNumber(end.rawValue + 1))
        log.commit(through: try #require(batch.last).lsn)
        #expect(try await write.value != nil)
    }
}

extension ReplicationEngineTests {
    /// A cluster's epoch record as `ReplicationBatch.epochRecord` makes it:
    /// the mark's magic, the epoch, the node id's length and the node id.
    static func epochMark(_ epoch: UInt64) -> [UInt8] {
        var bytes = ClusterMark.magic
        withUnsafeBytes(of: epoch.littleEndian) { bytes.append(contentsOf: $0) }
        bytes.append(1)
        bytes.append(UInt8(ascii: "a"))
        return bytes
    }

    @Test("an epoch record takes its LSN on a follower and in recovery, and changes no state")
    func epochRecordsPassThrough() async throws {
        let leaderDirectory = try TemporaryDirectory.make()
        let followerDirectory = try TemporaryDirectory.make()
        defer {
            TemporaryDirectory.remove(leaderDirectory)
            TemporaryDirectory.remove(followerDirectory)
        }
        let leader = try Leader(directory: leaderDirectory)
        defer { leader.wal.close() }
        var engine: DurableEngine? = try DurableEngine.open(
            directory: followerDirectory, policy: .always, shardCount: 2, cluster: true
        ).0
        let follower = try Self.follower(of: try #require(engine))
        let registry = leader.registry
        let log = leader.log
        try await Self.replicate(leader, to: follower) {
            _ = log.append([Self.epochMark(7)])
            for seed in 0..<4 {
                _ = await registry.execute(liveKey, .register(RegisterRequest(token: try apnsToken(seed)), at: now))
            }
            _ = log.append([Self.epochMark(9)])
        }
        let expected = await Self.state(of: leader.registry, keys: [liveKey])
        #expect(await Self.state(of: try #require(engine).registry, keys: [liveKey]) == expected)
        #expect(try #require(engine).log.appendedThrough == leader.log.appendedThrough)
        // Recovery passes over them too.
        try #require(engine).close()
        engine = nil
        let (reopened, report) = try DurableEngine.open(directory: followerDirectory, policy: .always, shardCount: 2)
        defer { reopened.close() }
        #expect(report.logRecords == Int(leader.log.appendedThrough.rawValue))
        #expect(await Self.state(of: reopened.registry, keys: [liveKey]) == expected)
    }
}
