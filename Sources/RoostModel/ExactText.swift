/// Text compared as a sequence of Unicode scalars, as RFC 7493 §2.3 compares
/// JSON member names: equal only to the same sequence. Swift's `String` `==`,
/// `<` and hash use canonical equivalence instead, under which `"caf\u{E9}"`
/// (NFC) and `"cafe\u{301}"` (NFD) are one string; a registry that stored one
/// under the other's name would lose data (a tag, a person) the client sent.
/// Compared by UTF-8 bytes (the same equality and order as the scalars),
/// without Foundation and without allocating (docs/json.md "Names").
enum ExactText {
    /// Returns whether `lhs` and `rhs` hold the same Unicode scalars. O(bytes):
    /// one length check, then the two strings' own UTF-8 storage compared
    /// word by word (a generic `elementsEqual` over `String.UTF8View` walks
    /// index by index: ~700 instructions for a 5-byte text, 2.7 % of a
    /// registration's instructions in the interner's look-ups).
    @inline(__always)
    static func equal(_ lhs: String, _ rhs: String) -> Bool {
        guard lhs.utf8.count == rhs.utf8.count else { return false }
        let stored = lhs.utf8.withContiguousStorageIfAvailable { left in
            rhs.utf8.withContiguousStorageIfAvailable { right in sameBytes(left, right) }
        }
        guard let stored, let stored else { return lhs.utf8.elementsEqual(rhs.utf8) }
        return stored
    }

    /// Returns whether `text` is exactly `name` (a spec spelling: `ios`,
    /// `production`, `live`): one length check and the text's own bytes. A
    /// `switch` over a generic `StringProtocol` with string literals builds
    /// strings and compares them by canonical equivalence: ~300 instructions
    /// a name, twice a registration.
    @inline(__always)
    static func equal(_ text: some StringProtocol, name: StaticString) -> Bool {
        guard text.utf8.count == name.utf8CodeUnitCount else { return false }
        let expected = UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
        return text.utf8.withContiguousStorageIfAvailable { sameBytes($0, expected) }
            ?? text.utf8.elementsEqual(expected)
    }

    /// The value whose spelling `text` is exactly, of two (`AppMode`,
    /// `Platform`, `APNsEnvironment`), or nil.
    @inline(__always)
    static func value<Value>(
        of text: some StringProtocol, _ first: (StaticString, Value), _ second: (StaticString, Value)
    ) -> Value? {
        if equal(text, name: first.0) { return first.1 }
        if equal(text, name: second.0) { return second.1 }
        return nil
    }

    /// Whether two buffers of the same length hold the same bytes.
    @inline(__always)
    static func sameBytes(_ left: UnsafeBufferPointer<UInt8>, _ right: UnsafeBufferPointer<UInt8>) -> Bool {
        precondition(left.count == right.count, "sameBytes of \(left.count) and \(right.count) bytes")
        var index = 0
        while index + 8 <= left.count {
            let a = UnsafeRawPointer(left.baseAddress!).loadUnaligned(fromByteOffset: index, as: UInt64.self)
            let b = UnsafeRawPointer(right.baseAddress!).loadUnaligned(fromByteOffset: index, as: UInt64.self)
            if a != b { return false }
            index += 8
        }
        while index < left.count {
            if left[index] != right[index] { return false }
            index += 1
        }
        return true
    }

    /// Returns whether both are nil or both hold the same Unicode scalars.
    @inline(__always)
    static func equal(_ lhs: String?, _ rhs: String?) -> Bool {
        switch (lhs, rhs) {
        case (nil, nil): true
        case (let lhs?, let rhs?): equal(lhs, rhs)
        case (nil, _?), (_?, nil): false
        }
    }

    /// Feeds the UTF-8 bytes to `hasher` (a native string's own storage: no
    /// copy), so that texts `equal` calls equal hash alike. O(bytes).
    @inline(__always)
    static func hash(_ text: String, into hasher: inout Hasher) {
        var text = text
        text.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        hasher.combine(0xFF as UInt8)  // no UTF-8 byte: ends the text inside a larger hash
    }

    /// The order of the Unicode scalars (the order of the UTF-8 bytes): a
    /// strict total order consistent with `equal`, the order tag keys are
    /// encoded in. Not Swift's `<`, which is not even a strict weak order on
    /// texts that are not NFC: it finds `"e\u{301}"` neither before nor after
    /// `"\u{E9}b"` though they differ, so a sort by it depends on the input
    /// order. For NFC texts (every ASCII text) both orders agree, so tags
    /// stored by older builds read back with the same bytes. O(bytes).
    @inline(__always)
    static func precedes(_ lhs: String, _ rhs: String) -> Bool {
        lhs.utf8.lexicographicallyPrecedes(rhs.utf8)
    }
}

/// A tag key: 1 to 128 bytes of UTF-8, compared as Unicode scalars
/// (`ExactText`), so `"caf\u{E9}"` and `"cafe\u{301}"` are two keys.
package struct TagKey: Hashable, Comparable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    package let rawValue: String

    /// Wraps a key as sent; `Tags.merge` checks its length.
    package init(_ rawValue: String) { self.rawValue = rawValue }

    package init(stringLiteral value: String) { rawValue = value }

    package static func == (lhs: TagKey, rhs: TagKey) -> Bool { ExactText.equal(lhs.rawValue, rhs.rawValue) }
    package func hash(into hasher: inout Hasher) { ExactText.hash(rawValue, into: &hasher) }
    /// `ExactText.precedes`: the order of the encoded keys.
    package static func < (lhs: TagKey, rhs: TagKey) -> Bool { ExactText.precedes(lhs.rawValue, rhs.rawValue) }
    package var description: String { rawValue }
}
