import RoostModel
import RoostStorage

/// One index's people and devices, encoded from its frozen view on the
/// snapshot thread: the view's image (decision 0056) in parts of at most
/// `StoreImageFormat.partPayloadBytes`, then the history records of the
/// devices that have one, in slices of `Shard.snapshotSliceDevices` devices.
///
/// Before each batch it checks the snapshot's pinned memory: past
/// `pinnedBytesMax` it drops the view (so writers stop copying chunks for it)
/// and stops; the engine then encodes the index from `position` in shard
/// turns as mutation records (decision 0054). A stop inside the image first
/// writes the part that abandons it, so recovery drops the parts before.
struct IndexSnapshotSource: SnapshotRecordSource {
    /// Where the encoding has got to, and where shard turns continue after a stop.
    enum Position: Equatable, Sendable {
        /// The next slice starts at this person slot (then every device).
        case people(fromSlot: UInt32)
        /// People are done; the next slice holds the devices after this sequence.
        case devices(afterSequence: UInt64)
        /// Everything in the view is encoded.
        case done
    }

    /// The phase on the snapshot thread.
    private enum Phase: Sendable {
        case image
        /// The next device (an index into the encoder's `devicesWithHistory`) whose history records follow.
        case history(next: Int)
        case finished
    }

    let key: IndexKey
    let pin: SnapshotPin
    let pinnedBytesMax: Int
    /// The view's only holder (it lets go of chunks as it writes them); nil once the source is done or stopped.
    private var encoder: StoreImageEncoder?
    private var phase = Phase.image
    private let prefix: [UInt8]
    /// Where shard turns continue if the source stopped (`.done` once all is encoded).
    private(set) var position = Position.people(fromSlot: 0)
    /// Whether the source stopped because the pinned memory passed its limit.
    private(set) var stoppedAtPinLimit = false
    /// Records produced so far.
    private(set) var recordCount = 0

    /// Takes `view` (give it the only copy: see `IndexSnapshotView.imageEncoder`).
    init(key: IndexKey, view: consuming IndexSnapshotView, pin: SnapshotPin, pinnedBytesMax: Int) {
        precondition(pinnedBytesMax >= 0, "negative pinned-bytes limit \(pinnedBytesMax)")
        self.key = key
        self.pin = pin
        self.pinnedBytesMax = pinnedBytesMax
        encoder = view.imageEncoder()
        prefix = EngineRecord.imagePrefix(key)
    }

    /// Image parts per batch: about 1 MiB of records per hand-off to the compressor.
    static let imagePartsPerBatch = 4

    /// Whether the source still holds its index's frozen view.
    var holdsView: Bool { encoder != nil }

    mutating func nextBatch() -> [[UInt8]]? {
        guard encoder != nil else { return nil }
        if case .finished = phase {
            position = .done
            encoder = nil
            return nil
        }
        if pin.pinnedBytes > pinnedBytesMax {
            stoppedAtPinLimit = true
            encoder = nil
            switch phase {
            case .image:
                // Shard turns write every person and device; recovery drops the parts written so far.
                position = .people(fromSlot: 0)
                guard recordCount > 0 else { return nil }
                recordCount += 1
                return [StoreImageEncoder.abandonedPart(prefix: prefix)]
            case .history, .finished:
                // The image is whole; the devices' upserts again, with their history, from shard turns.
                position = .devices(afterSequence: 0)
                return nil
            }
        }
        var records: [[UInt8]] = []
        switch phase {
        case .image:
            while records.count < Self.imagePartsPerBatch, let part = encoder!.nextPart(prefix: prefix) {
                records.append(part)
            }
            if encoder!.isDone { phase = .history(next: 0) }
        case .history(var next):
            let devices = encoder!.devicesWithHistory
            let end = min(next + Shard.snapshotSliceDevices, devices.count)
            while next < end {
                records += encoder!.historyMutations(devices[next]).map { EngineRecord.mutation(key, $0).encoded() }
                next += 1
            }
            phase = next < devices.count ? .history(next: next) : .finished
        case .finished:
            preconditionFailure("a finished source is handled above")
        }
        recordCount += records.count
        return records
    }
}
