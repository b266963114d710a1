import RoostJSON
import RoostModel
import RoostPlatform

/// Everything the catalog knows: apps, keys (as digests) and the next app id.
package struct CatalogState: Sendable {
    package var nextAppID: UInt32 = 1
    package var apps: [AppID: AppRecord] = [:]
    package var keysByDigest: [KeyDigest: KeyRecord] = [:]
    package var keyDigestByID: [String: KeyDigest] = [:]

    package init() {}
}

/// The catalog file, `DIR/catalog.json`: a JSON document replaced atomically
/// (temp → fsync → rename → fsync dir) after every change. Apps and keys
/// change rarely, so a whole-file rewrite costs one fsync per operator action
/// and keeps the file readable. Keys appear only as SHA-256 digests.
/// The format is in docs/storage.md.
package final class CatalogStore: Sendable {
    package static let formatVersion = 1
    /// The largest catalog file read at start-up.
    package static let fileBytesMax = 256 * 1024 * 1024

    package let path: String

    package init(path: String) {
        self.path = path
    }

    /// Reads the catalog file; a missing file is an empty catalog.
    package func load() throws(CatalogLoadError) -> CatalogState {
        let bytes: [UInt8]?
        do {
            bytes = try DurableFile.readIfExists(path: path, limitBytes: CatalogStore.fileBytesMax)
        } catch {
            throw CatalogLoadError(path: path, reason: "\(error)")
        }
        guard let bytes else { return CatalogState() }
        do {
            return try CatalogStore.decode(bytes)
        } catch let error as CatalogLoadError {
            throw CatalogLoadError(path: path, reason: error.reason)
        } catch {
            throw CatalogLoadError(path: path, reason: "\(error)")
        }
    }

    // MARK: - Format

    package static func encode(_ state: CatalogState) -> [UInt8] {
        var writer = JSONWriter(reservingCapacity: 4096)
        writer.beginObject()
        writer.member("version", formatVersion)
        writer.member("next_app_id", Int(state.nextAppID))
        writer.key("apps")
        writer.beginArray()
        for app in state.apps.values.sorted(by: { $0.id < $1.id }) {
            writer.beginObject()
            writer.member("id", Int(app.id.rawValue))
            writer.member("name", app.name)
            writer.member("created_at_ms", Int(app.createdAtMilliseconds))
            writer.member("max_devices_per_person", app.settings.maxDevicesPerPerson)
            writer.member("require_known_person", app.settings.requireKnownPerson)
            writer.endObject()
        }
        writer.endArray()
        writer.key("keys")
        writer.beginArray()
        for key in state.keysByDigest.values.sorted(by: { $0.id < $1.id }) {
            writer.beginObject()
            writer.member("id", key.id)
            writer.member("app", Int(key.appID.rawValue))
            writer.member("kind", key.kind.rawValue)
            writer.member("mode", key.mode.name)
            writer.key("capabilities")
            writer.beginArray()
            for capability in key.capabilities.sorted() { writer.string(capability.rawValue) }
            writer.endArray()
            writer.member("label", key.label)
            writer.member("created_at_ms", Int(key.createdAtMilliseconds))
            if let rate = key.rateLimitPerSecond { writer.member("rate_limit_per_second", rate) }
            writer.member("sha256", Hex.encode(key.digest.bytes))
            writer.endObject()
        }
        writer.endArray()
        writer.endObject()
        var bytes = writer.bytes
        bytes.append(UInt8(ascii: "\n"))
        return bytes
    }

    package static func decode(_ bytes: [UInt8]) throws -> CatalogState {
        let document = try JSONReader.parse(
            bytes,
            limits: JSONLimits(
                maxDepth: 8, maxInputBytes: fileBytesMax, maxStringBytes: 64 * 1024))
        func fail(_ reason: String) -> CatalogLoadError { CatalogLoadError(path: "", reason: reason) }
        guard document["version"]?.intValue == formatVersion else { throw fail("unknown catalog version") }
        guard let next = document["next_app_id"]?.intValue, next >= 1, next <= Int(UInt32.max) else {
            throw fail("bad next_app_id")
        }
        var state = CatalogState()
        state.nextAppID = UInt32(next)
        for app in document["apps"]?.arrayValue ?? [] {
            guard let id = app["id"]?.intValue, id >= 1, id < next,
                let name = app["name"]?.stringValue,
                let created = app["created_at_ms"]?.intValue,
                let maxDevices = app["max_devices_per_person"]?.intValue,
                Limits.maxDevicesPerPersonRange.contains(maxDevices),
                let requireKnown = app["require_known_person"]?.boolValue
            else { throw fail("bad app entry") }
            let appID = AppID(UInt32(id))
            state.apps[appID] = AppRecord(
                id: appID, name: name, createdAtMilliseconds: Int64(created),
                settings: AppSettings(maxDevicesPerPerson: maxDevices, requireKnownPerson: requireKnown))
        }
        for key in document["keys"]?.arrayValue ?? [] {
            guard let id = key["id"]?.stringValue,
                let app = key["app"]?.intValue, app >= 1, state.apps[AppID(UInt32(clamping: app))] != nil,
                let kind = key["kind"]?.stringValue.flatMap(KeyKind.init(rawValue:)),
                let mode = key["mode"]?.stringValue.flatMap({ AppMode(name: $0) }),
                let capabilityNames = key["capabilities"]?.arrayValue,
                let label = key["label"]?.stringValue,
                let created = key["created_at_ms"]?.intValue,
                let digestHex = key["sha256"]?.stringValue,
                let digest = Hex.decode(digestHex).flatMap(KeyDigest.init(bytes:))
            else { throw fail("bad key entry") }
            var capabilities = Set<Capability>()
            for name in capabilityNames {
                guard let capability = name.stringValue.flatMap(Capability.init(rawValue:)) else {
                    throw fail("bad capability in key \(id)")
                }
                capabilities.insert(capability)
            }
            let rate = key["rate_limit_per_second"]?.intValue
            state.keysByDigest[digest] = KeyRecord(
                id: id, appID: AppID(UInt32(app)), kind: kind, mode: mode, capabilities: capabilities, label: label,
                createdAtMilliseconds: Int64(created), rateLimitPerSecond: rate, digest: digest)
            state.keyDigestByID[id] = digest
        }
        return state
    }
}

/// The catalog file exists but cannot be read: start-up stops and says why.
package struct CatalogLoadError: Error, CustomStringConvertible {
    package var path: String
    package var reason: String
    package var description: String { "cannot load catalog \(path): \(reason)" }
}
