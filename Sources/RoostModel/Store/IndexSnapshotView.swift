/// A frozen, read-only copy of one index's devices and people, taken in one
/// shard turn (`AppIndex.freezeForSnapshot`) and encoded into a snapshot on
/// the snapshot thread, outside the shard's turns (decision 0054).
///
/// It shares the live store's chunks: writers copy a chunk the first time they
/// touch it while the view lives (counted in the snapshot's `SnapshotPin`), so
/// the view keeps showing the index as it was when it was taken. Encoding it
/// costs writers those chunk copies and nothing else.
package struct IndexSnapshotView: Sendable {
    let store: DeviceStore

    /// The devices stored in the view (live ones).
    package var deviceCount: Int { store.deviceCount }

    /// One bounded slice of the view's people (`DeviceStore.snapshotPeople`).
    package func snapshotPeople(fromSlot: UInt32, limit: Int) -> (mutations: [Mutation], next: UInt32?) {
        store.snapshotPeople(fromSlot: fromSlot, limit: limit)
    }

    /// An encoder of the view's image (decision 0056): its devices and
    /// people as the store's own arrays, then its devices' histories. Give
    /// the encoder the only copy of the view: it lets go of chunks as it
    /// writes them, which spares writers their copies only if nothing else holds them.
    package func imageEncoder() -> StoreImageEncoder { store.imageEncoder() }

    /// One bounded slice of the view's devices (`DeviceStore.snapshotDevices`).
    package func snapshotDevices(afterSequence: UInt64, limit: Int) -> (mutations: [Mutation], next: UInt64?) {
        store.snapshotDevices(afterSequence: afterSequence, limit: limit)
    }
}

extension AppIndex {
    /// Returns a frozen copy of this index's devices and people for a snapshot
    /// (`IndexSnapshotView`); later writes count the chunks they copy in `pin`.
    /// O(chunks). Call `endSnapshotSharing()` after the view is dropped.
    package mutating func freezeForSnapshot(pin: SnapshotPin) -> IndexSnapshotView {
        IndexSnapshotView(store: store.freezeForSnapshot(pin: pin))
    }

    /// Forgets the sharing marks of `freezeForSnapshot` (its view is gone).
    package mutating func endSnapshotSharing() {
        store.endSnapshotSharing()
    }
}
