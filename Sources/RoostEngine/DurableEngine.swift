import Glibc
import RoostModel
import RoostStorage
import Synchronization

/// The engine over its data directory: recovery at open (checkpoint →
/// snapshot → log replay), the registry the API submits to, fuzzy snapshots
/// while writers continue, and a clean close.
package final class DurableEngine: Sendable {
    package let registry: Registry
    /// The apps, keys, settings and identity signing keys, rebuilt by
    /// recovery and written into every snapshot first.
    package let catalog: CatalogStore
    package let log: WALMutationLog
    /// In cluster mode (spec §13), the log the shards and the catalog append
    /// to, over `log`: it follows or leads (`ClusterLog`); nil on one node.
    package let clusterLog: ClusterLog?
    private let shardCount: Int
    private let snapshotFiguresState = Mutex(SnapshotFigures())

    /// What the snapshots of this process did, for metrics.
    package struct SnapshotFigures: Sendable, Equatable {
        /// Snapshots written and checkpointed, and those that failed.
        package var completed: UInt64 = 0
        package var failed: UInt64 = 0
        /// The last completed one: how long it took, its file size and records.
        package var lastDuration: Duration?
        package var lastBytes: UInt64?
        package var lastRecords: UInt64?
        /// When the newest snapshot on disk was finished, in milliseconds
        /// since the Unix epoch: the file's modification time at start-up,
        /// then the end of each snapshot written here. Nil while there is none.
        package var lastCompletedWallMilliseconds: Int64?
        /// Index views that passed the pinned-memory limit and were finished in shard turns.
        package var pinLimitStops: UInt64 = 0
        /// The most bytes one index's view pinned in the last completed snapshot.
        package var lastPinnedBytesMax: Int?
    }

    /// What recovery found, for the operator (one line each).
    package struct RecoveryReport: Sendable {
        package var snapshotRecords = 0
        package var logRecords = 0
        package var notes: [String] = []
        /// How many catalog records (`EngineRecord.catalog`) the snapshot
        /// and the log held: the catalog was rebuilt from them.
        package var catalogRecords = 0
        /// Wall time of each phase: reading and verifying the files (checkpoint
        /// slots, snapshot CRC, every segment), loading the snapshot, replaying the log.
        package var filesDuration: Duration = .zero
        package var snapshotDuration: Duration = .zero
        package var logDuration: Duration = .zero
    }

    private init(
        registry: Registry, catalog: CatalogStore, log: WALMutationLog, clusterLog: ClusterLog?, shardCount: Int
    ) {
        self.registry = registry
        self.catalog = catalog
        self.log = log
        self.clusterLog = clusterLog
        self.shardCount = shardCount
        if let path = log.wal.newestSnapshotPath {
            var info = stat()
            if stat(path, &info) == 0 {
                let milliseconds = Int64(info.st_mtim.tv_sec) * 1000 + Int64(info.st_mtim.tv_nsec) / 1_000_000
                snapshotFiguresState.withLock { $0.lastCompletedWallMilliseconds = milliseconds }
            }
        }
    }

    /// What the snapshots of this process did so far.
    package var snapshotFigures: SnapshotFigures { snapshotFiguresState.withLock { $0 } }

    /// Opens the log in `directory` and rebuilds every index and the catalog
    /// from the newest valid snapshot and the log after it; the shards run on `loopCount`
    /// loops, driven by the engine's own threads until a server takes them. Throws, naming file and offset,
    /// on damage recovery must not paper over.
    package static func open(
        directory: String, policy: FsyncPolicy, shardCount: Int, loopCount: Int = 1,
        options: StorageOptions = StorageOptions(), changesRetained: Int = ChangeFeed.retainedDefault,
        cluster: Bool = false
    ) throws -> (DurableEngine, RecoveryReport) {
        let clock = ContinuousClock()
        let started = clock.now
        let (wal, recovered) = try WriteAheadLog.open(directory: directory, policy: policy, options: options)
        let filesDuration = clock.now - started
        let replayed: (tables: [IndexTable], catalog: CatalogContents, report: RecoveryReport)
        do {
            replayed = try replay(recovered, shardCount: shardCount, changesRetained: changesRetained)
        } catch {
            wal.close()
            throw error
        }
        var report = replayed.report
        report.filesDuration = filesDuration
        let log = WALMutationLog(wal: wal)
        let clusterLog = cluster ? ClusterLog(local: log) : nil
        let appendsTo: any MutationLog = clusterLog ?? log
        let registry = Registry(
            shardSet: ShardSet(shardCount: shardCount, loopCount: loopCount, log: appendsTo, tables: replayed.tables))
        let catalog = CatalogStore(replayed.catalog, log: appendsTo)
        let engine = DurableEngine(
            registry: registry, catalog: catalog, log: log, clusterLog: clusterLog, shardCount: shardCount)
        return (engine, report)
    }

    /// `roost wal verify`: the storage checks (`WALTool.verify`), then, when
    /// recovery would start, the replay start-up runs (the snapshot's records
    /// and index images, then the log's records, into indexes and a catalog in
    /// memory), so that verify refuses exactly what start-up refuses (a
    /// CRC-valid snapshot whose image does not load, a record that does not
    /// decode, catalog records that leave a key without its app). Never
    /// changes a file. O(data), and the memory of the whole state, as
    /// start-up; one shard (an index's checks do not depend on its shard).
    package static func verify(
        directory: String, options: StorageOptions = StorageOptions()
    ) throws -> VerificationReport {
        var (report, recovered) = try WALTool.verifyAndRecover(directory: directory, options: options)
        guard let recovered else { return report }
        do {
            let replayed = try replay(recovered, shardCount: 1, changesRetained: ChangeFeed.retainedDefault).report
            report.lines.append(
                "start-up would replay \(replayed.snapshotRecords) snapshot records and \(replayed.logRecords) log "
                    + "records: OK")
        } catch let error as StorageError {
            guard case .damaged(let damage) = error else { throw error }
            report.damages.append(damage)
            report.lines.append("recovery would refuse to start: \(damage)")
            report.verdict = .unrecoverable
        } catch {
            report.lines.append("recovery would refuse to start: \(error)")
            report.verdict = .unrecoverable
        }
        return report
    }

    /// Rebuilds every index and the catalog from `recovered` through the
    /// `Replayer`: its snapshot's records, then the log's records after it,
    /// checked as they are applied (start-up and `verify` share it). Throws
    /// `EngineRecoveryError` naming the record when one does not decode or
    /// apply, or an image has no end part; `CatalogRecoveryError` when the
    /// catalog's records do not make a whole catalog. O(records).
    static func replay(
        _ recovered: RecoveredState, shardCount: Int, changesRetained: Int
    ) throws -> (tables: [IndexTable], catalog: CatalogContents, report: RecoveryReport) {
        let clock = ContinuousClock()
        var started = clock.now
        var replayer = Replayer(shardCount: shardCount, changesRetained: changesRetained)
        var report = RecoveryReport()
        report.notes = recovered.notes
        if let snapshot = recovered.snapshot {
            let source = Replayer.Source.snapshot(recordCount: snapshot.recordCount)
            while try snapshot.withNextRecord({ payload -> Bool in
                report.snapshotRecords += 1
                try replayer.apply(payload, from: source) { "snapshot record \(report.snapshotRecords)" }
                return true
            }) != nil {}
            try replayer.checkSnapshotEnded()
        }
        report.snapshotDuration = clock.now - started
        started = clock.now
        var failure: (any Error)?
        try recovered.replay { record in
            guard failure == nil else { return }
            report.logRecords += 1
            do {
                try record.payload.withUnsafeBytes { payload in
                    try replayer.apply(payload, from: .log(record.lsn)) { "log record LSN \(record.lsn.rawValue)" }
                }
            } catch {
                failure = error
            }
        }
        if let failure { throw failure }
        report.logDuration = clock.now - started
        let (tables, catalogRecords) = replayer.finish()
        report.catalogRecords = catalogRecords.count
        return (tables, try CatalogContents.rebuild(catalogRecords), report)
    }

    /// Writes a fuzzy snapshot: the catalog's records first (read after the
    /// start LSN is taken, so every catalog change below it is in them), then
    /// every index from a frozen view taken in one shard turn and encoded on
    /// the snapshot thread while writers continue (decision 0054), then
    /// checkpoints it (temp → fsync → rename → fsync dir → checkpoint slot →
    /// old segments deleted). Replay from the snapshot's start LSN makes it
    /// exact. An index whose view pins more than `pinnedBytesMax` of copied
    /// chunks is finished in bounded slices in shard turns instead. Returns
    /// nil when nothing was appended since the last snapshot. Counted in
    /// `snapshotFigures`.
    package func snapshot(pinnedBytesMax: Int = Limits.snapshotPinnedBytesMax) async throws -> SnapshotSummary? {
        let clock = ContinuousClock()
        let started = clock.now
        do {
            guard let (summary, pinned) = try await writeSnapshot(pinnedBytesMax: pinnedBytesMax) else { return nil }
            let duration = clock.now - started
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            snapshotFiguresState.withLock { figures in
                figures.completed += 1
                figures.lastDuration = duration
                figures.lastBytes = summary.fileBytes
                figures.lastRecords = summary.recordCount
                figures.lastPinnedBytesMax = pinned
                figures.lastCompletedWallMilliseconds = Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
            }
            return summary
        } catch {
            snapshotFiguresState.withLock { $0.failed += 1 }
            throw error
        }
    }

    /// Returns the summary and the most bytes one index's view pinned, or nil (nothing to snapshot).
    private func writeSnapshot(pinnedBytesMax: Int) async throws -> (SnapshotSummary, pinned: Int)? {
        var devices = 0
        for shard in registry.shardSet.shards { devices += await shard.deviceCount() }
        log.growth.reset()
        let writer: SnapshotWriter
        do {
            writer = try log.wal.beginSnapshot(
                counts: SnapshotCounts(records: UInt64(devices), groups: UInt64(shardCount)))
        } catch StorageError.invalidUse {
            return nil
        }
        // Records are encoded and compressed on a low-priority thread so that
        // they yield the cores to requests; the shards' turns only freeze views.
        let background = BackgroundSnapshotWriter(writer)
        let catalogRecords = catalogSnapshotRecords()
        var pinnedMost = 0
        func push(_ records: [[UInt8]]) async throws {
            while !background.offer(records) {
                if let failure = background.failure { throw failure }
                await background.wait(for: .room)
            }
        }
        do {
            try await push(catalogRecords)
            for shard in registry.shardSet.shards {
                for key in await shard.keys() {
                    let pinned = try await writeIndex(
                        key, of: shard, to: background, pinnedBytesMax: pinnedBytesMax, push: push)
                    pinnedMost = max(pinnedMost, pinned)
                }
            }
        } catch {
            background.close()
            await background.wait(for: .done)
            background.abandon()
            throw error
        }
        background.close()
        await background.wait(for: .done)
        let summary = try background.finish()
        // The frozen views may hold any record appended so far: the snapshot
        // counts only once the log acknowledged all of them (in cluster mode,
        // once the group log committed them), so that it never holds a
        // change a restart would cut (spec §13.2).
        let mayHoldThrough = registry.shardSet.log.appendedThrough
        guard await registry.shardSet.perform(.awaitLog(mayHoldThrough)) != nil else {
            throw StorageError.invalidUse("the log did not acknowledge what snapshot \(summary.startLSN) holds")
        }
        try log.wal.checkpoint(summary)
        return (summary, pinnedMost)
    }

    /// Writes one index: its size hint, settings and credentials, its people
    /// and devices from a frozen view drained on the snapshot thread (the rest
    /// in shard-turn slices if the view stopped at the pinned-memory limit),
    /// and its sequence floor. Returns the bytes its view pinned.
    private func writeIndex(
        _ key: IndexKey, of shard: Shard, to background: BackgroundSnapshotWriter, pinnedBytesMax: Int,
        push: ([[UInt8]]) async throws -> Void
    ) async throws -> Int {
        if let size = await shard.read(key, { (devices: $0.count, people: $0.stats().people) }) {
            try await push([
                EngineRecord.indexSize(key, devices: UInt64(size.devices), people: UInt64(size.people)).encoded()
            ])
        }
        try await push(await shard.snapshotHeader(key))
        let feed = await shard.snapshotChangeFeed(key)
        try await push(feed.map { EngineRecord.mutation(key, .changeFeed($0)).encoded() })
        let pin = SnapshotPin()
        guard let view = await shard.freezeForSnapshot(key, pin: pin) else { return 0 }  // the app is gone
        var position = IndexSnapshotSource.Position.people(fromSlot: 0)
        do {
            // The source must be the view's only holder (it lets go of chunks as it writes them, decision
            // 0056): no copy of the view or of the source stays here, so it is made in the offer itself.
            while !background.hasRoom {
                if let failure = background.failure { throw failure }
                await background.wait(for: .room)
            }
            let offered = background.offer(
                source: IndexSnapshotSource(key: key, view: consume view, pin: pin, pinnedBytesMax: pinnedBytesMax))
            if !offered { throw background.failure ?? StorageError.invalidUse("snapshot queue full after it had room") }
            while true {
                if let returned = background.takeReturnedSource() {
                    guard let drained = returned as? IndexSnapshotSource, drained.key == key else {
                        preconditionFailure("snapshot thread returned another source than \(key)'s")
                    }
                    // After a failed write the thread hands the source back undrained, view and all.
                    if let failure = background.failure { throw failure }
                    precondition(!drained.holdsView, "snapshot source of \(key) returned holding its view")
                    position = drained.position
                    if drained.stoppedAtPinLimit {
                        snapshotFiguresState.withLock { $0.pinLimitStops += 1 }
                        let pinned = pin.pinnedBytes
                        log.wal.options.logger.warning("snapshot.warning") { line in
                            line.field("snapshot.warning", "pinned-limit")
                            line.field("snapshot.index", "\(key.app.rawValue)/\(key.mode)")
                            line.field("snapshot.pinned_bytes", pinned)
                            line.field("snapshot.pinned_bytes_max", pinnedBytesMax)
                        }
                    }
                    break
                }
                if let failure = background.failure { throw failure }
                await background.wait(for: .returnedSource)
            }
        } catch {
            await shard.endSnapshotSharing(key)
            throw error
        }
        await shard.endSnapshotSharing(key)
        if case .people(var personSlot) = position {
            while true {
                let slice = await shard.snapshotPeople(key, fromSlot: personSlot)
                try await push(slice.records)
                guard let next = slice.next else { break }
                personSlot = next
            }
            position = .devices(afterSequence: 0)
        }
        if case .devices(var after) = position {
            while true {
                let slice = await shard.snapshotDevices(key, afterSequence: after)
                try await push(slice.records)
                guard let next = slice.next else { break }
                after = next
            }
        }
        try await push(await shard.snapshotSequenceFloor(key))
        return pin.pinnedBytes
    }

    /// Returns the catalog's records framed as `EngineRecord.catalog`: read
    /// after the snapshot's start LSN is taken, so every catalog change below
    /// it is in them.
    private func catalogSnapshotRecords() -> [[UInt8]] {
        catalog.snapshotPayloads().map { EngineRecord.catalog($0).encoded() }
    }

    /// Flushes and fsyncs the log and stops its I/O thread.
    package func close() {
        log.wal.close()
    }
}

/// A record recovery cannot apply: start-up stops and says where.
package struct EngineRecoveryError: Error, CustomStringConvertible {
    package var `where`: String
    package var reason: String
    package var description: String {
        "recovery stopped at \(self.where): \(reason); run `roost wal verify DIR` for details"
    }
}
