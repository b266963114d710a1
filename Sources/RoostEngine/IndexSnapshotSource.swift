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
        /// The next device (an index into `historySequences`) whose history records follow.
        case history(next: Int)
        case finished
    }

    let key: IndexKey
    private(set) var view: IndexSnapshotView?
    let pin: SnapshotPin
    let pinnedBytesMax: Int
    private var encoder: StoreImageEncoder
    private var phase = Phase.image
    private var historySequences: [UInt64] = []
    private let prefix: [UInt8]
    /// Where shard turns continue if the source stopped (`.done` once all is encoded).
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
        encoder = view.imageEncoder()
        prefix = EngineRecord.imagePrefix(key)
    }

    /// Image parts per batch: about 1 MiB of records per hand-off to the compressor.
    static let imagePartsPerBatch = 4

    mutating func nextBatch() -> [[UInt8]]? {
        guard let view else { return nil }
        if case .finished = phase {
            position = .done
            self.view = nil
            return nil
        }
        if pin.pinnedBytes > pinnedBytesMax {
            stoppedAtPinLimit = true
            self.view = nil
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
            while records.count < Self.imagePartsPerBatch, let part = encoder.nextPart(prefix: prefix) {
                records.append(part)
            }
            if encoder.isDone {
                historySequences = view.sequencesWithHistory()
                phase = .history(next: 0)
            }
        case .history(var next):
            var devices = 0
            while next < historySequences.count && devices < Shard.snapshotSliceDevices {
                records += view.historyMutations(ofSequence: historySequences[next]).map {
                    EngineRecord.mutation(key, $0).encoded()
                }
                next += 1
                devices += 1
            }
            phase = next < historySequences.count ? .history(next: next) : .finished
        case .finished:
            preconditionFailure("a finished source is handled above")
        }
        recordCount += records.count
        return records
    }
}
