import RoostEngine
import RoostModel

/// The signing keys for Connect-style identity tokens: one current key that
/// signs, and older keys that still verify until an operator removes them.
///
/// The keys are catalog records in the log (`CatalogRecord.identityKey`),
/// applied and appended under one mutex (`CatalogStore`) and acknowledged once
/// durable; a new data directory gets its first key at start-up. Rotation:
/// `POST /v1/identity-keys` makes a new current key; `DELETE
/// /v1/identity-keys/{id}` removes an old one, after which its tokens answer
/// 401 (docs/compat.md).
package final class IdentityKeyStore: Sendable {
    /// The engine's catalog, which holds the keys (shared with `Catalog`).
    private let state: CatalogStore

    /// Keys recovered from the log (at least one), in the engine's catalog.
    /// A cluster follower may have none yet (its catalog is the group log's:
    /// the first leader mints the first key); it signs no token (minting is
    /// a write, refused on a follower) and verifies with the keys replicated.
    package init(state: CatalogStore) {
        precondition(
            !state.takesChanges
                || state.read { contents in
                    contents.identityKeys.keys.contains { $0.id == contents.identityKeys.currentID }
                },
            "the current identity key must exist")
        self.state = state
    }

    /// Keys that live only as long as the process (tests, tools).
    package static func inMemory(now: Int64) -> IdentityKeyStore {
        var contents = CatalogContents()
        contents.identityKeys.apply(.identityKey(IdentitySigningKey.mint(at: now), current: true))
        return IdentityKeyStore(state: CatalogStore(contents, log: nil))
    }

    // MARK: - Reads

    /// The key that signs new tokens: the current key whose record is
    /// durable, so no token is ever signed by a key a crash could lose.
    func currentKey() -> IdentitySigningKey {
        state.readAcknowledged { contents in
            let state = contents.identityKeys
            guard let key = state.keys.first(where: { $0.id == state.currentID }) else {
                preconditionFailure("current identity key \(state.currentID) is missing")
            }
            return key
        }
    }

    /// The key with `id`, current or older; nil when removed or never known.
    func key(id: Substring) -> IdentitySigningKey? {
        state.read { contents in contents.identityKeys.keys.first { $0.id == id } }
    }

    /// Every acknowledged key's id and creation time, oldest first, and the current id.
    func list() -> (currentID: String, keys: [(id: String, createdAtMilliseconds: Int64)]) {
        state.readAcknowledged { contents in
            (contents.identityKeys.currentID, contents.identityKeys.keys.map { ($0.id, $0.createdAtMilliseconds) })
        }
    }

    /// Returns the keys (a copy), every applied change included.
    package func currentState() -> IdentityKeyState {
        state.read { $0.identityKeys }
    }

    // MARK: - Rotation (each logged; acknowledged once durable)

    /// Makes a new current key; older keys keep verifying. 409 at `keysMax`.
    func rotate(now: Int64) throws(APIError) -> (key: IdentitySigningKey, ticket: CommitTicket) {
        let (outcome, ticket) = try state.run(.rotateIdentityKey(IdentitySigningKey.mint(at: now)))
        guard case .identityKey(let key) = outcome else { preconditionFailure("rotation answered \(outcome)") }
        return (key, ticket)
    }

    /// Removes an old key: the tokens it signed stop verifying. The current key
    /// cannot be removed (409 `current_key`); an unknown id is 404.
    func remove(id: String) throws(APIError) -> CommitTicket {
        try state.run(.removeIdentityKey(id: id)).ticket
    }
}
