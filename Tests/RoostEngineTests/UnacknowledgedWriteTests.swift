import Glibc
import RoostModel
import RoostStorage
import RoostTesting
import Testing

@testable import RoostEngine

/// Roost issue 9, finding 5: a write answered 503 after the disk filled was
/// still visible to reads until a restart, although spec §2 says it was not
/// applied. The engine now stops serving what such a write changed.
@Suite("Writes the log never acknowledged stay invisible")
struct UnacknowledgedWriteTests {
    static let otherKey = IndexKey(app: AppID(2), mode: .live)

    /// The number of devices of `key`, or nil when the read is answered 503.
    static func devices(_ registry: Registry, _ key: IndexKey = liveKey) async -> Int? {
        await registry.perform(key) { index in (index.stats().devices, []) }
    }

    /// Registers `token` in `key`'s index; nil when answered 503.
    static func register(_ registry: Registry, _ key: IndexKey, _ token: PushToken) async -> DeviceID? {
        await registry.perform(key) { index in
            switch index.register(RegisterRequest(token: token), at: now) {
            case .success(let outcome): return (outcome.device.id, outcome.mutations)
            case .failure(let rejection): preconditionFailure("registration refused: \(rejection)")
            }
        }
    }

    @Test("ENOSPC: the write answered 503 is not visible to reads; an index it did not touch is still read")
    func diskFull() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let (engine, _) = try DurableEngine.open(
            directory: "/data", policy: .always, shardCount: 1, options: DurableEngineTests.options(fileSystem))
        defer { engine.close() }
        #expect(await Self.register(engine.registry, liveKey, try apnsToken(1)) != nil)
        #expect(await Self.register(engine.registry, Self.otherKey, try apnsToken(2)) != nil)
        fileSystem.inject(.init(operation: .write, nth: 1, errno: ENOSPC, pathContains: "/wal/", sticky: true))
        #expect(await Self.register(engine.registry, liveKey, try apnsToken(3)) == nil, "answered 503")
        #expect(!engine.registry.acceptsWrites)
        // Reading the index it changed would show the write: 503 until restart.
        #expect(await Self.devices(engine.registry) == nil)
        // The other index holds only acknowledged writes: still served.
        #expect(await Self.devices(engine.registry, Self.otherKey) == 1)
        // A write that reaches the shard after the failure changes nothing.
        #expect(await Self.register(engine.registry, Self.otherKey, try apnsToken(4)) == nil)
        #expect(await Self.devices(engine.registry, Self.otherKey) == 1)
    }

    @Test("an append the log refuses at once: that index answers 503 from then on, others are unaffected")
    func refusedAppend() async throws {
        let log = ManualLog()
        let registry = Registry(shardCount: 1, log: log)
        let first = Task { await Self.register(registry, Self.otherKey, try apnsToken(5)) }
        #expect(await soon { log.state.withLock { $0.appended } >= 1 })
        log.acknowledgeAll()
        #expect(try await first.value != nil)
        log.state.withLock { $0.refusing = true }
        #expect(await Self.register(registry, liveKey, try apnsToken(6)) == nil)
        log.state.withLock { $0.refusing = false }
        #expect(await Self.devices(registry) == nil, "the refused registration must not show")
        #expect(await Self.devices(registry, Self.otherKey) == 1)
    }

    @Test(
        "the log fails while a write and a read of its index wait: both answer 503, a read of another index is served")
    func failureWhileWaiting() async throws {
        let log = ManualLog()
        let registry = Registry(shardCount: 1, log: log)
        let first = Task { await Self.register(registry, Self.otherKey, try apnsToken(7)) }
        #expect(await soon { log.state.withLock { $0.appended } >= 1 })
        log.acknowledgeAll()
        #expect(try await first.value != nil)
        // The first write may append more than one record (an index's first
        // write): wait for the second write's own records, not for a count.
        let before = log.state.withLock { $0.appended }
        let write = Task { await Self.register(registry, liveKey, try apnsToken(8)) }
        #expect(await soon { log.state.withLock { $0.appended } > before })
        let sameIndex = Task { await Self.devices(registry) }
        let otherIndex = Task { await Self.devices(registry, Self.otherKey) }
        // The reads may reach the shard before the failure or after it: 503 either way.
        log.fail()
        #expect(try await write.value == nil)
        #expect(await sameIndex.value == nil, "a read that could show the failed write")
        #expect(await otherIndex.value == 1)
        // Later reads: the same.
        #expect(await Self.devices(registry) == nil)
        #expect(await Self.devices(registry, Self.otherKey) == 1)
    }
}
