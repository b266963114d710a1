/// One change asked of the catalog (apps, keys, settings, identity signing
/// keys), as a value: the catalog's rules (`CatalogContents.plan`) turn it into
/// the after-image records to log and a `CatalogOutcome`, or refuse it with a
/// `CatalogRejection`, the way `Command` works for devices.
///
/// Commands are deterministic: anything random (a key, its id, a signing
/// secret) is minted by the caller and carried in the command, so that
/// planning one command on one state always gives the same records.
package enum CatalogCommand: Sendable, Equatable {
    /// Creates an app with the next id of the logged counter, at `atMilliseconds`.
    case createApp(name: String, settings: AppSettingsChange, atMilliseconds: Int64)
    /// Changes an app's name or settings: nil leaves a value as it is.
    case updateApp(AppID, name: String?, settings: AppSettingsChange)
    /// Deletes an app and every key of it.
    case deleteApp(AppID)
    /// Adds a freshly minted key (its digest; the key itself is never stored).
    case createKey(KeyRecord)
    /// Revokes key `keyID` of `app` (of `onlyMode` when given).
    case revokeKey(app: AppID, keyID: String, onlyMode: AppMode?)
    /// Records when keys were last used; uses of keys no longer live are dropped.
    case noteKeyUses([KeyUse])
    /// Adds a freshly minted identity signing key and makes it the current one.
    case rotateIdentityKey(IdentitySigningKey)
    /// Removes an old identity signing key.
    case removeIdentityKey(id: String)
}

/// A partial change of an app's settings: nil leaves a setting as it is; for
/// `inactiveAfterDays`, `.some(nil)` turns the sweep off.
package struct AppSettingsChange: Sendable, Equatable {
    package var maxDevicesPerPerson: Int?
    package var requireKnownPerson: Bool?
    package var inactiveAfterDays: Int??

    package init(maxDevicesPerPerson: Int? = nil, requireKnownPerson: Bool? = nil, inactiveAfterDays: Int?? = nil) {
        self.maxDevicesPerPerson = maxDevicesPerPerson
        self.requireKnownPerson = requireKnownPerson
        self.inactiveAfterDays = inactiveAfterDays
    }

    /// Returns `settings` with this change applied.
    package func applied(to settings: AppSettings) -> AppSettings {
        var next = settings
        if let maxDevicesPerPerson { next.maxDevicesPerPerson = maxDevicesPerPerson }
        if let requireKnownPerson { next.requireKnownPerson = requireKnownPerson }
        if let inactiveAfterDays { next.inactiveAfterDays = inactiveAfterDays }
        return next
    }
}

/// One key's use at a time (wall clock, milliseconds).
package struct KeyUse: Sendable, Equatable {
    package var keyID: String
    package var atMilliseconds: Int64

    package init(keyID: String, atMilliseconds: Int64) {
        self.keyID = keyID
        self.atMilliseconds = atMilliseconds
    }
}

/// What a catalog command did, for the answer.
package enum CatalogOutcome: Sendable, Equatable {
    /// The app as it is after a create or update.
    case app(AppRecord)
    /// An app deleted, with the ids of the keys that went with it.
    case appDeleted(keyIDs: [String])
    /// The key as created.
    case key(KeyRecord)
    /// A key revoked.
    case keyRevoked
    /// Key uses noted (possibly none, when every key was gone).
    case keyUsesNoted
    /// The new current identity signing key.
    case identityKey(IdentitySigningKey)
    /// An identity signing key removed.
    case identityKeyRemoved
}

/// Why the catalog refused a command: nothing changed. Each case carries what
/// the API's error envelope needs (status, stable code, message).
package enum CatalogRejection: Error, Hashable, Sendable, CustomStringConvertible {
    /// The server holds `CatalogLimits.appsMax` apps. 409 `limit_reached`.
    case appsLimitReached
    /// Every app id up to `UInt32.max` was given. 409 `limit_reached`.
    case appIDsExhausted
    /// 404 `app_not_found`.
    case appNotFound
    /// The app holds `CatalogLimits.keysPerAppMax` keys. 409 `limit_reached`.
    case keysPerAppLimitReached
    /// No such key in this app (and mode). 404 `key_not_found`.
    case keyNotFound
    /// `IdentitySigningKey.keysMax` signing keys are kept. 409 `limit_reached`.
    case identityKeysLimitReached
    /// 404 `identity_key_not_found`.
    case identityKeyNotFound
    /// The current signing key cannot be removed. 409 `current_key`.
    case currentIdentityKey

    /// The stable error code of the API envelope.
    package var code: String {
        switch self {
        case .appsLimitReached, .appIDsExhausted, .keysPerAppLimitReached, .identityKeysLimitReached:
            "limit_reached"
        case .appNotFound: "app_not_found"
        case .keyNotFound: "key_not_found"
        case .identityKeyNotFound: "identity_key_not_found"
        case .currentIdentityKey: "current_key"
        }
    }

    /// The HTTP status the API answers with.
    package var httpStatus: Int {
        switch self {
        case .appNotFound, .keyNotFound, .identityKeyNotFound: 404
        case .appsLimitReached, .appIDsExhausted, .keysPerAppLimitReached, .identityKeysLimitReached,
            .currentIdentityKey:
            409
        }
    }

    /// A human sentence for the envelope's `message`.
    package var message: String {
        switch self {
        case .appsLimitReached: "this server holds \(CatalogLimits.appsMax) apps"
        case .appIDsExhausted: "every app id has been used"
        case .appNotFound: "no such app"
        case .keysPerAppLimitReached: "an app holds at most \(CatalogLimits.keysPerAppMax) keys"
        case .keyNotFound: "no such key"
        case .identityKeysLimitReached:
            "at most \(IdentitySigningKey.keysMax) identity keys; remove an old one first"
        case .identityKeyNotFound: "no such identity key"
        case .currentIdentityKey: "the current identity key cannot be removed; rotate first"
        }
    }

    package var description: String { "\(httpStatus) \(code)" }
}

