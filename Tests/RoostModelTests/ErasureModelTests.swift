import Testing

@testable import RoostModel

/// Erasure erases everywhere (issue 24, deliverable 5): a `DELETE
/// /v1/people/{id}` leaves nothing of the person in remembered idempotency
/// answers (M-5) or in the history of devices that moved away from them
/// (L-1), and replaying the log (a restart, a follower) reaches the same state.
@Suite("Erasure erases everywhere: remembered answers and moved devices' histories")
struct ErasureModelTests {
    static let owner = IdempotencyOwner("key_0123456789abcdef")

    static func tag(_ key: String, digest: UInt8, at now: Timestamp) -> IdempotencyTag {
        IdempotencyTag(
            owner: owner, key: IdempotencyKey(key[...])!, digest: RequestDigest(Array(repeating: digest, count: 32)),
            at: now)
    }

    /// Whether anything in `value`'s description spells `name`.
    static func names(_ value: Any, _ name: String) -> Bool {
        String(describing: value).contains(name)
    }

    @Test("M-5: after erasure a replayed key answers 410 person_erased, names nobody, and applies nothing")
    func replayAfterErasure() throws {
        var harness = Harness()
        let register = Command.register(
            request(apnsToken(1)) {
                $0.externalID = .set(person("erased_ada"))
                $0.installationID = installation("ada-install")
            }, at: harness.now)
        let registerTag = Self.tag("register-1", digest: 1, at: harness.now)
        let first = harness.execute(.idempotent(registerTag, register))
        guard case .registered = first.outcome else { Issue.record("\(first.outcome)"); return }
        let putTag = Self.tag("put-1", digest: 2, at: harness.now)
        _ = harness.execute(.idempotent(putTag, .putPerson(person("erased_ada"), at: harness.now)))
        // Someone else's answer stays as it was.
        let otherTag = Self.tag("other-1", digest: 3, at: harness.now)
        let other = harness.execute(
            .idempotent(
                otherTag, .register(request(apnsToken(2)) { $0.externalID = .set(person("bob")) }, at: harness.now)))

        _ = harness.execute(.erasePerson(person("erased_ada"), at: harness.now))
        let before = harness.index.snapshotMutations()
        for (tag, command) in [(registerTag, register), (putTag, .putPerson(person("erased_ada"), at: harness.now))] {
            let replay = harness.execute(.idempotent(tag, command))
            #expect(replay.mutations.isEmpty)
            guard case .replayed(let answer) = replay.outcome else { Issue.record("\(replay.outcome)"); continue }
            #expect(rejection(answer)?.code == "person_erased", "\(answer)")
            #expect(!Self.names(answer, "erased_ada") && !Self.names(answer, "ada-install"))
        }
        #expect(harness.index.snapshotMutations() == before, "a replay after erasure applied something")
        #expect(harness.index.person(person("erased_ada")) == nil)
        #expect(!Self.names(harness.index.snapshotMutations(), "erased_ada"), "the snapshot still names the person")
        // The same key for another request is still a reuse.
        let reused = harness.execute(.idempotent(Self.tag("register-1", digest: 9, at: harness.now), register))
        guard case .idempotencyKeyReused = reused.outcome else { Issue.record("\(reused.outcome)"); return }
        let otherReplay = harness.execute(.idempotent(otherTag, .stats))
        guard case .replayed(let otherAnswer) = otherReplay.outcome else {
            Issue.record("\(otherReplay.outcome)"); return
        }
        guard case .registered(let replayedOther) = otherAnswer, case .registered(let firstOther) = other.outcome else {
            Issue.record("\(otherAnswer)")
            return
        }
        #expect(replayedOther.device == firstOther.device, "another person's answer is kept")
        try harness.verify()
    }

