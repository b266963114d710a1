/// A device as the registry knows it: every field of spec §4 "Device JSON", plus
/// the token (absent on a `Reassigned` device) and the installation secret's digest.
///
/// This is the value the API renders and the after-image a `Mutation` carries;
/// `AppIndex` keeps a packed form of it (`DeviceRecord`).
package struct Device: Hashable, Sendable {
    package var id: DeviceID
    package var environment: APNsEnvironment
    package var token: PushToken?
    package var bundleID: BundleID?
    package var installationID: InstallationID?
    package var installationSecretDigest: SecretDigest?
    package var externalID: ExternalID?
    /// First registration; never bumped.
    package var createdAt: Timestamp
    /// Every registration (not PATCH, not feedback).
    package var lastSeenAt: Timestamp
    /// When the device became its current person's; nil without a person.
    package var boundAt: Timestamp?
    package var appVersion: String?
    package var timezone: String?
    package var locale: String?
    /// The operating system permission; nil until reported.
    package var pushPermission: Bool?
    /// The app-level preference; true until the app opts out.
    package var optedIn: Bool
    package var tags: Tags
    package var invalidatedAt: Timestamp?
    package var invalidationReason: InvalidationReason?
    package var strikes: UInt32
    /// Spec §7: 1 at creation, +1 on every change of any other stored field
    /// (`DeviceVersion.next`); the API's `ETag` and `If-Match` compare it.
    package var version: UInt32
    /// Spec §7: the highest `client_sequence` a registration of this device
    /// carried and that was accepted; nil until one carries one.
    package var clientSequence: UInt64?

    package var platform: Platform { id.platform }
    package var mode: AppMode { id.mode }
    /// True when the device can still be sent to (not invalidated).
    package var isActive: Bool { invalidatedAt == nil }

    /// A fresh device created at `now` with defaults for every optional field.
    package init(id: DeviceID, environment: APNsEnvironment, token: PushToken?, createdAt now: Timestamp) {
        self.id = id
        self.environment = environment
        self.token = token
        self.bundleID = nil
        self.installationID = nil
        self.installationSecretDigest = nil
        self.externalID = nil
        self.createdAt = now
        self.lastSeenAt = now
        self.boundAt = nil
        self.appVersion = nil
        self.timezone = nil
        self.locale = nil
        self.pushPermission = nil
        self.optedIn = true
        self.tags = .empty
        self.invalidatedAt = nil
        self.invalidationReason = nil
        self.strikes = 0
        self.version = 1
        self.clientSequence = nil
    }

    /// A device with every field given, built in one step: the store's
    /// reading of a record and a registration's new device (field by field
    /// assignments to a fresh device copied the whole value twice, each copy
    /// retaining every string in it).
    init(
        id: DeviceID, environment: APNsEnvironment, token: PushToken?, bundleID: BundleID?,
        installationID: InstallationID?, installationSecretDigest: SecretDigest?, externalID: ExternalID?,
        createdAt: Timestamp, lastSeenAt: Timestamp, boundAt: Timestamp?, appVersion: String?, timezone: String?,
        locale: String?, pushPermission: Bool?, optedIn: Bool, tags: Tags, invalidatedAt: Timestamp?,
        invalidationReason: InvalidationReason?, strikes: UInt32, version: UInt32, clientSequence: UInt64?
    ) {
        self.id = id
        self.environment = environment
        self.token = token
        self.bundleID = bundleID
        self.installationID = installationID
        self.installationSecretDigest = installationSecretDigest
        self.externalID = externalID
        self.createdAt = createdAt
        self.lastSeenAt = lastSeenAt
        self.boundAt = boundAt
        self.appVersion = appVersion
        self.timezone = timezone
        self.locale = locale
        self.pushPermission = pushPermission
        self.optedIn = optedIn
        self.tags = tags
        self.invalidatedAt = invalidatedAt
        self.invalidationReason = invalidationReason
        self.strikes = strikes
        self.version = version
        self.clientSequence = clientSequence
    }

    /// Whether `other` holds the same stored fields as this device, whatever
    /// either's `version` (the test of "a change" that bumps the version).
    package func hasSameFields(as other: Device) -> Bool {
        var other = other
        other.version = version
        return self == other
    }

    /// Returns the first broken invariant of a stored device, or nil (used by `apply` and the codec).
    package func violation() -> String? {
        if let token, token.platform != platform { return "token platform differs from the device's" }
        if !environment.isAllowed(for: platform) { return "android device with sandbox environment" }
        if (invalidatedAt == nil) != (invalidationReason == nil) { return "invalidated_at and reason disagree" }
        if token == nil && invalidatedAt == nil { return "a device without token must be invalidated" }
        if (externalID == nil) != (boundAt == nil) { return "external_id and bound_at disagree" }
        if lastSeenAt < createdAt { return "last_seen_at before created_at" }
        if let value = appVersion, value.utf8.count > Limits.appVersionBytesMax { return "app_version too long" }
        if let value = timezone, value.utf8.count > Limits.timezoneBytesMax { return "timezone too long" }
        if let value = locale, value.utf8.count > Limits.localeBytesMax { return "locale too long" }
        if tags.count > Limits.tagKeysMax || tags.byteCount > Limits.tagBytesMax { return "tags over limits" }
        if version == 0 { return "version 0" }
        if let clientSequence, clientSequence > Limits.clientSequenceMax { return "client_sequence over 2^53 - 1" }
        return nil
    }
}

