import Testing

@testable import RoostModel

/// `ChangeFeed` (spec §9 `GET /v1/changes`): one entry per device at its
/// latest change, retention and expiry, snapshot slices, the codec.
@Suite("Change feed (spec §9)")
struct ChangeFeedTests {
    static let t0 = Timestamp(millisecondsSinceEpoch: 1_800_000_000_000)

    static func at(_ offset: Int64) -> Timestamp { t0.adding(milliseconds: offset) }

    static func positions(_ page: ChangeFeed.Page) -> [UInt64] { page.entries.map(\.position) }

    @Test("each device appears once, at its latest change, in position order; a deletion is a tombstone")
    func latestOnly() throws {
        var feed = ChangeFeed()
        feed.record(sequence: 1, platform: .ios, deleted: false, at: Self.at(0), position: 10)
        feed.record(sequence: 2, platform: .android, deleted: false, at: Self.at(1), position: 11)
        feed.record(sequence: 1, platform: .ios, deleted: false, at: Self.at(2), position: 15)
        feed.record(sequence: 2, platform: .android, deleted: true, at: Self.at(3), position: 20)
        let page = try feed.page(after: nil, limit: 10).get()
        #expect(Self.positions(page) == [15, 20])
        #expect(page.entries.map(\.sequence) == [1, 2])
        #expect(page.entries.map(\.deleted) == [false, true])
        #expect(page.entries.map(\.at) == [Self.at(2), Self.at(3)])
        #expect(page.next == 20)
        #expect(try feed.page(after: 15, limit: 10).get().entries.map(\.sequence) == [2])
        let empty = try feed.page(after: 20, limit: 10).get()
        #expect(empty.entries.isEmpty && empty.next == 20, "nothing after the last: the cursor comes back")
        let afterFirst = try feed.page(after: 15, limit: 1).get()
        let afterLast = try feed.page(after: 20, limit: 1).get()
        #expect(!afterFirst.entries.isEmpty && afterLast.entries.isEmpty)
    }

    @Test("pages of `limit` chain through every change without a gap or a repeat")
    func paging() throws {
        var feed = ChangeFeed()
        for n in 1...25 {
            feed.record(sequence: UInt64(n), platform: .ios, deleted: false, at: Self.t0, position: UInt64(n * 3))
        }
        var cursor: UInt64? = nil
        var seen: [UInt64] = []
        while true {
            let page = try feed.page(after: cursor, limit: 4).get()
            if page.entries.isEmpty { break }
            seen += page.entries.map(\.sequence)
            cursor = page.next
        }
        #expect(seen == (1...25).map(UInt64.init))
    }

    @Test("a position at or below the last one is already held: recording it changes nothing")
    func replayIsIdempotent() {
        var feed = ChangeFeed()
        let first = feed.record(sequence: 1, platform: .ios, deleted: false, at: Self.t0, position: 5)
        #expect(first)
        let before = feed
        let same = feed.record(sequence: 9, platform: .ios, deleted: false, at: Self.t0, position: 5)
        let older = feed.record(sequence: 9, platform: .ios, deleted: false, at: Self.t0, position: 3)
        #expect(!same && !older)
        #expect(feed == before)
    }