    @Test("M-5: an identity token's minted answer naming the user is redacted too; other answers are kept")
    func mintedAnswerRedacted() throws {
        var harness = Harness()
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("user_7")) })
        let body = Array(#"{"principal":"user:user_7","identity_token":"rit3.x","expires_at":"y"}"#.utf8)
        let mint = Self.tag("mint-1", digest: 4, at: harness.now)
        _ = harness.execute(.idempotent(mint, .answer(status: 201, body: body)))
        let otherBody = Array(#"{"principal":"user:user_70","identity_token":"rit3.z","expires_at":"y"}"#.utf8)
        let otherMint = Self.tag("mint-2", digest: 5, at: harness.now)
        _ = harness.execute(.idempotent(otherMint, .answer(status: 201, body: otherBody)))

        _ = harness.execute(.erasePerson(person("user_7"), at: harness.now))
        let replay = harness.execute(.idempotent(mint, .answer(status: 201, body: body)))
        guard case .replayed(let answer) = replay.outcome else { Issue.record("\(replay.outcome)"); return }
        #expect(rejection(answer)?.code == "person_erased", "\(answer)")
        let kept = harness.execute(.idempotent(otherMint, .answer(status: 201, body: otherBody)))
        guard case .replayed(.answered(201, otherBody)) = kept.outcome else { Issue.record("\(kept.outcome)"); return }
        try harness.verify()
    }

    @Test("L-1: a device that moved away before the erasure no longer names the person in its history")
    func movedDeviceHistoryScrubbed() throws {
        var harness = Harness()
        let device = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("erased_eve")) })
            .device
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.tags = .merge(["plan": .bool(true)]) })
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("bob")) })
        let unbound = try harness.mustRegister(request(apnsToken(2)) { $0.externalID = .set(person("erased_eve")) })
            .device
        _ = try harness.mustRegister(request(apnsToken(2)) { $0.externalID = .clear })
        _ = try harness.mustRegister(request(apnsToken(3)) { $0.externalID = .set(person("erased_eve")) })
        let historyBefore = try #require(harness.index.history(device.id))

        _ = harness.execute(.erasePerson(person("erased_eve"), at: harness.now))
        let history = try #require(harness.index.history(device.id))
        #expect(!Self.names(history, "erased_eve"), "\(history)")
        #expect(history.map(\.kind) == historyBefore.map(\.kind), "the events stay, without the person")
        #expect(history.map(\.at) == historyBefore.map(\.at))
        #expect(history.first?.externalID == person("bob"))
        let unboundHistory = try #require(harness.index.history(unbound.id))
        #expect(!Self.names(unboundHistory, "erased_eve"), "\(unboundHistory)")
        #expect(!Self.names(harness.index.snapshotMutations(), "erased_eve"))
        // Later events of the moved device are recorded after the scrubbed ones.
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("carol")) })
        #expect(harness.index.history(device.id)?.first?.previousExternalID == person("bob"))
        try harness.verify()
    }

    @Test("L-1: replaying the log from any point over the final state (a fuzzy snapshot) converges to it")
    func fuzzyReplayConverges() throws {
        var harness = Harness()
        let device = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("erased_eve")) })
            .device
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("bob")) })
        _ = harness.execute(.erasePerson(person("erased_eve"), at: harness.now))
        // The same external id comes back and the device moves through it again.
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("erased_eve")) })
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("bob")) })
        let final = harness.index.snapshotMutations()
        #expect(harness.index.history(device.id)?.contains { $0.previousExternalID == person("erased_eve") } == true)
        for start in 0...harness.log.count {
            var replayed = AppIndex(appID: testApp, mode: harness.index.mode)
            try replayed.apply(final)
            try replayed.apply(Array(harness.log[start...]))
            #expect(replayed.snapshotMutations() == final, "replay from record \(start) differs")
            #expect(replayed.invariantViolations() == [])
        }
        try harness.verify()
    }

    @Test("M-5: a token issued before the erasure is refused (also rit2, without an issue time); later tokens pass")
    func tokensIssuedBeforeErasureRefused() throws {
        var harness = Harness()
        let owner = person("erased_tom")
        let issued = harness.now
        let phone = request(apnsToken(1)) { $0.installationID = installation("phone") }
        let made = harness.execute(.registerForPrincipal(phone, owner: owner, at: harness.now, tokenIssuedAt: issued))
        guard case .registered = made.outcome else { Issue.record("\(made.outcome)"); return }
        let bystander = harness.execute(
            .registerForPrincipal(
                request(apnsToken(2)) { $0.installationID = installation("b") }, owner: person("bob"),
                at: harness.now, tokenIssuedAt: nil))
        guard case .registered = bystander.outcome else { Issue.record("\(bystander.outcome)"); return }
        let erasedAt = harness.now
        _ = harness.execute(.erasePerson(owner, at: erasedAt))

        for issuedAt in [issued, erasedAt, nil] as [Timestamp?] {
            let again = harness.execute(
                .registerForPrincipal(phone, owner: owner, at: harness.now, tokenIssuedAt: issuedAt))
            #expect(rejection(again.outcome) == .identityTokenRevoked, "issued at \(String(describing: issuedAt))")
            let delete = harness.execute(
                .deletePrincipalDevice(installation("phone"), owner: owner, tokenIssuedAt: issuedAt))
            #expect(rejection(delete.outcome) == .identityTokenRevoked)
        }
        #expect(harness.index.person(owner) == nil, "the refused token re-created nobody")
        #expect(OutcomeCodec.encode(.rejected(.identityTokenRevoked)) == nil, "a refused token is never remembered")
        // Another person's tokens, even rit2 ones, are untouched.
        let other = harness.execute(
            .registerForPrincipal(
                request(apnsToken(2)) { $0.installationID = installation("b") }, owner: person("bob"),
                at: harness.now, tokenIssuedAt: nil))
        guard case .registered = other.outcome else { Issue.record("\(other.outcome)"); return }
        // A token issued after the erasure makes the person anew; the old one stays refused.
        let fresh = Timestamp(millisecondsSinceEpoch: erasedAt.millisecondsSinceEpoch + 1)
        let recreated = harness.execute(
            .registerForPrincipal(phone, owner: owner, at: harness.now, tokenIssuedAt: fresh))
        guard case .registered = recreated.outcome else { Issue.record("\(recreated.outcome)"); return }
        let old = harness.execute(.registerForPrincipal(phone, owner: owner, at: harness.now, tokenIssuedAt: issued))
        #expect(rejection(old.outcome) == .identityTokenRevoked, "a re-created person does not revive old tokens")
        try harness.verify()
        #expect(!Self.names(harness.index.erasures.snapshotMutations(), "erased_tom"), "marks hold a digest")
    }

    @Test("erasure marks count for 30 days before the newest mark, whatever order they are applied in")
    func marksExpire() {
        let day: Int64 = 24 * 60 * 60 * 1000
        let start: Int64 = 1_789_912_931_000
        let first = ErasureMark(
            digest: ErasureMark.digest(of: person("a")), at: Timestamp(millisecondsSinceEpoch: start))
        let later = ErasureMark(
            digest: ErasureMark.digest(of: person("b")), at: Timestamp(millisecondsSinceEpoch: start + 29 * day))
        let last = ErasureMark(
            digest: ErasureMark.digest(of: person("c")), at: Timestamp(millisecondsSinceEpoch: start + 30 * day))
        var inOrder = ErasureMarks()
        inOrder.apply(first)
        inOrder.apply(later)
        #expect(inOrder.erasedAt(person("a")) == first.at)
        inOrder.apply(last)
        #expect(inOrder.erasedAt(person("a")) == nil, "30 days before the newest mark: no token can be that old")
        #expect(inOrder.erasedAt(person("b")) == later.at)
        var reversed = ErasureMarks()
        for mark in [last, later, first, first] { reversed.apply(mark) }
        #expect(reversed.snapshotMutations() == inOrder.snapshotMutations())
        #expect(!inOrder.revokes(owner: person("z"), issuedAt: nil), "never erased: even a rit2 token passes")
    }

    @Test("the byte search finds a needle anywhere, and nothing that is only a prefix of it")
    func byteSearch() {
        let hay = Array("abcabd".utf8)
        #expect(ByteSearch.contains(hay, Array("abd".utf8)))
        #expect(ByteSearch.contains(hay, Array("abc".utf8)))
        #expect(!ByteSearch.contains(hay, Array("abe".utf8)))
        #expect(!ByteSearch.contains(hay, Array("abcabdx".utf8)))
        #expect(ByteSearch.contains(hay, []))
        #expect(!ByteSearch.contains([], Array("a".utf8)))
        #expect(JSONText.quoted("a\"b\\c\n\u{01}é") == Array(#""a\"b\\c\n\u0001é""#.utf8))
    }

    @Test("a one-letter external id redacts only the answers that name it, not every answer holding the letter")
    func shortIDsDoNotOverRedact() throws {
        var harness = Harness()
        let tag = Self.tag("a-1", digest: 1, at: harness.now)
        let kept = harness.execute(
            .idempotent(tag, .register(request(apnsToken(1)) { $0.externalID = .set(person("ab")) }, at: harness.now)))
        _ = try harness.mustRegister(request(apnsToken(2)) { $0.externalID = .set(person("a")) })
        _ = harness.execute(.erasePerson(person("a"), at: harness.now))
        let replay = harness.execute(.idempotent(tag, .stats))
        guard case .replayed(.registered(let answer)) = replay.outcome, case .registered(let first) = kept.outcome
        else {
            Issue.record("\(replay.outcome)")
            return
        }
        #expect(answer.device == first.device)
        try harness.verify()
    }
}
