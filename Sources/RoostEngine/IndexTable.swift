import RoostModel

/// The indexes one shard owns, and the one place where a logged record is
/// applied to them (replay after a restart and snapshot loading).
package struct IndexTable: Sendable {
    package private(set) var indexes: [IndexKey: AppIndex] = [:]
    /// The change-feed retention of every index this table creates
    /// (`roost serve --changes-retained`).
    package let changesRetained: Int
    /// Index images being read from a snapshot, by index (decision 0056):
    /// a loader from the image's header to its end part.
    private var imageLoaders: [IndexKey: StoreImageLoader] = [:]

    package init(changesRetained: Int = ChangeFeed.retainedDefault) {
        self.changesRetained = changesRetained
    }

    /// Returns the index of `key`, creating it with `settings` when absent.
    /// The second value says whether it was created.
    package mutating func ensure(_ key: IndexKey, settings: AppSettings) -> Bool {
        guard indexes[key] == nil else { return false }
        indexes[key] = AppIndex(appID: key.app, mode: key.mode, settings: settings, changesRetained: changesRetained)
        return true
    }

    /// Runs `body` on the index of `key` in place (no copy of the index),
    /// through the dictionary's values at the key's position rather than
    /// `indexes[key]!`, whose accessor yields an `Optional` to unwrap and
    /// put back: ~480 fewer instructions a registration (`instructions.py`,
    /// 64,282 → 63,803).
    package mutating func withIndex<Result>(_ key: IndexKey, _ body: (inout AppIndex) -> Result) -> Result? {
        guard let position = indexes.index(forKey: key) else { return nil }
        return body(&indexes.values[position])
    }

    /// Removes both modes of an app; returns how many devices they held.
    package mutating func removeApp(_ app: AppID) -> Int {
        var removed = 0
        for mode in AppMode.allCases {
            if let index = indexes.removeValue(forKey: IndexKey(app: app, mode: mode)) {
                removed += index.stats().devices
            }
        }
        return removed
    }

    /// Applies a record read back from the log (`lsn`: its LSN; the index
    /// counts the record, and a device change takes the count as its
    /// change-feed position) or a snapshot (nil: the snapshot carries the
    /// feed and the count itself). Records are after-images, so
    /// applying one twice changes nothing.
    package mutating func replay(_ record: EngineRecord, lsn: UInt64? = nil) throws(ReplayError) {
        switch record {
        case .mutation(let key, let mutation):
            let position = ensurePosition(key)
            do {
                try indexes.values[position].apply(mutation)
            } catch {
                throw ReplayError(key: key, reason: "\(error)")
            }
            if let lsn, let counted = indexes.values[position].countRecord(lsn: lsn),
                let change = ChangedDevice(mutation)
            {
                indexes.values[position].recordReplayedChange(change, position: counted)
            }
        case .appRemoved(let app):
            _ = removeApp(app)
        case .catalog:
            // The catalog's, not an index's: recovery hands these to the catalog.
            break
        case .indexImage(let key, let part):
            let result = part.withUnsafeBytes { bytes in
                Result { () throws(ReplayError) in try replayImagePart(key, part: bytes, lsn: lsn) }
            }
            try result.get()
        case .indexSize(let key, let devices, let people):
            // A hint: reserve (bounded, it is read from disk) and change nothing else.
            let limit = UInt64(Limits.devicesPerIndexMax)
            indexes.values[ensurePosition(key)].reserveCapacity(
                devices: Int(min(devices, limit)), people: Int(min(people, limit)))
        }
    }

    /// Reads one part of an index's image from a snapshot (decision 0056):
    /// the header starts a loader, the end part replaces the index's (empty)
    /// store with the loaded one, an abandoned part drops the loader. Throws
    /// on a part out of order, an inconsistent image, an image of an index
    /// that already holds devices or people, or a part read from the log
    /// (`lsn` non-nil: images are in snapshots only).
    package mutating func replayImagePart(
        _ key: IndexKey, part: UnsafeRawBufferPointer, lsn: UInt64? = nil
    ) throws(ReplayError) {
        guard lsn == nil else { throw ReplayError(key: key, reason: "an index image part in the log") }
        if StoreImageLoader.isAbandoned(part) {
            imageLoaders[key] = nil
            return
        }
        var loader = imageLoaders.removeValue(forKey: key) ?? StoreImageLoader(appID: key.app, mode: key.mode)
        let loaded: LoadedIndexImage
        do {
            try loader.add(part)
            guard loader.isComplete else {
                imageLoaders[key] = loader
                return
            }
            loaded = try loader.finish()
        } catch {
            throw ReplayError(key: key, reason: error.description)
        }
        guard indexes.values[ensurePosition(key)].adoptLoadedStore(loaded) else {
            throw ReplayError(key: key, reason: "an index image for an index that already holds devices or people")
        }
    }

    /// The indexes whose image began and has not ended (a snapshot cut short: damage once it is all read).
    package var unfinishedImages: [IndexKey] {
        imageLoaders.keys.sorted { ($0.app, $0.mode.rawValue) < ($1.app, $1.mode.rawValue) }
    }

    /// Replay's fast path for device and person upserts (most records):
    /// `mutation` is the record's `MutationCodec` bytes (see `upsert(in:)`).
    /// Returns true when applied as `replay(.mutation(key, decoded))` would;
    /// false, having changed no index's state, when the caller must take
    /// `replay`'s path.
    /// An upsert read from the log (`lsn` non-nil) is counted, and a device
    /// upsert takes its place in the index's change feed.
    package mutating func replayUpsert(
        _ key: IndexKey, encoded mutation: UnsafeRawBufferPointer, lsn: UInt64? = nil
    ) -> Bool {
        let position = ensurePosition(key)
        guard indexes.values[position].applyEncodedUpsert(mutation) else { return false }
        if let lsn, let counted = indexes.values[position].countRecord(lsn: lsn),
            let change = MutationCodec.deviceChange(in: mutation)
        {
            indexes.values[position].recordReplayedChange(change, position: counted)
        }
        return true
    }

    /// The index key and `MutationCodec` bytes of an `EngineRecord` holding a
    /// device or person upsert, read from its framing without decoding it;
    /// nil for any other record (which `EngineRecord.decode` then reads or refuses).
    package static func upsert(
        in record: UnsafeRawBufferPointer
    ) -> (key: IndexKey, mutation: UnsafeRawBufferPointer)? {
        guard let framed = EngineRecord.framedMutation(in: record), MutationCodec.isUpsert(framed.mutation) else {
            return nil
        }
        return framed
    }

    /// Returns where the index of `key` is, creating it with the default
    /// settings (as replay does) when absent. One hash of the key when present.
    private mutating func ensurePosition(_ key: IndexKey) -> [IndexKey: AppIndex].Index {
        if let position = indexes.index(forKey: key) { return position }
        indexes[key] = AppIndex(
            appID: key.app, mode: key.mode, settings: .defaults, changesRetained: changesRetained)
        guard let position = indexes.index(forKey: key) else {
            preconditionFailure("index \(key) just added is missing")
        }
        return position
    }

    /// Returns the keys held, sorted by app then mode.
    package var sortedKeys: [IndexKey] {
        indexes.keys.sorted { ($0.app, $0.mode.rawValue) < ($1.app, $1.mode.rawValue) }
    }
}

/// A logged record that does not apply to the state it follows: recovery stops.
package struct ReplayError: Error, CustomStringConvertible {
    package var key: IndexKey
    package var reason: String
    package var description: String { "replaying a record for \(key) failed: \(reason)" }
}
