import RoostCrypto
import RoostJSON
import RoostModel
import RoostPlatform

/// Parses the body of `POST /v1/devices` (spec §4), or one CSV import row put
/// into the same shape, into a `RegisterRequest`.
///
/// Rules: `platform` and `token` are required; `environment` defaults to
/// `production` for a new device and keeps an existing device's (spec §12); an omitted optional member keeps the stored value and `null`
/// clears it (`external_id`, `bundle_id`, `app_version`, `timezone`, `locale`,
/// `push_permission`; an empty string clears the three free-text fields too);
/// `tags` merge (a `null` value removes a key) and `tags: null` clears them all;
/// `installation_secret` is hashed with SHA-256 here, so the model never sees
/// it; a `device_id` this server did not mint is treated as unknown (no reuse).
/// `opted_in: null` and `installation_id: null` keep the stored value (neither
/// can be unset). `client_sequence` (spec §7) is an integer 0 to 2^53 − 1.
/// Unknown members are ignored.
enum RegisterBody {
    /// The longest `installation_secret` accepted, in UTF-8 bytes.
    static let installationSecretBytesMax = 1_024

    /// The member names of a register body (also the CSV import's columns).
    static let memberNames: [String] = RegisterField.allCases.map(\.name)

    /// Returns the request a body object spells, or the 400 of the first member at fault.
    static func parse(_ body: JSONValue) throws(APIError) -> RegisterRequest {
        try parse(members: body)
    }

    /// `parse` over a body's members wherever they are read from: a parsed
    /// object, or the request bytes scanned in place (`PlainBodyScan`).
    static func parse(members body: some RegisterMembers) throws(APIError) -> RegisterRequest {
        let platform = try body.platform()
        let token = try body.token(for: platform)
        var request = RegisterRequest(token: token, environment: try body.environment())
        if let environment = request.environment, !environment.isAllowed(for: platform) {
            throw APIError(RegistryRejection.invalidEnvironment)
        }
        request.bundleID = try change(body, .bundleID) { (text) throws(RegistryRejection) in try BundleID(text) }
        request.externalID = try change(body, .externalID) { (text) throws(RegistryRejection) in
            try ExternalID(text)
        }
        if let text = try string(body, .deviceID) { request.deviceID = DeviceID(rendered: text) }
        if let secret = try string(body, .installationSecret) {
            guard !secret.utf8.isEmpty, secret.utf8.count <= installationSecretBytesMax else {
                throw APIError.invalidField(
                    "installation_secret", "installation_secret must be 1 to \(installationSecretBytesMax) bytes")
            }
            request.installationSecretDigest = SecretDigest(bytes: Crypto.sha256(secret.utf8))
        }
        if let text = try string(body, .installationID) {
            request.installationID = try model { () throws(RegistryRejection) in try InstallationID(text) }
        }
        request.appVersion = try textChange(body, .appVersion)
        request.timezone = try textChange(body, .timezone)
        request.locale = try textChange(body, .locale)
        switch body[field: .pushPermission] {
        case nil: break
        case .null?: request.pushPermission = .clear
        case .bool(let flag)?: request.pushPermission = .set(flag)
        case _?: throw APIError.invalidField("push_permission", "push_permission must be a boolean or null")
        }
        switch body[field: .optedIn] {
        case nil, .null?: break
        case .bool(let flag)?: request.optedIn = flag
        case _?: throw APIError.invalidField("opted_in", "opted_in must be a boolean")
        }
        request.tags = try tagsChange(body[field: .tags])
        if let member = body[field: .clientSequence] { request.clientSequence = try clientSequence(member) }
        return request
    }

    /// The `token` member of a parsed object, parsed for `platform`.
    static func token(_ value: JSONValue?, for platform: Platform) throws(APIError) -> PushToken {
        switch value {
        case nil, .null?: throw APIError.missingField("token")
        case .string(let text)?:
            return try model { () throws(RegistryRejection) in try PushToken(parsing: text, platform: platform) }
        case _?: throw APIError(RegistryRejection.invalidTokenFormat)
        }
    }

