import RoostCrypto
import RoostEngine
import RoostModel
import Synchronization

/// The apps and API keys as the API uses them: reads and `CatalogCommand`s
/// on the engine's `CatalogStore` (the one owner of the catalog's state),
/// plus what only a serving process keeps: rate-limit buckets, in-memory key
/// uses and refusal counts. `IdentityKeyStore` reads the same store.
///
/// Apps and keys change rarely and are read on every request (authentication),
/// so reads take the mutex for a dictionary probe only. Authentication and
/// validation read every applied change (a deleted app's keys stop at once);
/// listings read only acknowledged ones, so they never show a change that a
/// crash could still lose.
package final class Catalog: Sendable {
    /// The engine's catalog, shared with `IdentityKeyStore`.
    package let state: CatalogStore
    private let rateLimits: Mutex<[String: TokenBucket]>
    /// When each key was last used, in memory (every use), and when that was
    /// last logged (`KeyUsage`): the hot path writes the log at most once per
    /// key per `KeyUsage.persistIntervalMilliseconds`.
    private let usage: Mutex<[String: KeyUsage]>
    /// Requests refused by a key's rate limit, per app (metrics); touched only on a refusal.
    private let rateLimitHits = Mutex<[AppID: UInt64]>([:])
    private let clock: any APIClock

    /// Creates a catalog from a recovered state whose changes go to `log`
    /// (nil keeps everything in memory: tests only).
    package convenience init(state: CatalogState = CatalogState(), log: (any MutationLog)?, clock: any APIClock) {
        var contents = CatalogContents()
        contents.catalog = state
        self.init(state: CatalogStore(contents, log: log), clock: clock)
    }

    /// Creates a catalog over the engine's `state`.
    package init(state: CatalogStore, clock: any APIClock) {
        self.state = state
        self.rateLimits = Mutex([:])
        self.usage = Mutex(
            state.read { $0.catalog.keyLastUsedMilliseconds }.mapValues {
                KeyUsage(lastUsed: $0, logged: $0, loggedAtUse: $0)
            })
        self.clock = clock
    }

    // MARK: - Reads

    /// Returns the key whose SHA-256 digest is `digest`, if it is live.
    package func key(withDigest digest: KeyDigest) -> KeyRecord? {
        state.read { $0.catalog.keysByDigest[digest] }
    }

    /// Returns the live key with public id `id` (`key_…`), nil once it is
    /// revoked or its app deleted. Every applied change counts, as for
    /// authentication. O(1) expected.
    package func liveKey(id: String) -> KeyRecord? {
        state.read { $0.catalog.liveKey(id: id) }
    }

    /// Returns the whole state (a copy), every applied change included.
    package func currentState() -> CatalogState {
        state.read { $0.catalog }
    }

    /// Returns the catalog's part of a snapshot (its whole visible state). O(n log n).
    package func snapshotRecords() -> [CatalogRecord] {
        state.read { $0.catalog.records() }
    }

    package func app(_ id: AppID) -> AppRecord? {
        state.read { $0.catalog.apps[id] }
    }

    /// Returns the settings of an app, nil when there is no such app.
    package func settings(of id: AppID) -> AppSettings? {
        state.read { $0.catalog.apps[id]?.settings }
    }

    /// Returns the app as its acknowledged changes left it.
    package func acknowledgedApp(_ id: AppID) -> AppRecord? {
        state.readAcknowledged { $0.catalog.apps[id] }
    }

    /// Returns every app whose creation is acknowledged, ordered by id. O(apps log apps).
    package func apps() -> [AppRecord] {
        state.readAcknowledged { $0.catalog.apps.values.sorted { $0.id < $1.id } }
    }

    /// Returns the live keys of `app` whose creation is acknowledged (of
    /// `onlyMode` when given), oldest first (ties by id), each with when it
    /// was last used (in memory: every use of this run, and what the log kept
    /// of earlier runs). Revoked keys are gone from the catalog and not
    /// listed. At most `keysPerAppMax` keys. O(keys of the server).
    package func keys(of app: AppID, onlyMode: AppMode? = nil) -> [(key: KeyRecord, lastUsedMilliseconds: Int64?)] {
        let keys = state.readAcknowledged { state in
            state.catalog.keysByDigest.values.filter { $0.appID == app && (onlyMode == nil || $0.mode == onlyMode) }
        }.sorted { ($0.createdAtMilliseconds, $0.id) < ($1.createdAtMilliseconds, $1.id) }
        let uses = usage.withLock { uses in keys.map { uses[$0.id]?.lastUsed } }
        return Array(zip(keys, uses)).map { (key: $0.0, lastUsedMilliseconds: $0.1) }
    }

    /// Returns the number of live keys of `app` (of `onlyMode` when given). O(keys).
    package func keyCount(of app: AppID, onlyMode: AppMode? = nil) -> Int {
        state.read { $0.catalog.keyCount(of: app, onlyMode: onlyMode) }
    }

    // MARK: - Changes (each logged; the ticket says when it is durable)

    /// Creates an app with the next id from the logged counter, so an id is
    /// never given twice (also after deletions and restarts).
    /// `inactiveAfterDays`: nil leaves the default (off); `.some(nil)` is off.
    package func createApp(
        name: String, maxDevicesPerPerson: Int? = nil, requireKnownPerson: Bool? = nil,
        inactiveAfterDays: Int?? = nil
    ) throws(APIError) -> (record: AppRecord, ticket: CommitTicket) {
        let settings = AppSettingsChange(
            maxDevicesPerPerson: maxDevicesPerPerson, requireKnownPerson: requireKnownPerson,
            inactiveAfterDays: inactiveAfterDays)
        let (outcome, ticket) = try state.run(
            .createApp(name: name, settings: settings, atMilliseconds: clock.wallMilliseconds()))
        guard case .app(let record) = outcome else { preconditionFailure("createApp answered \(outcome)") }
        return (record, ticket)
    }

    /// Applies a partial update: nil leaves a value as it is (for
    /// `inactiveAfterDays`, `.some(nil)` turns it off). A patch that changes
    /// nothing logs nothing.
    package func updateApp(
        _ id: AppID, name: String?, maxDevicesPerPerson: Int?, requireKnownPerson: Bool?,
        inactiveAfterDays: Int?? = nil
    ) throws(APIError) -> (record: AppRecord, ticket: CommitTicket) {
        let settings = AppSettingsChange(
            maxDevicesPerPerson: maxDevicesPerPerson, requireKnownPerson: requireKnownPerson,
            inactiveAfterDays: inactiveAfterDays)
        let (outcome, ticket) = try state.run(.updateApp(id, name: name, settings: settings))
        guard case .app(let record) = outcome else { preconditionFailure("updateApp answered \(outcome)") }
        return (record, ticket)
    }

    /// Deletes an app and every key of it: its keys answer 401 from now on.
    package func deleteApp(_ id: AppID) throws(APIError) -> CommitTicket {
        let (outcome, ticket) = try state.run(.deleteApp(id))
        guard case .appDeleted(let keyIDs) = outcome else { preconditionFailure("deleteApp answered \(outcome)") }
        _ = rateLimitHits.withLock { $0.removeValue(forKey: id) }
        usage.withLock { uses in
            for keyID in keyIDs { uses[keyID] = nil }
        }
        return ticket
    }

    /// Mints a key. Returns its record and the key itself, which is shown once
    /// and never stored (the log holds its SHA-256 digest).
    package func createKey(
        app: AppID, kind: KeyKind, mode: AppMode, capabilities: Set<Capability>, label: String,
        rateLimitPerSecond: Int?
    ) throws(APIError) -> (record: KeyRecord, key: String, ticket: CommitTicket) {
        let now = clock.wallMilliseconds()
        let secret = KeyMinting.newKey(kind: kind, mode: mode)
        let id = KeyMinting.newKeyID()
        guard let digest = KeyDigest(bytes: Crypto.sha256(secret.utf8)) else {
            preconditionFailure("SHA-256 did not give 32 bytes")
        }
        let minted = KeyRecord(
            id: id, appID: app, kind: kind, mode: mode, capabilities: capabilities, label: label,
            createdAtMilliseconds: now, rateLimitPerSecond: rateLimitPerSecond, digest: digest)
        let (outcome, ticket) = try state.run(.createKey(minted))
        guard case .key(let record) = outcome else { preconditionFailure("createKey answered \(outcome)") }
        return (record, secret, ticket)
    }

    /// Revokes a key of `app` (of `onlyMode` when given). A key of another app,
    /// or of the other mode, answers as unknown.
    package func revokeKey(app: AppID, keyID: String, onlyMode: AppMode? = nil) throws(APIError) -> CommitTicket {
        let ticket = try state.run(.revokeKey(app: app, keyID: keyID, onlyMode: onlyMode)).ticket
        _ = rateLimits.withLock { $0.removeValue(forKey: keyID) }
        _ = usage.withLock { $0.removeValue(forKey: keyID) }
        return ticket
    }

    /// Returns the key a client presented, after its rate limit (429 with
    /// `Retry-After`); nil when no key matches. Keys are compared as SHA-256
    /// digests; the key never appears in an error.
    package func key(presented: Substring) throws(APIError) -> KeyRecord? {
        guard !presented.isEmpty, presented.utf8.count <= Authenticator.presentedKeyBytesMax else { return nil }
        return try key(digest: KeyDigest(words: Crypto.sha256Words(utf8: presented)))
    }

    /// Returns the key with this SHA-256 digest, after its rate limit.
    package func key(digest keyDigest: KeyDigest) throws(APIError) -> KeyRecord? {
        guard let key = key(withDigest: keyDigest) else { return nil }
        RequestAttribution.note(key.appID, mode: key.mode)
        if let retryAfter = admit(key) {
            rateLimitHits.withLock { $0[key.appID, default: 0] += 1 }
            throw APIError.rateLimited(.key, retryAfterSeconds: retryAfter)
        }
        noteUse(of: key)
        return key
    }

    // MARK: - Last use (decision 0053)

    /// Notes that `key` authenticated a request now: in memory always; in the
    /// log (a `keyUsed` record appended, not waited for) only when the last
    /// logged use is `KeyUsage.persistIntervalMilliseconds` old or more. So
    /// a busy key costs the log one small record a minute, and a crash loses
    /// less than a minute of its last use. A use the log cannot take stays in
    /// memory (the request is not refused for it). O(1) expected.
    func noteUse(of key: KeyRecord) {
        let now = clock.wallMilliseconds()
        let due = usage.withLock { uses -> Bool in
            // Changed in place: one look-up of the key's id (a get and a set
            // were two, each hashing the id: ~0.8 % of a registration's instructions).
            Self.noteUse(at: now, in: &uses[key.id, default: KeyUsage(lastUsed: now, logged: nil, loggedAtUse: nil)])
        }
        if due { logUse(key.id, at: now) }
    }

    /// Counts a use at `now` in `entry`; returns whether it is due in the log.
    private static func noteUse(at now: Int64, in entry: inout KeyUsage) -> Bool {
        entry.lastUsed = max(entry.lastUsed, now)
        let due = entry.logged.map { now - $0 >= KeyUsage.persistIntervalMilliseconds } ?? true
        if due {
            entry.logged = now
            entry.loggedAtUse = entry.lastUsed
        }
        return due
    }

    /// Logs every use not logged yet (clean shutdown: `roost serve` calls it
    /// before its final snapshot). Returns the ticket of the last record, to
    /// wait for; `.acknowledged` when nothing was pending.
    package func flushKeyUsage() -> CommitTicket {
        let pending = usage.withLock { uses -> [KeyUse] in
            var pending: [KeyUse] = []
            for (id, entry) in uses where entry.loggedAtUse != entry.lastUsed {
                pending.append(KeyUse(keyID: id, atMilliseconds: entry.lastUsed))
                uses[id]?.logged = entry.lastUsed
                uses[id]?.loggedAtUse = entry.lastUsed
            }
            return pending.sorted { $0.keyID < $1.keyID }
        }
        guard !pending.isEmpty else { return .acknowledged }
        return (try? state.run(.noteKeyUses(pending)).ticket) ?? .refused
    }

    private func logUse(_ id: String, at now: Int64) {
        // A key revoked since it was looked up logs nothing (`plan` sees the current state).
        _ = try? state.run(.noteKeyUses([KeyUse(keyID: id, atMilliseconds: now)]))
    }

    // MARK: - Rate limits

    /// Requests refused by a rate limit since start, per app (deleted apps dropped).
    package var rateLimitHitsByApp: [AppID: UInt64] { rateLimitHits.withLock { $0 } }

    /// Takes one request from the key's bucket. Returns nil when allowed, or
    /// the whole seconds after which a retry can succeed.
    package func admit(_ key: KeyRecord) -> Int? {
        guard let perSecond = key.rateLimitPerSecond else { return nil }
        let now = clock.monotonicNanoseconds()
        return rateLimits.withLock { buckets in
            var bucket = buckets[key.id] ?? TokenBucket(perSecond: perSecond, now: now)
            let verdict = bucket.take(now: now)
            buckets[key.id] = bucket
            return verdict
        }
    }

}

