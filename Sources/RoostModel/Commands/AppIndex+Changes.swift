/// The change feed and the point-in-time export (spec §9): what the shard
/// records after each append, what `GET /v1/changes` reads, and the frozen
/// view `GET /v1/devices/export` streams.
extension AppIndex {
    /// Counts this index's log record at `lsn` (spec §13.1: a position counts
    /// the app's own records): its position, or nil when it was counted
    /// already (a replay over a snapshot that holds it). O(1).
    package mutating func countRecord(lsn: UInt64) -> UInt64? {
        changes.countRecord(lsn: lsn)
    }

    /// The position of this index's newest record: what a cursor taken now
    /// names (`Roost-Position`, the export's `Roost-Cursor`).
    package var position: UInt64 { changes.recordCount }

    /// Records `change` (committed at `at`) at log position `position`;
    /// returns whether it was recorded (false: the feed already holds that
    /// position). Amortised O(1).
    @discardableResult
    package mutating func recordChange(_ change: ChangedDevice, at: Timestamp, position: UInt64) -> Bool {
        changes.record(
            sequence: change.sequence, platform: change.platform, deleted: change.deleted, at: at, position: position)
    }

    /// Replay's form of `recordChange` for a device mutation read from the
    /// log at `position`: the time is the last `changeTime` record's, else
    /// (a log written before the feed existed) the device's `last_seen_at`,
    /// else the epoch.
    package mutating func recordReplayedChange(_ change: ChangedDevice, position: UInt64) {
        var at = replayChangeTime
        if at == nil, !change.deleted {
            at =
                store.device(
                    DeviceID(appID: appID, mode: mode, platform: change.platform, sequence: change.sequence))?
                .lastSeenAt
        }
        recordChange(change, at: at ?? Timestamp(millisecondsSinceEpoch: 0), position: position)
    }

    /// `GET /v1/changes`: at most `limit` changes after `cursor` (nil: from
    /// the oldest retained), each device as it is now — which is its state at
    /// its entry's position, since any later change would have moved it on.
    /// O(log retained + limit).
    package func changesPage(after cursor: UInt64?, limit: Int) -> Result<ChangesPage, ChangeFeed.CursorFault> {
        changes.page(after: cursor, limit: limit).map { page in
            ChangesPage(
                changes: page.entries.map { entry in
                    let id = DeviceID(appID: appID, mode: mode, platform: entry.platform, sequence: entry.sequence)
                    // A live upsert entry's device exists (`invariantViolations` checks it).
                    if !entry.deleted, let device = store.device(id) {
                        return .upsert(position: entry.position, at: entry.at, device)
                    }
                    return .delete(position: entry.position, at: entry.at, id)
                },
                next: page.next)
        }
    }

    /// The broken invariants of the change feed: a live upsert entry whose
    /// device is gone. O(retained).
    func changeFeedViolations() -> [String] {
        var result: [String] = []
        if case .success(let page) = changes.page(after: nil, limit: changes.retainedCount + 1) {
            for entry in page.entries where !entry.deleted {
                let id = DeviceID(appID: appID, mode: mode, platform: entry.platform, sequence: entry.sequence)
                if store.device(id) == nil {
                    result.append("change feed: upsert of \(id) at \(entry.position), no device")
                }
            }
        }
        return result
    }

    /// A frozen copy of the devices for a point-in-time export, and the
    /// change-feed position it holds exactly: every change at or below the
    /// cursor, none above. O(chunks); later writes copy what they touch.
    /// The cursor is the position of the newest change (where following the
    /// feed to its end arrives); changes of this turn not yet counted are not
    /// in it: the shard sets it once they are (`IndexExportView.at(cursor:)`).
    package func freezeForExport() -> IndexExportView {
        IndexExportView(store: store.frozenForExport(), cursor: changes.lastPosition)
    }
}

/// One change as `GET /v1/changes` answers it.
package enum FeedChange: Sendable, Equatable {
    case upsert(position: UInt64, at: Timestamp, Device)
    case delete(position: UInt64, at: Timestamp, DeviceID)

    package var position: UInt64 {
        switch self {
        case .upsert(let position, _, _), .delete(let position, _, _): position
        }
    }
}

/// A page of the change feed.
package struct ChangesPage: Sendable, Equatable {
    package var changes: [FeedChange]
    /// The cursor to ask from next.
    package var next: UInt64

    package init(changes: [FeedChange], next: UInt64) {
        self.changes = changes
        self.next = next
    }
}

/// The devices of one index frozen at one shard turn, for a point-in-time
/// export streamed off the shard (`GET /v1/devices/export`, spec §9); and
/// the change-feed cursor it is the state at.
package struct IndexExportView: Sendable {
    let store: DeviceStore
    package let cursor: UInt64

    /// The devices in the view.
    package var deviceCount: Int { store.deviceCount }

    /// The same view at another cursor: the shard's, when changes of the
    /// batch that froze it got their positions after the freeze.
    package func at(cursor: UInt64) -> IndexExportView {
        precondition(cursor >= self.cursor, "an export's cursor moved back from \(self.cursor) to \(cursor)")
        return IndexExportView(store: store, cursor: cursor)
    }
}