    @Test("past the retention the oldest device is dropped; a cursor below it is expired, one at it is not")
    func retention() throws {
        var feed = ChangeFeed(retainedMax: 3)
        for n in 1...5 {
            feed.record(sequence: UInt64(n), platform: .ios, deleted: n == 2, at: Self.t0, position: UInt64(n))
        }
        #expect(feed.retainedCount == 3)
        #expect(feed.expiredThrough == 2)
        #expect(feed.page(after: 1, limit: 10) == .failure(.expired(retainedFrom: 2)))
        #expect(Self.positions(try feed.page(after: 2, limit: 10).get()) == [3, 4, 5])
        #expect(
            Self.positions(try feed.page(after: nil, limit: 10).get()) == [3, 4, 5], "no cursor: the oldest retained")
        // A device changing again does not count twice.
        feed.record(sequence: 5, platform: .ios, deleted: false, at: Self.t0, position: 6)
        #expect(feed.retainedCount == 3 && feed.expiredThrough == 2)
        #expect(Self.positions(try feed.page(after: 2, limit: 10).get()) == [3, 4, 6])
    }

    @Test("a cursor past every change held is refused as another feed's")
    func aheadCursor() {
        var feed = ChangeFeed()
        feed.record(sequence: 1, platform: .ios, deleted: false, at: Self.t0, position: 7)
        #expect(feed.page(after: 8, limit: 1) == .failure(.ahead(last: 7)))
        #expect(ChangeFeed().page(after: 1, limit: 1) == .failure(.ahead(last: 0)))
        #expect((try? ChangeFeed().page(after: 0, limit: 1).get())?.entries.isEmpty == true)
    }

    @Test("positions count the index's own records: each record at a new LSN takes the next number, once")
    func countedPositions() throws {
        var feed = ChangeFeed()
        #expect(feed.countRecord(lsn: 5) == 1)
        #expect(feed.countRecord(lsn: 9) == 2)
        // LSN 9 again (a replay over a snapshot that holds it), or an older one: counted already.
        #expect(feed.countRecord(lsn: 9) == nil && feed.countRecord(lsn: 7) == nil)
        let counted = feed.countRecord(lsn: 1_000)
        let position = try #require(counted)
        feed.record(sequence: 1, platform: .ios, deleted: false, at: Self.t0, position: position)
        #expect(position == 3 && feed.recordCount == 3 && feed.countedThrough == 1_000)
        #expect(Self.positions(try feed.page(after: 2, limit: 10).get()) == [3])
        #expect(feed.page(after: 4, limit: 1) == .failure(.ahead(last: 3)), "a count this index never reached")
        // A record without a change moves the position; nothing follows it yet.
        #expect(feed.countRecord(lsn: 1_001) == 4)
        #expect(try feed.page(after: 4, limit: 10).get() == ChangeFeed.Page(entries: [], next: 4))
        // The count survives a snapshot.
        var restored = ChangeFeed()
        for slice in feed.snapshotSlices() { try restored.restore(slice) }
        #expect(restored == feed && restored.recordCount == 4 && restored.countedThrough == 1_001)
        #expect(restored.countRecord(lsn: 1_001) == nil && restored.countRecord(lsn: 1_002) == 5)
    }

    @Test("a legacy slice (LSN positions) keeps its cursors and counts on far above them: a tail cursor misses nothing")
    func legacySlice() throws {
        let entries = [10, 40].map { (position: UInt64) in
            ChangeFeed.Entry(position: position, sequence: position, platform: .ios, deleted: false, at: Self.t0)
        }
        var feed = ChangeFeed()
        try feed.restore(ChangeFeedSlice(expiredThrough: 0, lastPosition: 40, entries: entries, counted: nil))
        #expect(feed.countedThrough == 40 && feed.recordCount == 40 + ChangeFeed.legacyGap)
        #expect(Self.positions(try feed.page(after: 10, limit: 10).get()) == [40], "a cursor the old server gave")
        // The log's tail after the old snapshot: LSN 41 (a non-change) and 57 (a change).
        #expect(feed.countRecord(lsn: 41) == 41 + ChangeFeed.legacyGap)
        let tail = feed.countRecord(lsn: 57)
        let position = try #require(tail)
        feed.record(sequence: 99, platform: .ios, deleted: false, at: Self.t0, position: position)
        // The old server gave cursor 57 for that change (an LSN): read again, never skipped.
        #expect(Self.positions(try feed.page(after: 57, limit: 10).get()) == [position])
        #expect(Self.positions(try feed.page(after: 40, limit: 10).get()) == [position])
    }

    @Test("compaction keeps every live entry (many changes of few devices)")
    func compaction() throws {
        var feed = ChangeFeed()
        var position: UInt64 = 0
        for round in 0..<3_000 {
            for device in 1...5 {
                position += 1
                feed.record(
                    sequence: UInt64(device), platform: .android, deleted: false, at: Self.at(Int64(round)),
                    position: position)
            }
        }
        #expect(feed.entries.count < ChangeFeed.compactionSlack * 2 + 10, "superseded entries are compacted away")
        let page = try feed.page(after: nil, limit: 100).get()
        #expect(Self.positions(page) == Array((position - 4)...position))
    }

    @Test("snapshot slices restore the same feed, retention marks included; restoring twice changes nothing")
    func snapshotRoundTrip() throws {
        var feed = ChangeFeed(retainedMax: 1_200)
        for n in 1...1_500 {
            feed.record(
                sequence: UInt64(n % 1_300 + 1), platform: n % 3 == 0 ? .android : .ios, deleted: n % 7 == 0,
                at: Self.at(Int64(n)), position: UInt64(n * 2))
        }
        let slices = feed.snapshotSlices()
        #expect(slices.count == 3, "1,200 live entries in slices of \(ChangeFeed.entriesPerSnapshotRecordMax)")
        var restored = ChangeFeed(retainedMax: 1_200)
        for slice in slices { try restored.restore(slice) }
        #expect(restored == feed)
        for slice in slices { try restored.restore(slice) }
        #expect(restored == feed)
        // The empty feed still carries its marks.
        #expect(ChangeFeed().snapshotSlices().count == 1)
    }

    @Test("a slice out of order or out of its bounds is refused")
    func badSlices() {
        let entry = { (position: UInt64) in
            ChangeFeed.Entry(position: position, sequence: 1, platform: .ios, deleted: false, at: Self.t0)
        }
        var feed = ChangeFeed()
        #expect(throws: MutationApplyError.invalidChangeFeed) {
            try feed.restore(
                ChangeFeedSlice(expiredThrough: 0, lastPosition: 10, entries: [entry(5), entry(4)], counted: nil))
        }
        #expect(throws: MutationApplyError.invalidChangeFeed) {
            try feed.restore(ChangeFeedSlice(expiredThrough: 0, lastPosition: 4, entries: [entry(5)], counted: nil))
        }
        #expect(throws: MutationApplyError.invalidChangeFeed) {
            try feed.restore(ChangeFeedSlice(expiredThrough: 5, lastPosition: 9, entries: [entry(5)], counted: nil))
        }
        #expect(throws: MutationApplyError.invalidChangeFeed) {
            try feed.restore(ChangeFeedSlice(expiredThrough: 9, lastPosition: 5, entries: [], counted: nil))
        }
    }

    @Test("the codec round-trips change times and feed slices and refuses a slice out of order")
    func codec() throws {
        let slice = ChangeFeedSlice(
            expiredThrough: 3, lastPosition: 90,
            entries: [
                ChangeFeed.Entry(position: 4, sequence: 17, platform: .ios, deleted: false, at: Self.t0),
                ChangeFeed.Entry(position: 90, sequence: 2, platform: .android, deleted: true, at: Self.at(5)),
            ], counted: nil)
        var counted = slice
        counted.counted = ChangeFeedSlice.Counted(recordCount: 95, countedThrough: 4_000)
        for mutation in [
            Mutation.changeTime(Self.at(42)), .changeFeed(slice), .changeFeed(counted),
            .changeFeed(ChangeFeedSlice(expiredThrough: 0, lastPosition: 0, entries: [], counted: nil)),
        ] {
            #expect(try MutationCodec.decode(MutationCodec.encode(mutation)) == mutation)
        }
        var full: [ChangeFeed.Entry] = []
        for n in 1...ChangeFeed.entriesPerSnapshotRecordMax {
            full.append(
                ChangeFeed.Entry(position: UInt64(n), sequence: UInt64(n), platform: .ios, deleted: false, at: Self.t0))
        }
        let largest = MutationCodec.encode(
            .changeFeed(
                ChangeFeedSlice(
                    expiredThrough: 0, lastPosition: UInt64(full.count), entries: full,
                    counted: .init(recordCount: .max, countedThrough: .max))))
        #expect(largest.count <= Limits.mutationBytesMax)
        var swapped = MutationCodec.encode(.changeFeed(slice))
        // The two positions (offsets 20 and 46): 90 before 4 is out of order.
        swapped.withUnsafeMutableBytes { bytes in
            bytes.storeBytes(of: UInt64(90).littleEndian, toByteOffset: 20, as: UInt64.self)
        }
        #expect(throws: ByteDecodingError.self) { try MutationCodec.decode(swapped) }
        var belowLast = counted
        belowLast.counted?.recordCount = 89
        #expect(throws: ByteDecodingError.self, "a count below the last change's position") {
            try MutationCodec.decode(MutationCodec.encode(.changeFeed(belowLast)))
        }
    }

    @Test("an index records a device's change where the shard says; its page shows the device as it is")
    func indexPage() throws {
        var index = AppIndex(appID: AppID(1), mode: .live)
        let registered = try index.register(RegisterRequest(token: apnsToken(1)), at: Self.t0).get()
        var position: UInt64 = 100
        for mutation in registered.mutations {
            position += 1
            if let change = ChangedDevice(mutation) { index.recordChange(change, at: Self.t0, position: position) }
        }
        let page = try index.changesPage(after: nil, limit: 10).get()
        #expect(page.changes == [.upsert(position: 101, at: Self.t0, registered.device)])
        let removal = index.deleteDevice(registered.device.id)
        for mutation in removal.mutations {
            if let change = ChangedDevice(mutation) { index.recordChange(change, at: Self.at(1), position: 200) }
        }
        #expect(
            try index.changesPage(after: 101, limit: 10).get().changes == [
                .delete(position: 200, at: Self.at(1), registered.device.id)
            ])
        #expect(index.invariantViolations().isEmpty)
    }

    @Test(
        "a feed at its retention agrees with a plain model through runs of new devices only (nothing superseded) and of repeats, across compactions"
    )
    func retentionAgreesWithModel() throws {
        let retained = 300
        var feed = ChangeFeed(retainedMax: retained)
        // The model: each held device's latest (position, deleted), and the highest position dropped.
        var latest: [UInt64: (position: UInt64, deleted: Bool)] = [:]
        var expiredThrough: UInt64 = 0
        var state: UInt64 = 0x9E37_79B9
        var position: UInt64 = 0
        var nextDevice: UInt64 = 1
        // Long runs of devices never seen (the feed's fast paths: no entry superseded) between
        // runs that change held devices again; each run well past `compactionSlack` changes.
        for run in 0..<6 {
            for _ in 0..<(ChangeFeed.compactionSlack + 2_500) {
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                let repeats = run % 2 == 1 && (state >> 40) % 4 != 0 && !latest.isEmpty
                let device = repeats ? Array(latest.keys)[Int((state >> 20) % UInt64(latest.count))] : nextDevice
                if !repeats { nextDevice += 1 }
                let deleted = (state >> 50) % 16 == 0
                position += 1
                let recorded = feed.record(
                    sequence: device, platform: .ios, deleted: deleted, at: Self.t0, position: position)
                #expect(recorded)
                latest[device] = (position, deleted)
                if latest.count > retained, let oldest = latest.min(by: { $0.value.position < $1.value.position }) {
                    latest[oldest.key] = nil
                    expiredThrough = oldest.value.position
                }
            }
            let page = try feed.page(after: nil, limit: retained + 1).get()
            let expected = latest.sorted { $0.value.position < $1.value.position }
            #expect(page.entries.map(\.sequence) == expected.map(\.key), "run \(run)")
            #expect(page.entries.map(\.position) == expected.map(\.value.position), "run \(run)")
            #expect(page.entries.map(\.deleted) == expected.map(\.value.deleted), "run \(run)")
            #expect(feed.retainedCount == latest.count && feed.expiredThrough == expiredThrough, "run \(run)")
            #expect(
                feed.entries.count <= retained + retained / 4 + ChangeFeed.compactionSlack + 1,
                "run \(run): dropped entries are compacted away")
        }
    }

    @Test("SequenceMap agrees with a Dictionary over random inserts, updates and removals (backward-shift deletion)")
    func sequenceMap() {
        var map = SequenceMap()
        var reference: [UInt64: UInt64] = [:]
        var state: UInt64 = 0x1234_5678
        for step in 0..<200_000 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            let key = (state >> 33) % 3_000 + 1
            if (state >> 20) % 3 == 0 {
                #expect(map.removeValue(forKey: key) == reference.removeValue(forKey: key))
            } else {
                #expect(map.updateValue(UInt64(step), forKey: key) == reference.updateValue(UInt64(step), forKey: key))
            }
        }
        #expect(map.count == reference.count)
        for key in UInt64(1)...3_001 where map[key] != reference[key] {
            Issue.record("key \(key): \(map[key] as Any) vs \(reference[key] as Any)")
        }
    }
}