extension CatalogStore {
    /// Runs `command` as the API does (`Catalog`, `IdentityKeyStore`): a
    /// failure becomes its error envelope.
    func run(_ command: CatalogCommand) throws(APIError) -> (outcome: CatalogOutcome, ticket: CommitTicket) {
        do throws(CatalogChangeFailure) {
            return try execute(command)
        } catch {
            throw APIError(error)
        }
    }
}

extension APIError {
    package static let appNotFound = APIError(CatalogRejection.appNotFound)

    /// The error envelope of a catalog rejection.
    package init(_ rejection: CatalogRejection) {
        self.init(status: rejection.httpStatus, code: rejection.code, message: rejection.message)
    }

    /// The error envelope of a catalog change not made.
    package init(_ failure: CatalogChangeFailure) {
        switch failure {
        case .rejected(let rejection): self.init(rejection)
        case .logUnavailable: self = .logUnavailable
        case .notLeader: self = .notLeader
        }
    }
}

/// When a key was last used, in memory, and what of it the log holds.
package struct KeyUsage: Sendable {
    /// A key's use is logged at most once per this interval (one minute): the
    /// granularity of `last_used_at` across a crash (decision 0053).
    package static let persistIntervalMilliseconds: Int64 = 60_000

    /// The latest use (wall clock, milliseconds).
    var lastUsed: Int64
    /// When a use was last logged (nil: never in this run).
    var logged: Int64?
    /// The use that record carried (`flushKeyUsage` logs only what moved since).
    var loggedAtUse: Int64?
}

