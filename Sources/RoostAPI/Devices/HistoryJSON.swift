import RoostJSON
import RoostModel

/// The one renderer of spec §9 history events (device history, person export).
///
/// Every event has all six members (`at`, `kind`, `external_id`,
/// `previous_external_id`, `token_fingerprint`, `reason`), `null` where the
/// kind has no value, as Device JSON renders unset fields (docs/model.md §8).
enum HistoryJSON {
    /// About how many bytes one event takes (two short external ids).
    static let eventBytesEstimate = 200

    /// Writes `events` as a JSON array, in the order given.
    static func write(_ events: [HistoryEvent], into writer: inout JSONWriter) {
        writer.beginArray()
        for event in events {
            writer.beginObject()
            writer.member("at", event.at.rfc3339)
            writer.member("kind", event.kind.name)
            writer.member("external_id", event.externalID?.rawValue)
            writer.member("previous_external_id", event.previousExternalID?.rawValue)
            writer.member("token_fingerprint", event.tokenFingerprint?.rendered)
            writer.member("reason", event.reason?.rawValue)
            writer.endObject()
        }
        writer.endArray()
    }
}