/// Spec §7 device versions: how a change moves the number on.
package enum DeviceVersion {
    /// The version after `version`: +1, and from `Limits.deviceVersionMax` back to 1 (never 0).
    package static func next(_ version: UInt32) -> UInt32 {
        precondition(version >= 1, "device version 0")
        return version == Limits.deviceVersionMax ? 1 : version + 1
    }
}

/// The `If-Match` condition of `PATCH` and `DELETE /v1/devices/{id}` (spec §7,
/// RFC 9110 §13.1.1), parsed by the API: the device's current version must be
/// one of `versions`, or, for `*`, the device must merely exist.
package enum VersionCondition: Hashable, Sendable {
    /// `If-Match: *`.
    case anyVersion
    /// A list of strong entity tags that spell versions; a list whose tags
    /// all spell no version (weak, not a canonical number) is empty and never matches.
    case oneOf([UInt32])

    /// Whether a device at `version` satisfies the condition.
    package func isMet(byVersion version: UInt32) -> Bool {
        switch self {
        case .anyVersion: true
        case .oneOf(let versions): versions.contains(version)
        }
    }
}

/// Per-app settings (spec §3, §8). Both modes of an app carry the same settings;
/// the engine applies a settings change to both of its indexes.
package struct AppSettings: Hashable, Sendable {
    package var maxDevicesPerPerson: Int
    package var requireKnownPerson: Bool
    /// `inactive_after_days` (spec §8): a device not seen for this many days is
    /// invalidated with reason `Inactive` by the server's sweep; nil: off.
    package var inactiveAfterDays: Int?

    package static let defaults = AppSettings(
        maxDevicesPerPerson: Limits.maxDevicesPerPersonDefault, requireKnownPerson: false)

    package init(maxDevicesPerPerson: Int, requireKnownPerson: Bool, inactiveAfterDays: Int? = nil) {
        self.maxDevicesPerPerson = maxDevicesPerPerson
        self.requireKnownPerson = requireKnownPerson
        self.inactiveAfterDays = inactiveAfterDays
    }

    /// Returns the first field out of range, as a rejection, or nil.
    package func validationError() -> RegistryRejection? {
        guard Limits.maxDevicesPerPersonRange.contains(maxDevicesPerPerson) else {
            return .invalidField("max_devices_per_person")
        }
        if let days = inactiveAfterDays, !Limits.inactiveAfterDaysRange.contains(days) {
            return .invalidField("inactive_after_days")
        }
        return nil
    }
}

/// The key of an APNs credential: a bundle id in one APNs environment.
package struct CredentialKey: Hashable, Comparable, Sendable {
    package var bundleID: BundleID
    package var environment: APNsEnvironment

    package init(bundleID: BundleID, environment: APNsEnvironment) {
        self.bundleID = bundleID
        self.environment = environment
    }

    package static func < (lhs: CredentialKey, rhs: CredentialKey) -> Bool {
        (lhs.bundleID, lhs.environment.rawValue) < (rhs.bundleID, rhs.environment.rawValue)
    }
}

/// APNs credential metadata (spec §4 Credentials): only team and key ids are kept.
package struct APNsCredential: Hashable, Sendable {
    package var key: CredentialKey
    package var teamID: String
    package var keyID: String

    /// Validates `team_id` and `key_id`: 1 to 64 ASCII letters and digits.
    package init(key: CredentialKey, teamID: String, keyID: String) throws(RegistryRejection) {
        guard Self.isValidField(teamID) else { throw .invalidField("team_id") }
        guard Self.isValidField(keyID) else { throw .invalidField("key_id") }
        self.key = key
        self.teamID = teamID
        self.keyID = keyID
    }

    private static func isValidField(_ text: String) -> Bool {
        let utf8 = text.utf8
        return utf8.count >= 1 && utf8.count <= Limits.credentialFieldBytesMax && utf8.allSatisfy(isAlphanumeric)
    }
}

/// A known person (spec §4 People).
package struct Person: Hashable, Sendable {
    package var externalID: ExternalID
    package var createdAt: Timestamp

    package init(externalID: ExternalID, createdAt: Timestamp) {
        self.externalID = externalID
        self.createdAt = createdAt
    }
}

/// `GET /v1/stats` (spec §4). `active` counts devices that are not invalidated.
package struct RegistryStats: Hashable, Sendable {
    package var devices: Int
    package var active: Int
    package var invalidated: Int
    package var people: Int
    package var byPlatform: [Platform: Int]
}