    /// `client_sequence` (spec §7): an integer literal (no sign, fraction or
    /// exponent, no leading zero) from 0 to 2^53 − 1. Anything else, `null`
    /// included, is 400 `invalid_field`: a client that meant to order its
    /// writes must not silently lose the check.
    static func clientSequence(_ value: JSONValue) throws(APIError) -> UInt64 {
        let invalid = APIError.invalidField(
            "client_sequence", "client_sequence must be an integer from 0 to \(Limits.clientSequenceMax)")
        guard case .number(let literal) = value else { throw invalid }
        let digits = Array(literal.utf8)
        guard !digits.isEmpty, digits.count <= 16, digits.count == 1 || digits[0] != UInt8(ascii: "0") else {
            throw invalid
        }
        var sequence: UInt64 = 0
        for digit in digits {
            guard digit >= UInt8(ascii: "0") && digit <= UInt8(ascii: "9") else { throw invalid }
            sequence = sequence * 10 + UInt64(digit - UInt8(ascii: "0"))
        }
        guard sequence <= Limits.clientSequenceMax else { throw invalid }
        return sequence
    }

    /// `platform`: required, `ios` or `android` (else 400 `invalid_platform`).
    static func parsePlatform(_ value: JSONValue?) throws(APIError) -> Platform {
        switch value {
        case nil, .null?: throw APIError.missingField("platform")
        case .string(let name)?:
            guard let platform = Platform(name: name) else { throw APIError(RegistryRejection.invalidPlatform) }
            return platform
        case _?: throw APIError(RegistryRejection.invalidPlatform)
        }
    }

    /// `environment`: `production` or `sandbox`; omitted or `null` is nil: an
    /// existing device keeps its stored one, a new one gets `production`.
    static func parseEnvironment(_ value: JSONValue?) throws(APIError) -> APNsEnvironment? {
        switch value {
        case nil, .null?: return nil
        case .string(let name)?:
            guard let environment = APNsEnvironment(name: name) else {
                throw APIError(RegistryRejection.invalidEnvironment)
            }
            return environment
        case _?: throw APIError(RegistryRejection.invalidEnvironment)
        }
    }

    /// `tags`: omitted keeps, `null` clears, an object merges (values: string,
    /// finite number, boolean, or `null` to remove the key). Anything else is
    /// 400 `invalid_tags`.
    static func tagsChange(_ value: JSONValue?) throws(APIError) -> TagsChange {
        switch value {
        case nil: return .keep
        case .null?: return .clear
        case .object(let members)?:
            // Keyed by `TagKey`: the reader refused a name given twice, and an
            // NFC name and its NFD form are two keys (docs/json.md "Names").
            var patch: [TagKey: TagValue?] = [:]
            for (name, member) in members {
                let key = TagKey(name)
                switch member {
                case .null: patch[key] = .some(nil)
                case .string(let text): patch[key] = .string(text)
                case .bool(let flag): patch[key] = .bool(flag)
                case .number:
                    guard let number = member.doubleValue else { throw APIError(RegistryRejection.invalidTags) }
                    patch[key] = .number(number)
                case .array, .object: throw APIError(RegistryRejection.invalidTags)
                }
            }
            return .merge(patch)
        case _?: throw APIError(RegistryRejection.invalidTags)
        }
    }

    /// Returns a string member, nil when absent or null; 400 when of another type.
    private static func string(_ body: some RegisterMembers, _ field: RegisterField) throws(APIError) -> String? {
        switch body[field: field] {
        case nil, .null?: return nil
        case .string(let text)?: return text
        case _?: throw APIError.invalidField(field.name, "\(field.name) must be a string")
        }
    }

    /// Returns the change a nullable string member asks for, validated by `make`.
    private static func change<Value>(
        _ body: some RegisterMembers, _ field: RegisterField, _ make: (String) throws(RegistryRejection) -> Value
    ) throws(APIError) -> FieldChange<Value> {
        switch body[field: field] {
        case nil: return .keep
        case .null?: return .clear
        case .string(let text)?:
            do throws(RegistryRejection) {
                return .set(try make(text))
            } catch {
                throw APIError(error)
            }
        case _?: throw APIError.invalidField(field.name, "\(field.name) must be a string or null")
        }
    }

    /// A free-text metadata member: `""` clears like `null` (the model bounds the length).
    private static func textChange(_ body: some RegisterMembers, _ field: RegisterField) throws(APIError)
        -> FieldChange<String>
    {
        let parsed = try change(body, field) { (text) throws(RegistryRejection) in text }
        if case .set(let text) = parsed, text.isEmpty { return .clear }
        return parsed
    }

