/// A tag value: a string, a finite number (IEEE-754 binary64, as JSON numbers are
/// read by most SDKs) or a boolean. Strings are equal only with the same Unicode
/// scalars (`ExactText`): an NFD value is not the NFC one, so changing one for the
/// other is a change that is stored.
package enum TagValue: Hashable, Sendable {
    case string(String)
    case number(Double)
    case bool(Bool)

    package static func == (lhs: TagValue, rhs: TagValue) -> Bool {
        switch (lhs, rhs) {
        case (.string(let a), .string(let b)): ExactText.equal(a, b)
        case (.number(let a), .number(let b)): a == b
        case (.bool(let a), .bool(let b)): a == b
        case (.string, _), (.number, _), (.bool, _): false
        }
    }

    package func hash(into hasher: inout Hasher) {
        switch self {
        case .string(let text):
            hasher.combine(0 as UInt8)
            ExactText.hash(text, into: &hasher)
        case .number(let number):
            hasher.combine(1 as UInt8)
            hasher.combine(number)
        case .bool(let flag):
            hasher.combine(2 as UInt8)
            hasher.combine(flag)
        }
    }

    /// Bytes this value counts toward `Limits.tagBytesMax` (see `Tags.byteCount`).
    var byteCount: Int {
        switch self {
        case .string(let text): text.utf8.count
        case .number: 8
        case .bool: 1
        }
    }

    /// Returns whether a `tag.KEY=VALUE` list filter's VALUE text matches this value:
    /// strings compare exactly (as Unicode scalars: an NFD filter does not match an
    /// NFC value), numbers numerically (`30` matches `30.0`), booleans as `true`/`false`.
    package func matches(filterText text: String) -> Bool {
        switch self {
        case .string(let value): ExactText.equal(value, text)
        case .number(let value): Double(text).map { $0 == value } ?? false
        case .bool(let value): text == (value ? "true" : "false")
        }
    }
}

