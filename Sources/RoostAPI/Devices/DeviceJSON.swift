import RoostHTTP
import RoostJSON
import RoostModel

/// The one renderer of spec §4 "Device JSON", shared by the native and the
/// compatibility routes so that a device reads the same on every route.
///
/// Every field is always present, `null` where unset (`version` and
/// `client_sequence` of spec §7 last); timestamps are RFC 3339
/// UTC with milliseconds. The token appears only where a route asks for it
/// (reads under `devices:read`); a registration answer never carries it, and
/// the installation secret's digest is never rendered anywhere.
package enum DeviceJSON {
    /// Writes `device` as one JSON object; with `includeToken`, a `token` member
    /// follows `environment` (null on a device that lost its token).
    /// Without `closing`, the object is left open for the caller's members.
    package static func write(
        _ device: Device, includeToken: Bool, into writer: inout JSONWriter, closing: Bool = true
    ) {
        writer.beginObject()
        writer.key("id")
        device.id.withRendered { writer.asciiString($0) }
        writer.member("platform", device.platform.name)
        writer.member("environment", device.environment.name)
        if includeToken { writer.member("token", device.token?.text) }
        writer.member("bundle_id", device.bundleID?.rawValue)
        writer.member("installation_id", device.installationID?.rawValue)
        writer.member("external_id", device.externalID?.rawValue)
        writeTimestamp("created_at", device.createdAt, into: &writer)
        writeTimestamp("last_seen_at", device.lastSeenAt, into: &writer)
        writeTimestamp("bound_at", device.boundAt, into: &writer)
        writer.member("app_version", device.appVersion)
        writer.member("timezone", device.timezone)
        writer.member("locale", device.locale)
        writer.key("push_permission")
        if let permission = device.pushPermission { writer.bool(permission) } else { writer.null() }
        writer.member("opted_in", device.optedIn)
        writer.key("tags")
        writeTags(device.tags, into: &writer)
        writeTimestamp("invalidated_at", device.invalidatedAt, into: &writer)
        writer.member("invalidation_reason", device.invalidationReason?.rawValue)
        writer.member("strikes", Int(device.strikes))
        writer.member("mode", device.mode.name)
        writer.member("version", Int(device.version))
        writer.key("client_sequence")
        if let sequence = device.clientSequence { writer.int(Int(sequence)) } else { writer.null() }
        if closing { writer.endObject() }
    }

    /// Writes a member whose value is `timestamp` in RFC 3339 form, or `null`,
    /// formatted on the stack and written as bytes: no `String` is built
    /// (issue 25: two heap allocations per timestamp before).
    static func writeTimestamp(_ name: String, _ timestamp: Timestamp?, into writer: inout JSONWriter) {
        writer.key(name)
        guard let timestamp else {
            writer.null()
            return
        }
        timestamp.withRFC3339 { writer.asciiString($0) }
    }

    /// Bytes a device's JSON with its token takes, about: the fixed members
    /// (~760 bytes with every field set) plus its tags' keys and values and
    /// their punctuation (escapes aside). O(tags).
    static func estimatedBytes(_ device: Device) -> Int {
        760 + device.tags.byteCount + 6 * device.tags.count
    }

    /// Writes tags as an object with keys in sorted order (a stable rendering).
    static func writeTags(_ tags: Tags, into writer: inout JSONWriter) {
        writer.beginObject()
        for (key, value) in tags.sortedEntries {
            writer.key(key.rawValue)
            switch value {
            case .string(let text): writer.string(text)
            case .bool(let flag): writer.bool(flag)
            case .number(let number): writeNumber(number, into: &writer)
            }
        }
        writer.endObject()
    }

    /// Integral numbers within ±2^53 are written without a fraction (`30`, not
    /// `30.0`), so a tag reads back as the client sent it; others in shortest form.
    private static func writeNumber(_ number: Double, into writer: inout JSONWriter) {
        if let integral = integral(number) { writer.int(integral) } else { writer.double(number) }
    }

    /// `number` as the integer a tag number is written as, or nil when it is
    /// written in shortest form (`JSONWriter.double`).
    static func integral(_ number: Double) -> Int? {
        let exactIntegerLimit = 9_007_199_254_740_992.0
        guard number == number.rounded(), abs(number) <= exactIntegerLimit, !(number == 0 && number.sign == .minus)
        else { return nil }
        return Int(number)
    }

    /// Returns a JSON response holding one device, with the device's version
    /// as its strong `ETag` (spec §7).
    static func response(_ status: Int, _ device: Device, includeToken: Bool) -> HTTPResponse {
        var writer = JSONWriter(reservingCapacity: 680)
        write(device, includeToken: includeToken, into: &writer)
        var response = jsonResponse(status, writer)
        response.headers.append(("ETag", IfMatch.entityTag(device)))
        return response
    }
}
