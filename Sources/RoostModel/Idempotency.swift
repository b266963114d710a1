/// Idempotency keys (spec §7): an answer remembered per (API key, key) for
/// 24 hours, so that a retried write gets the first answer and applies
/// nothing. The remembered answers of an (app, mode) live in its `AppIndex`,
/// are logged in the same append as the write they answer (two mutation
/// kinds: `rememberedAnswerPart`, `rememberedAnswer`) and are carried by
/// snapshots: the write and its answer are durable together or not at all.
/// docs/decisions/0050-batches-and-idempotency.md.
package enum IdempotencyLimits {
    /// How long an answer is remembered (spec §7: 24 hours), counted from the
    /// first request's time.
    package static let retentionMilliseconds: Int64 = 24 * 60 * 60 * 1000
    /// The longest `Idempotency-Key` (spec §7: 1 to 200 visible ASCII characters).
    package static let keyCharactersMax = 200
    /// The longest owner name (an API key id, or an identity token's minting
    /// key id and principal: `key_…` + 1 + `user:` + 256).
    package static let ownerBytesMax = 512
    /// Remembered answers per (app, mode) index. At the bound the oldest is
    /// forgotten first (before its 24 hours): writes are never refused for
    /// want of room (decision 0050).
    package static let answersPerIndexMax = 100_000
    /// Bytes of remembered answers per index (encoded outcomes plus
    /// `entryOverheadBytes` each); same rule at the bound. Above the largest
    /// single answer (a 1,000-item batch, ≤ 1,000 × `Limits.mutationBytesMax`),
    /// so that every answer can be remembered.
    package static let bytesPerIndexMax = 32 * 1024 * 1024
    /// The largest remembered answer: a batch of 1,000 devices at the largest
    /// device record each, plus its framing.
    package static let answerBytesMax = 1_000 * (Limits.mutationBytesMax + 16) + 64
    /// What one remembered answer costs besides its encoded outcome (owner,
    /// key, digest, dictionary and queue entries), for the byte budget.
    package static let entryOverheadBytes = 160
    /// Bytes of encoded outcome per `rememberedAnswerPart` mutation: with
    /// the owner and key the record stays under `Limits.mutationBytesMax`.
    package static let partBytesMax = 12 * 1024
}

/// Who an answer is remembered for: an API key id, or for an identity token
/// its minting key id and `p` + SHA-256 of its principal in hex (two users of
/// one mobile key never share answers; decision 0079: no external id is
/// stored in the name; releases before it wrote the principal itself, which
/// erasure still recognizes). docs/decisions/0050. Compared as Unicode scalars
/// (`ExactText`): a principal's external id spelled NFC and one spelled NFD
/// are two users, who must never be answered each other's remembered answers.
package struct IdempotencyOwner: Hashable, Sendable, Comparable {
    package let rawValue: String

    package init(_ rawValue: String) {
        precondition(
            !rawValue.isEmpty && rawValue.utf8.count <= IdempotencyLimits.ownerBytesMax,
            "idempotency owner of \(rawValue.utf8.count) bytes")
        self.rawValue = rawValue
    }

    package static func == (lhs: Self, rhs: Self) -> Bool { ExactText.equal(lhs.rawValue, rhs.rawValue) }
    package func hash(into hasher: inout Hasher) { ExactText.hash(rawValue, into: &hasher) }
    package static func < (lhs: Self, rhs: Self) -> Bool { ExactText.precedes(lhs.rawValue, rhs.rawValue) }
}

/// An `Idempotency-Key` header value: 1 to 200 visible ASCII characters
/// (0x21 to 0x7E).
package struct IdempotencyKey: Hashable, Sendable {
    package let rawValue: String

    /// Returns the key `text` spells, or nil when it is empty, longer than
    /// `IdempotencyLimits.keyCharactersMax` or holds anything but visible ASCII.
    package init?(_ text: Substring) {
        let bytes = text.utf8
        guard !bytes.isEmpty, bytes.count <= IdempotencyLimits.keyCharactersMax,
            bytes.allSatisfy({ $0 >= 0x21 && $0 <= 0x7E })
        else { return nil }
        rawValue = String(text)
    }
}

/// SHA-256 of a request's method, path and body: what tells a retry from a
/// reuse of its key for another request.
package struct RequestDigest: Hashable, Sendable {
    package static let byteCount = 32
    package let bytes: [UInt8]

    package init(_ bytes: [UInt8]) {
        precondition(bytes.count == Self.byteCount, "a request digest of \(bytes.count) bytes")
        self.bytes = bytes
    }
}

