import RoostModel
import RoostStorage

/// The one place where a record read back — from a snapshot or from the log —
/// changes the engine's state: it routes each record to the index table of its
/// app's shard (device and person upserts straight from their bytes, index
/// image parts where they lie, everything else decoded), and keeps the
/// catalog's records, in order, for the catalog.
///
/// Recovery drives it today (`DurableEngine.open`: snapshot, then log); a
/// follower and a re-seeded node are to drive the same type (issue 22), so that
/// every copy of the state is made by one function. Runs on the thread that
/// owns the tables (recovery's, before any shard exists).
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
        let position = source.changePosition
        // Device and person upserts (most records) go straight from their bytes into the index.
        if let upsert = IndexTable.upsert(in: payload),
            tables[shard(of: upsert.key.app)].replayUpsert(upsert.key, encoded: upsert.mutation, lsn: position)
        {
            return
        }
        // Index image parts (snapshots only) are read where they lie.
        if let image = EngineRecord.framedImagePart(in: payload) {
            do {
                try tables[shard(of: image.key.app)].replayImagePart(image.key, part: image.part, lsn: position)
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
        let app: AppID
        switch record {
        case .mutation(let key, _): app = key.app
        case .appRemoved(let removed): app = removed
        case .indexSize(let key, let devices, let people):
            let hintMax = source.sizeHintMax
            record = .indexSize(key, devices: min(devices, hintMax), people: min(people, hintMax))
            app = key.app
        case .indexImage(let key, _): app = key.app
        case .catalog(let catalogPayload):
            catalogRecords.append(catalogPayload)
            return
        }
        do {
            try tables[shard(of: app)].replay(record, lsn: position)
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