/// A device's tags: at most 50 keys and 4,096 bytes.
///
/// Bytes are counted as: for every key, its UTF-8 length plus its value's size,
/// where a string counts its UTF-8 length, a number 8 and a boolean 1. This is
/// independent of JSON escaping and of the order of keys, so a client can compute
/// it exactly. Keys are `TagKey`s: two keys are one only with the same Unicode
/// scalars, so `"caf\u{E9}"` and `"cafe\u{301}"` are two tags.
///
/// Held in its binary form (`encode(into:)`'s bytes, keys sorted), one array:
/// the index stores those bytes as they are, so reading a device copies them
/// once and nothing is decoded until a caller looks at the values.
package struct Tags: Hashable, Sendable {
    /// `encode(into:)`'s bytes; empty for no tags (instead of a lone zero count).
    private(set) var encoded: [UInt8]

    package static let empty = Tags()

    package init() { encoded = [] }

    /// Creates tags from a map, checking every key and value and the limits.
    package init(_ values: [TagKey: TagValue]) throws(RegistryRejection) {
        var tags = Tags()
        try tags.merge(values.mapValues { Optional($0) })
        self = tags
    }

    /// Wraps bytes that `encode(into:)` wrote and the index stored (not re-checked).
    init(storedEncoding encoded: [UInt8]) {
        precondition(encoded.first != 0, "stored tags with no entries")
        self.encoded = encoded
    }

    /// Encodes `values` with keys in `TagKey` order (code points, `ExactText.precedes`):
    /// one encoding per map, whatever order the map was built in. For NFC keys
    /// (every ASCII key) it is the order older builds wrote, Swift's `<`.
    init(unchecked values: [TagKey: TagValue]) {
        if values.isEmpty {
            encoded = []
            return
        }
        // Sized first: one allocation for the bytes, where growing field by
        // field took three (`roost-alloc-count`'s `register_known_tagged`).
        var byteCount = 1
        for (key, value) in values {
            byteCount += 2 + key.rawValue.utf8.count + 1
            switch value {
            case .string(let text): byteCount += 2 + text.utf8.count
            case .number: byteCount += 8
            case .bool: break
            }
        }
        var writer = LittleEndianWriter(capacity: byteCount)
        writer.u8(UInt8(values.count))
        for (key, value) in values.sorted(by: { $0.key < $1.key }) {
            writer.string(key.rawValue)
            switch value {
            case .string(let text):
                writer.u8(0)
                writer.string(text)
            case .number(let number):
                writer.u8(1)
                writer.u64(number.bitPattern)
            case .bool(let flag):
                writer.u8(flag ? 3 : 2)
            }
        }
        precondition(writer.bytes.count == byteCount, "tags sized \(byteCount) bytes, wrote \(writer.bytes.count)")
        encoded = writer.bytes
    }

    /// The tags as a map (decoded on each call). O(tags).
    package var values: [TagKey: TagValue] {
        if encoded.isEmpty { return [:] }
        return encoded.withUnsafeBytes { bytes in
            var reader = LittleEndianReader(bytes)
            do throws(ByteDecodingError) {
                return try Self.decodeValues(from: &reader)
            } catch {
                preconditionFailure("held tags do not decode: \(error)")
            }
        }
    }

    package var isEmpty: Bool { encoded.isEmpty }
    package var count: Int { encoded.isEmpty ? 0 : Int(encoded[0]) }

    /// The entries sorted by key (a stable order for rendering and encoding).
    package var sortedEntries: [(key: TagKey, value: TagValue)] {
        values.sorted { $0.key < $1.key }
    }

    /// The size counted against `Limits.tagBytesMax`, read off the encoding
    /// without decoding. O(tags).
    package var byteCount: Int {
        if encoded.isEmpty { return 0 }
        return encoded.withUnsafeBytes { bytes in
            var total = 0
            var offset = 1
            for _ in 0..<Int(bytes[0]) {
                let keyLength = Int(LittleEndianReader.u16(at: offset, of: bytes))
                total += keyLength
                offset += 2 + keyLength
                let kind = bytes[offset]
                offset += 1
                switch kind {
                case 0:
                    let valueLength = Int(LittleEndianReader.u16(at: offset, of: bytes))
                    total += valueLength
                    offset += 2 + valueLength
                case 1:
                    total += 8
                    offset += 8
                default:
                    total += 1
                }
            }
            return total
        }
    }

    package subscript(key: TagKey) -> TagValue? { values[key] }

    /// Merges a patch: a value sets its key, nil removes it, other keys stay.
    /// An empty patch is a no-op. Throws `invalidTags` for a malformed key or
    /// value and `tagsTooLarge` when the result exceeds the limits; `self` is
    /// unchanged when it throws.
    package mutating func merge(_ patch: [TagKey: TagValue?]) throws(RegistryRejection) {
        if patch.isEmpty { return }
        var result = values
        for (key, value) in patch {
            try Self.check(key: key, value: value)
            result[key] = value
        }
        let merged = Tags(unchecked: result)
        guard merged.count <= Limits.tagKeysMax, merged.byteCount <= Limits.tagBytesMax else { throw .tagsTooLarge }
        self = merged
    }

    static func check(key: TagKey, value: TagValue?) throws(RegistryRejection) {
        let keyBytes = key.rawValue.utf8.count
        guard keyBytes >= 1 && keyBytes <= Limits.tagKeyBytesMax else { throw .invalidTags }
        if case .number(let number) = value, !number.isFinite { throw .invalidTags }
    }

    /// Equal maps (keys and string values compared as Unicode scalars, numbers
    /// as Doubles): equal bytes decide at once; different bytes can still hold
    /// equal maps (`-0.0` and `0.0`), so those compare decoded.
    package static func == (lhs: Tags, rhs: Tags) -> Bool {
        lhs.encoded == rhs.encoded || lhs.values == rhs.values
    }

    package func hash(into hasher: inout Hasher) {
        hasher.combine(values)
    }
}

/// What a request does to the stored tags (spec §4): keep them (omitted), clear
/// them all (`tags: null`), or merge a map (null values delete keys).
package enum TagsChange: Hashable, Sendable {
    case keep
    case clear
    case merge([TagKey: TagValue?])

    /// Returns `current` changed as this says, or the rejection.
    package func applied(to current: Tags) -> Result<Tags, RegistryRejection> {
        switch self {
        case .keep: return .success(current)
        case .clear: return .success(.empty)
        case .merge(let patch):
            var tags = current
            do throws(RegistryRejection) {
                try tags.merge(patch)
            } catch {
                return .failure(error)
            }
            return .success(tags)
        }
    }
}

/// A change to one optional field: omitted (keep), `null` (clear) or a value (set).
package enum FieldChange<Value: Hashable & Sendable>: Hashable, Sendable {
    case keep
    case clear
    case set(Value)

    /// Returns the same change with `transform` applied to a set value.
    func map<Other>(_ transform: (Value) -> Other) -> FieldChange<Other> {
        switch self {
        case .keep: .keep
        case .clear: .clear
        case .set(let value): .set(transform(value))
        }
    }

    /// Whether this change leaves the field as it is.
    package var isKeep: Bool {
        if case .keep = self { true } else { false }
    }

    /// Returns the field's value after this change.
    package func applied(to current: Value?) -> Value? {
        switch self {
        case .keep: current
        case .clear: nil
        case .set(let value): value
        }
    }
}
