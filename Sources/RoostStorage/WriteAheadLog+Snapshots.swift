extension WriteAheadLog {
    /// The path of the snapshot the newest checkpoint names, or nil when no
    /// snapshot was ever checkpointed (metrics: the age of the last snapshot).
    package var newestSnapshotPath: String? {
        catalog.withLock { $0.newest }.map { layout.snapshotPath($0.snapshotLSN) }
    }
}
