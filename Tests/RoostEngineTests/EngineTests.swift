import RoostModel
import RoostStorage
import RoostTelemetry
import RoostTesting
import Synchronization
import Testing

@testable import RoostEngine

/// The APNs token `TestTokens.apns(seed)`, parsed.
func apnsToken(_ seed: Int) throws -> PushToken {
    try PushToken(parsing: TestTokens.apns(seed), platform: .ios)
}

let liveKey = IndexKey(app: AppID(1), mode: .live)
let now = Timestamp(millisecondsSinceEpoch: 1_790_000_000_000)

/// Registers `token` for `person` and returns the device id, or nil on a log failure.
func register(_ registry: Registry, _ token: PushToken, person: String? = nil) async throws -> DeviceID? {
    var request = RegisterRequest(token: token)
    if let person { request.externalID = .set(try ExternalID(person)) }
    let sent = request
    return await registry.perform(liveKey) { index in
        switch index.register(sent, at: now) {
        case .success(let outcome): return (outcome.device.id, outcome.mutations)
        case .failure(let rejection): preconditionFailure("registration refused: \(rejection)")
        }
    }
}

@Suite("Engine records")
struct EngineRecordTests {
    @Test("decode after encode is the identity for a mutation and an app removal")
    func roundTrip() throws {
        let records: [EngineRecord] = [
            .mutation(
                IndexKey(app: AppID(7), mode: .test),
                .settings(AppSettings(maxDevicesPerPerson: 3, requireKnownPerson: true))),
            .mutation(IndexKey(app: AppID(UInt32.max), mode: .live), .deviceSequenceFloor(42)),
            .appRemoved(AppID(9)),
            .indexSize(IndexKey(app: AppID(3), mode: .test), devices: 5_000_000, people: UInt64.max),
            .catalog([1, 5, 2, 0, 0, 0]),
        ]
        for record in records {
            #expect(try EngineRecord.decode(record.encoded()) == record)
        }
    }

    @Test("truncated, unknown and malformed records are refused, never applied")
    func garbage() {
        let good = EngineRecord.mutation(liveKey, .deviceSequenceFloor(5)).encoded()
        for length in 0..<good.count {
            #expect(throws: EngineRecordError.self) { try EngineRecord.decode(Array(good.prefix(length))) }
        }
        var wrongVersion = good
        wrongVersion[0] = 9
        #expect(throws: EngineRecordError.unknownVersion(9)) { try EngineRecord.decode(wrongVersion) }
        var wrongKind = good
        wrongKind[1] = 6
        #expect(throws: EngineRecordError.unknownKind(6)) { try EngineRecord.decode(wrongKind) }
        // Kind 5 frames an index image part, which must not be empty; its contents are the model's to check.
        let imagePrefix = EngineRecord.imagePrefix(liveKey)
        for length in 0...imagePrefix.count {
            #expect(throws: EngineRecordError.self) { try EngineRecord.decode(Array(imagePrefix.prefix(length))) }
        }
        #expect((try? EngineRecord.decode(imagePrefix + [9])) == .indexImage(liveKey, [9]))
        // Kind 4 carries the catalog's payload, which must not be empty.
        #expect(throws: EngineRecordError.self) { try EngineRecord.decode([EngineRecord.formatVersion, 4]) }
        let hint = EngineRecord.indexSize(liveKey, devices: 1, people: 2).encoded()
        for length in 0..<hint.count {
            #expect(throws: EngineRecordError.self) { try EngineRecord.decode(Array(hint.prefix(length))) }
        }
        #expect(throws: EngineRecordError.self) { try EngineRecord.decode(hint + [0]) }
        var zeroApp = good
        zeroApp[2...5] = [0, 0, 0, 0]
        #expect(throws: EngineRecordError.self) { try EngineRecord.decode(zeroApp) }
    }
}

@Suite("Replay into an index table")
struct IndexTableReplayTests {
    /// An index with people, tags, shared and moved tokens and deletions.
    static func sampleIndex() throws -> AppIndex {
        var index = AppIndex(appID: liveKey.app, mode: liveKey.mode)
        for seed in 0..<400 {
            var request = RegisterRequest(token: try apnsToken(seed % 300))
            if seed % 3 != 0 { request.externalID = .set(try ExternalID("person \(seed % 50) ✓")) }
            if seed % 4 == 0 { request.tags = .merge(["plan": .string("pro"), "ünïcode": .number(Double(seed))]) }
            if seed % 5 == 0 { request.tags = .merge(["b": .bool(true), "a": .string("x")]) }
            if case .failure(let rejection) = index.register(request, at: now) {
                preconditionFailure("registration refused: \(rejection)")
            }
        }
        return index
    }

