import RoostCrypto

/// Erasure erases everywhere (spec §10, issue 24 M-5 and L-1,
/// docs/decisions/0079-erasure-erases-everywhere.md). Everything in an index
/// that stores an external id registers here, and `DELETE
/// /v1/people/{external_id}` scrubs it through logged after-images, so that a
/// restart, a follower and a fuzzy snapshot plus its log reach the same state:
///
/// - remembered idempotency answers that name the person are replaced, in
///   place, by 410 `person_erased` (mutation kinds 9 and 10);
/// - history events of devices that moved away from the person lose the
///   person's id (kind 23, `historyRedaction`);
/// - an erasure mark (kind 22) makes every identity token issued to the
///   person before the erasure refuse (401), for as long as such a token
///   can live.
package enum ErasureLimits {
    /// How long an erasure mark is kept: the longest identity token lifetime
    /// (30 days). A token issued before the erasure has expired by then.
    /// The API asserts its lifetimes fit (`IdentityToken.lifetimeSecondsRange`).
    package static let markRetentionMilliseconds: Int64 = 30 * 24 * 60 * 60 * 1000
}

/// An erased person as the index keeps it for refusing their old identity
/// tokens: SHA-256 of the external id (never the id itself) and the
/// erasure's time.
package struct ErasureMark: Hashable, Sendable {
    package static let digestBytes = 32
    package var digest: [UInt8]
    package var at: Timestamp

    package init(digest: [UInt8], at: Timestamp) {
        precondition(digest.count == Self.digestBytes, "an erasure mark digest of \(digest.count) bytes")
        self.digest = digest
        self.at = at
    }

    /// The digest a mark holds for `externalID`: SHA-256 of its UTF-8.
    package static func digest(of externalID: ExternalID) -> [UInt8] {
        Crypto.sha256(Array(externalID.rawValue.utf8))
    }
}

/// The erasure marks of one index (`ErasureMark`): by digest, the latest
/// erasure's time. Marks older than `ErasureLimits.markRetentionMilliseconds`
/// before the newest mark no longer count and are dropped now and then;
/// what counts depends only on the marks applied, never on the order or the
/// time they were applied, so replay (also over a fuzzy snapshot) agrees.
package struct ErasureMarks: Sendable {
    private var marks: [[UInt8]: Timestamp] = [:]
    private var newest: Timestamp? = nil
    private var countAtLastPrune = 0

    package init() {}

    /// Records a mark (live and replay alike). Amortized O(1).
    package mutating func apply(_ mark: ErasureMark) {
        if marks[mark.digest].map({ $0 < mark.at }) ?? true { marks[mark.digest] = mark.at }
        if newest.map({ mark.at > $0 }) ?? true { newest = mark.at }
        if marks.count > 2 * max(countAtLastPrune, 512) { prune() }
    }

    /// The time `externalID` was last erased, among marks that count; nil
    /// when none does. O(external id bytes).
    package func erasedAt(_ externalID: ExternalID) -> Timestamp? {
        guard let at = marks[ErasureMark.digest(of: externalID)], counts(at) else { return nil }
        return at
    }

    /// Whether an identity token for `owner` issued at `issuedAt` (nil: a
    /// token of a format without it, issued before any mark) was issued
    /// before `owner` was last erased.
    package func revokes(owner: ExternalID, issuedAt: Timestamp?) -> Bool {
        guard let erasedAt = erasedAt(owner) else { return false }
        guard let issuedAt else { return true }
        return issuedAt <= erasedAt
    }

    /// The marks that count, by digest: a snapshot's copy. O(marks log marks).
    package func snapshotMutations() -> [Mutation] {
        marks.filter { counts($0.value) }.sorted { $0.key.lexicographicallyPrecedes($1.key) }
            .map { .erasureMark(ErasureMark(digest: $0.key, at: $0.value)) }
    }

    private func counts(_ at: Timestamp) -> Bool {
        guard let newest else { return false }
        return newest.millisecondsSinceEpoch - at.millisecondsSinceEpoch < ErasureLimits.markRetentionMilliseconds
    }

    private mutating func prune() {
        marks = marks.filter { counts($0.value) }
        countAtLastPrune = marks.count
    }
}

extension AppIndex {
    /// `DELETE /v1/people/{external_id}` in full: the person and their
    /// devices (`DeviceStore.erasePerson`), then every other place that
    /// names them (decision 0079): remembered answers, moved devices'
    /// histories, and a mark that refuses their older identity tokens.
    /// The scrub is applied through `apply`, the function replay uses, so
    /// the live state is the replayed state by construction. An unknown
    /// person still has their traces scrubbed (a device may have moved
    /// away from a person since forgotten), but gets no mark.
    /// O(devices of the person + remembered bytes + history events).
    package mutating func erasePersonEverywhere(
        _ externalID: ExternalID, at now: Timestamp
    ) -> (removal: Removal?, mutations: [Mutation]) {
        var removal: Removal? = nil
        var mutations: [Mutation] = []
        if case .success(let removed) = erasePerson(externalID) {
            removal = removed
            mutations = removed.mutations
        }
        var scrub: [Mutation] = []
        let redacted = OutcomeCodec.encode(.rejected(.personErased))
        guard let redacted else { preconditionFailure("person_erased is not encodable") }
        for answer in remembered.names(naming: externalID) {
            scrub += RememberedAnswers.mutations(answer.name, digest: answer.digest, at: answer.at, encoded: redacted)
        }
        scrub += store.historyRedactions(naming: externalID)
        if removal != nil {
            scrub.append(.erasureMark(ErasureMark(digest: ErasureMark.digest(of: externalID), at: now)))
        }
        do throws(MutationApplyError) {
            try apply(scrub)
        } catch {
            preconditionFailure("an erasure's own scrub does not apply: \(error)")
        }
        return (removal, mutations + scrub)
    }

    /// Whether an identity token for `owner` issued at `issuedAt` was issued
    /// before `owner` was erased (decision 0079): such a token is refused.
    package func identityTokenRevoked(owner: ExternalID, issuedAt: Timestamp?) -> Bool {
        erasures.revokes(owner: owner, issuedAt: issuedAt)
    }
}