/// What a `Command.idempotent` carries: whose key, the key, the request's
/// digest and its time (the start of the 24 hours).
package struct IdempotencyTag: Hashable, Sendable {
    package var owner: IdempotencyOwner
    package var key: IdempotencyKey
    package var digest: RequestDigest
    package var at: Timestamp

    package init(owner: IdempotencyOwner, key: IdempotencyKey, digest: RequestDigest, at: Timestamp) {
        self.owner = owner
        self.key = key
        self.digest = digest
        self.at = at
    }

    /// The (owner, key) the answer is remembered under.
    package var name: RememberedAnswers.Name { RememberedAnswers.Name(owner: owner, key: key) }
}

/// The closing mutation of a remembered answer: whose, which key, the first
/// request's digest and time, and the length of the encoded outcome that the
/// `rememberedAnswerPart` mutations before it hold.
package struct RememberedAnswerSeal: Hashable, Sendable {
    package var owner: IdempotencyOwner
    package var key: IdempotencyKey
    package var digest: RequestDigest
    package var at: Timestamp
    package var byteCount: Int
}

/// The remembered answers of one index: a table by (owner, key) and a queue
/// in the order they were remembered, bounded by count and bytes; the
/// oldest go first at a bound, expired ones as soon as a newer answer comes.
/// Expiry and eviction depend only on the answers' own times and order, so
/// replaying the log rebuilds exactly the same table.
package struct RememberedAnswers: Sendable {
    package struct Entry: Sendable {
        package var digest: RequestDigest
        package var at: Timestamp
        package var encoded: [UInt8]
        var serial: UInt64
    }

    package struct Name: Hashable, Sendable {
        package var owner: IdempotencyOwner
        package var key: IdempotencyKey

        package init(owner: IdempotencyOwner, key: IdempotencyKey) {
            self.owner = owner
            self.key = key
        }
    }

    private(set) var entries: [Name: Entry] = [:]
    /// Names in the order remembered, with the serial of the entry they were
    /// queued for (a name remembered again after expiry is queued again).
    private var queue: [(name: Name, serial: UInt64)] = []
    private var queueHead = 0
    private var nextSerial: UInt64 = 0
    package private(set) var byteCount = 0
    /// The parts of an answer being replayed, until its seal.
    private var pending: (name: Name, bytes: [UInt8])?

    package init() {}

    package var count: Int { entries.count }

    /// Returns the unexpired answer remembered for `name` at `now`. O(1).
    package func lookup(_ name: Name, at now: Timestamp) -> Entry? {
        guard let entry = entries[name] else { return nil }
        guard now.millisecondsSinceEpoch - entry.at.millisecondsSinceEpoch < IdempotencyLimits.retentionMilliseconds
        else { return nil }
        return entry
    }

    /// Remembers an answer: forgets answers expired at its time and, oldest
    /// first, as many as the bounds need. Amortized O(1) plus what it forgets.
    package mutating func remember(_ name: Name, digest: RequestDigest, at: Timestamp, encoded: [UInt8]) {
        precondition(encoded.count <= IdempotencyLimits.answerBytesMax, "a remembered answer of \(encoded.count) bytes")
        if let old = entries.removeValue(forKey: name) { byteCount -= Self.cost(old) }
        let entry = Entry(digest: digest, at: at, encoded: encoded, serial: nextSerial)
        nextSerial += 1
        while let oldest = oldestLive() {
            let expired =
                at.millisecondsSinceEpoch - oldest.entry.at.millisecondsSinceEpoch
                >= IdempotencyLimits.retentionMilliseconds
            let full =
                entries.count + 1 > IdempotencyLimits.answersPerIndexMax
                || byteCount + Self.cost(entry) > IdempotencyLimits.bytesPerIndexMax
            guard expired || full else { break }
            entries[oldest.name] = nil
            byteCount -= Self.cost(oldest.entry)
            queueHead += 1
        }
        entries[name] = entry
        byteCount += Self.cost(entry)
        queue.append((name, entry.serial))
        compactQueue()
        precondition(entries.count <= IdempotencyLimits.answersPerIndexMax, "\(entries.count) remembered answers")
        precondition(byteCount <= IdempotencyLimits.bytesPerIndexMax, "\(byteCount) bytes of remembered answers")
    }

    /// The oldest queued entry still remembered (skipping stale queue slots).
    private mutating func oldestLive() -> (name: Name, entry: Entry)? {
        while queueHead < queue.count {
            let (name, serial) = queue[queueHead]
            if let entry = entries[name], entry.serial == serial { return (name, entry) }
            queueHead += 1
        }
        return nil
    }

    private mutating func compactQueue() {
        guard queueHead > 1_024, queueHead * 2 > queue.count else { return }
        queue.removeFirst(queueHead)
        queueHead = 0
    }

    private static func cost(_ entry: Entry) -> Int {
        entry.encoded.count + IdempotencyLimits.entryOverheadBytes
    }

    /// The mutations that log one remembered answer: its parts, then its seal.
    package static func mutations(_ name: Name, digest: RequestDigest, at: Timestamp, encoded: [UInt8]) -> [Mutation] {
        var result: [Mutation] = []
        var start = 0
        repeat {
            let end = min(start + IdempotencyLimits.partBytesMax, encoded.count)
            result.append(.rememberedAnswerPart(owner: name.owner, key: name.key, bytes: Array(encoded[start..<end])))
            start = end
        } while start < encoded.count
        result.append(
            .rememberedAnswer(
                RememberedAnswerSeal(
                    owner: name.owner, key: name.key, digest: digest, at: at, byteCount: encoded.count)))
        return result
    }

    /// The mutations that rebuild every remembered answer, oldest first. O(answers).
    package func snapshotMutations() -> [Mutation] {
        var result: [Mutation] = []
        for (name, serial) in queue[queueHead...] {
            guard let entry = entries[name], entry.serial == serial else { continue }
            result += Self.mutations(name, digest: entry.digest, at: entry.at, encoded: entry.encoded)
        }
        return result
    }

    /// Replays one part: the parts of one answer are consecutive in its
    /// index's records; a part of another answer drops an unsealed one (a
    /// torn tail's).
    mutating func applyPart(_ name: Name, bytes: [UInt8]) throws(MutationApplyError) {
        if var current = pending, current.name == name {
            guard current.bytes.count + bytes.count <= IdempotencyLimits.answerBytesMax else {
                throw .incompleteAnswer
            }
            pending = nil
            current.bytes += bytes
            pending = current
        } else {
            pending = (name, bytes)
        }
    }

    /// Replays a seal: the parts before it become the remembered answer.
    mutating func applySeal(_ seal: RememberedAnswerSeal) throws(MutationApplyError) {
        let name = Name(owner: seal.owner, key: seal.key)
        guard let current = pending, current.name == name, current.bytes.count == seal.byteCount else {
            throw .incompleteAnswer
        }
        pending = nil
        // The same answer again (a fuzzy snapshot's header and the log after
        // its start LSN both hold it), or the same answer redacted by an
        // erasure (decision 0079): its bytes are replaced where it stands.
        // Keeping its place keeps the queue, and so every later eviction,
        // exactly as it was.
        if entries[name]?.digest == seal.digest, entries[name]?.at == seal.at {
            replaceInPlace(name, encoded: current.bytes)
            return
        }
        remember(name, digest: seal.digest, at: seal.at, encoded: current.bytes)
    }

    /// Replaces the encoded outcome of the answer remembered for `name`,
    /// keeping its time, digest and place in the queue. O(its bytes).
    private mutating func replaceInPlace(_ name: Name, encoded: [UInt8]) {
        guard var entry = entries[name] else { preconditionFailure("no remembered answer to replace") }
        guard entry.encoded != encoded else { return }
        precondition(encoded.count <= IdempotencyLimits.answerBytesMax, "a remembered answer of \(encoded.count) bytes")
        byteCount -= Self.cost(entry)
        entry.encoded = encoded
        byteCount += Self.cost(entry)
        entries[name] = entry
        // No bound is asserted here: a redaction only shrinks an answer, and
        // a fuzzy replay that restores an original answer meets the
        // redaction that shrinks it again later in the same log.
    }

    /// The names of the remembered answers that name `externalID`, oldest
    /// first: whose owner is an identity token's principal for them, or whose
    /// outcome shows them (`Outcome.names`). Candidates are found by a byte
    /// search of each encoded outcome (outcomes hold strings as UTF-8, JSON
    /// bodies escaped), and only candidates are decoded. O(remembered bytes).
    package func names(naming externalID: ExternalID) -> [(name: Name, digest: RequestDigest, at: Timestamp)] {
        let raw = Array(externalID.rawValue.utf8)
        let escaped = JSONText.quoted(externalID.rawValue)
        var found: [(name: Name, digest: RequestDigest, at: Timestamp, serial: UInt64)] = []
        for (name, entry) in entries {
            var names =
                IdempotencyOwner.principal(of: name.owner).map { ExactText.equal($0, externalID.rawValue) } ?? false
            if !names, ByteSearch.contains(entry.encoded, raw) || ByteSearch.contains(entry.encoded, escaped) {
                do throws(ByteDecodingError) {
                    names = try OutcomeCodec.decode(entry.encoded).names(externalID)
                } catch {
                    preconditionFailure("a remembered answer does not decode: \(error)")
                }
            }
            if names { found.append((name, entry.digest, entry.at, entry.serial)) }
        }
        return found.sorted { $0.serial < $1.serial }.map { ($0.name, $0.digest, $0.at) }
    }
}

