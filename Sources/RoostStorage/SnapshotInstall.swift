import RoostPlatform

/// Installing another node's snapshot as the whole state of a closed data
/// directory (cluster mode, spec §13.6: a node whose next position etcd no
/// longer holds re-seeds). The directory's log, snapshots, checkpoint slots
/// and `log-end` are removed; the snapshot becomes the only one, named by a
/// checkpoint slot, with no log after it: recovery loads it and the log
/// starts at its start LSN (the records after it come from the group log).
/// Every other file of the directory (its lock, its cluster membership) stays.
package enum SnapshotInstall {
    /// Installs `snapshotFile` (already written in `directory`, fdatasynced)
    /// as described by `checkpoint` (its sequence is set to 1). The
    /// directory must be closed (its owner holds the lock). Durable when it
    /// returns. Throws when a file cannot be removed, moved or written; the
    /// snapshot is checked against the checkpoint by recovery at the next open.
    package static func install(
        directory: String, snapshotFile: String, checkpoint: Checkpoint, options: StorageOptions = StorageOptions()
    ) throws(StorageError) {
        let layout = StorageLayout(directory: directory, fileSystem: options.fileSystem)
        let fileSystem = options.fileSystem
        let segments = try layout.segmentNames()
        let snapshots = try layout.snapshotDirectoryNames()
        do throws(SystemCallError) {
            let present = Set(try fileSystem.list(directory))
            for name in CheckpointFormat.slotNames + [LogEndFormat.fileName] where present.contains(name) {
                try fileSystem.remove(fileSystem.join(directory, name))
            }
            for name in segments { try fileSystem.remove(layout.segmentPath(name)) }
            for name in snapshots { try fileSystem.remove(fileSystem.join(layout.snapshotDirectory, name)) }
            try fileSystem.syncDirectory(directory)
            try fileSystem.createDirectory(layout.snapshotDirectory)
            try fileSystem.createDirectory(layout.walDirectory)
            try fileSystem.rename(snapshotFile, to: layout.snapshotPath(checkpoint.snapshotLSN))
            try fileSystem.syncDirectory(layout.snapshotDirectory)
            // The log after the snapshot: one empty segment starting at its
            // LSN, and a log-end naming it, as a log that rolled into it would
            // leave them (recovery then sees the log reach the snapshot's start).
            let segment = try fileSystem.open(
                fileSystem.join(layout.walDirectory, SegmentFormat.temporaryName), create: true)
            do {
                try segment.truncate(size: 0)
                try segment.preallocate(size: options.segmentBytesMax)
                try segment.write(
                    SegmentFormat.encodeHeader(firstLSN: checkpoint.snapshotLSN, segmentBytes: options.segmentBytesMax)[
                        ...],
                    at: 0)
                try segment.syncData()
                segment.close()
            } catch {
                segment.close()
                throw error
            }
            try fileSystem.rename(
                segment.path, to: layout.segmentPath(SegmentFormat.fileName(firstLSN: checkpoint.snapshotLSN)))
            try fileSystem.syncDirectory(layout.walDirectory)
            let logEnd = try LogEndFile.openOrCreate(
                read: .missing(path: layout.logEndPath), layout: layout,
                initial: LogEnd(
                    sequence: 1, endLSN: LogSequenceNumber(checkpoint.snapshotLSN.rawValue - 1),
                    openSegment: checkpoint.snapshotLSN, cleanShutdown: false))
            logEnd.close()
            var installed = checkpoint
            installed.sequence = 1
            let slot = try fileSystem.open(layout.checkpointPath(slot: 0), create: true)
            defer { slot.close() }
            try slot.write(CheckpointFormat.encode(installed)[...], at: 0)
            try slot.syncData()
            try fileSystem.syncDirectory(directory)
        } catch {
            throw .io(error)
        }
    }
}
