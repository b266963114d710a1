/// One change to an `AppIndex`, as the value the durability layer logs.
///
/// Mutations are logical after-images (ARCHITECTURE "Decisions already taken"):
/// a device upsert carries the whole device as it is after the change, so
/// replaying a mutation twice, or replaying it over a state that already holds
/// it, gives the same state. The log record's envelope (app id, mode, LSN) is
/// the storage layer's; a mutation is applied to the index of its envelope.
package enum Mutation: Hashable, Sendable {
    /// The device as it is after the change (created or updated).
    case deviceUpsert(Device)
    /// The device no longer exists (deleted, evicted, erased with its person or credential).
    case deviceTombstone(DeviceID)
    /// The person is known, since `createdAt`.
    case personUpsert(Person)
    /// The person is erased; any device still bound to them is removed too.
    case personErase(ExternalID)
    /// The APNs credential metadata for a bundle id and environment.
    case credentialUpsert(APNsCredential)
    /// The credential is gone (its devices are tombstoned by their own mutations).
    case credentialDelete(CredentialKey)
    /// The app's settings.
    case settings(AppSettings)
    /// Device sequences below this value are used: a snapshot carries it so that a
    /// restored index never hands out the id of a deleted device again.
    case deviceSequenceFloor(UInt64)
    /// Events of a device's history (spec §9), ordinals `firstOrdinal`,
    /// `firstOrdinal + 1`, …: what one change of the device added, or part of a
    /// snapshot's copy. Replay is idempotent by ordinal (`DeviceHistoryStore`).
    case deviceHistory(DeviceID, firstOrdinal: UInt64, events: [HistoryEvent])
    /// Part of a remembered answer's encoded outcome (`OutcomeCodec`); the
    /// parts of one answer are consecutive and its seal follows them.
    case rememberedAnswerPart(owner: IdempotencyOwner, key: IdempotencyKey, bytes: [UInt8])
    /// The remembered answer whose parts came just before is complete: an
    /// `Idempotency-Key`'s first answer (spec §7).
    case rememberedAnswer(RememberedAnswerSeal)
    /// The device changes of this index in the log records after this one
    /// (up to the next such record of the index) were committed at this
    /// time: the `at` of their change-feed entries (spec §9). One per index
    /// per shard append; changes nothing but replay's clock.
    case changeTime(Timestamp)
    /// Part of a snapshot's copy of the index's change feed (`ChangeFeed.snapshotSlices`).
    case changeFeed(ChangeFeedSlice)
    /// A person was erased at this time: identity tokens issued to them
    /// before it are refused (decision 0079). Holds SHA-256 of the id.
    case erasureMark(ErasureMark)
    /// History events of a device, ordinals `firstOrdinal`, `firstOrdinal + 1`,
    /// …, as they are after an erasure removed the erased person from them
    /// (decision 0079): each replaces the stored event of its ordinal when
    /// that is still held and is the same event (time and kind); nothing else.
    case historyRedaction(DeviceID, firstOrdinal: UInt64, events: [HistoryEvent])
}

/// The device a device upsert or tombstone changes, as the change feed
/// records it (spec §9): read from a `Mutation`, or from its encoded bytes
/// (`MutationCodec.deviceChange(in:)`) where only those are at hand.
package struct ChangedDevice: Equatable, Sendable {
    package var sequence: UInt64
    package var platform: Platform
    package var deleted: Bool

    package init(sequence: UInt64, platform: Platform, deleted: Bool) {
        self.sequence = sequence
        self.platform = platform
        self.deleted = deleted
    }

    /// The change of a device upsert or tombstone; nil for any other mutation.
    package init?(_ mutation: Mutation) {
        switch mutation {
        case .deviceUpsert(let device):
            self.init(sequence: device.id.sequence, platform: device.id.platform, deleted: false)
        case .deviceTombstone(let id): self.init(sequence: id.sequence, platform: id.platform, deleted: true)
        case .personUpsert, .personErase, .credentialUpsert, .credentialDelete, .settings, .deviceSequenceFloor,
            .deviceHistory, .rememberedAnswerPart, .rememberedAnswer, .changeTime, .changeFeed, .erasureMark,
            .historyRedaction:
            return nil
        }
    }
}
