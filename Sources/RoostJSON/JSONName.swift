/// A member name as RFC 7493 §2.3 compares names: a sequence of Unicode
/// scalars, equal only to the same sequence. Swift's `String` `==` and hash
/// use canonical equivalence instead, under which `"caf\u{E9}"` (NFC) and
/// `"cafe\u{301}"` (NFD) are one string; compared here by their UTF-8 bytes
/// (the same order and equality as their scalars), without allocating.
struct JSONName: Hashable {
    let text: String

    init(_ text: String) { self.text = text }

    /// Returns whether `lhs` and `rhs` hold the same Unicode scalars. O(bytes).
    @inline(__always)
    static func equal(_ lhs: String, _ rhs: String) -> Bool {
        lhs.utf8.count == rhs.utf8.count && lhs.utf8.elementsEqual(rhs.utf8)
    }

    static func == (lhs: JSONName, rhs: JSONName) -> Bool { equal(lhs.text, rhs.text) }

    /// Hashes the UTF-8 bytes (a native string's own storage: no copy). O(bytes).
    func hash(into hasher: inout Hasher) {
        var text = self.text
        text.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }
}