    @Test("a snapshot replayed from its bytes (hints, borrowed decoding, fast paths) equals the index that wrote it")
    func bytesReplayEqualsSource() throws {
        let source = try Self.sampleIndex()
        var records = [
            EngineRecord.indexSize(
                liveKey, devices: UInt64(source.count), people: UInt64(source.stats().people)
            ).encoded()
        ]
        records += source.snapshotMutations().map { EngineRecord.mutation(liveKey, $0).encoded() }
        var fromBytes = IndexTable()
        var generic = AppIndex(appID: liveKey.app, mode: liveKey.mode)
        for bytes in records {
            let record = try bytes.withUnsafeBytes { raw in try EngineRecord.decode(raw) }
            #expect(try EngineRecord.decode(bytes) == record)
            try fromBytes.replay(record)
            if case .mutation(_, let mutation) = record { try generic.apply(mutation) }
        }
        let replayed = try #require(fromBytes.indexes[liveKey])
        #expect(replayed.snapshotMutations() == source.snapshotMutations())
        #expect(generic.snapshotMutations() == source.snapshotMutations())
        #expect(replayed.invariantViolations().isEmpty)
    }

    @Test("device and person upserts replayed straight from their bytes (the fast path) equal the decoded replay")
    func fastPathEqualsDecoded() throws {
        let source = try Self.sampleIndex()
        let records = source.snapshotMutations().map { EngineRecord.mutation(liveKey, $0).encoded() }
        var fast = IndexTable()
        var taken = 0
        for bytes in records {
            let applied = bytes.withUnsafeBytes { raw -> Bool in
                guard let upsert = IndexTable.upsert(in: raw) else { return false }
                #expect(upsert.key == liveKey)
                return fast.replayUpsert(upsert.key, encoded: upsert.mutation)
            }
            if applied {
                taken += 1
                switch try EngineRecord.decode(bytes) {
                case .mutation(_, .deviceUpsert), .mutation(_, .personUpsert): break
                default: Issue.record("fast path took a record that is not an upsert")
                }
            } else {
                try fast.replay(EngineRecord.decode(bytes))
            }
        }
        #expect(taken > 200, "only the devices with non-ASCII tag keys take the general path")
        #expect(fast.indexes[liveKey]?.snapshotMutations() == source.snapshotMutations())
        #expect(fast.indexes[liveKey]?.invariantViolations() == [])
        #expect(IndexTable.upsert(in: UnsafeRawBufferPointer(start: nil, count: 0)) == nil)
        for other in [EngineRecord.appRemoved(liveKey.app), .indexSize(liveKey, devices: 1, people: 1)] {
            #expect(other.encoded().withUnsafeBytes { IndexTable.upsert(in: $0) } == nil)
        }
    }

    @Test("an index-size hint reserves room and changes no state, even for an index that exists")
    func hintChangesNothing() throws {
        var table = IndexTable()
        try table.replay(.indexSize(liveKey, devices: 100_000, people: 0))
        #expect(
            table.indexes[liveKey]?.snapshotMutations()
                == AppIndex(appID: liveKey.app, mode: liveKey.mode).snapshotMutations())
        for mutation in try Self.sampleIndex().snapshotMutations() { try table.replay(.mutation(liveKey, mutation)) }
        let before = table.indexes[liveKey]?.snapshotMutations()
        try table.replay(.indexSize(liveKey, devices: 3, people: 1_000_000))
        #expect(table.indexes[liveKey]?.snapshotMutations() == before)
        #expect(table.indexes[liveKey]?.invariantViolations() == [])
    }
}

@Suite("Shards and the registry")
struct RegistryTests {
    @Test("64 concurrent registrations of one token produce exactly one device")
    func concurrentSameToken() async throws {
        let registry = Registry(shardCount: 2, log: VolatileLog())
        let token = try apnsToken(1)
        let ids = try await withThrowingTaskGroup(of: DeviceID?.self) { group in
            for _ in 0..<64 { group.addTask { try await register(registry, token) } }
            var ids: [DeviceID?] = []
            for try await id in group { ids.append(id) }
            return ids
        }
        #expect(Set(ids.compactMap { $0 }).count == 1)
        let devices = await registry.perform(liveKey) { index in (index.stats().devices, []) }
        #expect(devices == 1)
    }