extension IdempotencyOwner {
    /// The person an identity token's owner of a release before decision
    /// 0079 acts for (`key_… user:<id>` → `<id>`, `key_… guest:<hex>` →
    /// `guest:<hex>`); nil for an API key's, and for a newer owner (whose
    /// principal is a digest: it names nobody).
    package static func principal(of owner: IdempotencyOwner) -> String? {
        guard let space = owner.rawValue.firstIndex(of: " ") else { return nil }
        let principal = owner.rawValue[owner.rawValue.index(after: space)...]
        if principal.hasPrefix("user:") { return String(principal.dropFirst(5)) }
        if principal.hasPrefix(ExternalID.guestPrefix) { return String(principal) }
        return nil
    }
}

extension Outcome {
    /// Whether this remembered outcome shows `externalID`: a device bound to
    /// them, the person itself, a batch item that does, or a route's own JSON
    /// answer holding the id as a whole string (an identity token minted
    /// for `user:<id>`). Decision 0079. O(size of the outcome).
    package func names(_ externalID: ExternalID) -> Bool {
        switch self {
        case .registered(let registered): registered.device.externalID == externalID
        case .device(let device): device.externalID == externalID
        case .personPut(let person, _): person.externalID == externalID
        case .batch(let items): items.contains { $0.names(externalID) }
        case .answered(_, let body):
            ByteSearch.contains(body, JSONText.quoted(externalID.rawValue))
                || ByteSearch.contains(body, JSONText.quoted("user:" + externalID.rawValue))
        case .deleted, .removed, .personErased, .feedback, .credential, .deregistered, .rejected, .imported,
            .devicePage, .exportView, .changes, .stats, .inactivePreview, .inactiveInvalidated, .settings,
            .person, .history, .personExport, .peoplePage, .replayed, .idempotencyKeyReused, .notRemembered,
            .custom, .logAcknowledged, .appRemoved:
            false
        }
    }
}