    /// Runs a validating initializer, turning its rejection into the API envelope.
    static func model<Value>(_ make: () throws(RegistryRejection) -> Value) throws(APIError) -> Value {
        do throws(RegistryRejection) {
            return try make()
        } catch {
            throw APIError(error)
        }
    }
}

/// Where `RegisterBody.parse` reads a register body's members: a parsed
/// JSON object, or the request's bytes scanned in place (`PlainBodyScan`,
/// the fast path of `POST /v1/devices`). Names are compared as bytes (RFC
/// 7493), as `JSONValue`'s subscript compares them.
protocol RegisterMembers: BodyMembers {
    /// The value of the member `field` names, nil when absent: what
    /// `self[member: field.name]` is, found without a look-up by name where
    /// the source knows its members' fields already (`PlainBodyScan`).
    subscript(field field: RegisterField) -> JSONValue? { get }

    /// The `token` member parsed for `platform` (missing or null: 400
    /// `missing_field`; not a string: `invalid_token_format`).
    func token(for platform: Platform) throws(APIError) -> PushToken

    /// The `platform` member as `RegisterBody.parsePlatform` reads it.
    func platform() throws(APIError) -> Platform

    /// The `environment` member as `RegisterBody.parseEnvironment` reads it.
    func environment() throws(APIError) -> APNsEnvironment?
}

extension RegisterMembers {
    func platform() throws(APIError) -> Platform { try RegisterBody.parsePlatform(self[field: .platform]) }

    func environment() throws(APIError) -> APNsEnvironment? {
        try RegisterBody.parseEnvironment(self[field: .environment])
    }
}

extension JSONValue: RegisterMembers {
    package subscript(member name: String) -> JSONValue? { self[name] }

    subscript(field field: RegisterField) -> JSONValue? { self[field.name] }

    func token(for platform: Platform) throws(APIError) -> PushToken {
        try RegisterBody.token(self["token"], for: platform)
    }
}

/// The members `RegisterBody.parse` reads, in the order it reads them (its
/// 400 names the first member at fault in this order).
enum RegisterField: Int, CaseIterable {
    case platform, token, environment, bundleID, externalID, deviceID, installationSecret, installationID
    case appVersion, timezone, locale, pushPermission, optedIn, tags, clientSequence

    /// The member's name in a body (and the CSV import's column): read from
    /// a table made once from `staticName`, so that a name is spelled once
    /// and reading one builds nothing (`staticName.description` per call
    /// allocated past 15 bytes: `installation_secret`, for every batch item).
    var name: String { Self.names[rawValue] }

    private static let names: [String] = allCases.map { $0.staticName.description }

    /// The name's bytes: `named(_:)` compares with them in place (reading a
    /// `String`'s UTF-8 instead counted 83,615 instructions a registration,
    /// against a median of 83,127).
    var staticName: StaticString {
        switch self {
        case .platform: "platform"
        case .token: "token"
        case .environment: "environment"
        case .bundleID: "bundle_id"
        case .externalID: "external_id"
        case .deviceID: "device_id"
        case .installationSecret: "installation_secret"
        case .installationID: "installation_id"
        case .appVersion: "app_version"
        case .timezone: "timezone"
        case .locale: "locale"
        case .pushPermission: "push_permission"
        case .optedIn: "opted_in"
        case .tags: "tags"
        case .clientSequence: "client_sequence"
        }
    }

    /// The field named by the UTF-8 bytes `name`, nil for any other name:
    /// by length first, then the bytes of the fields of that length. Bytes,
    /// not canonical equivalence (RFC 7493), as `JSONValue` compares names.
    static func named(_ name: UnsafeBufferPointer<UInt8>) -> RegisterField? {
        // No list of candidates (a variadic list is an array): up to three, spelled out.
        func first(_ a: RegisterField, _ b: RegisterField? = nil, _ c: RegisterField? = nil) -> RegisterField? {
            func matches(_ field: RegisterField) -> Bool { sameBytes(name, field.staticName) }
            if matches(a) { return a }
            if let b, matches(b) { return b }
            if let c, matches(c) { return c }
            return nil
        }
        switch name.count {
        case 4: return first(.tags)
        case 5: return first(.token)
        case 6: return first(.locale)
        case 8: return first(.platform, .timezone, .optedIn)
        case 9: return first(.bundleID, .deviceID)
        case 11: return first(.environment, .externalID, .appVersion)
        case 15: return first(.installationID, .pushPermission, .clientSequence)
        case 19: return first(.installationSecret)
        default: return nil
        }
    }
}
