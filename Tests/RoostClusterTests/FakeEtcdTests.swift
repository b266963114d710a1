import RoostCluster
import RoostTesting
import Testing

/// `FakeEtcd` answers as etcd 3.4 does in what the cluster relies on
/// (spec §13): the leader key bound to a lease, appends fenced on the leader
/// key's create revision, watches from a revision, compaction; and it
/// injects the faults the simulation needs, from a seed.
@Suite("FakeEtcd: etcd 3.4's semantics and faults, in memory")
struct FakeEtcdTests {
    static let leaderKey = Array("/roost/test/leader".utf8)
    static let logPrefix = Array("/roost/test/log/".utf8)

    static func logKey(_ number: Int) -> [UInt8] {
        logPrefix + Array(String(number).utf8)
    }

    /// Takes the leader key with `lease` if nobody holds it; returns the create revision (the epoch) or nil.
    static func campaign(_ etcd: inout FakeEtcd, node: String, lease: EtcdLeaseID) -> EtcdRevision? {
        let answer = etcd.handle(
            .transaction(
                compares: [EtcdCompare(key: leaderKey, .equal, .createRevision(EtcdRevision(0)))],
                success: [.put(key: leaderKey, value: Array(node.utf8), lease: lease)],
                failure: []))
        guard case .transaction(true, let revision, _) = answer else { return nil }
        return revision
    }

    /// Appends one batch fenced on the leader key's create revision.
    static func append(_ etcd: inout FakeEtcd, _ number: Int, epoch: EtcdRevision) -> EtcdResponse {
        etcd.handle(
            .transaction(
                compares: [EtcdCompare(key: leaderKey, .equal, .createRevision(epoch))],
                success: [.put(key: logKey(number), value: [UInt8(number & 0xff)], lease: nil)],
                failure: [.range(.key(leaderKey), limit: 1)]))
    }

    static func grant(_ etcd: inout FakeEtcd, seconds: Int64) throws -> EtcdLeaseID {
        guard case .lease(let id, _) = etcd.handle(.grantLease(ttlSeconds: seconds)) else {
            throw FakeEtcdTestError.unexpected
        }
        return id
    }

    @Test("one leader at a time: the key is bound to a lease, and a new epoch starts only once it expired")
    func leaderKeyAndLease() throws {
        var etcd = FakeEtcd(seed: 1)
        let first = try Self.grant(&etcd, seconds: 2)
        let epoch = try #require(Self.campaign(&etcd, node: "a", lease: first))
        let early = try Self.grant(&etcd, seconds: 2)
        #expect(Self.campaign(&etcd, node: "b", lease: early) == nil, "the key is held")
        // Renewed before its TTL, the lease lives on.
        etcd.advance(byMilliseconds: 1_500)
        #expect(etcd.handle(.keepAlive(first)) == .keptAlive(first, ttlSeconds: 2))
        etcd.advance(byMilliseconds: 1_500)
        #expect(etcd.value(of: Self.leaderKey)?.value == Array("a".utf8))
        // Not renewed: it expires, the key goes, another node takes a later epoch.
        etcd.advance(byMilliseconds: 2_000)
        #expect(etcd.value(of: Self.leaderKey) == nil)
        #expect(etcd.handle(.keepAlive(first)) == .failed(.leaseNotFound))
        #expect(etcd.handle(.keepAlive(early)) == .failed(.leaseNotFound), "b's first lease ran out too")
        let second = try Self.grant(&etcd, seconds: 2)
        let next = try #require(Self.campaign(&etcd, node: "b", lease: second))
        #expect(next > epoch)
    }

    @Test("an append fenced on the leader key fails once another epoch holds it, and writes nothing")
    func fencedAppend() throws {
        var etcd = FakeEtcd(seed: 2)
        let lease = try Self.grant(&etcd, seconds: 1)
        let epoch = try #require(Self.campaign(&etcd, node: "a", lease: lease))
        guard case .transaction(true, let revision, _) = Self.append(&etcd, 1, epoch: epoch) else {
            Issue.record("the leader's append failed")
            return
        }
        #expect(etcd.value(of: Self.logKey(1))?.modRevision == revision)
        etcd.advance(byMilliseconds: 1_000)  // the deposed leader paused past its TTL
        let other = try Self.grant(&etcd, seconds: 1)
        let newEpoch = try #require(Self.campaign(&etcd, node: "b", lease: other))
        let before = etcd.revision
        guard case .transaction(false, _, let results) = Self.append(&etcd, 2, epoch: epoch) else {
            Issue.record("a deposed leader appended")
            return
        }
        #expect(etcd.value(of: Self.logKey(2)) == nil)
        #expect(etcd.revision == before, "a failed compare changes nothing")
        guard case .range(let holder)? = results.first else {
            Issue.record("no failure branch result")
            return
        }
        #expect(holder.first?.createRevision == newEpoch)
    }

