/// Every bound the model enforces, in one place (HOUSE_STYLE rule 4).
///
/// The API layer checks these where data enters; the model checks them again
/// where the data is stored and the codec checks them when it reads a record.
package enum Limits {
    /// APNs tokens in hex characters (spec §2): 64 to 400, even.
    package static let apnsTokenHexCharactersMin = 64
    package static let apnsTokenHexCharactersMax = 400
    /// FCM tokens in characters of `A-Za-z0-9_-:.` (spec §2).
    package static let fcmTokenCharactersMin = 32
    package static let fcmTokenCharactersMax = 400
    /// `external_id`: 1 to 256 characters (spec §2), counted as Unicode scalars.
    package static let externalIDCharactersMax = 256
    /// `installation_id`: at most 200 characters (spec §5 rule 4).
    package static let installationIDCharactersMax = 200
    /// `bundle_id`: Apple allows 155; Android package names are shorter than 255.
    package static let bundleIDBytesMax = 255
    /// Free-form metadata (`app_version`, `timezone`, `locale`), in UTF-8 bytes.
    package static let appVersionBytesMax = 64
    package static let timezoneBytesMax = 64
    package static let localeBytesMax = 64
    /// `invalidation_reason` (a provider's word such as `Unregistered`), in UTF-8 bytes.
    package static let invalidationReasonBytesMax = 64
    /// APNs credential metadata (`team_id`, `key_id`), in ASCII characters.
    package static let credentialFieldBytesMax = 64
    /// Tags after a merge (spec §4 via the Carillon seed): 50 keys and 4,096 bytes,
    /// counted as documented on `Tags.byteCount`.
    package static let tagKeysMax = 50
    package static let tagBytesMax = 4_096
    /// A single tag key, in UTF-8 bytes (a key alone could otherwise take the whole budget).
    package static let tagKeyBytesMax = 128
    /// `max_devices_per_person`: default 10 (spec §3), settable within this range.
    package static let maxDevicesPerPersonDefault = 10
    package static let maxDevicesPerPersonRange = 1...1_000
    /// `GET /v1/devices` page size: default 100, at most 1,000 (spec §4).
    package static let listLimitDefault = 100
    package static let listLimitMax = 1_000
    /// How many devices one list page may examine before it returns what it has with
    /// a cursor, so that a rare filter cannot make one request walk millions of rows.
    package static let listScanMax = 100_000
    /// Devices in one `AppIndex` (slots are `UInt32`, one value is reserved).
    package static let devicesPerIndexMax = Int(UInt32.max - 2)
    /// `client_sequence` (spec §7 ordered registration): an integer from 0 to
    /// 2^53 − 1, the largest integer every JSON reader holds exactly.
    package static let clientSequenceMax: UInt64 = (1 << 53) - 1
    /// A device's `version` (spec §7) counts changes from 1; after this value
    /// the next change wraps to 1 again (4.29 billion changes of one device;
    /// see docs/decisions/0051-ordered-writes-and-versions.md).
    package static let deviceVersionMax = UInt32.max
    /// The most memory one index's snapshot view may pin (decision 0054): the
    /// bytes of the chunks writers copied because the frozen view still shared
    /// them. Past it the snapshot thread drops the view (the old chunks are
    /// freed) and the engine writes the rest of that index in bounded slices in
    /// the shard's turns, as before views existed: writers then pay latency
    /// instead of memory. Without the limit a view pins at most one copy of
    /// the index's chunks (about its own size); one index is frozen at a time.
    package static let snapshotPinnedBytesMax = 1 << 30
    /// A codec record never exceeds this many bytes (a device with 4 KiB of tags fits).
    package static let mutationBytesMax = 16_384
    /// `inactive_after_days` and `older_than_days` (spec §8): 1 day to 10 years.
    package static let inactiveAfterDaysRange = 1...3_650
    /// Devices one inactivity step (sweep, preview or invalidation) examines in
    /// one shard turn: it reads each packed record's `last_seen_at` and
    /// invalidation flag only (docs/performance.md has the measured cost).
    package static let inactiveScanDevicesPerTurnMax = 16_384
    /// Devices one inactivity step invalidates in one shard turn (each is a
    /// device upsert of up to ~4.5 KB in that turn's one log append).
    package static let inactiveInvalidationsPerTurnMax = 256
    /// `GET /v1/devices/inactive` `limit`: default 100, at most 1,000 (as a list page).
    package static let inactivePreviewLimitDefault = 100
    package static let inactivePreviewLimitMax = 1_000
    /// Milliseconds in the days of `older_than_days`.
    package static let millisecondsPerDay: Int64 = 86_400_000
    /// Events a device's history keeps (spec §9: "at most the last 100"); older ones are dropped.
    package static let historyEventsPerDeviceMax = 100
    /// Events in one `deviceHistory` record: a snapshot writes a full history in
    /// records of this many, so that one stays under `mutationBytesMax` even with
    /// two 256-scalar (1,024-byte) external ids and a reason per event (≤ 2,150
    /// bytes each). One change makes at most 6 (`created` and five more).
    package static let historyEventsPerRecordMax = 6
}
