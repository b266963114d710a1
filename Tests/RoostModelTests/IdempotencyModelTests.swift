import Testing

@testable import RoostModel

/// Remembered answers in the model (spec §7): the outcome codec, mutation
/// kinds 9 and 10, replay and snapshots, expiry and the bounds.
@Suite("Remembered answers: codec, replay, bounds")
struct IdempotencyModelTests {
    static let owner = IdempotencyOwner("key_0123456789abcdef")

    static func tag(_ key: String, digest: UInt8 = 1, at milliseconds: Int64 = 1_789_912_931_000) -> IdempotencyTag {
        IdempotencyTag(
            owner: owner, key: IdempotencyKey(key[...])!, digest: RequestDigest(Array(repeating: digest, count: 32)),
            at: Timestamp(millisecondsSinceEpoch: milliseconds))
    }

    static func register(_ n: UInt64, _ harness: inout Harness) throws -> RegisterOutcome {
        try harness.mustRegister(RegisterRequest(token: apnsToken(n)))
    }

    @Test("every write outcome survives the codec; reads are never encoded")
    func outcomeRoundTrip() throws {
        var harness = Harness()
        var first = try IdempotencyModelTests.register(1, &harness)
        first.mutations = []
        let device = first.device
        let outcomes: [Outcome] = [
            .registered(first), .device(device), .deleted(true), .deleted(false),
            .removed(deleted: true, devicesRemoved: 3), .feedback(.invalidated(device.id)),
            .feedback(.alreadyInvalidated(device.id)), .feedback(.stale(device.id)), .feedback(.unknownToken),
            .personPut(Person(externalID: try ExternalID("p"), createdAt: device.createdAt), created: true),
            .credential(
                try APNsCredential(
                    key: CredentialKey(bundleID: try BundleID("com.example"), environment: .production), teamID: "T",
                    keyID: "K")),
            .deregistered(removed: true, tokensRemoved: 1), .rejected(.unknownIdentity),
            .rejected(.missingField("token")), .rejected(.deviceIdentityConflict(field: "device_id")),
            .batch([.registered(first), .rejected(.invalidTags)]),
            .imported(ImportBatch(created: 1, updated: 2, rejected: [ImportRejection(line: 3, code: "x")])),
            .answered(status: 201, body: Array(#"{"a":1}"#.utf8)),
        ]
        for outcome in outcomes {
            let encoded = try #require(OutcomeCodec.encode(outcome), "\(outcome)")
            let decoded = try OutcomeCodec.decode(encoded)
            #expect(OutcomeCodec.encode(decoded) == encoded, "\(outcome)")
            #expect(String(describing: decoded) == String(describing: outcome))
        }
        for read in [Outcome.stats(harness.index.stats()), .notRemembered, .idempotencyKeyReused] {
            #expect(OutcomeCodec.encode(read) == nil)
        }
        #expect(OutcomeCodec.encode(.batch([.batch([])])) == nil, "batches do not nest")
    }

    @Test("every rejection is rebuilt from its code and field")
    func rejectionsRoundTrip() {
        let all: [RegistryRejection] = [
            .missingField("a"), .invalidPlatform, .invalidEnvironment, .invalidTokenFormat, .unsupportedTokenType,
            .invalidField("b"), .invalidTags, .tagsTooLarge, .unknownIdentity, .credentialNotFound,
            .deviceIdentityConflict(field: "c"), .installationProofRequired, .deviceNotFound, .personNotFound,
            .staleRegistration(stored: 0), .staleRegistration(stored: Limits.clientSequenceMax),
            .preconditionFailed(currentVersion: 1), .preconditionFailed(currentVersion: UInt32.max),
            .alreadyTaken(field: "id"), .alreadyTaken(field: "token"), .personDeviceLimit,
        ]
        for rejection in all {
            #expect(RegistryRejection(code: rejection.code, associatedField: rejection.associatedField) == rejection)
        }
        #expect(RegistryRejection(code: "no_such_code", associatedField: nil) == nil)
        #expect(RegistryRejection(code: "stale_registration", associatedField: "x") == nil)
        #expect(RegistryRejection(code: "precondition_failed", associatedField: "0") == nil)
        // A 429 is never remembered: the retry is tried again.
        #expect(OutcomeCodec.encode(.rejected(.tokenRateLimited(retryAfterSeconds: 3))) == nil)
    }

    @Test("damaged outcome bytes throw, never trap", arguments: [[], [2], [1, 99], [1, 3, 2], [1, 3, 1, 0]])
    func damagedOutcomes(bytes: [UInt8]) {
        #expect(throws: ByteDecodingError.self) { try OutcomeCodec.decode(bytes) }
    }

    @Test("a remembered answer logs as parts then a seal (kinds 9 and 10) and replays to the same table")
    func logAndReplay() throws {
        var harness = Harness()
        // A batch answer larger than one part.
        let requests = (0..<150).map { RegisterRequest(token: apnsToken(UInt64($0))) }
        let (outcome, mutations) = harness.index.execute(
            .idempotent(IdempotencyModelTests.tag("b"), .registerBatch(requests, at: harness.now)))
        guard case .batch(let items) = outcome else { Issue.record("\(outcome)"); return }
        #expect(items.count == 150)
        let parts = mutations.filter { if case .rememberedAnswerPart = $0 { true } else { false } }
        #expect(parts.count >= 2)
        guard case .rememberedAnswer(let seal)? = mutations.last else { Issue.record("no seal last"); return }
        #expect(seal.byteCount > IdempotencyLimits.partBytesMax)
        for mutation in mutations where mutation.isRemembered {
            let bytes = MutationCodec.encode(mutation)
            #expect(bytes.count <= Limits.mutationBytesMax)
            #expect([9, 10].contains(bytes[1]))
            #expect(try MutationCodec.decode(bytes) == mutation)
        }
        var replayed = AppIndex(appID: testApp, mode: .live)
        try replayed.apply(mutations.map { try MutationCodec.decode(MutationCodec.encode($0)) })
        #expect(replayed.snapshotMutations() == harness.index.snapshotMutations())
        // The replayed index answers the retry as the first did.
        let (again, none) = replayed.execute(
            .idempotent(IdempotencyModelTests.tag("b"), .registerBatch(requests, at: harness.now)))
        #expect(none.isEmpty)
        guard case .replayed(let first) = again else { Issue.record("\(again)"); return }
        #expect(OutcomeCodec.encode(first) == OutcomeCodec.encode(outcome))
        // And from a snapshot of it.
        var restored = AppIndex(appID: testApp, mode: .live)
        try restored.apply(replayed.snapshotMutations())
        #expect(restored.snapshotMutations() == harness.index.snapshotMutations())
        #expect(restored.remembered.count == 1)
    }

    @Test("an answer both in a fuzzy snapshot's header and in the log after it keeps its place in the queue")
    func fuzzySnapshotDuplicate() throws {
        var live = AppIndex(appID: testApp, mode: .live)
        var logged: [[Mutation]] = []
        for n in 0..<3 {
            let (_, mutations) = live.execute(
                .idempotent(
                    IdempotencyModelTests.tag("f\(n)"),
                    .putPerson(try ExternalID("p\(n)"), at: Timestamp(millisecondsSinceEpoch: 1_789_912_931_000))))
            logged.append(mutations)
        }
        // The header was taken after the first answer's record, which the log replays again.
        var restored = AppIndex(appID: testApp, mode: .live)
        try restored.apply(live.snapshotMutations())
        try restored.apply(logged[0])
        #expect(restored.snapshotMutations() == live.snapshotMutations())
    }

    @Test("a seal without its parts is damage, not a silent loss")
    func sealWithoutParts() throws {
        var index = AppIndex(appID: testApp, mode: .live)
        let tag = IdempotencyModelTests.tag("s")
        let seal = RememberedAnswerSeal(owner: tag.owner, key: tag.key, digest: tag.digest, at: tag.at, byteCount: 3)
        #expect(throws: MutationApplyError.incompleteAnswer) { try index.apply(.rememberedAnswer(seal)) }
        try index.apply(.rememberedAnswerPart(owner: tag.owner, key: tag.key, bytes: [1, 3]))
        #expect(throws: MutationApplyError.incompleteAnswer) { try index.apply(.rememberedAnswer(seal)) }
        // An unsealed part (a torn tail's) is dropped by the next answer's parts.
        let other = IdempotencyModelTests.tag("t")
        try index.apply(.rememberedAnswerPart(owner: other.owner, key: other.key, bytes: [1, 3, 1]))
        let good = RememberedAnswerSeal(
            owner: other.owner, key: other.key, digest: other.digest, at: other.at, byteCount: 3)
        try index.apply(.rememberedAnswer(good))
        #expect(index.remembered.count == 1)
    }

    @Test("answers expire after 24 hours; at the count bound the oldest is forgotten first")
    func expiryAndBounds() {
        var answers = RememberedAnswers()
        let start: Int64 = 1_789_912_931_000
        func name(_ n: Int) -> RememberedAnswers.Name {
            RememberedAnswers.Name(owner: IdempotencyModelTests.owner, key: IdempotencyKey("k\(n)"[...])!)
        }
        let digest = RequestDigest(Array(repeating: 7, count: 32))
        answers.remember(name(0), digest: digest, at: Timestamp(millisecondsSinceEpoch: start), encoded: [1, 3, 1])
        let day = IdempotencyLimits.retentionMilliseconds
        #expect(answers.lookup(name(0), at: Timestamp(millisecondsSinceEpoch: start + day - 1)) != nil)
        #expect(answers.lookup(name(0), at: Timestamp(millisecondsSinceEpoch: start + day)) == nil)
        // A newer answer forgets the expired one for good.
        answers.remember(
            name(1), digest: digest, at: Timestamp(millisecondsSinceEpoch: start + day), encoded: [1, 3, 0])
        #expect(answers.count == 1)
        for n in 2...(IdempotencyLimits.answersPerIndexMax + 1) {
            answers.remember(
                name(n), digest: digest, at: Timestamp(millisecondsSinceEpoch: start + day + 1), encoded: [1, 3, 0])
        }
        #expect(answers.count == IdempotencyLimits.answersPerIndexMax)
        let now = Timestamp(millisecondsSinceEpoch: start + day + 1)
        #expect(answers.lookup(name(1), at: now) == nil, "the oldest went first")
        #expect(answers.lookup(name(2), at: now) != nil)
        #expect(answers.byteCount == answers.count * (3 + IdempotencyLimits.entryOverheadBytes))
    }

    @Test("at the byte bound the oldest answers are forgotten; the largest batch answer always fits")
    func byteBound() {
        var answers = RememberedAnswers()
        let digest = RequestDigest(Array(repeating: 7, count: 32))
        let big = [UInt8](repeating: 0, count: IdempotencyLimits.bytesPerIndexMax / 3)
        for n in 0..<4 {
            answers.remember(
                RememberedAnswers.Name(owner: IdempotencyModelTests.owner, key: IdempotencyKey("b\(n)"[...])!),
                digest: digest, at: Timestamp(millisecondsSinceEpoch: 1_789_912_931_000), encoded: big)
        }
        #expect(answers.count == 2)
        #expect(answers.byteCount <= IdempotencyLimits.bytesPerIndexMax)
        #expect(
            IdempotencyLimits.answerBytesMax + IdempotencyLimits.entryOverheadBytes
                <= IdempotencyLimits.bytesPerIndexMax)
    }

    @Test("keys: 1 to 200 visible ASCII characters")
    func keyShape() {
        #expect(IdempotencyKey(String(repeating: "a", count: 200)[...]) != nil)
        #expect(IdempotencyKey(String(repeating: "a", count: 201)[...]) == nil)
        #expect(IdempotencyKey(""[...]) == nil)
        #expect(IdempotencyKey("a b"[...]) == nil)
        #expect(IdempotencyKey("\u{7f}"[...]) == nil)
        #expect(IdempotencyKey("é"[...]) == nil)
        #expect(IdempotencyKey("!~"[...]) != nil)
    }
}

extension Mutation {
    fileprivate var isRemembered: Bool {
        switch self {
        case .rememberedAnswerPart, .rememberedAnswer: true
        default: false
        }
    }
}
