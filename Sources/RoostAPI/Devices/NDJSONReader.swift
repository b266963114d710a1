import RoostJSON
import RoostModel

/// A reader of newline-delimited JSON (the format of `GET /v1/devices/export`),
/// one line at a time, over a byte buffer.
///
/// Lines end at LF; a CR right before the LF is dropped (a file that went
/// through a CRLF editor still reads). Empty lines are skipped. A leading
/// UTF-8 byte-order mark is skipped, as the CSV reader does. Line numbers
/// count physical lines from 1. The reader never looks inside a line: the
/// line parser (`ExportedDevice`) does.
package struct NDJSONReader: Sendable {
    /// One non-empty line: its physical number (the first line is 1) and its
    /// bytes, without the line break.
    package struct Line: Sendable {
        package var number: Int
        package var bytes: ArraySlice<UInt8>
    }

    private let bytes: [UInt8]
    private var position: Int
    private var line = 0

    package init(_ bytes: [UInt8]) {
        self.bytes = bytes
        position = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
    }

    /// Whether every byte has been read.
    package var isAtEnd: Bool { position >= bytes.count }

    /// Returns the next non-empty line, or nil at the end. O(bytes of the line).
    package mutating func next() -> Line? {
        while position < bytes.count {
            line += 1
            let start = position
            var end = start
            while end < bytes.count && bytes[end] != UInt8(ascii: "\n") { end += 1 }
            position = end < bytes.count ? end + 1 : end
            var last = end
            if last > start && bytes[last - 1] == UInt8(ascii: "\r") { last -= 1 }
            if last > start { return Line(number: line, bytes: bytes[start..<last]) }
        }
        return nil
    }
}

