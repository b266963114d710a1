/// The change feed of one (app, mode) index (spec §9, `GET /v1/changes`):
/// which devices changed, in commit order, each at most once — at the
/// position of its latest change — with deletions kept as tombstones.
///
/// A position counts the index's own log records (spec §13.1, issue 24
/// L-2): `countRecord` gives each record of the index, in log order, the
/// next number, and a change takes its record's number. So a cursor names a
/// point of the log as this app and mode sees it, means the same after a
/// restart and on every node, and reveals nothing of other apps' writes.
/// `countedThrough` is the LSN of the last record counted, so a replay over
/// a snapshot that holds a record counts it once. A feed restored from a
/// snapshot written before counting (`ChangeFeedSlice.counted` nil) keeps
/// its entries' LSN positions and counts on from `legacyGap` above its last
/// one (`restore`; docs/decisions/0084). The feed keeps the latest
/// change of at most `retainedMax` devices (deleted ones included): past it
/// the oldest is dropped and `expiredThrough` moves to its position, and a
/// cursor below that answers 410 `cursor_expired` (the client may have
/// missed a deletion; it exports again). Memory: 32 bytes per entry (at
/// most 1.25 per device between compactions) and 18–37 in `latest` per
/// retained device — bounded by the retention, not by
/// the device count (docs/model.md "Change feed").
///
/// A pure value, owned by the shard that owns its index; it is rebuilt by
/// replay (every device mutation of the log, at its LSN) on top of the copy
/// a snapshot holds (`snapshotSlices`), so that live and recovered feeds are
/// the same.
package struct ChangeFeed: Sendable, Equatable {
    /// One change: the device (by its sequence and platform), whether it was
    /// deleted, when, and where in the log.
    package struct Entry: Sendable, Hashable {
        package var position: UInt64
        package var sequence: UInt64
        package var at: Timestamp
        package var platform: Platform
        package var deleted: Bool

        package init(position: UInt64, sequence: UInt64, platform: Platform, deleted: Bool, at: Timestamp) {
            self.position = position
            self.sequence = sequence
            self.platform = platform
            self.deleted = deleted
            self.at = at
        }
    }

    /// Why a page cannot be read from a cursor.
    package enum CursorFault: Error, Equatable, Sendable {
        /// Changes after the cursor were dropped by the retention.
        case expired(retainedFrom: UInt64)
        /// The cursor is past every change this feed ever held: it belongs to
        /// another server's (or an older data directory's) log.
        case ahead(last: UInt64)
    }

    /// One page of changes after a cursor.
    package struct Page: Sendable, Equatable {
        package var entries: [Entry]
        /// The cursor to ask from next: the last entry's position, or the
        /// cursor asked from when there was nothing after it.
        package var next: UInt64
    }

    /// The default of `retainedMax` (`roost serve --changes-retained`).
    package static let retainedDefault = 100_000
    /// The largest `retainedMax` accepted (~72 bytes each: 720 MB per index).
    package static let retainedLimit = 10_000_000
    /// Superseded or dropped entries always tolerated before the array is
    /// compacted (`compactIfWorthIt`: past that, once they pass a quarter of
    /// the live ones): amortised O(1) per change.
    static let compactionSlack = 4_096
    /// Entries per snapshot record (`snapshotSlices`): 26 bytes each, so a
    /// record stays under `Limits.mutationBytesMax` (13 KB).
    package static let entriesPerSnapshotRecordMax = 512

    /// Ascending positions; `entries[..<head]` are dropped. An entry is live
    /// while `latest` names its position for its device; a later change of
    /// the device makes it superseded (skipped, then compacted away) with no
    /// search for it: one map update per change.
    private(set) var entries: [Entry] = []
    private var head = 0
    /// Device sequence → position of its live entry.
    private var latest = SequenceMap()
    /// Entries at or after `head` that are no longer live.
    private var supersededCount = 0
    /// Cursors below this position are expired (0: nothing was ever dropped).
    package private(set) var expiredThrough: UInt64 = 0
    /// The position of the newest change held (0: none yet).
    package private(set) var lastPosition: UInt64 = 0
    /// The position of the index's newest record counted (0: none): what a
    /// cursor taken now names. At or above `lastPosition`.
    package private(set) var recordCount: UInt64 = 0
    /// The LSN of the newest record counted (0: none).
    package private(set) var countedThrough: UInt64 = 0
    /// How far above a legacy feed's last position counting resumes: more
    /// records than any pre-counting log held after that position, so that a
    /// legacy cursor (an LSN) taken from the log's tail sorts below every
    /// counted position and reads every later change (decision 0084).
    package static let legacyGap: UInt64 = 1 << 32
    /// The most devices whose latest change is kept.
    package let retainedMax: Int

    package init(retainedMax: Int = ChangeFeed.retainedDefault) {
        precondition((1...Self.retainedLimit).contains(retainedMax), "change retention \(retainedMax)")
        self.retainedMax = retainedMax
    }

    /// Devices whose latest change is held (deleted ones included).
    package var retainedCount: Int { latest.count }

    /// Counts the index's record at `lsn`: returns its position (the count
    /// with it), or nil when it was counted already (`lsn` at or below
    /// `countedThrough`: a replay over a snapshot that holds it). O(1).
    package mutating func countRecord(lsn: UInt64) -> UInt64? {
        guard lsn > countedThrough else { return nil }
        countedThrough = lsn
        recordCount += 1
        return recordCount
    }

    /// Records that device `sequence` changed (or was deleted) at `position`.
    /// Positions only grow: one at or below `lastPosition` is already held
    /// (a replay over a snapshot that has it) and changes nothing; returns
    /// whether it was recorded. Amortised O(1).
    @discardableResult
    package mutating func record(
        sequence: UInt64, platform: Platform, deleted: Bool, at: Timestamp, position: UInt64
    ) -> Bool {
        guard position > lastPosition else { return false }
        if latest.updateValue(position, forKey: sequence) != nil { supersededCount += 1 }
        entries.append(Entry(position: position, sequence: sequence, platform: platform, deleted: deleted, at: at))
        lastPosition = position
        recordCount = max(recordCount, position)
        while latest.count > retainedMax { dropOldest() }
        compactIfWorthIt()
        return true
    }

    /// The changes after `cursor` (nil: from the oldest retained one), at
    /// most `limit`, oldest first. O(log entries + limit + superseded skipped).
    package func page(after cursor: UInt64?, limit: Int) -> Result<Page, CursorFault> {
        precondition(limit >= 1, "change page limit \(limit)")
        if let cursor {
            if cursor < expiredThrough { return .failure(.expired(retainedFrom: expiredThrough)) }
            if cursor > recordCount { return .failure(.ahead(last: recordCount)) }
        }
        var position = firstIndex(after: cursor ?? 0)
        var result: [Entry] = []
        while position < entries.count && result.count < limit {
            if isLive(entries[position]) { result.append(entries[position]) }
            position += 1
        }
        return .success(Page(entries: result, next: result.last?.position ?? cursor ?? 0))
    }

    // MARK: Snapshots

    /// The feed as snapshot slices: each the retention state and up to
    /// `entriesPerSnapshotRecordMax` live entries, oldest first (at least one
    /// slice, so that `expiredThrough` and `lastPosition` survive an empty
    /// feed). `restore` of every slice, in order, into an empty feed gives
    /// this feed back.
    package func snapshotSlices() -> [ChangeFeedSlice] {
        var slices: [ChangeFeedSlice] = []
        var batch: [Entry] = []
        for entry in entries[head...] where isLive(entry) {
            batch.append(entry)
            if batch.count == Self.entriesPerSnapshotRecordMax {
                slices.append(slice(batch))
                batch.removeAll(keepingCapacity: true)
            }
        }
        if !batch.isEmpty || slices.isEmpty { slices.append(slice(batch)) }
        return slices
    }

    private func slice(_ entries: [Entry]) -> ChangeFeedSlice {
        ChangeFeedSlice(
            expiredThrough: expiredThrough, lastPosition: lastPosition, entries: entries,
            counted: ChangeFeedSlice.Counted(recordCount: recordCount, countedThrough: countedThrough))
    }

    /// Applies one snapshot slice: entries past `lastPosition` are appended
    /// as `record` would (so a slice read twice changes nothing), and the
    /// retention marks and the record count only move forward. A legacy
    /// slice (no count) leaves its LSN positions as they are and counts on
    /// from `legacyGap` above the last (the LSN of that change is where the
    /// count resumes). Throws on entries out of order.
    package mutating func restore(_ slice: ChangeFeedSlice) throws(MutationApplyError) {
        guard slice.lastPosition >= slice.expiredThrough else { throw .invalidChangeFeed }
        if let counted = slice.counted {
            guard counted.recordCount >= slice.lastPosition else { throw .invalidChangeFeed }
        }
        var previous: UInt64 = 0
        for entry in slice.entries {
            guard entry.position > previous, entry.position <= slice.lastPosition,
                entry.position > slice.expiredThrough
            else { throw .invalidChangeFeed }
            previous = entry.position
            record(
                sequence: entry.sequence, platform: entry.platform, deleted: entry.deleted, at: entry.at,
                position: entry.position)
        }
        expiredThrough = max(expiredThrough, slice.expiredThrough)
        // The newest entry's position is the last one (set by `record`); an
        // empty feed's slice carries it alone. Not taken from a slice with
        // entries: the slices after it still hold entries up to it.
        if slice.entries.isEmpty { lastPosition = max(lastPosition, slice.lastPosition) }
        let counted =
            slice.counted
            ?? ChangeFeedSlice.Counted(
                recordCount: slice.lastPosition + Self.legacyGap, countedThrough: slice.lastPosition)
        recordCount = max(recordCount, counted.recordCount)
        countedThrough = max(countedThrough, counted.countedThrough)
    }

    // MARK: Internals

    /// Drops the oldest live entry (and the superseded ones before it).
    private mutating func dropOldest() {
        while head < entries.count {
            let entry = entries[head]
            head += 1
            // With nothing superseded, every entry from `head` on is live: no look-up to tell.
            guard supersededCount == 0 || isLive(entry) else {
                supersededCount -= 1
                continue
            }
            latest.removeValue(forKey: entry.sequence)
            expiredThrough = entry.position
            return
        }
        preconditionFailure("change feed over its retention with no live entry")
    }

    /// Removes dropped and superseded entries once they pass a quarter of the
    /// live ones (and `compactionSlack`): O(live) — one look-up a kept entry
    /// when some are superseded, a copy when only dropped ones are (a feed at
    /// its retention whose changes are of devices not held: the steady state
    /// of many devices each changing now and then), amortised over a quarter as
    /// many changes (a memcpy of ~4 entries a change), and the array, sized
    /// for the live entries and that quarter, never grows by doubling in
    /// between (memory: ≤ 1.25 × live entries + slack).
    private mutating func compactIfWorthIt() {
        let dead = head + supersededCount
        guard dead > Self.compactionSlack && dead * 4 > latest.count else { return }
        var kept: [Entry] = []
        kept.reserveCapacity(latest.count + latest.count / 4 + Self.compactionSlack + 1)
        if supersededCount == 0 {
            // Only dropped entries to remove: the rest is live, copied without a look-up each.
            kept.append(contentsOf: entries[head...])
        } else {
            for entry in entries[head...] where isLive(entry) { kept.append(entry) }
        }
        entries = kept
        head = 0
        supersededCount = 0
    }

    /// The index of the first held entry with a position above `cursor`.
    private func firstIndex(after cursor: UInt64) -> Int {
        var low = head
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].position <= cursor { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// Whether `entry` is its device's latest change. O(1).
    private func isLive(_ entry: Entry) -> Bool { latest[entry.sequence] == entry.position }

    package static func == (lhs: ChangeFeed, rhs: ChangeFeed) -> Bool {
        lhs.expiredThrough == rhs.expiredThrough && lhs.lastPosition == rhs.lastPosition
            && lhs.recordCount == rhs.recordCount && lhs.countedThrough == rhs.countedThrough
            && lhs.retainedMax == rhs.retainedMax && lhs.snapshotSlices() == rhs.snapshotSlices()
    }
}

/// One snapshot record's part of a change feed (`ChangeFeed.snapshotSlices`).
package struct ChangeFeedSlice: Sendable, Hashable {
    /// The feed's record count and the LSN it counts through.
    package struct Counted: Sendable, Hashable {
        package var recordCount: UInt64
        package var countedThrough: UInt64

        package init(recordCount: UInt64, countedThrough: UInt64) {
            self.recordCount = recordCount
            self.countedThrough = countedThrough
        }
    }

    package var expiredThrough: UInt64
    package var lastPosition: UInt64
    package var entries: [ChangeFeed.Entry]
    /// Nil in a slice written before positions counted the index's records
    /// (`MutationCodec`'s kind 21): its positions are LSNs.
    package var counted: Counted?

    package init(expiredThrough: UInt64, lastPosition: UInt64, entries: [ChangeFeed.Entry], counted: Counted?) {
        self.expiredThrough = expiredThrough
        self.lastPosition = lastPosition
        self.entries = entries
        self.counted = counted
    }
}