/// A token bucket: `perSecond` requests each second with a burst of one
/// second's worth.
package struct TokenBucket: Sendable {
    private let perSecond: Int
    private var tokens: Double
    private var lastRefillNanoseconds: UInt64

    package init(perSecond: Int, now: UInt64) {
        precondition(perSecond > 0, "a rate limit must be positive, got \(perSecond)")
        self.perSecond = perSecond
        self.tokens = Double(perSecond)
        self.lastRefillNanoseconds = now
    }

    /// Takes a token. Returns nil when one was available, else whole seconds to wait (≥ 1).
    package mutating func take(now: UInt64) -> Int? {
        if now > lastRefillNanoseconds {
            let elapsedSeconds = Double(now - lastRefillNanoseconds) / 1e9
            tokens = min(Double(perSecond), tokens + elapsedSeconds * Double(perSecond))
            lastRefillNanoseconds = now
        }
        if tokens >= 1 {
            tokens -= 1
            return nil
        }
        let secondsToOne = (1 - tokens) / Double(perSecond)
        return max(1, Int(secondsToOne.rounded(.up)))
    }
}

/// Mints keys and key ids from the CSPRNG.
package enum KeyMinting {
    /// Random bytes in a key: 192 bits.
    package static let keyRandomBytes = 24

    /// Returns a new key: a readable prefix (`sk_live_`, `mk_test_`, …) and 48 hex digits.
    package static func newKey(kind: KeyKind, mode: AppMode) -> String {
        let prefix = (kind == .secret ? "sk_" : "mk_") + mode.name + "_"
        return prefix + Hex.encode(Crypto.randomBytes(keyRandomBytes))
    }

    /// Returns a new public key id, `key_` + 16 hex digits.
    package static func newKeyID() -> String {
        "key_" + Hex.encode(Crypto.randomBytes(8))
    }
}