/// Byte-string search for erasure's scans.
enum ByteSearch {
    /// Whether `needle` occurs in `haystack`. O(haystack × needle) worst case,
    /// O(haystack) in practice (the first byte filters).
    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty else { return true }
        guard haystack.count >= needle.count else { return false }
        return haystack.withUnsafeBufferPointer { hay in
            needle.withUnsafeBufferPointer { wanted in
                let first = wanted[0]
                var index = 0
                let last = hay.count - wanted.count
                while index <= last {
                    if hay[index] == first {
                        var matched = 1
                        while matched < wanted.count && hay[index + matched] == wanted[matched] { matched += 1 }
                        if matched == wanted.count { return true }
                    }
                    index += 1
                }
                return false
            }
        }
    }
}

/// A string as RoostJSON's writer spells it in a JSON body (quotes
/// included): `"` and `\` escaped, control characters as short escapes or
/// `\u00xx`, everything else as UTF-8. The model does not link RoostJSON.
enum JSONText {
    static func quoted(_ text: String) -> [UInt8] {
        let hex = Array("0123456789abcdef".utf8)
        var out: [UInt8] = [0x22]
        for byte in text.utf8 {
            switch byte {
            case 0x22: out += [0x5C, 0x22]
            case 0x5C: out += [0x5C, 0x5C]
            case 0x08: out += [0x5C, UInt8(ascii: "b")]
            case 0x0C: out += [0x5C, UInt8(ascii: "f")]
            case 0x0A: out += [0x5C, UInt8(ascii: "n")]
            case 0x0D: out += [0x5C, UInt8(ascii: "r")]
            case 0x09: out += [0x5C, UInt8(ascii: "t")]
            case ..<0x20: out += Array("\\u00".utf8) + [hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            default: out.append(byte)
            }
        }
        out.append(0x22)
        return out
    }
}
