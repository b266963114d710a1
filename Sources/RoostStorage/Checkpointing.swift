extension WriteAheadLog {
    /// Starts a snapshot whose replay begins at the current `nextLSN`.
    ///
    /// Call it before reading the first slice of state, and apply each
    /// mutation in memory before (or in the same actor turn as) appending its
    /// record: then every mutation with an LSN below the start is already
    /// visible to the slices, and every later one is replayed (after-images
    /// make replaying an already-captured change harmless).
    package func beginSnapshot(counts: SnapshotCounts) throws(StorageError) -> SnapshotWriter {
        let startLSN = nextLSN
        let newest = catalog.withLock { $0.newest }
        if let newest, newest.snapshotLSN >= startLSN {
            throw .invalidUse("no record appended since the snapshot at LSN \(newest.snapshotLSN)")
        }
        return try SnapshotWriter(
            fileSystem: layout.fileSystem, directory: layout.snapshotDirectory, startLSN: startLSN, counts: counts)
    }

    /// Makes `snapshot` (finished) the start of recovery, then removes what no
    /// checkpoint needs any more. Order: sync the log (so that nothing the
    /// snapshot may hold can vanish from the log), write the other checkpoint
    /// slot and fdatasync it, then delete segments below the older checkpoint's
    /// LSN and snapshots neither slot names. Blocks for a sync: call it off the
    /// request path. One checkpoint at a time.
    package func checkpoint(_ snapshot: SnapshotSummary) throws(StorageError) {
        let claimed = catalog.withLock { catalog -> Bool in
            if catalog.checkpointRunning { return false }
            catalog.checkpointRunning = true
            return true
        }
        guard claimed else { throw .invalidUse("a checkpoint is already running") }
        defer { catalog.withLock { $0.checkpointRunning = false } }
        try sync()
        let (slot, sequence, newest) = catalog.withLock { catalog in
            ((catalog.newestSlot ?? 1) == 0 ? 1 : 0, catalog.highestSequence + 1, catalog.newest)
        }
        if let newest, newest.snapshotLSN >= snapshot.startLSN {
            throw .invalidUse(
                "snapshot at \(snapshot.startLSN) is not newer than the checkpoint at \(newest.snapshotLSN)")
        }
        let checkpoint = Checkpoint(
            sequence: sequence, snapshotLSN: snapshot.startLSN, snapshotBytes: snapshot.fileBytes,
            snapshotChecksum: snapshot.checksum)
        let path = layout.checkpointPath(slot: slot)
        do {
            let file = try layout.fileSystem.open(path, create: true)
            defer { file.close() }
            try file.write(CheckpointFormat.encode(checkpoint)[...], at: 0)
            try file.syncData()
            try layout.fileSystem.syncDirectory(layout.directory)
        } catch {
            catalog.withLock { $0.highestSequence = sequence }
            throw .io(error)
        }
        let (obsolete, olderLSN) = catalog.withLock { catalog in
            catalog.older = catalog.newest
            catalog.newest = checkpoint
            catalog.newestSlot = slot
            catalog.highestSequence = sequence
            // Keep every segment the older checkpoint needs, so that a damaged
            // newest snapshot can fall back to it; never the open segment.
            let keepFrom = catalog.older?.snapshotLSN ?? .first
            var obsolete: [LogSequenceNumber] = []
            while catalog.segments.count >= 2 && catalog.segments[1] <= keepFrom {
                obsolete.append(catalog.segments.removeFirst())
            }
            return (obsolete, keepFrom)
        }
        options.logger.info("wal.checkpoint") { line in
            line.field("wal.checkpoint", UInt64(sequence))
            line.field("wal.snapshot_lsn", snapshot.startLSN.rawValue)
            line.field("wal.slot", Int(slot))
            line.field("wal.segments_removed", obsolete.count)
            line.field("wal.keep_from", olderLSN.rawValue)
        }
        removeSegments(obsolete)
        removeUnreferencedSnapshots(keepTemporary: true)
    }

    /// The first LSNs of the segment files on disk, ascending.
    package var segmentFirstLSNs: [LogSequenceNumber] { catalog.withLock { $0.segments } }

    func removeSegments(_ firstLSNs: [LogSequenceNumber]) {
        guard !firstLSNs.isEmpty else { return }
        let fileSystem = layout.fileSystem
        do {
            for first in firstLSNs {
                try fileSystem.remove(layout.segmentPath(SegmentFormat.fileName(firstLSN: first)))
            }
            try fileSystem.syncDirectory(layout.walDirectory)
        } catch {
            options.logger.warning("wal.warning") { line in
                line.field("wal.warning", "segment-cleanup")
                line.field("wal.detail", "\(error)")
            }
        }
    }
}
