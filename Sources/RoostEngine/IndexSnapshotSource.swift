import RoostModel
import RoostStorage

/// One index's people and devices, encoded from its frozen view on the
/// snapshot thread in slices of `Shard.snapshotSliceDevices` (decision 0054):
/// people in slot order, then devices in id order, as the in-turn slices did.
///
/// Before each slice it checks the snapshot's pinned memory: past
/// `pinnedBytesMax` it drops the view (so writers stop copying chunks for it)
/// and stops; the engine then encodes the rest from `position` in shard turns.
struct IndexSnapshotSource: SnapshotRecordSource {
    /// Where the encoding has got to.
    enum Position: Equatable, Sendable {
        /// The next slice starts at this person slot (then every device).
        case people(fromSlot: UInt32)
        /// People are done; the next slice holds the devices after this sequence.
        case devices(afterSequence: UInt64)
        /// Everything in the view is encoded.
        case done
    }

    let key: IndexKey
    private(set) var view: IndexSnapshotView?
    let pin: SnapshotPin
    let pinnedBytesMax: Int
    private(set) var position = Position.people(fromSlot: 0)
    /// Whether the source stopped because the pinned memory passed its limit.
    private(set) var stoppedAtPinLimit = false
    /// Records produced so far.
    private(set) var recordCount = 0

    init(key: IndexKey, view: IndexSnapshotView, pin: SnapshotPin, pinnedBytesMax: Int) {
        precondition(pinnedBytesMax >= 0, "negative pinned-bytes limit \(pinnedBytesMax)")
        self.key = key
        self.view = view
        self.pin = pin
        self.pinnedBytesMax = pinnedBytesMax
    }

    mutating func nextBatch() -> [[UInt8]]? {
        guard let view else { return nil }
        if pin.pinnedBytes > pinnedBytesMax {
            stoppedAtPinLimit = true
            self.view = nil
            return nil
        }
        let mutations: [Mutation]
        switch position {
        case .people(let fromSlot):
            let slice = view.snapshotPeople(fromSlot: fromSlot, limit: Shard.snapshotSliceDevices)
            mutations = slice.mutations
            position = slice.next.map { .people(fromSlot: $0) } ?? .devices(afterSequence: 0)
        case .devices(let afterSequence):
            let slice = view.snapshotDevices(afterSequence: afterSequence, limit: Shard.snapshotSliceDevices)
            mutations = slice.mutations
            position = slice.next.map { .devices(afterSequence: $0) } ?? .done
        case .done:
            self.view = nil
            return nil
        }
        recordCount += mutations.count
        return mutations.map { EngineRecord.mutation(key, $0).encoded() }
    }
}
