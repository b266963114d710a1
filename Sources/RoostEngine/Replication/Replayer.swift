import RoostModel
import RoostStorage

/// The one place where a record read back — from a snapshot or from the log —
/// changes the engine's state: it routes each record to the index table of its
/// app's shard (device and person upserts straight from their bytes, index
/// image parts where they lie, everything else decoded), and keeps the
/// catalog's records, in order, for the catalog.
///
/// Recovery drives it (`DurableEngine.open`: snapshot, then log) over tables
/// no shard owns yet; a follower's live shards apply replicated records with
/// its static `apply` (`ShardWork.replicate`), so that every copy of the state
/// is made by one function. Runs on the thread that owns the tables.
package struct Replayer: Sendable {
    /// Where a record was read, which decides how it applies.
    package enum Source: Sendable {
        /// A snapshot record; an index-size hint is bounded by `recordCount`
        /// (every device and person is a record, so no index holds more).
        case snapshot(recordCount: UInt64)
        /// A log record at `lsn`: a device change takes this position in its
        /// index's change feed; index-size hints are ignored (the log never holds one).
        case log(LogSequenceNumber)

        /// The LSN a device change takes in the change feed (nil: a snapshot carries the feed itself).
        var changePosition: UInt64? {
            switch self {
            case .snapshot: nil
            case .log(let lsn): lsn.rawValue
            }
        }

        /// The largest index-size hint believed (0: none).
        var sizeHintMax: UInt64 {
            switch self {
            case .snapshot(let recordCount): recordCount
            case .log: 0
            }
        }
    }

    /// The index tables, one per shard.
    package private(set) var tables: [IndexTable]
    /// The catalog's record payloads (`EngineRecord.catalog`) in the order
    /// applied: the catalog rebuilds its state from them.
    package private(set) var catalogRecords: [[UInt8]] = []

    /// A replayer over empty tables for `shardCount` shards.
    package init(shardCount: Int, changesRetained: Int) {
        precondition(shardCount > 0, "a replayer needs at least one shard, got \(shardCount)")
        tables = [IndexTable](repeating: IndexTable(changesRetained: changesRetained), count: shardCount)
    }

    /// Applies one record (its `EngineRecord` bytes) read from `source`.
    /// Throws, naming `origin()`, a record that cannot be read or does not
    /// apply to the state it follows.
    package mutating func apply(
        _ payload: UnsafeRawBufferPointer, from source: Source, origin: () -> String
    ) throws(EngineRecoveryError) {
        let shardCount = tables.count
        let routed = try Self.route(payload, from: source, origin: origin)
        switch routed {
        case .clusterMark:
            break
        case .catalog(let catalogPayload):
            catalogRecords.append(catalogPayload)
        case .index(let app):
            try Self.apply(
                payload, from: source, to: &tables[ShardSet.shardNumber(for: app, shardCount: shardCount)],
                origin: origin)
        }
    }

    /// Where a record applies: to the catalog (its payload), to the index
    /// table of an app's shard, or nowhere (a cluster mark).
    package enum Destination: Sendable {
        case catalog([UInt8])
        case index(AppID)
        /// A cluster's epoch record (`ClusterMark`): it takes its LSN and changes nothing.
        case clusterMark
    }

    /// Reads where `payload` applies without applying it. Throws, naming
    /// `origin()`, a record that cannot be read.
    package static func route(
        _ payload: UnsafeRawBufferPointer, from source: Source, origin: () -> String
    ) throws(EngineRecoveryError) -> Destination {
        if ClusterMark.isMark(payload) { return .clusterMark }
        if let upsert = IndexTable.upsert(in: payload) { return .index(upsert.key.app) }
        if let image = EngineRecord.framedImagePart(in: payload) { return .index(image.key.app) }
        do {
            switch try EngineRecord.decode(payload) {
            case .mutation(let key, _), .indexSize(let key, _, _), .indexImage(let key, _): return .index(key.app)
            case .appRemoved(let removed): return .index(removed)
            case .catalog(let catalogPayload): return .catalog(catalogPayload)
            }
        } catch {
            throw EngineRecoveryError(where: origin(), reason: "\(error)")
        }
    }

    /// Applies one index record (not a catalog one: `route` first) to
    /// `table`, the table of its app's shard: the one function by which a
    /// record read back changes an index, for recovery (`apply`) and for a
    /// follower's live shards (`Shard`, `ShardWork.replicate`). Device and
    /// person upserts (most records) go straight from their bytes into the
    /// index; index image parts (snapshots only) are read where they lie.
    package static func apply(
        _ payload: UnsafeRawBufferPointer, from source: Source, to table: inout IndexTable, origin: () -> String
    ) throws(EngineRecoveryError) {
        let position = source.changePosition
        if let upsert = IndexTable.upsert(in: payload),
            table.replayUpsert(upsert.key, encoded: upsert.mutation, lsn: position)
        {
            return
        }
        if let image = EngineRecord.framedImagePart(in: payload) {
            do {
                try table.replayImagePart(image.key, part: image.part, lsn: position)
            } catch {
                throw EngineRecoveryError(where: origin(), reason: error.description)
            }
            return
        }
        var record: EngineRecord
        do {
            record = try EngineRecord.decode(payload)
        } catch {
            throw EngineRecoveryError(where: origin(), reason: "\(error)")
        }
        switch record {
        case .mutation, .appRemoved, .indexImage: break
        case .indexSize(let key, let devices, let people):
            let hintMax = source.sizeHintMax
            record = .indexSize(key, devices: min(devices, hintMax), people: min(people, hintMax))
        case .catalog:
            preconditionFailure("a catalog record routed to an index table (\(origin()))")
        }
        do {
            try table.replay(record, lsn: position)
        } catch {
            throw EngineRecoveryError(where: origin(), reason: error.description)
        }
    }

    /// Throws when a snapshot ended with an index image begun and never ended
    /// (a snapshot cut short). Call once the snapshot's last record is applied.
    package func checkSnapshotEnded() throws(EngineRecoveryError) {
        for table in tables {
            if let key = table.unfinishedImages.first {
                throw EngineRecoveryError(where: "snapshot end", reason: "the image of \(key) has no end part")
            }
        }
    }

    /// Hands over the state replayed: the tables (one per shard, for the
    /// `ShardSet`) and the catalog's payloads.
    package consuming func finish() -> (tables: [IndexTable], catalogRecords: [[UInt8]]) {
        (tables, catalogRecords)
    }

    /// The shard that owns `app`'s indexes.
    private func shard(of app: AppID) -> Int {
        ShardSet.shardNumber(for: app, shardCount: tables.count)
    }
}
