import RoostJSON
import RoostModel

/// Native Notify's errors: the same envelope as ours, with the codes of its
/// table (seeds/nativenotify-device-registration.md, "Error codes").
enum NativeNotifyError {
    static func missingField(_ field: String) -> APIError {
        APIError(status: 400, code: "missing_field", message: "\(field) is required", field: field)
    }

    static let invalidPlatform = APIError(
        status: 400, code: "invalid_platform", message: "platform must be \"ios\" or \"android\"", field: "platform")

    static func invalidDeviceID(_ why: String) -> APIError {
        APIError(status: 400, code: "invalid_device_id", message: "deviceId \(why)", field: "deviceId")
    }

    static func invalidSubscriberID(_ why: String) -> APIError {
        APIError(status: 400, code: "invalid_subscriber_id", message: "subscriberId \(why)", field: "subscriberId")
    }

    static let noTokensProvided = APIError(
        status: 400, code: "no_tokens_provided", message: "send tokens.apnsToken (ios) or tokens.fcmToken (android)",
        field: "tokens")

    static func invalidTokenFormat(_ field: String) -> APIError {
        APIError(
            status: 400, code: "invalid_token_format",
            message: "the token does not match its shape (hex APNs, URL-safe FCM) or is over 400 characters",
            field: field)
    }

    static func tokenPlatformMismatch(_ field: String) -> APIError {
        APIError(
            status: 400, code: "token_platform_mismatch",
            message: "apnsToken must come from an ios device and fcmToken from an android device", field: field)
    }

    static func unsupportedTokenType(_ field: String) -> APIError {
        APIError(
            status: 400, code: "unsupported_token_type",
            message: "Expo push tokens are not accepted here; send the APNs or FCM token", field: field)
    }

    static let appNotFound = APIError(status: 404, code: "app_not_found", message: "no such app", field: "appId")

    static let unauthorized = APIError(status: 401, code: "unauthorized", message: "wrong appToken for this appId")

    static func invalidText(_ field: String) -> APIError {
        APIError(status: 400, code: "invalid_field", message: "\(field) must be a string", field: field)
    }
}

/// The parts of a Native Notify body every route reads: `appId`, `appToken`.
struct NativeNotifyCredentials {
    var appID: AppID
    var appToken: String?

    /// Reads `appId` (a positive integer, or its digits as a string) and
    /// `appToken`. A missing `appId` is 400 `missing_field`; one that cannot be
    /// an app id is an app we do not know (404 `app_not_found`).
    init(appID value: JSONValue?, appToken: JSONValue?) throws(APIError) {
        guard let value, !value.isNull else { throw NativeNotifyError.missingField("appId") }
        let number: Int? =
            value.intValue
            ?? value.stringValue.flatMap { text in
                text.utf8.count <= 10 && text.utf8.allSatisfy { $0 >= 48 && $0 <= 57 } ? Int(text) : nil
            }
        guard let number, number > 0, number <= Int(UInt32.max) else { throw NativeNotifyError.appNotFound }
        appID = AppID(UInt32(number))
        self.appToken = appToken?.stringValue
    }
}

/// A parsed `POST /api/universal/device/register` body, every rule of the
/// vendor's field table applied. Native Notify's names map onto ours:
/// `deviceId` → `installation_id`, `subscriberId` → `external_id`,
/// `appVersion` → `app_version`, `timezone` → `timezone`.
struct NativeNotifyRegistration {
    /// `appVersion`: trimmed, capped at 50 characters (and at the model's 64 bytes).
    static let appVersionCharactersMax = 50
    /// `timezone`: trimmed, capped at 60 characters (and at the model's 64 bytes).
    static let timezoneCharactersMax = 60
    /// Token values, over which `invalid_token_format`.
    static let tokenCharactersMax = 400
    /// The names a token may come under, canonical name first.
    static let apnsNames = ["apnsToken", "apns_token", "apnToken"]
    static let fcmNames = ["fcmToken", "fcm_token"]

    var installationID: InstallationID
    var platform: Platform
    var subscriber: FieldChange<ExternalID>
    var appVersion: FieldChange<String>
    var timezone: FieldChange<String>
    var token: PushToken
    /// The token's name in the answer's `tokens` (`apnsToken` or `fcmToken`).
    var tokenName: String

    init(_ body: JSONBody) throws(APIError) {
        installationID = try NativeNotifyRegistration.deviceID(body.value["deviceId"])
        guard let platformValue = body.member("platform") else { throw NativeNotifyError.missingField("platform") }
        guard let name = platformValue.stringValue, let platform = Platform(name: name) else {
            throw NativeNotifyError.invalidPlatform
        }
        self.platform = platform
        subscriber = try NativeNotifyRegistration.subscriber(body.value["subscriberId"])
        appVersion = try NativeNotifyRegistration.trimmedText(
            body.value["appVersion"], field: "appVersion",
            charactersMax: NativeNotifyRegistration.appVersionCharactersMax,
            bytesMax: Limits.appVersionBytesMax, coerceNumbers: true)
        timezone = try NativeNotifyRegistration.trimmedText(
            body.value["timezone"], field: "timezone", charactersMax: NativeNotifyRegistration.timezoneCharactersMax,
            bytesMax: Limits.timezoneBytesMax, coerceNumbers: false)
        (token, tokenName) = try NativeNotifyRegistration.token(body, platform: platform)
    }

