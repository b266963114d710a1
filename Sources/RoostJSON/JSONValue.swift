/// A parsed JSON document. Objects keep their members in document order; the
/// reader refuses an object naming a member twice (I-JSON, RFC 7493), so a parsed
/// object's names are distinct.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// A number kept as its literal text, so that integers beyond 2^53 and
    /// exact decimals survive; use `intValue` / `doubleValue` to read it.
    case number(String)
    case string(String)
    case array([JSONValue])
    case object([(key: String, value: JSONValue)])

    /// Equal documents: strings and member names compared as Unicode scalars
    /// (RFC 7493), so NFC and NFD spellings differ; members in order.
    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case (.bool(let a), .bool(let b)): return a == b
        case (.number(let a), .number(let b)): return JSONName.equal(a, b)
        case (.string(let a), .string(let b)): return JSONName.equal(a, b)
        case (.array(let a), .array(let b)): return a == b
        case (.object(let a), .object(let b)):
            return a.count == b.count
                && zip(a, b).allSatisfy { JSONName.equal($0.key, $1.key) && $0.value == $1.value }
        case (.null, _), (.bool, _), (.number, _), (.string, _), (.array, _), (.object, _):
            return false
        }
    }
}