/// The catalog's named limits (docs/limits.md).
package enum CatalogLimits {
    /// How many apps one server holds.
    package static let appsMax = 100_000
    /// How many live keys one app holds.
    package static let keysPerAppMax = 1_000
}

/// The records a command logs (after-images, in order) and what it did.
package struct CatalogPlan: Sendable, Equatable {
    /// Empty when the command changes nothing (then nothing is logged).
    package var records: [CatalogRecord]
    package var outcome: CatalogOutcome
}

extension CatalogContents {
    /// Returns what `command` does to this state: the records to log and
    /// apply, and the outcome; throws when the rules refuse it. Pure: the
    /// state is not changed (apply the records for that). O(keys of the
    /// server) for key counts and app deletion, O(1) expected otherwise.
    package func plan(_ command: CatalogCommand) throws(CatalogRejection) -> CatalogPlan {
        switch command {
        case .createApp(let name, let change, let now):
            guard catalog.apps.count < CatalogLimits.appsMax else { throw .appsLimitReached }
            guard catalog.nextAppID < UInt32.max else { throw .appIDsExhausted }
            let app = AppRecord(
                id: AppID(catalog.nextAppID), name: name, createdAtMilliseconds: now,
                settings: change.applied(to: .defaults))
            return CatalogPlan(records: [.app(app)], outcome: .app(app))
        case .updateApp(let id, let name, let change):
            guard let app = catalog.apps[id] else { throw .appNotFound }
            var next = app
            if let name { next.name = name }
            next.settings = change.applied(to: app.settings)
            return CatalogPlan(records: next == app ? [] : [.app(next)], outcome: .app(next))
        case .deleteApp(let id):
            guard catalog.apps[id] != nil else { throw .appNotFound }
            let keyIDs = catalog.keysByDigest.values.filter { $0.appID == id }.map(\.id)
            return CatalogPlan(records: [.appDeleted(id)], outcome: .appDeleted(keyIDs: keyIDs))
        case .createKey(let key):
            guard catalog.apps[key.appID] != nil else { throw .appNotFound }
            guard catalog.keyCount(of: key.appID) < CatalogLimits.keysPerAppMax else { throw .keysPerAppLimitReached }
            precondition(catalog.keysByDigest[key.digest] == nil, "a fresh 192-bit key collided")
            precondition(catalog.keyDigestByID[key.id] == nil, "a fresh 64-bit key id \(key.id) collided")
            return CatalogPlan(records: [.key(key)], outcome: .key(key))
        case .revokeKey(let app, let keyID, let onlyMode):
            guard let key = catalog.liveKey(id: keyID), key.appID == app, onlyMode == nil || key.mode == onlyMode
            else { throw .keyNotFound }
            return CatalogPlan(records: [.keyRevoked(id: keyID)], outcome: .keyRevoked)
        case .noteKeyUses(let uses):
            // A key revoked since its use was seen logs nothing.
            let records = uses.filter { catalog.keyDigestByID[$0.keyID] != nil }.map {
                CatalogRecord.keyUsed(id: $0.keyID, atMilliseconds: $0.atMilliseconds)
            }
            return CatalogPlan(records: records, outcome: .keyUsesNoted)
        case .rotateIdentityKey(let key):
            guard identityKeys.keys.count < IdentitySigningKey.keysMax else { throw .identityKeysLimitReached }
            precondition(
                !identityKeys.keys.contains { $0.id == key.id }, "a fresh 64-bit identity key id \(key.id) collided")
            return CatalogPlan(records: [.identityKey(key, current: true)], outcome: .identityKey(key))
        case .removeIdentityKey(let id):
            guard identityKeys.keys.contains(where: { $0.id == id }) else { throw .identityKeyNotFound }
            guard id != identityKeys.currentID else { throw .currentIdentityKey }
            return CatalogPlan(records: [.identityKeyRemoved(id: id)], outcome: .identityKeyRemoved)
        }
    }
}

extension CatalogState {
    /// Returns the live key with public id `id`, nil once revoked or its app deleted. O(1) expected.
    package func liveKey(id: String) -> KeyRecord? {
        keyDigestByID[id].flatMap { keysByDigest[$0] }
    }

    /// Returns the number of live keys of `app` (of `onlyMode` when given). O(keys of the server).
    package func keyCount(of app: AppID, onlyMode: AppMode? = nil) -> Int {
        keysByDigest.values.reduce(0) { $0 + ($1.appID == app && (onlyMode == nil || $1.mode == onlyMode) ? 1 : 0) }
    }
}