    /// `deviceId`: required, a string of 1 to 200 characters.
    static func deviceID(_ value: JSONValue?) throws(APIError) -> InstallationID {
        guard let value, !value.isNull else { throw NativeNotifyError.missingField("deviceId") }
        guard let text = value.stringValue else { throw NativeNotifyError.invalidDeviceID("must be a string") }
        if text.isEmpty { throw NativeNotifyError.missingField("deviceId") }
        do throws(RegistryRejection) {
            return try InstallationID(text)
        } catch {
            throw NativeNotifyError.invalidDeviceID("must be at most \(Limits.installationIDCharactersMax) characters")
        }
    }

    /// `subscriberId`: omitted keeps the stored one; `null` or empty makes a mass
    /// device (no person); a number is coerced to its decimal text; at most 256 characters.
    static func subscriber(_ value: JSONValue?) throws(APIError) -> FieldChange<ExternalID> {
        guard let value else { return .keep }
        let text: String
        switch value {
        case .null: return .clear
        case .string(let string): text = string
        case .number(let literal): text = value.intValue.map { String($0) } ?? literal
        case .bool, .array, .object: throw NativeNotifyError.invalidSubscriberID("must be a string or a number")
        }
        if text.isEmpty { return .clear }
        do throws(RegistryRejection) {
            return .set(try ExternalID(text))
        } catch {
            throw NativeNotifyError.invalidSubscriberID("must be at most \(Limits.externalIDCharactersMax) characters")
        }
    }

    /// A free-text field: omitted keeps, `null` clears; otherwise trimmed and cut
    /// to `charactersMax` characters (and `bytesMax` UTF-8 bytes, never inside a
    /// character); empty after trimming clears.
    static func trimmedText(
        _ value: JSONValue?, field: String, charactersMax: Int, bytesMax: Int, coerceNumbers: Bool
    ) throws(APIError) -> FieldChange<String> {
        guard let value else { return .keep }
        let text: String
        switch value {
        case .null: return .clear
        case .string(let string): text = string
        case .number(let literal) where coerceNumbers: text = literal
        case .number, .bool, .array, .object: throw NativeNotifyError.invalidText(field)
        }
        let trimmed = text.drop(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed()
        var kept = ""
        var bytes = 0
        for character in trimmed.prefix(charactersMax) {
            let size = character.utf8.count
            if bytes + size > bytesMax { break }
            kept.append(character)
            bytes += size
        }
        return kept.isEmpty ? .clear : .set(kept)
    }

    /// The token: `tokens.apnsToken` (aliases `apns_token`, `apnToken`) or
    /// `tokens.fcmToken` (alias `fcm_token`), also accepted at the top level.
    /// Empty values count as not sent. Checks, in order: none sent (`tokens`
    /// absent: `missing_field`; present: `no_tokens_provided`), an Expo token,
    /// a token of the other platform, then the shape (hex APNs of 64+, FCM of
    /// 32+ URL-safe characters, at most 400).
    static func token(_ body: JSONBody, platform: Platform) throws(APIError) -> (PushToken, String) {
        let tokens = body.member("tokens")
        func find(_ names: [String]) -> (name: String, value: JSONValue)? {
            for container in [tokens, body.value].compactMap({ $0 }) {
                for name in names {
                    guard let value = container[name], !value.isNull else { continue }
                    if case .string(let text) = value, text.isEmpty { continue }
                    return (name, value)
                }
            }
            return nil
        }
        let apns = find(apnsNames)
        let fcm = find(fcmNames)
        if apns == nil && fcm == nil {
            throw tokens == nil ? NativeNotifyError.missingField("tokens") : NativeNotifyError.noTokensProvided
        }
        for (found, canonical) in [(apns, "apnsToken"), (fcm, "fcmToken")] {
            if let text = found?.value.stringValue,
                text.hasPrefix("ExponentPushToken[") || text.hasPrefix("ExpoPushToken[")
            {
                throw NativeNotifyError.unsupportedTokenType("tokens.\(canonical)")
            }
        }
        if apns != nil && platform == .android { throw NativeNotifyError.tokenPlatformMismatch("tokens.apnsToken") }
        if fcm != nil && platform == .ios { throw NativeNotifyError.tokenPlatformMismatch("tokens.fcmToken") }
        let canonical = platform == .ios ? "apnsToken" : "fcmToken"
        guard let text = (platform == .ios ? apns : fcm)?.value.stringValue,
            text.utf8.count <= tokenCharactersMax
        else { throw NativeNotifyError.invalidTokenFormat("tokens.\(canonical)") }
        do throws(RegistryRejection) {
            return (try PushToken(parsing: text, platform: platform), canonical)
        } catch {
            throw NativeNotifyError.invalidTokenFormat("tokens.\(canonical)")
        }
    }

    /// The registration in the model's terms: installation, person, metadata, token.
    var registerRequest: RegisterRequest {
        var request = RegisterRequest(token: token)
        request.installationID = installationID
        request.externalID = subscriber
        request.appVersion = appVersion
        request.timezone = timezone
        return request
    }
}
