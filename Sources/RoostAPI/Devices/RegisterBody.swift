import RoostCrypto
import RoostJSON
import RoostModel

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
    static let memberNames: [String] = [
        "platform", "token", "environment", "bundle_id", "external_id", "device_id", "installation_secret",
        "installation_id", "app_version", "timezone", "locale", "push_permission", "opted_in", "tags",
        "client_sequence",
    ]

    /// Returns the request a body object spells, or the 400 of the first member at fault.
    static func parse(_ body: JSONValue) throws(APIError) -> RegisterRequest {
        try parse(members: body)
    }

    /// `parse` over a body's members wherever they are read from: a parsed
    /// object, or the request bytes scanned in place (`PlainBodyScan`).
    static func parse(members body: some RegisterMembers) throws(APIError) -> RegisterRequest {
        let platform = try parsePlatform(body[member: "platform"])
        let token = try body.token(for: platform)
        var request = RegisterRequest(token: token, environment: try parseEnvironment(body[member: "environment"]))
        if let environment = request.environment, !environment.isAllowed(for: platform) {
            throw APIError(RegistryRejection.invalidEnvironment)
        }
        request.bundleID = try change(body, "bundle_id") { (text) throws(RegistryRejection) in try BundleID(text) }
        request.externalID = try change(body, "external_id") { (text) throws(RegistryRejection) in
            try ExternalID(text)
        }
        if let text = try string(body, "device_id") { request.deviceID = DeviceID(rendered: text) }
        if let secret = try string(body, "installation_secret") {
            guard !secret.utf8.isEmpty, secret.utf8.count <= installationSecretBytesMax else {
                throw APIError.invalidField(
                    "installation_secret", "installation_secret must be 1 to \(installationSecretBytesMax) bytes")
            }
            request.installationSecretDigest = SecretDigest(bytes: Crypto.sha256(secret.utf8))
        }
        if let text = try string(body, "installation_id") {
            request.installationID = try model { () throws(RegistryRejection) in try InstallationID(text) }
        }
        request.appVersion = try textChange(body, "app_version")
        request.timezone = try textChange(body, "timezone")
        request.locale = try textChange(body, "locale")
        switch body[member: "push_permission"] {
        case nil: break
        case .null?: request.pushPermission = .clear
        case .bool(let flag)?: request.pushPermission = .set(flag)
        case _?: throw APIError.invalidField("push_permission", "push_permission must be a boolean or null")
        }
        switch body[member: "opted_in"] {
        case nil, .null?: break
        case .bool(let flag)?: request.optedIn = flag
        case _?: throw APIError.invalidField("opted_in", "opted_in must be a boolean")
        }
        request.tags = try tagsChange(body[member: "tags"])
        if let member = body[member: "client_sequence"] { request.clientSequence = try clientSequence(member) }
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
    private static func string(_ body: some RegisterMembers, _ name: String) throws(APIError) -> String? {
        switch body[member: name] {
        case nil, .null?: return nil
        case .string(let text)?: return text
        case _?: throw APIError.invalidField(name, "\(name) must be a string")
        }
    }

    /// Returns the change a nullable string member asks for, validated by `make`.
    private static func change<Value>(
        _ body: some RegisterMembers, _ name: String, _ make: (String) throws(RegistryRejection) -> Value
    ) throws(APIError) -> FieldChange<Value> {
        switch body[member: name] {
        case nil: return .keep
        case .null?: return .clear
        case .string(let text)?:
            do throws(RegistryRejection) {
                return .set(try make(text))
            } catch {
                throw APIError(error)
            }
        case _?: throw APIError.invalidField(name, "\(name) must be a string or null")
        }
    }

    /// A free-text metadata member: `""` clears like `null` (the model bounds the length).
    private static func textChange(_ body: some RegisterMembers, _ name: String) throws(APIError) -> FieldChange<String>
    {
        let parsed = try change(body, name) { (text) throws(RegistryRejection) in text }
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
    /// The `token` member parsed for `platform` (missing or null: 400
    /// `missing_field`; not a string: `invalid_token_format`).
    func token(for platform: Platform) throws(APIError) -> PushToken
}

extension JSONValue: RegisterMembers {
    package subscript(member name: String) -> JSONValue? { self[name] }

    func token(for platform: Platform) throws(APIError) -> PushToken {
        try RegisterBody.token(self["token"], for: platform)
    }
}
