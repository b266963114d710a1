/// Why a document was rejected and where: `offset` is the byte offset in the input
/// of the first byte that could not be accepted (or the input length at an unexpected end).
public struct JSONError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The closed set of reasons a document is rejected.
    public enum Kind: Sendable, Equatable {
        /// The input ended inside a value (or held only whitespace).
        case unexpectedEnd
        /// A byte that cannot start or continue the current construct.
        case unexpectedByte
        /// A byte sequence that is not well-formed UTF-8 (overlong, surrogate, > U+10FFFF, truncated).
        case invalidUTF8
        /// A backslash escape other than `\" \\ \/ \b \f \n \r \t \uXXXX`, or a lone surrogate `\u` escape.
        case invalidEscape
        /// A number that does not match `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
        case invalidNumber
        /// A byte below 0x20 inside a string; RFC 8259 requires it to be escaped.
        case controlCharacterInString
        /// Bytes other than whitespace after the top-level value.
        case trailingData
        /// Arrays and objects nested deeper than `JSONLimits.maxDepth`.
        case depthExceeded
        /// The input is longer than `JSONLimits.maxInputBytes`, or a string or number longer
        /// than `JSONLimits.maxStringBytes`.
        case tooLarge
        /// An object names the same member twice (I-JSON, RFC 7493 §2.3); the offset is
        /// the opening quote of the second name.
        case duplicateKey
    }

    /// What went wrong.
    public var kind: Kind
    /// The byte offset in the input where it went wrong.
    public var offset: Int
    /// The offending byte for `.unexpectedByte`, `.controlCharacterInString`, `.trailingData`; nil otherwise.
    public var byte: UInt8?

    /// Creates an error of `kind` at `offset`, naming the offending `byte` when there is one.
    public init(kind: Kind, offset: Int, byte: UInt8? = nil) {
        self.kind = kind
        self.offset = offset
        self.byte = byte
    }

    /// A one-line message fit for an API error body, e.g. "unexpected byte 'x' at offset 12".
    public var description: String {
        let what: String
        switch kind {
        case .unexpectedEnd: what = "unexpected end of input"
        case .unexpectedByte: what = "unexpected byte \(Self.describe(byte))"
        case .invalidUTF8: what = "invalid UTF-8"
        case .invalidEscape: what = "invalid escape sequence"
        case .invalidNumber: what = "invalid number"
        case .controlCharacterInString: what = "unescaped control character \(Self.describe(byte)) in string"
        case .trailingData: what = "unexpected data \(Self.describe(byte)) after the JSON value"
        case .depthExceeded: what = "arrays or objects nested too deeply"
        case .tooLarge: what = "input, string or number larger than the limit"
        case .duplicateKey: what = "an object names the same member twice"
        }
        return "\(what) at offset \(offset)"
    }

    /// Returns `'x'` for a printable ASCII byte and `0x1F` otherwise.
    private static func describe(_ byte: UInt8?) -> String {
        guard let byte else { return "" }
        if byte >= 0x21 && byte < 0x7F {
            return "'\(Character(Unicode.Scalar(byte)))'"
        }
        let hex = String(byte, radix: 16, uppercase: true)
        return byte < 0x10 ? "0x0\(hex)" : "0x\(hex)"
    }
}
