import RoostModel

/// The signing keys for Connect-style identity tokens: one current key that
/// signs, and older keys that still verify until an operator removes them.
///
/// The keys are catalog records in the log (`CatalogRecord.identityKey`),
/// applied and appended under one mutex (`LoggedState`) and acknowledged once
/// durable; a new data directory gets its first key at start-up. Rotation:
/// `POST /v1/identity-keys` makes a new current key; `DELETE
/// /v1/identity-keys/{id}` removes an old one, after which its tokens answer
/// 401 (docs/compat.md).
package final class IdentityKeyStore: Sendable {
    private let state: LoggedState<IdentityKeyState>

    /// Keys recovered from the log (at least one), whose changes go to `log`.
    package init(state: IdentityKeyState, log: CatalogLog) {
        precondition(state.keys.contains { $0.id == state.currentID }, "the current identity key must exist")
        self.state = LoggedState(state, log: log) { value, record in value.apply(record) }
    }

    /// Keys that live only as long as the process (tests, tools).
    package static func inMemory(now: Int64) -> IdentityKeyStore {
        IdentityKeyStore(state: IdentityKeyState().withNewKey(at: now).state, log: CatalogLog(log: nil))
    }

    // MARK: - Reads

    /// The key that signs new tokens: the current key whose record is
    /// durable, so no token is ever signed by a key a crash could lose.
    func currentKey() -> IdentitySigningKey {
        state.readAcknowledged { state in
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

    /// Every acknowledged key's id and creation time, oldest first, and the current id.
    func list() -> (currentID: String, keys: [(id: String, createdAtMilliseconds: Int64)]) {
        state.readAcknowledged { state in (state.currentID, state.keys.map { ($0.id, $0.createdAtMilliseconds) }) }
    }

    /// Returns the keys as records for a snapshot.
    package func snapshotRecords() -> [CatalogRecord] {
        state.read { $0.records() }
    }

    /// Returns the keys (a copy), every applied change included.
    package func currentState() -> IdentityKeyState {
        state.read { $0 }
    }

    // MARK: - Rotation (each logged; acknowledged once durable)

    /// Makes a new current key; older keys keep verifying. 409 at `keysMax`.
    func rotate(now: Int64) throws(APIError) -> (key: IdentitySigningKey, ticket: CommitTicket) {
        try state.change { state throws(APIError) in
            guard state.keys.count < IdentitySigningKey.keysMax else {
                throw APIError(
                    status: 409, code: "limit_reached",
                    message: "at most \(IdentitySigningKey.keysMax) identity keys; remove an old one first")
            }
            let (next, record) = state.withNewKey(at: now)
            return ([record], next.keys[next.keys.count - 1])
        }
    }

    /// Removes an old key: the tokens it signed stop verifying. The current key
    /// cannot be removed (409 `current_key`); an unknown id is 404.
    func remove(id: String) throws(APIError) -> CommitTicket {
        try state.change { state throws(APIError) in
            guard state.keys.contains(where: { $0.id == id }) else {
                throw APIError(status: 404, code: "identity_key_not_found", message: "no such identity key")
            }
            guard id != state.currentID else {
                throw APIError(
                    status: 409, code: "current_key",
                    message: "the current identity key cannot be removed; rotate first")
            }
            return ([.identityKeyRemoved(id: id)], ())
        }.1
    }
}