    @Test("commands for one shard run in the order they were submitted, across turns")
    func fifoOrder() async throws {
        let registry = Registry(shardCount: 3, log: VolatileLog())
        let seen = Mutex<[Int]>([])
        let count = ShardLoop.commandsPerTurnMax * 2 + 500
        let work: [ShardWork] = (0..<count).map { number in
            .index(
                liveKey, settings: .defaults,
                .custom(
                    CustomWork { _ in
                        seen.withLock { $0.append(number) }
                        return (number, [])
                    }))
        }
        let outcomes = await registry.shardSet.perform(batch: work)
        #expect(seen.withLock { $0 } == Array(0..<count))
        #expect(outcomes.count == count)
    }

    @Test("the same app always lands on the same shard, and apps spread over shards")
    func stableSharding() {
        let counts = (1...1000).reduce(into: [Int](repeating: 0, count: 4)) { counts, app in
            counts[ShardSet.shardNumber(for: AppID(UInt32(app)), shardCount: 4)] += 1
        }
        #expect(counts.allSatisfy { $0 > 150 })
        #expect(
            ShardSet.shardNumber(for: AppID(17), shardCount: 4) == ShardSet.shardNumber(for: AppID(17), shardCount: 4))
    }
}

@Suite("Durable engine")
struct DurableEngineTests {
    static func options(_ fileSystem: FaultInjectingFileSystem) -> StorageOptions {
        var options = StorageOptions()
        options.fileSystem = fileSystem
        options.segmentBytesMax = 2 * 1024 * 1024
        options.logger = Logger(output: .memory)
        return options
    }

    /// Every index's canonical state, for comparing two engines.
    static func state(_ engine: DurableEngine) async -> [IndexKey: [Mutation]] {
        var result: [IndexKey: [Mutation]] = [:]
        for shard in engine.registry.shardSet.shards {
            for key in await shard.keys() {
                result[key] = await shard.read(key) { $0.snapshotMutations() }
            }
        }
        return result
    }

    @Test("writes survive a close and reopen, with and without a snapshot in between")
    func reopen() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = Self.options(fileSystem)
        let (engine, _) = try DurableEngine.open(directory: "/data", policy: .always, shardCount: 2, options: options)
        for seed in 0..<200 { _ = try await register(engine.registry, try apnsToken(seed), person: "p\(seed % 17)") }
        let snapshot = try await engine.snapshot()
        #expect(snapshot != nil)
        for seed in 150..<260 { _ = try await register(engine.registry, try apnsToken(seed), person: "q\(seed % 5)") }
        let before = await Self.state(engine)
        engine.close()

        let (reopened, report) = try DurableEngine.open(
            directory: "/data", policy: .always, shardCount: 2, options: options)
        #expect(report.snapshotRecords > 0)
        #expect(report.logRecords > 0)
        #expect(await Self.state(reopened) == before)
        reopened.close()
    }

    @Test("acknowledged writes survive a simulated power loss under fsync always")
    func powerLoss() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = Self.options(fileSystem)
        let (engine, _) = try DurableEngine.open(directory: "/data", policy: .always, shardCount: 1, options: options)
        var acknowledged: [DeviceID] = []
        for seed in 0..<50 {
            if let id = try await register(engine.registry, try apnsToken(seed)) { acknowledged.append(id) }
        }
        fileSystem.simulateCrash(.dropUnsynced)
        engine.close()
        let (reopened, _) = try DurableEngine.open(directory: "/data", policy: .always, shardCount: 1, options: options)
        let expected = acknowledged
        let present = await reopened.registry.perform(liveKey) { index in
            (expected.filter { index.device($0) != nil }.count, [])
        }
        #expect(present == expected.count)
        reopened.close()
    }

    @Test("after a failed fdatasync no write is acknowledged; reads of what it did not touch still answer")
    func failedSync() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = Self.options(fileSystem)
        let (engine, _) = try DurableEngine.open(directory: "/data", policy: .always, shardCount: 1, options: options)
        let untouched = IndexKey(app: AppID(9), mode: .test)
        #expect(try await register(engine.registry, try apnsToken(1)) != nil)
        #expect(await engine.registry.perform(untouched) { index in (index.stats().devices, []) } == 0)
        fileSystem.inject(.init(operation: .syncData, nth: 1, errno: 5))
        #expect(try await register(engine.registry, try apnsToken(2)) == nil)
        #expect(try await register(engine.registry, try apnsToken(3)) == nil)
        #expect(!engine.registry.acceptsWrites)
        let devices = await engine.registry.perform(untouched) { index in (index.stats().devices, []) }
        #expect(devices == 0, "a read is served after the log failed")
        engine.close()
    }
}
