import RoostJSON
import RoostModel
import RoostPlatform

/// One HMAC-SHA-256 signing key for identity tokens.
struct IdentitySigningKey: Sendable, Equatable {
    /// Public, written into every token it signs: `ik_` + 16 hex digits.
    var id: String
    /// 32 random bytes; never logged, never answered.
    var secret: [UInt8]
    var createdAtMilliseconds: Int64
}

/// The signing keys for Connect-style identity tokens: one current key that
/// signs, and older keys that still verify until an operator removes them.
///
/// The keys persist in `DIR/identity-keys.json` (mode 0600), replaced
/// atomically with `DurableFile.replace` (temp, fsync, rename, fsync dir)
/// before a change is published, as the catalog is. Rotation: `POST
/// /v1/identity-keys` makes a new current key; `DELETE /v1/identity-keys/{id}`
/// removes an old one, after which its tokens answer 401 (docs/compat.md).
package final class IdentityKeyStore: Sendable {
    package static let formatVersion = 1
    /// Secret bytes per key (HMAC-SHA-256's block-size-safe key length).
    package static let secretBytes = 32
    /// The most keys kept at once; rotate, then remove the old ones.
    package static let keysMax = 16
    /// The largest key file read at start-up.
    static let fileBytesMax = 64 * 1024

    fileprivate struct State: Sendable {
        var currentID: String
        var keys: [IdentitySigningKey]
    }

    private let state: PersistedState<State>

    /// `path` nil keeps the keys in memory only (tests).
    private init(state: State, path: String?) {
        precondition(state.keys.contains { $0.id == state.currentID }, "the current identity key must exist")
        self.state = PersistedState(state, path: path, what: "the identity keys", encode: IdentityKeyStore.encode)
    }

    /// Keys that live only as long as the process (tests, tools).
    package static func inMemory(now: Int64) -> IdentityKeyStore {
        IdentityKeyStore(state: State(currentID: "", keys: []).withNewKey(at: now), path: nil)
    }

    /// Loads `path`, or creates it with one fresh key on first start. Throws
    /// when the file exists but cannot be read, or cannot be created.
    package static func open(path: String, now: Int64) throws(IdentityKeyStoreError) -> IdentityKeyStore {
        let bytes: [UInt8]?
        do {
            bytes = try DurableFile.readIfExists(path: path, limitBytes: fileBytesMax)
        } catch {
            throw IdentityKeyStoreError(path: path, reason: "\(error)")
        }
        if let bytes {
            guard let state = decode(bytes) else {
                throw IdentityKeyStoreError(path: path, reason: "not a version \(formatVersion) identity key file")
            }
            return IdentityKeyStore(state: state, path: path)
        }
        let state = State(currentID: "", keys: []).withNewKey(at: now)
        do {
            try DurableFile.replace(path: path, with: encode(state))
        } catch {
            throw IdentityKeyStoreError(path: path, reason: "\(error)")
        }
        return IdentityKeyStore(state: state, path: path)
    }

    // MARK: - Reads

    /// The key that signs new tokens.
    func currentKey() -> IdentitySigningKey {
        state.read { state in
            guard let key = state.keys.first(where: { $0.id == state.currentID }) else {
                preconditionFailure("current identity key \(state.currentID) is missing")
            }
            return key
        }
    }

    /// The key with `id`, current or older; nil when removed or never known.
    func key(id: Substring) -> IdentitySigningKey? {
        state.read { state in state.keys.first { $0.id == id } }
    }

    /// Every key's id and creation time, oldest first, and the current id.
    func list() -> (currentID: String, keys: [(id: String, createdAtMilliseconds: Int64)]) {
        state.read { state in (state.currentID, state.keys.map { ($0.id, $0.createdAtMilliseconds) }) }
    }

    // MARK: - Rotation (each change durable before it is published)

    /// Makes a new current key; older keys keep verifying. 409 at `keysMax`.
    func rotate(now: Int64) throws(APIError) -> IdentitySigningKey {
        try state.change { state throws(APIError) in
            guard state.keys.count < IdentityKeyStore.keysMax else {
                throw APIError(
                    status: 409, code: "limit_reached",
                    message: "at most \(IdentityKeyStore.keysMax) identity keys; remove an old one first")
            }
            state = state.withNewKey(at: now)
            return state.keys[state.keys.count - 1]
        }
    }

    /// Removes an old key: the tokens it signed stop verifying. The current key
    /// cannot be removed (409 `current_key`); an unknown id is 404.
    func remove(id: String) throws(APIError) {
        try state.change { state throws(APIError) in
            guard state.keys.contains(where: { $0.id == id }) else {
                throw APIError(status: 404, code: "identity_key_not_found", message: "no such identity key")
            }
            guard id != state.currentID else {
                throw APIError(
                    status: 409, code: "current_key",
                    message: "the current identity key cannot be removed; rotate first")
            }
            state.keys.removeAll { $0.id == id }
        }
    }

    // MARK: - Format

    /// `{"version":1,"current":"ik_…","keys":[{"id":"ik_…","secret":"<64 hex>","created_at_ms":N}]}`
    private static func encode(_ state: State) -> [UInt8] {
        var writer = JSONWriter(reservingCapacity: 256)
        writer.beginObject()
        writer.member("version", formatVersion)
        writer.member("current", state.currentID)
        writer.key("keys")
        writer.beginArray()
        for key in state.keys {
            writer.beginObject()
            writer.member("id", key.id)
            writer.member("secret", Hex.encode(key.secret))
            writer.member("created_at_ms", Int(key.createdAtMilliseconds))
            writer.endObject()
        }
        writer.endArray()
        writer.endObject()
        var bytes = writer.bytes
        bytes.append(UInt8(ascii: "\n"))
        return bytes
    }

    private static func decode(_ bytes: [UInt8]) -> State? {
        guard let document = try? JSONReader.parse(bytes), document["version"]?.intValue == formatVersion,
            let current = document["current"]?.stringValue, let entries = document["keys"]?.arrayValue,
            !entries.isEmpty, entries.count <= keysMax
        else { return nil }
        var keys: [IdentitySigningKey] = []
        for entry in entries {
            guard let id = entry["id"]?.stringValue, IdentityToken.isKeyID(id),
                let secret = entry["secret"]?.stringValue.flatMap({ Hex.decode($0) }),
                secret.count == secretBytes, let created = entry["created_at_ms"]?.intValue,
                !keys.contains(where: { $0.id == id })
            else { return nil }
            keys.append(IdentitySigningKey(id: id, secret: secret, createdAtMilliseconds: Int64(created)))
        }
        guard keys.contains(where: { $0.id == current }) else { return nil }
        return State(currentID: current, keys: keys)
    }
}

extension IdentityKeyStore.State {
    /// Returns the state with a fresh random key appended and made current.
    fileprivate func withNewKey(at now: Int64) -> IdentityKeyStore.State {
        var next = self
        var id: String
        repeat {
            id = "ik_" + Hex.encode(Crypto.randomBytes(8))
        } while next.keys.contains { $0.id == id }
        next.keys.append(
            IdentitySigningKey(
                id: id, secret: Crypto.randomBytes(IdentityKeyStore.secretBytes), createdAtMilliseconds: now))
        next.currentID = id
        return next
    }
}

/// The identity key file exists but cannot be used: start-up stops and says why.
package struct IdentityKeyStoreError: Error, CustomStringConvertible {
    package var path: String
    package var reason: String
    package var description: String { "cannot load identity keys \(path): \(reason)" }
}
