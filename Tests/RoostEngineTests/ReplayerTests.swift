import RoostModel
import RoostStorage
import Testing

@testable import RoostEngine

@Suite("Replayer: the one place a read-back record changes state")
struct ReplayerTests {
    /// Applies `records` to `replayer` from `source`.
    private func apply(_ records: [[UInt8]], to replayer: inout Replayer, from source: Replayer.Source) throws {
        for (number, bytes) in records.enumerated() {
            try bytes.withUnsafeBytes { raw in
                try replayer.apply(raw, from: source) { "record \(number)" }
            }
        }
    }

    @Test("records reach the table of their app's shard; the catalog's payloads are kept in order")
    func routing() throws {
        let shardCount = 4
        var replayer = Replayer(shardCount: shardCount, changesRetained: ChangeFeed.retainedDefault)
        let apps = [AppID(1), AppID(2), AppID(3)]
        #expect(Set(apps.map { ShardSet.shardNumber(for: $0, shardCount: shardCount) }).count > 1)
        var sources: [AppID: AppIndex] = [:]
        var records: [[UInt8]] = []
        for app in apps {
            let key = IndexKey(app: app, mode: .live)
            var source = AppIndex(appID: app, mode: .live)
            for seed in 0..<20 {
                var request = RegisterRequest(token: try apnsToken(seed))
                request.externalID = .set(try ExternalID("person \(seed % 7)"))
                guard case .success = source.register(request, at: now) else { preconditionFailure("refused") }
            }
            sources[app] = source
            records += source.snapshotMutations().map { EngineRecord.mutation(key, $0).encoded() }
            records.append(EngineRecord.catalog([1, 5, UInt8(app.rawValue), 0, 0, 0]).encoded())
        }
        try apply(records, to: &replayer, from: .snapshot(recordCount: UInt64(records.count)))
        try replayer.checkSnapshotEnded()
        let (tables, catalog) = replayer.finish()
        #expect(catalog == apps.map { [1, 5, UInt8($0.rawValue), 0, 0, 0] })
        for app in apps {
            let key = IndexKey(app: app, mode: .live)
            let shard = ShardSet.shardNumber(for: app, shardCount: shardCount)
            #expect(tables[shard].indexes[key]?.snapshotMutations() == sources[app]?.snapshotMutations())
            for other in 0..<shardCount where other != shard {
                #expect(tables[other].indexes[key] == nil, "app \(app.rawValue) also in shard \(other)")
            }
        }
    }

    @Test(
        "a device change read from the log takes its count of the index's records in the change feed; one from a snapshot does not"
    )
    func changePositions() throws {
        var index = AppIndex(appID: liveKey.app, mode: liveKey.mode)
        var request = RegisterRequest(token: try apnsToken(1))
        request.externalID = .set(try ExternalID("ada"))
        guard case .success(let outcome) = index.register(request, at: now) else {
            Issue.record("registration refused")
            return
        }
        let records = outcome.mutations.map { EngineRecord.mutation(liveKey, $0).encoded() }

        var fromLog = Replayer(shardCount: 1, changesRetained: ChangeFeed.retainedDefault)
        for (number, bytes) in records.enumerated() {
            try bytes.withUnsafeBytes { raw in
                try fromLog.apply(raw, from: .log(LogSequenceNumber(41 + UInt64(number)))) { "record \(number)" }
            }
        }
        let logged = try #require(fromLog.finish().tables[0].indexes[liveKey])
        guard case .success(let page) = logged.changesPage(after: nil, limit: 10) else {
            Issue.record("no feed page")
            return
        }
        // Counted: the index's first record (the change time is not in this
        // turn's mutations) is at position 1, whatever its LSN.
        let deviceRecord = try #require(outcome.mutations.firstIndex { ChangedDevice($0) != nil })
        #expect(page.changes.map(\.position) == [UInt64(deviceRecord + 1)])
        #expect(logged.position == UInt64(records.count))

        var fromSnapshot = Replayer(shardCount: 1, changesRetained: ChangeFeed.retainedDefault)
        try apply(records, to: &fromSnapshot, from: .snapshot(recordCount: 10))
        let snapshotted = try #require(fromSnapshot.finish().tables[0].indexes[liveKey])
        guard case .success(let empty) = snapshotted.changesPage(after: nil, limit: 10) else {
            Issue.record("no feed page")
            return
        }
        #expect(empty.changes.isEmpty)
    }

    @Test("an undecodable record and an index image part read from the log are refused, naming where")
    func refusals() throws {
        var replayer = Replayer(shardCount: 2, changesRetained: ChangeFeed.retainedDefault)
        #expect(throws: EngineRecoveryError.self) {
            try apply([[9, 9, 9]], to: &replayer, from: .log(LogSequenceNumber(1)))
        }
        let part = EngineRecord.indexImage(liveKey, [0, 1, 2, 3]).encoded()
        do {
            try apply([part], to: &replayer, from: .log(LogSequenceNumber(2)))
            Issue.record("an image part from the log was applied")
        } catch let error as EngineRecoveryError {
            #expect(error.where == "record 0")
        }
    }
}
