/// A tag value: a string, a finite number (IEEE-754 binary64, as JSON numbers are
/// read by most SDKs) or a boolean.
package enum TagValue: Hashable, Sendable {
    case string(String)
    case number(Double)
    case bool(Bool)

    /// Bytes this value counts toward `Limits.tagBytesMax` (see `Tags.byteCount`).
    var byteCount: Int {
        switch self {
        case .string(let text): text.utf8.count
        case .number: 8
        case .bool: 1
        }
    }

    /// Returns whether a `tag.KEY=VALUE` list filter's VALUE text matches this value:
    /// strings compare exactly, numbers numerically (`30` matches `30.0`), booleans as `true`/`false`.
    package func matches(filterText text: String) -> Bool {
        switch self {
        case .string(let value): value == text
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
/// it exactly.
package struct Tags: Hashable, Sendable {
    package private(set) var values: [String: TagValue]

    package static let empty = Tags()

    package init() { values = [:] }

    /// Creates tags from a map, checking every key and value and the limits.
    package init(_ values: [String: TagValue]) throws(RegistryRejection) {
        var tags = Tags()
        try tags.merge(values.mapValues { Optional($0) })
        self = tags
    }

    package var isEmpty: Bool { values.isEmpty }
    package var count: Int { values.count }

    /// The entries sorted by key (a stable order for rendering and encoding).
    package var sortedEntries: [(key: String, value: TagValue)] {
        values.sorted { $0.key < $1.key }
    }

    /// The size counted against `Limits.tagBytesMax`.
    package var byteCount: Int {
        values.reduce(0) { $0 + $1.key.utf8.count + $1.value.byteCount }
    }

    package subscript(key: String) -> TagValue? { values[key] }

    /// Merges a patch: a value sets its key, nil removes it, other keys stay.
    /// An empty patch is a no-op. Throws `invalidTags` for a malformed key or
    /// value and `tagsTooLarge` when the result exceeds the limits; `self` is
    /// unchanged when it throws.
    package mutating func merge(_ patch: [String: TagValue?]) throws(RegistryRejection) {
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

    init(unchecked values: [String: TagValue]) { self.values = values }

    static func check(key: String, value: TagValue?) throws(RegistryRejection) {
        let keyBytes = key.utf8.count
        guard keyBytes >= 1 && keyBytes <= Limits.tagKeyBytesMax else { throw .invalidTags }
        if case .number(let number) = value, !number.isFinite { throw .invalidTags }
    }
}

/// What a request does to the stored tags (spec §4): keep them (omitted), clear
/// them all (`tags: null`), or merge a map (null values delete keys).
package enum TagsChange: Hashable, Sendable {
    case keep
    case clear
    case merge([String: TagValue?])

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

    /// Returns the field's value after this change.
    package func applied(to current: Value?) -> Value? {
        switch self {
        case .keep: current
        case .clear: nil
        case .set(let value): value
        }
    }
}