    @Test("revisions: one per changing transaction, shared by its writes; reads and no-op deletes do not count")
    func revisions() {
        var etcd = FakeEtcd(seed: 3)
        #expect(etcd.revision == EtcdRevision(1))
        _ = etcd.handle(
            .transaction(
                compares: [],
                success: [
                    .put(key: Self.logKey(1), value: [1], lease: nil),
                    .put(key: Self.logKey(2), value: [2], lease: nil),
                ], failure: []))
        #expect(etcd.revision == EtcdRevision(2))
        #expect(etcd.value(of: Self.logKey(1))?.modRevision == etcd.value(of: Self.logKey(2))?.modRevision)
        _ = etcd.handle(.transaction(compares: [], success: [.range(.prefix(Self.logPrefix), limit: 0)], failure: []))
        _ = etcd.handle(.transaction(compares: [], success: [.delete(.key(Self.logKey(9)))], failure: []))
        #expect(etcd.revision == EtcdRevision(2))
        _ = etcd.handle(
            .transaction(compares: [], success: [.put(key: Self.logKey(1), value: [3], lease: nil)], failure: []))
        #expect(etcd.value(of: Self.logKey(1))?.version == 2)
        #expect(etcd.value(of: Self.logKey(1))?.createRevision == EtcdRevision(2))
    }

    @Test("a watch delivers every change from its revision once; compaction makes an older start fail")
    func watchAndCompaction() throws {
        var etcd = FakeEtcd(seed: 4)
        for number in 1...5 {
            _ = etcd.handle(
                .transaction(
                    compares: [], success: [.put(key: Self.logKey(number), value: [0], lease: nil)], failure: []))
        }
        let watch = try etcd.watch(.prefix(Self.logPrefix), from: EtcdRevision(4)).get()
        let events = try etcd.takeEvents(watch).get()
        #expect(events.map(\.revision) == [EtcdRevision(4), EtcdRevision(5), EtcdRevision(6)])
        #expect(try etcd.takeEvents(watch).get().isEmpty)
        #expect(etcd.handle(.compact(EtcdRevision(5))) == .compacted(EtcdRevision(5)))
        #expect(
            etcd.watch(.prefix(Self.logPrefix), from: EtcdRevision(3))
                == .failure(.compacted(compactRevision: EtcdRevision(5))))
        #expect(etcd.handle(.compact(EtcdRevision(99))) == .failed(.futureRevision))
        // Compaction keeps the keys: only history goes.
        #expect(etcd.values(in: .prefix(Self.logPrefix)).count == 5)
    }

    @Test("etcd 3.4.23's faults, from the seed: duplicated, lost and rewound events, keep-alive after revoke")
    func faults() throws {
        var etcd = FakeEtcd(seed: 5)
        etcd.faults.duplicateEventPercent = 30
        etcd.faults.dropEventPercent = 20
        etcd.faults.rewindPercent = 30
        etcd.faults.keepAliveAfterRevokePercent = 100
        let watch = try etcd.watch(.prefix(Self.logPrefix), from: EtcdRevision(1)).get()
        var seen: [EtcdRevision] = []
        for number in 1...200 {
            _ = etcd.handle(
                .transaction(
                    compares: [], success: [.put(key: Self.logKey(number), value: [0], lease: nil)], failure: []))
            seen += try etcd.takeEvents(watch).get().map(\.revision)
        }
        let distinct = Set(seen)
        #expect(seen.count > distinct.count, "no duplicate or rewound event in 200")
        #expect(distinct.count < 200, "no event lost in 200")
        #expect(seen != seen.sorted() || seen.count > distinct.count)
        let lease = try Self.grant(&etcd, seconds: 5)
        #expect(etcd.handle(.revokeLease(lease)) == .revoked(revision: etcd.revision))
        #expect(etcd.handle(.keepAlive(lease)) == .keptAlive(lease, ttlSeconds: 1), "the 3.4.23 false success")
        #expect(etcd.handle(.revokeLease(lease)) == .failed(.leaseNotFound))
        // The same seed gives the same faults.
        var again = FakeEtcd(seed: 5)
        again.faults = etcd.faults
        let replay = try again.watch(.prefix(Self.logPrefix), from: EtcdRevision(1)).get()
        var seenAgain: [EtcdRevision] = []
        for number in 1...200 {
            _ = again.handle(
                .transaction(
                    compares: [], success: [.put(key: Self.logKey(number), value: [0], lease: nil)], failure: []))
            seenAgain += try again.takeEvents(replay).get().map(\.revision)
        }
        #expect(seenAgain == seen)
    }

    @Test("without a quorum every request fails as unavailable; a put on a lease that is gone fails whole")
    func unavailableAndLostLease() throws {
        var etcd = FakeEtcd(seed: 6)
        let lease = try Self.grant(&etcd, seconds: 1)
        etcd.unavailable = true
        #expect(etcd.handle(.keepAlive(lease)) == .failed(.unavailable))
        #expect(Self.campaign(&etcd, node: "a", lease: lease) == nil)
        etcd.unavailable = false
        etcd.advance(byMilliseconds: 1_000)
        #expect(
            etcd.handle(
                .transaction(compares: [], success: [.put(key: Self.leaderKey, value: [1], lease: lease)], failure: []))
                == .failed(.leaseNotFound))
        #expect(etcd.value(of: Self.leaderKey) == nil)
        let big = [UInt8](repeating: 7, count: FakeEtcd.requestBytesMax)
        #expect(
            etcd.handle(
                .transaction(compares: [], success: [.put(key: Self.logKey(1), value: big, lease: nil)], failure: []))
                == .failed(.requestTooLarge))
    }
}

enum FakeEtcdTestError: Error {
    case unexpected
}