/// One line of an export read back as a `Device` (spec §11: "in the exact
/// format of `GET /v1/devices/export`"): every member the export writes
/// (`DeviceJSON.write` with the token), each as the export spells it; an
/// unknown member, a repeated one or a value of the wrong shape rejects the
/// line with the code registration gives the same fault (`invalid_token_format`,
/// `invalid_platform`, `invalid_tags`, …; `invalid_field` otherwise).
/// `id`, `platform` and `created_at` are required; a member left out takes
/// the value the export writes for "unset" (null, `opted_in` true, no tags,
/// no strikes, `last_seen_at` = `created_at`). The installation secret's
/// digest is never exported, so a restored device holds none.
package enum ExportedDevice {
    /// The longest line read, in bytes (a device with the most tags, escaped,
    /// is far shorter; the JSON body limit of spec §2).
    static let lineBytesMax = 64 * 1024

    /// The members of an export line (`DeviceJSON.write`, token included).
    static let memberNames: Set<String> = [
        "id", "platform", "environment", "token", "bundle_id", "installation_id", "external_id", "created_at",
        "last_seen_at", "bound_at", "app_version", "timezone", "locale", "push_permission", "opted_in", "tags",
        "invalidated_at", "invalidation_reason", "strikes", "mode", "version", "client_sequence",
    ]

    static let invalidLine = APIError(
        status: 400, code: "invalid_ndjson_line", message: "the line is not one JSON object of at most 64 KiB")

    /// Returns the device a line spells, or the error of the first fault.
    package static func parse(_ line: ArraySlice<UInt8>) -> Result<Device, APIError> {
        do throws(APIError) {
            return .success(try device(line))
        } catch {
            return .failure(error)
        }
    }

    private static func device(_ line: ArraySlice<UInt8>) throws(APIError) -> Device {
        guard line.count <= lineBytesMax else { throw invalidLine }
        let value: JSONValue
        do {
            value = try JSONReader.parse(line, limits: JSONBody.limits)
        } catch {
            throw error.kind == .duplicateKey
                ? APIError(status: 400, code: "malformed_json", message: "a member appears twice")
                : invalidLine
        }
        guard let members = value.objectMembers else { throw invalidLine }
        for (name, _) in members where !memberNames.contains(name) {
            throw APIError.invalidField(String(name.prefix(64)), "an export line has no member \(name.prefix(64))")
        }
        guard case .string(let idText)? = value["id"], let id = DeviceID(rendered: idText) else {
            throw APIError.invalidField("id", "id must be a device id this server format mints")
        }
        let platform = try RegisterBody.parsePlatform(value["platform"])
        guard platform == id.platform else { throw APIError(RegistryRejection.deviceIdentityConflict(field: "id")) }
        if let mode = value["mode"], !mode.isNull {
            guard mode.stringValue == id.mode.name else {
                throw APIError.invalidField("mode", "mode must be the mode of the id (\(id.mode.name))")
            }
        }
        let environment = try RegisterBody.parseEnvironment(value["environment"]) ?? .production
        guard environment.isAllowed(for: platform) else { throw APIError(RegistryRejection.invalidEnvironment) }
        var token: PushToken?
        switch value["token"] {
        case nil, .null?: token = nil
        case .string(let text)?:
            token = try model { () throws(RegistryRejection) in
                try PushToken(parsing: text, platform: platform)
            }
        case _?: throw APIError(RegistryRejection.invalidTokenFormat)
        }
        guard let createdAt = try timestamp(value, "created_at") else { throw APIError.missingField("created_at") }
        var device = Device(id: id, environment: environment, token: token, createdAt: createdAt)
        device.lastSeenAt = try timestamp(value, "last_seen_at") ?? createdAt
        device.boundAt = try timestamp(value, "bound_at")
        device.bundleID = try string(value, "bundle_id").map { (text) throws(APIError) in
            try model { () throws(RegistryRejection) in try BundleID(text) }
        }
        device.installationID = try string(value, "installation_id").map { (text) throws(APIError) in
            try model { () throws(RegistryRejection) in try InstallationID(text) }
        }
        device.externalID = try string(value, "external_id").map { (text) throws(APIError) in
            try model { () throws(RegistryRejection) in try ExternalID(text) }
        }
        device.appVersion = try text(value, "app_version", max: Limits.appVersionBytesMax)
        device.timezone = try text(value, "timezone", max: Limits.timezoneBytesMax)
        device.locale = try text(value, "locale", max: Limits.localeBytesMax)
        switch value["push_permission"] {
        case nil, .null?: device.pushPermission = nil
        case .bool(let flag)?: device.pushPermission = flag
        case _?: throw APIError.invalidField("push_permission", "push_permission must be a boolean or null")
        }
        switch value["opted_in"] {
        case nil: device.optedIn = true
        case .bool(let flag)?: device.optedIn = flag
        case _?: throw APIError.invalidField("opted_in", "opted_in must be a boolean")
        }
        switch value["tags"] {
        case nil, .null?: device.tags = .empty
        case .object?:
            switch try RegisterBody.tagsChange(value["tags"]).applied(to: .empty) {
            case .success(let tags): device.tags = tags
            case .failure(let rejection): throw APIError(rejection)
            }
        case _?: throw APIError(RegistryRejection.invalidTags)
        }
        device.invalidatedAt = try timestamp(value, "invalidated_at")
        device.invalidationReason = try string(value, "invalidation_reason").map { (text) throws(APIError) in
            try model { () throws(RegistryRejection) in try InvalidationReason(text) }
        }
        switch value["strikes"] {
        case nil, .null?: device.strikes = 0
        case let number?:
            guard let strikes = number.intValue, let count = UInt32(exactly: strikes) else {
                throw APIError.invalidField("strikes", "strikes must be an integer from 0 to \(UInt32.max)")
            }
            device.strikes = count
        }
        // Spec §7: kept as exported, like the timestamps (absent: a new device's 1, none).
        switch value["version"] {
        case nil, .null?: device.version = 1
        case let number?:
            guard let version = number.intValue, version >= 1, let stored = UInt32(exactly: version) else {
                throw APIError.invalidField(
                    "version", "version must be an integer from 1 to \(Limits.deviceVersionMax)")
            }
            device.version = stored
        }
        switch value["client_sequence"] {
        case nil, .null?: device.clientSequence = nil
        case let number?:
            guard let sequence = number.intValue, sequence >= 0, UInt64(sequence) <= Limits.clientSequenceMax else {
                throw APIError.invalidField(
                    "client_sequence", "client_sequence must be an integer from 0 to \(Limits.clientSequenceMax)")
            }
            device.clientSequence = UInt64(sequence)
        }
        if device.violation() != nil {
            throw APIError.invalidField("device", "the line's members contradict each other")
        }
        return device
    }

    /// A string member; nil when absent or null.
    private static func string(_ value: JSONValue, _ name: String) throws(APIError) -> String? {
        switch value[name] {
        case nil, .null?: return nil
        case .string(let text)?: return text
        case _?: throw APIError.invalidField(name, "\(name) must be a string or null")
        }
    }

    /// A free-text member: 1 to `max` bytes (the export writes null, never "", for unset).
    private static func text(_ value: JSONValue, _ name: String, max: Int) throws(APIError) -> String? {
        guard let text = try string(value, name) else { return nil }
        guard !text.isEmpty, text.utf8.count <= max else {
            throw APIError.invalidField(name, "\(name) must be 1 to \(max) bytes or null")
        }
        return text
    }

    /// An RFC 3339 timestamp member; nil when absent or null.
    private static func timestamp(_ value: JSONValue, _ name: String) throws(APIError) -> Timestamp? {
        guard let text = try string(value, name) else { return nil }
        guard let timestamp = Timestamp(rfc3339: text) else {
            throw APIError.invalidField(name, "\(name) must be an RFC 3339 timestamp")
        }
        return timestamp
    }

    private static func model<Value>(_ make: () throws(RegistryRejection) -> Value) throws(APIError) -> Value {
        do throws(RegistryRejection) {
            return try make()
        } catch {
            throw APIError(error)
        }
    }
}
