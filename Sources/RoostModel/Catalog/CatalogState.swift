/// Everything the catalog knows: apps, keys (as digests) and the next app id.
/// Changed only by applying `CatalogRecord`s, live and in recovery alike.
package struct CatalogState: Sendable, Equatable {
    package var nextAppID: UInt32 = 1
    package var apps: [AppID: AppRecord] = [:]
    package var keysByDigest: [KeyDigest: KeyRecord] = [:]
    package var keyDigestByID: [String: KeyDigest] = [:]
    /// When each live key was last used, as far as the log knows (`CatalogRecord.keyUsed`):
    /// coarse, see `KeyUsage`. A key never used has no entry.
    package var keyLastUsedMilliseconds: [String: Int64] = [:]

    package init() {}

    /// Applies one after-image. Idempotent: applying a record twice, or one
    /// whose effect is already here, changes nothing. A key may arrive before
    /// its app in a fuzzy replay; `CatalogContents.validated` checks the end state.
    package mutating func apply(_ record: CatalogRecord) {
        switch record {
        case .app(let app):
            apps[app.id] = app
            nextAppID = max(nextAppID, app.id.rawValue &+ 1)
        case .appDeleted(let app):
            apps[app] = nil
            nextAppID = max(nextAppID, app.rawValue &+ 1)
            for (digest, key) in keysByDigest where key.appID == app {
                keysByDigest[digest] = nil
                keyDigestByID[key.id] = nil
                keyLastUsedMilliseconds[key.id] = nil
            }
        case .key(let key):
            if let old = keyDigestByID[key.id], old != key.digest { keysByDigest[old] = nil }
            keysByDigest[key.digest] = key
            keyDigestByID[key.id] = key.digest
        case .keyRevoked(let id):
            if let digest = keyDigestByID.removeValue(forKey: id) { keysByDigest[digest] = nil }
            keyLastUsedMilliseconds[id] = nil
        case .nextAppID(let next):
            nextAppID = max(nextAppID, next)
        case .keyUsed(let id, let at):
            // Only for a live key (a use logged after its revocation changes
            // nothing), and never backwards (a fuzzy replay may repeat an older one).
            guard keyDigestByID[id] != nil else { break }
            keyLastUsedMilliseconds[id] = max(keyLastUsedMilliseconds[id] ?? at, at)
        case .identityKey, .identityKeyRemoved:
            break
        }
    }

    /// Returns the whole state as records (a snapshot's catalog part): the
    /// counter first, then apps by id, then keys by id, then key uses by key id. O(n log n).
    package func records() -> [CatalogRecord] {
        [.nextAppID(nextAppID)] + apps.values.sorted { $0.id < $1.id }.map { .app($0) }
            + keysByDigest.values.sorted { $0.id < $1.id }.map { .key($0) }
            + keyLastUsedMilliseconds.sorted { $0.key < $1.key }.map { .keyUsed(id: $0.key, atMilliseconds: $0.value) }
    }
}

/// The identity signing keys: one current key that signs, older ones that
/// still verify until removed.
package struct IdentityKeyState: Sendable, Equatable {
    package var currentID: String = ""
    package var keys: [IdentitySigningKey] = []

    package init() {}

    /// Applies one after-image (idempotent, as `CatalogState.apply`).
    package mutating func apply(_ record: CatalogRecord) {
        switch record {
        case .identityKey(let key, let current):
            if let position = keys.firstIndex(where: { $0.id == key.id }) {
                keys[position] = key
            } else {
                keys.append(key)
            }
            if current { currentID = key.id }
        case .identityKeyRemoved(let id):
            keys.removeAll { $0.id == id }
        case .app, .appDeleted, .key, .keyRevoked, .nextAppID, .keyUsed:
            break
        }
    }

    /// Returns the keys as records, oldest first, the current one marked.
    package func records() -> [CatalogRecord] {
        keys.map { .identityKey($0, current: $0.id == currentID) }
    }
}

/// The catalog as recovery rebuilt it from the catalog records of the
/// snapshot and the log, in order.
package struct CatalogContents: Sendable, Equatable {
    package var catalog = CatalogState()
    package var identityKeys = IdentityKeyState()
    /// How many records of each part were read: zero means the log never held
    /// that part (a directory of an older release, or a new one).
    package var catalogRecordCount = 0
    package var identityRecordCount = 0

    package init() {}

    /// Decodes and applies `payloads` in order, then checks the end state.
    package static func rebuild(_ payloads: [[UInt8]]) throws(CatalogRecoveryError) -> CatalogContents {
        var contents = CatalogContents()
        for (position, payload) in payloads.enumerated() {
            let record: CatalogRecord
            do {
                record = try CatalogRecord.decode(payload)
            } catch {
                throw CatalogRecoveryError("catalog record \(position + 1) of \(payloads.count): \(error.reason)")
            }
            contents.apply(record)
        }
        try contents.validated()
        return contents
    }

    /// Applies one record to its part.
    package mutating func apply(_ record: CatalogRecord) {
        switch record {
        case .identityKey, .identityKeyRemoved:
            identityRecordCount += 1
            identityKeys.apply(record)
        case .app, .appDeleted, .key, .keyRevoked, .nextAppID, .keyUsed:
            catalogRecordCount += 1
            catalog.apply(record)
        }
    }

    /// Throws when the end state is one no sequence of acknowledged changes
    /// makes: records are missing.
    package func validated() throws(CatalogRecoveryError) {
        for key in catalog.keysByDigest.values where catalog.apps[key.appID] == nil {
            throw CatalogRecoveryError(
                "key \(key.id) belongs to app \(key.appID.rawValue), which the log never created")
        }
        guard identityKeys.keys.isEmpty || identityKeys.keys.contains(where: { $0.id == identityKeys.currentID })
        else {
            throw CatalogRecoveryError("the current identity key \(identityKeys.currentID) is not in the log")
        }
    }

    /// Returns every record of both parts (what a migration imports).
    package func records() -> [CatalogRecord] {
        catalog.records() + identityKeys.records()
    }
}

/// The catalog part of the log cannot be made whole: start-up stops.
package struct CatalogRecoveryError: Error, CustomStringConvertible {
    package var reason: String
    package init(_ reason: String) { self.reason = reason }
    package var description: String {
        "\(reason); the log is damaged or incomplete: run `roost wal verify DIR`, restore the data directory from a backup"
    }
}
