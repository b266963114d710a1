extension WriteAheadLog {
    /// The path of the snapshot the newest checkpoint names, or nil when no
    /// snapshot was ever checkpointed (metrics: the age of the last snapshot).
    package var newestSnapshotPath: String? {
        catalog.withLock { $0.newest }.map { layout.snapshotPath($0.snapshotLSN) }
    }
}

extension WriteAheadLog {
    /// The newest checkpoint and its snapshot file's path (nil: none yet):
    /// what a cluster node hands a node that re-seeds (spec §13.6). The file
    /// may be removed by a later checkpoint: open it before the next one.
    package var newestCheckpoint: (checkpoint: Checkpoint, path: String)? {
        catalog.withLock { $0.newest }.map { ($0, layout.snapshotPath($0.snapshotLSN)) }
    }
}
