/// Small repeated strings (bundle ids, app versions, time zones, locales,
/// invalidation reasons) stored once per index and referred to by a `UInt32`.
///
/// Reference-counted: an id is freed and reused when the last device using it
/// lets go, so a stream of distinct values does not grow the table forever.
/// Id 0 means "no string". Strings are told apart as Unicode scalars
/// (`ExactText`), so an NFD app version or person is kept as sent, not
/// answered as another device's NFC spelling of it.
struct StringInterner: Sendable {
    /// Chunked so that a snapshot's frozen copy shares it (decision 0054).
    private var strings: ChunkedArray<String?> = {
        var strings = ChunkedArray<String?>(chunkBytes: 64 << 10)
        strings.append(nil)
        return strings
    }()
    private var referenceCounts: [UInt32] = [0]
    private var freeIDs: [UInt32] = []
    private var ids: [InternedText: UInt32] = [:]
    /// Live ids of strings retained lately, by `recentSlot` (0: none): a
    /// device's app version, time zone and locale are mostly the last
    /// devices' too, and a slot that holds the same text is found without
    /// hashing it (three `Hasher` runs and look-ups a new device, ~1,400
    /// instructions: 1.5 % of a registration's; issue 25). A slot is a hit
    /// only when its id's live text is the one retained, so an id freed or
    /// reused since is a miss, and a release leaves the slots alone. Empty
    /// until the first retain (no array for an interner that is never
    /// written, as frozen copies).
    private var recentIDs: [UInt32] = []
    static let recentSlots = 16

    /// Number of distinct live strings.
    var count: Int { ids.count }

    /// Returns the id of `string`, adding one reference.
    mutating func retain(_ string: String) -> UInt32 {
        let slot = Self.recentSlot(of: string)
        if recentIDs.isEmpty { recentIDs = Array(repeating: 0, count: Self.recentSlots) }
        let recent = recentIDs[slot]
        if recent != 0, let kept = strings[Int(recent)], ExactText.equal(kept, string) {
            referenceCounts[Int(recent)] += 1
            return recent
        }
        if let id = ids[InternedText(string)] {
            referenceCounts[Int(id)] += 1
            recentIDs[slot] = id
            return id
        }
        let id: UInt32
        if let reused = freeIDs.popLast() {
            id = reused
            strings[Int(id)] = string
            referenceCounts[Int(id)] = 1
        } else {
            precondition(strings.count < Int(UInt32.max), "interner full")
            id = UInt32(strings.count)
            strings.append(string)
            referenceCounts.append(1)
        }
        ids[InternedText(string)] = id
        recentIDs[slot] = id
        return id
    }

    /// The slot of `recentIDs` a string goes in: its length and its first
    /// and last bytes (no hash to compute; texts that share them share a
    /// slot, and the last one retained keeps it).
    private static func recentSlot(of string: String) -> Int {
        let utf8 = string.utf8
        let count = utf8.count
        guard count > 0 else { return 0 }
        let mixed = count &* 31 &+ Int(utf8[utf8.startIndex]) &* 7 &+ Int(utf8[utf8.index(before: utf8.endIndex)])
        return mixed & (recentSlots - 1)
    }

    /// Returns the id of an optional string (0 for nil), adding one reference.
    mutating func retain(_ string: String?) -> UInt32 {
        guard let string else { return 0 }
        return retain(string)
    }

    /// Drops one reference to `id` (0 is ignored); frees it at zero.
    mutating func release(_ id: UInt32) {
        guard id != 0 else { return }
        let index = Int(id)
        precondition(referenceCounts[index] > 0, "interned id \(id) released more than retained")
        referenceCounts[index] -= 1
        if referenceCounts[index] == 0, let string = strings[index] {
            ids[InternedText(string)] = nil
            strings[index] = nil
            freeIDs.append(id)
        }
    }

    /// Marks the string table as shared with a frozen copy about to be taken. O(chunks).
    mutating func shareChunks(pin: SnapshotPin) { strings.shareChunks(pin: pin) }

    /// Forgets the sharing marks.
    mutating func endSharing() { strings.endSharing() }

    /// A copy that can only read strings by id (`string(_:)`): it shares the
    /// string table and holds neither the lookup dictionary nor the counts.
    func frozenCopy() -> StringInterner {
        var copy = StringInterner()
        copy.strings = strings.frozenCopy()
        copy.referenceCounts = []
        return copy
    }

    /// Returns the id of `string` if it is live, without adding a reference.
    func id(of string: String) -> UInt32? { ids[InternedText(string)] }

    /// Returns the string of `id`, or nil for 0.
    func string(_ id: UInt32) -> String? {
        guard id != 0 else { return nil }
        let value = strings[Int(id)]
        precondition(value != nil, "interned id \(id) is not live")
        return value
    }

    /// Returns the reference count of `id` (for invariant checks).
    func referenceCount(_ id: UInt32) -> UInt32 { referenceCounts[Int(id)] }

    /// Calls `body` with every live (id, reference count).
    func forEachLive(_ body: (UInt32, UInt32) -> Void) {
        for (index, string) in strings.enumerated() where string != nil {
            body(UInt32(index), referenceCounts[index])
        }
    }
}

// MARK: The index image (decision 0056)

extension StringInterner {
    /// Ids ever handed out, free ones included, plus id 0.
    var idCount: Int { strings.count }

    /// The string of `id` as the table holds it: nil when `id` is free (or 0).
    func storedString(_ id: Int) -> String? { strings[id] }

    /// The interner an image describes: `strings[id]` for every id (nil for 0
    /// and free ids) and how many references each has. Nil when they
    /// disagree: a live string with no reference, references to a free id,
    /// id 0 not empty, or one string under two ids.
    init?(loadedStrings: [String?], referenceCounts: [UInt32]) {
        guard !loadedStrings.isEmpty, loadedStrings.count == referenceCounts.count, loadedStrings[0] == nil,
            referenceCounts[0] == 0
        else { return nil }
        var table = ChunkedArray<String?>(chunkBytes: 64 << 10)
        var ids: [InternedText: UInt32] = [:]
        var free: [UInt32] = []
        for (index, string) in loadedStrings.enumerated() {
            table.append(string)
            guard index > 0 else { continue }
            if let string {
                guard referenceCounts[index] > 0, ids.updateValue(UInt32(index), forKey: InternedText(string)) == nil
                else {
                    return nil
                }
            } else {
                guard referenceCounts[index] == 0 else { return nil }
                free.append(UInt32(index))
            }
        }
        self.init()
        strings = table
        self.referenceCounts = referenceCounts
        freeIDs = free.reversed()
        self.ids = ids
    }
}

/// The interner's lookup key: a string hashed and compared as its Unicode
/// scalars (`ExactText`), not by canonical equivalence.
private struct InternedText: Hashable {
    let text: String

    init(_ text: String) { self.text = text }

    static func == (lhs: InternedText, rhs: InternedText) -> Bool { ExactText.equal(lhs.text, rhs.text) }
    func hash(into hasher: inout Hasher) { ExactText.hash(text, into: &hasher) }
}
