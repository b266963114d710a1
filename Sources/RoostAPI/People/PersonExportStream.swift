import RoostHTTP
import RoostJSON
import RoostModel

/// `GET /v1/people/{external_id}/export` streamed (issue 24 H-1, decision
/// 0081): the answer is the same bytes as rendering it whole
/// (`PersonExportStream.renderWhole`), cut into chunks of at most
/// `windowDevices` devices, each rendered only once the connection has
/// taken the one before (`HTTPBodyStream.whenWritable`).
///
/// The view is the `PersonExport` the shard froze in one turn: the person,
/// a copy of their `Device` values, and each device's history ring as the
/// index packs it (28 bytes an event), shared copy-on-write, which later
/// writes cannot change. A window's histories are unpacked only when it is
/// rendered. A connection that does not read holds that view, one window
/// and `HTTPServerLimits.streamBufferBytesMax` of output, instead of the
/// whole rendered answer (41.9 MB for 1,000 devices × 100 events) and its
/// copy.
struct PersonExportStream: Sendable {
    /// Devices rendered per chunk: the window. A device of a person export
    /// renders to at most ~45 KB (its JSON without token, ≤ 4.6 KB with the
    /// largest tags, and ≤ `Limits.historyEventsPerDeviceMax` = 100 history
    /// events of ≤ ~400 bytes), so a window is ≤ ~0.7 MB (docs/limits.md).
    static let windowDevices = 16

    static let headers: [(name: String, value: String)] = [("Content-Type", "application/json")]

    let export: PersonExport

    /// Writes the chunk that starts at device `index` (the first also opens
    /// the object, the last closes it), then, once the stream has taken it,
    /// the next; finishes the stream after the last.
    func send(from index: Int, to stream: any HTTPBodyStream) {
        let end = min(index + Self.windowDevices, export.devices.count)
        let chunk = Self.render(export, devices: index..<end)
        guard end < export.devices.count else {
            stream.write(chunk) { signal in if signal == .writable { stream.finish() } }
            return
        }
        stream.write(chunk) { signal in
            guard signal == .writable else { return }  // the client went away: the view goes with this closure
            self.send(from: end, to: stream)
        }
    }

    /// Renders the devices in `range`, with the object's opening before the
    /// first device and its closing after the last (both for a person with
    /// no device). Chunks of consecutive ranges from 0 to the end concatenate
    /// to `renderWhole`.
    static func render(_ export: PersonExport, devices range: Range<Int>) -> [UInt8] {
        var capacity = 128
        for device in export.devices[range] { capacity += DeviceJSON.estimatedBytes(device) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(capacity)
        if range.lowerBound == 0 {
            // `{"external_id":…,"created_at":…,"devices":[`: the writer's
            // bytes with the person's object and the array still open.
            var writer = JSONWriter(reservingCapacity: 128)
            PeopleRoutes.writePerson(export.person, into: &writer, closing: false)
            writer.key("devices")
            writer.beginArray()
            bytes.append(contentsOf: writer.bytes)
        }
        for index in range {
            let device = export.devices[index]
            let history = export.history(index)
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            var writer = JSONWriter(
                reservingCapacity: DeviceJSON.estimatedBytes(device) + history.count * HistoryJSON.eventBytesEstimate)
            DeviceJSON.write(device, includeToken: false, into: &writer, closing: false)
            writer.member("token_fingerprint", device.token.map { TokenFingerprint($0).rendered })
            writer.key("history")
            HistoryJSON.write(history, into: &writer)
            writer.endObject()
            bytes.append(contentsOf: writer.bytes)
        }
        if range.upperBound == export.devices.count {
            bytes.append(UInt8(ascii: "]"))
            bytes.append(UInt8(ascii: "}"))
        }
        return bytes
    }

    /// The whole answer in one buffer, as it was rendered before it streamed
    /// (tests compare the stream with it).
    static func renderWhole(_ export: PersonExport) -> [UInt8] {
        let histories = export.devices.indices.map { export.history($0) }
        var capacity = 128
        for (device, history) in zip(export.devices, histories) {
            capacity += DeviceJSON.estimatedBytes(device) + history.count * HistoryJSON.eventBytesEstimate
        }
        var writer = JSONWriter(reservingCapacity: capacity)
        PeopleRoutes.writePerson(export.person, into: &writer, closing: false)
        writer.key("devices")
        writer.beginArray()
        for (device, history) in zip(export.devices, histories) {
            DeviceJSON.write(device, includeToken: false, into: &writer, closing: false)
            writer.member("token_fingerprint", device.token.map { TokenFingerprint($0).rendered })
            writer.key("history")
            HistoryJSON.write(history, into: &writer)
            writer.endObject()
        }
        writer.endArray()
        writer.endObject()
        return writer.bytes
    }
}
