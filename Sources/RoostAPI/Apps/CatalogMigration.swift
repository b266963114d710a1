import RoostEngine
import RoostJSON
import RoostModel
import RoostPlatform

/// Brings the catalog up at start-up, after the engine recovered the log:
/// migrates the files an older release kept (`DIR/catalog.json`,
/// `DIR/identity-keys.json`) into the log, refuses every ambiguous or
/// incomplete combination, and gives a new directory its first identity key.
/// docs/decisions/0004-catalog-in-the-log.md says why; docs/recovery.md
/// ("The catalog at start-up") lists every case.
package enum CatalogStartup {
    /// The largest legacy catalog file read (100,000 apps with 1,000 keys each
    /// would not fit; an older release never wrote one that large).
    package static let legacyCatalogBytesMax = 256 * 1024 * 1024
    /// The largest legacy identity key file read.
    package static let legacyIdentityKeysBytesMax = 64 * 1024
    /// Appended to a legacy file's name once its contents are durable in the log.
    package static let migratedSuffix = ".migrated"

    /// Brings the engine's recovered catalog (`store`: what the log holds) up
    /// to date: migrates legacy files found in `directory`, and gives a new
    /// directory its first identity signing key. Order, each step
    /// crash-safe: read and check both files; append their records; `sync`
    /// the log; rename each file to `NAME.migrated` (fsync of the directory).
    /// A crash before the rename leaves the files and records equal to them:
    /// the next start sees that, appends nothing and renames (re-importing
    /// would be harmless too: records are after-images). A cluster follower
    /// changes nothing (its catalog is the group log's) and refuses legacy
    /// files.
    package static func open(
        directory: String, store: CatalogStore, sync: () throws -> Void, now: Int64
    ) throws {
        let catalogPath = directory + "/catalog.json"
        let identityPath = directory + "/identity-keys.json"
        let recovered = store.read { $0 }
        var imports: [CatalogRecord] = []
        var toRename: [String] = []

        if let legacy = try legacyRecords(
            catalogPath, limitBytes: legacyCatalogBytesMax, decode: decodeLegacyCatalog,
            logHolds: recovered.catalogRecordCount > 0 ? recovered.catalog : nil, what: "catalog",
            records: { $0.records() }, directory: directory)
        {
            imports += legacy
            toRename.append(catalogPath)
        }
        if let legacy = try legacyRecords(
            identityPath, limitBytes: legacyIdentityKeysBytesMax, decode: decodeLegacyIdentityKeys,
            logHolds: recovered.identityRecordCount > 0 ? recovered.identityKeys : nil,
            what: "identity keys", records: { $0.records() }, directory: directory)
        {
            imports += legacy
            toRename.append(identityPath)
        }
        guard store.takesChanges else {
            // A cluster follower (spec §13): its catalog is the group log's, and
            // a new cluster's first signing key is its first leader's to mint.
            guard toRename.isEmpty else {
                throw CatalogStartError(
                    "\(directory) holds an older release's catalog files: start it once without --cluster to "
                        + "migrate them, then join the cluster")
            }
            return
        }
        if recovered.identityKeys.keys.isEmpty && !imports.contains(where: \.isIdentityKey) {
            // A new directory: its first signing key, durable before any token is signed.
            imports.append(.identityKey(IdentitySigningKey.mint(at: now), current: true))
        }
        guard !imports.isEmpty || !toRename.isEmpty else { return }
        if !imports.isEmpty {
            do throws(CatalogChangeFailure) {
                _ = try store.importRecords(imports)
            } catch {
                throw CatalogStartError("the log could not take the catalog records")
            }
        }
        // Makes the imported records durable whatever the --fsync policy.
        try sync()
        for path in toRename {
            try DurableFile.rename(path, to: path + migratedSuffix)
        }
        try store.read { $0 }.validated()
    }

    /// Returns the records to import from a legacy file: all of them when the
    /// log holds none of that kind (`logHolds` nil), none when the log already
    /// holds exactly the file's contents (a migration interrupted before its
    /// rename), nil when there is no file. Throws, saying what to do, when the
    /// log holds something else, or when the file is gone but its
    /// `.migrated` copy shows the log lost what it held.
    private static func legacyRecords<Value: Equatable>(
        _ path: String, limitBytes: Int, decode: ([UInt8]) -> Value?, logHolds: Value?, what: String,
        records: (Value) -> [CatalogRecord], directory: String
    ) throws(CatalogStartError) -> [CatalogRecord]? {
        guard let legacy = try readLegacy(path, limitBytes: limitBytes, decode: decode) else {
            if logHolds == nil, DurableFile.exists(path + migratedSuffix) {
                throw CatalogStartError(
                    "\(path + migratedSuffix) shows that this directory's \(what) went into the log, but the log "
                        + "holds no \(what): the log was lost or replaced; restore wal/, snapshots/ and checkpoint.* "
                        + "from a backup (or rename the file back to \(path) to re-import it)")
            }
            return nil
        }
        guard let inLog = logHolds else { return records(legacy) }
        guard legacy == inLog else {
            throw CatalogStartError(
                "\(path) is present but the log already holds other \(what); the log is authoritative: "
                    + "if the file is a leftover or a restored copy, move it out of \(directory), then start again")
        }
        return []
    }

    /// Reads and decodes a legacy file; nil when there is none. Throws, naming
    /// the file, when it exists but cannot be read or is not what an older
    /// release wrote.
    private static func readLegacy<Value>(
        _ path: String, limitBytes: Int, decode: ([UInt8]) -> Value?
    ) throws(CatalogStartError) -> Value? {
        let bytes: [UInt8]?
        do {
            bytes = try DurableFile.readIfExists(path: path, limitBytes: limitBytes)
        } catch {
            throw CatalogStartError(
                "cannot read \(path) to move it into the log: \(error); fix its permissions or restore it "
                    + "from a backup (nothing was changed)")
        }
        guard let bytes else { return nil }
        guard let value = decode(bytes) else {
            throw CatalogStartError(
                "\(path) is damaged or not a file an older roost wrote, so it cannot be moved into the log; "
                    + "restore it from a backup (nothing was changed)")
        }
        return value
    }

    // MARK: - Legacy formats (read only; written by releases before 0004)

    /// `{"version":1,"next_app_id":N,"apps":[…],"keys":[…]}`, keys as SHA-256 hex.
    package static func decodeLegacyCatalog(_ bytes: [UInt8]) -> CatalogState? {
        guard
            let document = try? JSONReader.parse(
                bytes, limits: JSONLimits(maxDepth: 8, maxInputBytes: legacyCatalogBytesMax, maxStringBytes: 64 * 1024)),
            document["version"]?.intValue == 1,
            let next = document["next_app_id"]?.intValue, next >= 1, next <= Int(UInt32.max)
        else { return nil }
        var state = CatalogState()
        state.nextAppID = UInt32(next)
        for app in document["apps"]?.arrayValue ?? [] {
            guard let id = app["id"]?.intValue, id >= 1, id < next,
                let name = app["name"]?.stringValue, name.utf8.count <= CatalogRecord.stringBytesMax,
                let created = app["created_at_ms"]?.intValue,
                let maxDevices = app["max_devices_per_person"]?.intValue,
                Limits.maxDevicesPerPersonRange.contains(maxDevices),
                let requireKnown = app["require_known_person"]?.boolValue
            else { return nil }
            let appID = AppID(UInt32(id))
            state.apps[appID] = AppRecord(
                id: appID, name: name, createdAtMilliseconds: Int64(created),
                settings: AppSettings(maxDevicesPerPerson: maxDevices, requireKnownPerson: requireKnown))
        }
        for key in document["keys"]?.arrayValue ?? [] {
            guard let id = key["id"]?.stringValue, id.utf8.count <= CatalogRecord.stringBytesMax,
                let app = key["app"]?.intValue, app >= 1, state.apps[AppID(UInt32(clamping: app))] != nil,
                let kind = key["kind"]?.stringValue.flatMap(KeyKind.init(rawValue:)),
                let mode = key["mode"]?.stringValue.flatMap({ AppMode(name: $0) }),
                let capabilityNames = key["capabilities"]?.arrayValue,
                let label = key["label"]?.stringValue, label.utf8.count <= CatalogRecord.stringBytesMax,
                let created = key["created_at_ms"]?.intValue,
                let digest = key["sha256"]?.stringValue.flatMap({ Hex.decode($0) }).flatMap(KeyDigest.init(bytes:))
            else { return nil }
            var capabilities = Set<Capability>()
            for name in capabilityNames {
                guard let capability = name.stringValue.flatMap(Capability.init(rawValue:)) else { return nil }
                capabilities.insert(capability)
            }
            let rate = key["rate_limit_per_second"]?.intValue
            if let rate, !(1...KeyRecord.rateLimitPerSecondMax).contains(rate) { return nil }
            state.apply(
                .key(
                    KeyRecord(
                        id: id, appID: AppID(UInt32(app)), kind: kind, mode: mode, capabilities: capabilities,
                        label: label, createdAtMilliseconds: Int64(created), rateLimitPerSecond: rate, digest: digest)))
        }
        return state
    }

    /// `{"version":1,"current":"ik_…","keys":[{"id","secret":"<64 hex>","created_at_ms"}]}`.
    package static func decodeLegacyIdentityKeys(_ bytes: [UInt8]) -> IdentityKeyState? {
        guard let document = try? JSONReader.parse(bytes), document["version"]?.intValue == 1,
            let current = document["current"]?.stringValue, let entries = document["keys"]?.arrayValue,
            !entries.isEmpty, entries.count <= IdentitySigningKey.keysMax
        else { return nil }
        var state = IdentityKeyState()
        for entry in entries {
            guard let id = entry["id"]?.stringValue, IdentitySigningKey.isValidID(id),
                let secret = entry["secret"]?.stringValue.flatMap({ Hex.decode($0) }),
                secret.count == IdentitySigningKey.secretBytes, let created = entry["created_at_ms"]?.intValue,
                !state.keys.contains(where: { $0.id == id })
            else { return nil }
            state.apply(
                .identityKey(
                    IdentitySigningKey(id: id, secret: secret, createdAtMilliseconds: Int64(created)),
                    current: id == current))
        }
        guard state.currentID == current else { return nil }
        return state
    }
}

extension CatalogRecord {
    fileprivate var isIdentityKey: Bool {
        if case .identityKey = self { return true }
        return false
    }
}

/// Start-up cannot bring the catalog up: exit 2 with this line.
package struct CatalogStartError: Error, CustomStringConvertible {
    package var reason: String
    init(_ reason: String) { self.reason = reason }
    package var description: String { reason }
}
