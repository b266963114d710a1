/// A device registration (`POST /v1/devices` and the compatibility routes), in typed values.
///
/// The API layer parses JSON into this: the token with `PushToken(parsing:platform:)`
/// (which throws the spec's token codes), ids with their validating initializers.
/// Omitted optional fields are `.keep`; JSON `null` is `.clear`.
///
/// Layout: the fields a device sends on every registration stay inline; the
/// rest live in one shared, copy-on-write box (`Extras`), so the value a job
/// captures and copies stays small (~120 bytes instead of ~300) and a request
/// that sets none of them allocates nothing for them.
package struct RegisterRequest: Hashable, Sendable {
    /// Required; its platform is the request's `platform`.
    package var token: PushToken
    /// nil keeps an existing device's stored environment, and is `production`
    /// for a new device (spec §12: an APNs sandbox token is not a production
    /// token); android accepts only `production`.
    package var environment: APNsEnvironment?
    /// `.clear` unbinds the person (`external_id: null`), `.keep` keeps them.
    package var externalID: FieldChange<ExternalID>
    /// The `device_id` the client last confirmed (rule 5); nil when absent or not parseable.
    package var deviceID: DeviceID?
    /// Rule 4's client-chosen installation key; nil keeps the stored one.
    package var installationID: InstallationID?
    /// nil keeps the stored preference.
    package var optedIn: Bool?
    package var tags: TagsChange
    /// Rule 3 regardless of the app setting (the Barua route always requires it).
    package var requireKnownPerson: Bool
    private var extras: ExtrasBox

    package var bundleID: FieldChange<BundleID> {
        get { extras.value.bundleID }
        set { updateExtras { $0.bundleID = newValue } }
    }
    /// SHA-256 of `installation_secret`, computed by the API (rule 5).
    package var installationSecretDigest: SecretDigest? {
        get { extras.value.installationSecretDigest }
        set { updateExtras { $0.installationSecretDigest = newValue } }
    }
    package var appVersion: FieldChange<String> {
        get { extras.value.appVersion }
        set { updateExtras { $0.appVersion = newValue } }
    }
    package var timezone: FieldChange<String> {
        get { extras.value.timezone }
        set { updateExtras { $0.timezone = newValue } }
    }
    package var locale: FieldChange<String> {
        get { extras.value.locale }
        set { updateExtras { $0.locale = newValue } }
    }
    package var pushPermission: FieldChange<Bool> {
        get { extras.value.pushPermission }
        set { updateExtras { $0.pushPermission = newValue } }
    }
    /// Requires an APNs credential for (bundle id, environment): the Barua route's
    /// 409 `notification_app_not_found`.
    package var requireCredential: Bool {
        get { extras.value.requireCredential }
        set { updateExtras { $0.requireCredential = newValue } }
    }
    /// Replaces the app's `max_devices_per_person` for this request (the Barua seed
    /// fixes it at 10 whatever the app setting); must lie in `Limits.maxDevicesPerPersonRange`.
    package var maxDevicesPerPersonOverride: Int? {
        get { extras.value.maxDevicesPerPersonOverride }
        set { updateExtras { $0.maxDevicesPerPersonOverride = newValue } }
    }
    /// Spec §7 ordered registration: nil skips the check; a value must be
    /// above the stored one of every device the request names (docs/model.md).
    /// 0 to `Limits.clientSequenceMax`.
    package var clientSequence: UInt64? {
        get { extras.value.clientSequence }
        set { updateExtras { $0.clientSequence = newValue } }
    }

    package var platform: Platform { token.platform }

    /// A request that only presents a token; every other field keeps its stored value.
    package init(token: PushToken, environment: APNsEnvironment? = nil) {
        self.token = token
        self.environment = environment
        self.externalID = .keep
        self.deviceID = nil
        self.installationID = nil
        self.optedIn = nil
        self.tags = .keep
        self.requireKnownPerson = false
        self.extras = ExtrasBox.none
    }

    /// Changes the boxed fields, copying the box first unless this request owns it alone.
    private mutating func updateExtras(_ change: (inout Extras) -> Void) {
        if !isKnownUniquelyReferenced(&extras) {
            extras = ExtrasBox(extras.value)
        }
        change(&extras.value)
    }

    /// The fields a registration usually leaves alone (or sets once at install).
    private struct Extras: Hashable {
        var bundleID: FieldChange<BundleID> = .keep
        var installationSecretDigest: SecretDigest?
        var appVersion: FieldChange<String> = .keep
        var timezone: FieldChange<String> = .keep
        var locale: FieldChange<String> = .keep
        var pushPermission: FieldChange<Bool> = .keep
        var requireCredential = false
        var maxDevicesPerPersonOverride: Int?
        var clientSequence: UInt64?
    }

    /// `Extras` behind one reference; compared and hashed by value. Sendable as an
    /// array buffer is: it is mutated only while one request holds it alone.
    private final class ExtrasBox: Hashable, @unchecked Sendable {
        /// Shared by every request that sets no extra field; never mutated.
        static let none = ExtrasBox(Extras())

        var value: Extras

        init(_ value: Extras) { self.value = value }

        static func == (lhs: ExtrasBox, rhs: ExtrasBox) -> Bool { lhs === rhs || lhs.value == rhs.value }
        func hash(into hasher: inout Hasher) { hasher.combine(value) }
    }

    /// Returns the first field out of bounds, or nil. Does not look at stored state.
    func validationError() -> RegistryRejection? {
        if let environment, !environment.isAllowed(for: platform) { return .invalidEnvironment }
        if let sequence = clientSequence, sequence > Limits.clientSequenceMax {
            return .invalidField("client_sequence")
        }
        if let limit = maxDevicesPerPersonOverride, !Limits.maxDevicesPerPersonRange.contains(limit) {
            return .invalidField("max_devices_per_person")
        }
        // One check per field, in this order (no list of them: it was built,
        // and destroyed, on every registration).
        if Self.textOutOfRange(appVersion, bytesMax: Limits.appVersionBytesMax) { return .invalidField("app_version") }
        if Self.textOutOfRange(timezone, bytesMax: Limits.timezoneBytesMax) { return .invalidField("timezone") }
        if Self.textOutOfRange(locale, bytesMax: Limits.localeBytesMax) { return .invalidField("locale") }
        return nil
    }

    /// True when `change` sets a text that is empty or longer than `bytesMax` UTF-8 bytes.
    private static func textOutOfRange(_ change: FieldChange<String>, bytesMax: Int) -> Bool {
        guard case .set(let value) = change else { return false }
        return value.utf8.isEmpty || value.utf8.count > bytesMax
    }
}

/// What a registration did to the token, in Native Notify's words.
package enum TokenChange: Hashable, Sendable {
    /// The device already had this token, or a new device got a token nobody held.
    case unchanged
    /// The device's token was replaced by one nobody held (rotation).
    case refreshed
    /// The token moved here from another device (that device is `displaced`).
    case reassigned
}

/// The result of a registration.
package struct RegisterOutcome: Hashable, Sendable {
    /// True for 201 (a new device), false for 200.
    package var created: Bool
    /// The device as it is now (the API renders it without its token).
    package var device: Device
    package var tokenChange: TokenChange
    /// A device that lost its token (`Reassigned`) or its claim (`Superseded`).
    package var displaced: DeviceID?
    /// Devices removed to keep the person within `max_devices_per_person`.
    package var evicted: [DeviceID]
    /// Everything that changed, in order, for the log.
    package var mutations: [Mutation]
}
