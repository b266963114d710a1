import RoostJSON
import Testing

/// Input RFC 8259 (or a limit) rejects, with the error it must produce.
struct RejectedCase: Sendable, CustomTestStringConvertible {
    var name: String
    var bytes: [UInt8]
    var kind: JSONError.Kind
    var offset: Int
    var limits = JSONLimits.default
    var testDescription: String { name }

    init(_ name: String, _ text: String, _ kind: JSONError.Kind, at offset: Int, limits: JSONLimits = .default) {
        self.init(name, Array(text.utf8), kind, at: offset, limits: limits)
    }

    init(_ name: String, _ bytes: [UInt8], _ kind: JSONError.Kind, at offset: Int, limits: JSONLimits = .default) {
        self.name = name
        self.bytes = bytes
        self.kind = kind
        self.offset = offset
        self.limits = limits
    }
}

private let quote = UInt8(ascii: "\"")

@Suite("JSONReader rejects what RFC 8259 rejects")
struct ReaderRejectionTests {
    static let structure: [RejectedCase] = [
        RejectedCase("empty input", "", .unexpectedEnd, at: 0),
        RejectedCase("only whitespace", " \t\r\n", .unexpectedEnd, at: 4),
        RejectedCase("trailing comma in array", "[1,]", .unexpectedByte, at: 3),
        RejectedCase("trailing comma in object", #"{"a":1,}"#, .unexpectedByte, at: 7),
        RejectedCase("leading comma", "[,1]", .unexpectedByte, at: 1),
        RejectedCase("double comma", "[1,,2]", .unexpectedByte, at: 3),
        RejectedCase("missing comma", "[1 2]", .unexpectedByte, at: 3),
        RejectedCase("missing comma between members", #"{"a":1 "b":2}"#, .unexpectedByte, at: 7),
        RejectedCase("missing colon", #"{"a" 1}"#, .unexpectedByte, at: 5),
        RejectedCase("missing value", #"{"a":}"#, .unexpectedByte, at: 5),
        RejectedCase("unquoted key", "{a:1}", .unexpectedByte, at: 1),
        RejectedCase("number as key", "{1:1}", .unexpectedByte, at: 1),
        RejectedCase("single-quoted key", "{'a':1}", .unexpectedByte, at: 1),
        RejectedCase("single-quoted string", "['a']", .unexpectedByte, at: 1),
        RejectedCase("mismatched close", "[}", .unexpectedByte, at: 1),
        RejectedCase("object closed as array", #"{"a":1]"#, .unexpectedByte, at: 6),
        RejectedCase("lone close bracket", "]", .unexpectedByte, at: 0),
        RejectedCase("unclosed array", "[1", .unexpectedEnd, at: 2),
        RejectedCase("unclosed array after comma", "[1,", .unexpectedEnd, at: 3),
        RejectedCase("unclosed object after colon", #"{"a":"#, .unexpectedEnd, at: 5),
        RejectedCase("unclosed object after key", #"{"a""#, .unexpectedEnd, at: 4),
        RejectedCase("trailing garbage after array", "[1]x", .trailingData, at: 3),
        RejectedCase("two top-level values", "1 2", .trailingData, at: 2),
        RejectedCase("two top-level objects", "{} {}", .trailingData, at: 3),
        RejectedCase("extra close bracket", "[1]]", .trailingData, at: 3),
        RejectedCase("line comment", "[1] // c", .trailingData, at: 4),
        RejectedCase("block comment", "/* c */ 1", .unexpectedByte, at: 0),
        RejectedCase("comment inside array", "[1/*c*/]", .unexpectedByte, at: 2),
        RejectedCase("vertical tab is not whitespace", "\u{0B}1", .unexpectedByte, at: 0),
        RejectedCase("form feed is not whitespace", "\u{0C}1", .unexpectedByte, at: 0),
        RejectedCase("no-break space is not whitespace", "\u{A0}1", .unexpectedByte, at: 0),
        RejectedCase("NUL after value", "1\u{0}", .trailingData, at: 1),
        RejectedCase("byte order mark (rejected by choice)", [0xEF, 0xBB, 0xBF, 0x31], .unexpectedByte, at: 0),
    ]

    static let literalsAndNumbers: [RejectedCase] = [
        RejectedCase("truncated true", "tru", .unexpectedEnd, at: 3),
        RejectedCase("misspelt true", "trUe", .unexpectedByte, at: 2),
        RejectedCase("capitalised True", "True", .unexpectedByte, at: 0),
        RejectedCase("truncated null", "nul", .unexpectedEnd, at: 3),
        RejectedCase("literal with suffix", "nullx", .trailingData, at: 4),
        RejectedCase("undefined", "undefined", .unexpectedByte, at: 0),
        RejectedCase("leading zero", "01", .invalidNumber, at: 1),
        RejectedCase("negative leading zero", "-01", .invalidNumber, at: 2),
        RejectedCase("leading zeros in array", "[00]", .invalidNumber, at: 2),
        RejectedCase("plus sign", "+1", .unexpectedByte, at: 0),
        RejectedCase("leading dot", ".5", .unexpectedByte, at: 0),
        RejectedCase("trailing dot", "1.", .invalidNumber, at: 2),
        RejectedCase("dot before exponent", "1.e3", .invalidNumber, at: 2),
        RejectedCase("empty exponent", "1e", .invalidNumber, at: 2),
        RejectedCase("signed empty exponent", "1e+", .invalidNumber, at: 3),
        RejectedCase("lone minus", "-", .invalidNumber, at: 1),
        RejectedCase("minus then letter", "-a", .invalidNumber, at: 1),
        RejectedCase("minus then space", "- 1", .invalidNumber, at: 1),
        RejectedCase("NaN", "NaN", .unexpectedByte, at: 0),
        RejectedCase("Infinity", "Infinity", .unexpectedByte, at: 0),
        RejectedCase("minus Infinity", "-Infinity", .invalidNumber, at: 1),
        RejectedCase("hex at top level", "0x1F", .trailingData, at: 1),
        RejectedCase("hex in array", "[0x1F]", .unexpectedByte, at: 2),
        RejectedCase("comma as decimal separator", "[1,5.]", .invalidNumber, at: 5),
        RejectedCase("number with space", "1 000", .trailingData, at: 2),
    ]

    static let strings: [RejectedCase] = [
        RejectedCase("unterminated string", #""abc"#, .unexpectedEnd, at: 4),
        RejectedCase("unterminated escaped string", #""a\n"#, .unexpectedEnd, at: 4),
        RejectedCase("unescaped tab", "\"a\tb\"", .controlCharacterInString, at: 2),
        RejectedCase("unescaped newline", "\"a\nb\"", .controlCharacterInString, at: 2),
        RejectedCase("unescaped NUL", "\"\u{0}\"", .controlCharacterInString, at: 1),
        RejectedCase("unescaped control after an escape", "\"\\n\u{1F}\"", .controlCharacterInString, at: 3),
        RejectedCase("unescaped control in key", "{\"a\u{1}\":1}", .controlCharacterInString, at: 3),
        RejectedCase("unknown escape", #""\x41""#, .invalidEscape, at: 1),
        RejectedCase("escaped single quote", #""\'""#, .invalidEscape, at: 1),
        RejectedCase("escaped zero", #""\0""#, .invalidEscape, at: 1),
        RejectedCase("uppercase U escape", #""\U0041""#, .invalidEscape, at: 1),
        RejectedCase("short unicode escape", #""\u12""#, .invalidEscape, at: 5),
        RejectedCase("non-hex unicode escape", #""\u12G4""#, .invalidEscape, at: 5),
        RejectedCase("backslash at end", "\"\\", .unexpectedEnd, at: 2),
        RejectedCase("unicode escape cut by end", #""\u00"#, .unexpectedEnd, at: 5),
        RejectedCase("lone high surrogate", #""\uD800""#, .invalidEscape, at: 1),
        RejectedCase("lone low surrogate", #""\uDC00""#, .invalidEscape, at: 1),
        RejectedCase("high surrogate then text", #""\uD83Dx""#, .invalidEscape, at: 1),
        RejectedCase("high surrogate then non-surrogate escape", #""\uD83D\u0041""#, .invalidEscape, at: 1),
        RejectedCase("two high surrogates", #""\uD83D\uD83D""#, .invalidEscape, at: 1),
        RejectedCase("reversed surrogate pair", #""\uDE00\uD83D""#, .invalidEscape, at: 1),
        RejectedCase("high surrogate then other escape", #""\uD83D\n""#, .invalidEscape, at: 1),
    ]

    static let utf8: [RejectedCase] = [
        RejectedCase("byte FF in string", [quote, 0xFF, quote], .invalidUTF8, at: 1),
        RejectedCase("byte F5 in string", [quote, 0xF5, 0x80, 0x80, 0x80, quote], .invalidUTF8, at: 1),
        RejectedCase("lone continuation byte", [quote, 0x80, quote], .invalidUTF8, at: 1),
        RejectedCase("overlong slash C0 AF", [quote, 0xC0, 0xAF, quote], .invalidUTF8, at: 1),
        RejectedCase("overlong C1 BF", [quote, 0xC1, 0xBF, quote], .invalidUTF8, at: 1),
        RejectedCase("overlong three-byte E0 80 AF", [quote, 0xE0, 0x80, 0xAF, quote], .invalidUTF8, at: 1),
        RejectedCase("overlong four-byte F0 80 80 AF", [quote, 0xF0, 0x80, 0x80, 0xAF, quote], .invalidUTF8, at: 1),
        RejectedCase("encoded high surrogate ED A0 80", [quote, 0xED, 0xA0, 0x80, quote], .invalidUTF8, at: 1),
        RejectedCase("encoded low surrogate ED B0 80", [quote, 0xED, 0xB0, 0x80, quote], .invalidUTF8, at: 1),
        RejectedCase("above U+10FFFF F4 90 80 80", [quote, 0xF4, 0x90, 0x80, 0x80, quote], .invalidUTF8, at: 1),
        RejectedCase("two-byte sequence cut by quote", [quote, 0xC3, quote], .invalidUTF8, at: 1),
        RejectedCase("three-byte sequence cut by quote", [quote, 0xE2, 0x82, quote], .invalidUTF8, at: 1),
        RejectedCase("sequence cut by end of input", [quote, 0xE2, 0x82], .invalidUTF8, at: 1),
        RejectedCase("bad UTF-8 after an escape", [quote, 0x5C, 0x6E, 0xFF, quote], .invalidUTF8, at: 3),
        RejectedCase("bad UTF-8 in key", [0x7B, quote, 0xC0, 0x80, quote, 0x3A, 0x31, 0x7D], .invalidUTF8, at: 2),
        RejectedCase("bad UTF-8 outside strings", [0x5B, 0xFF, 0x5D], .invalidUTF8, at: 1),
        RejectedCase("bad UTF-8 after the value", [0x31, 0x20, 0xFE], .invalidUTF8, at: 2),
        RejectedCase("UTF-16 byte order mark", [0xFE, 0xFF, 0x00, 0x31], .invalidUTF8, at: 0),
        RejectedCase("UTF-16 text", [0x00, 0x5B, 0x00, 0x5D], .unexpectedByte, at: 0),
    ]

    static let limits: [RejectedCase] = [
        RejectedCase(
            "one level deeper than maxDepth", "[[[]]]", .depthExceeded, at: 2, limits: JSONLimits(maxDepth: 2)),
        RejectedCase(
            "objects deeper than maxDepth", #"{"a":{"b":{}}}"#, .depthExceeded, at: 10, limits: JSONLimits(maxDepth: 2)),
        RejectedCase(
            "depth 33 against the default 32",
            String(repeating: "[", count: 33) + String(repeating: "]", count: 33), .depthExceeded, at: 32),
        RejectedCase(
            "input longer than maxInputBytes", "[1,2]", .tooLarge, at: 4, limits: JSONLimits(maxInputBytes: 4)),
        RejectedCase(
            "string longer than maxStringBytes", #"["abcde"]"#, .tooLarge, at: 1, limits: JSONLimits(maxStringBytes: 4)),
        RejectedCase(
            "key longer than maxStringBytes", #"{"abcde":1}"#, .tooLarge, at: 1, limits: JSONLimits(maxStringBytes: 4)),
        RejectedCase(
            "escaped string longer than maxStringBytes", #""ab\ncd""#, .tooLarge, at: 0,
            limits: JSONLimits(maxStringBytes: 4)),
        RejectedCase(
            "number longer than maxStringBytes", "[12345]", .tooLarge, at: 1, limits: JSONLimits(maxStringBytes: 4)),
    ]

    /// I-JSON (RFC 7493 §2.3): one name once per object; the offset is the second name's quote.
    static let duplicates: [RejectedCase] = [
        RejectedCase("the same name twice", #"{"a":1,"a":2}"#, .duplicateKey, at: 7),
        RejectedCase("the same name with the same value", #"{"a":1,"a":1}"#, .duplicateKey, at: 7),
        RejectedCase("the same name after others", #"{"a":1,"b":2,"c":3,"b":4}"#, .duplicateKey, at: 19),
        RejectedCase("an escaped spelling of the same name", #"{"ab":1,"\u0061b":2}"#, .duplicateKey, at: 8),
        RejectedCase("the empty name twice", #"{"":1,"":2}"#, .duplicateKey, at: 6),
        RejectedCase("in a nested object", #"{"t":{"x":1,"x":2}}"#, .duplicateKey, at: 12),
        RejectedCase("in an object inside an array", #"[{},{"k":null,"k":[]}]"#, .duplicateKey, at: 14),
        RejectedCase(
            "the NFD spelling of a name twice", "{\"cafe\u{301}\":1,\"cafe\u{301}\":2}", .duplicateKey, at: 12),
    ]

    @Test("an object naming a member twice is rejected as duplicateKey at the second name", arguments: duplicates)
    func rejectsDuplicates(_ testCase: RejectedCase) { expectRejected(testCase) }

    @Test("duplicate detection in a 20,000-member object finds the one repeat, first or last, in linear time")
    func largeObjectDuplicates() throws {
        let names = (0..<20_000).map { "\"member\($0)\":\($0)" }
        let distinct = Array(("{" + names.joined(separator: ",") + "}").utf8)
        let clock = ContinuousClock()
        let started = clock.now
        let parsed = try JSONReader.parse(distinct)
        #expect(parsed.objectMembers?.count == 20_000)
        for repeated in ["member0", "member19999"] {
            let text = "{" + names.joined(separator: ",") + ",\"\(repeated)\":0}"
            let bytes = Array(text.utf8)
            #expect(throws: JSONError(kind: .duplicateKey, offset: bytes.count - repeated.utf8.count - 5)) {
                try JSONReader.parse(bytes)
            }
        }
        // Pairwise this would be 2 × 10^8 comparisons; a set makes it milliseconds.
        #expect(clock.now - started < .seconds(5))
    }

    @Test("malformed structure is rejected with its kind and offset", arguments: structure)
    func rejectsStructure(_ testCase: RejectedCase) { expectRejected(testCase) }

    @Test("malformed literals and numbers are rejected with their kind and offset", arguments: literalsAndNumbers)
    func rejectsLiteralsAndNumbers(_ testCase: RejectedCase) { expectRejected(testCase) }

    @Test("malformed strings and escapes are rejected with their kind and offset", arguments: strings)
    func rejectsStrings(_ testCase: RejectedCase) { expectRejected(testCase) }

    @Test("ill-formed UTF-8 anywhere is rejected as invalidUTF8", arguments: utf8)
    func rejectsUTF8(_ testCase: RejectedCase) { expectRejected(testCase) }

    @Test("input beyond a limit is rejected with depthExceeded or tooLarge", arguments: limits)
    func rejectsBeyondLimits(_ testCase: RejectedCase) { expectRejected(testCase) }

    @Test("100,000 open brackets fail at maxDepth without deep recursion")
    func hundredThousandBrackets() {
        let bytes = [UInt8](repeating: UInt8(ascii: "["), count: 100_000)
        #expect(throws: JSONError(kind: .depthExceeded, offset: 32)) { try JSONReader.parse(bytes) }
        // With the depth limit out of the way the parser still uses no call stack per level.
        let unlimited = JSONLimits(maxDepth: 1_000_000)
        #expect(throws: JSONError(kind: .unexpectedEnd, offset: 100_000)) {
            try JSONReader.parse(bytes, limits: unlimited)
        }
        let objects = [UInt8](String(repeating: #"{"a":"#, count: 100_000).utf8)
        #expect(throws: JSONError(kind: .unexpectedEnd, offset: objects.count)) {
            try JSONReader.parse(objects, limits: unlimited)
        }
    }

    @Test("every strict prefix of a valid document is rejected")
    func prefixesAreRejected() throws {
        let document = Array(#" {"a":[1,-2.5e+3,"x\u00e9\n",true,null],"b":{}} "#.utf8)
        _ = try JSONReader.parse(document)
        let lastSignificant = document.count - 1  // drop the trailing space: it is optional
        for length in 0..<lastSignificant {
            #expect(throws: JSONError.self, "prefix of length \(length)") {
                try JSONReader.parse(document[..<length])
            }
        }
    }

    @Test("error descriptions name the problem and the offset")
    func descriptions() {
        #expect(
            JSONError(kind: .unexpectedByte, offset: 12, byte: UInt8(ascii: "x")).description
                == "unexpected byte 'x' at offset 12")
        #expect(
            JSONError(kind: .controlCharacterInString, offset: 3, byte: 0x09).description
                == "unescaped control character 0x09 in string at offset 3")
        #expect(JSONError(kind: .unexpectedEnd, offset: 0).description == "unexpected end of input at offset 0")
        #expect(JSONError(kind: .invalidUTF8, offset: 5).description == "invalid UTF-8 at offset 5")
        #expect(
            JSONError(kind: .trailingData, offset: 3, byte: 0xFE).description
                == "unexpected data 0xFE after the JSON value at offset 3")
    }

    private func expectRejected(_ testCase: RejectedCase, sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            let value = try JSONReader.parse(testCase.bytes, limits: testCase.limits)
            Issue.record("accepted as \(value)", sourceLocation: sourceLocation)
        } catch {
            #expect(error.kind == testCase.kind, "\(error)", sourceLocation: sourceLocation)
            #expect(error.offset == testCase.offset, "\(error)", sourceLocation: sourceLocation)
        }
    }
}

@Suite("String scanning finds special bytes at every position")
struct StringScanTests {
    /// A 24-byte string of `a` with `inserted` at `position`, quoted.
    private func document(_ inserted: [UInt8], at position: Int) -> [UInt8] {
        var content = [UInt8](repeating: UInt8(ascii: "a"), count: 24)
        content.replaceSubrange(position..<position + 1, with: inserted)
        return [UInt8(ascii: "\"")] + content + [UInt8(ascii: "\"")]
    }

    @Test("word-at-a-time scanning misses no byte that needs attention", arguments: 0..<24)
    func everyPosition(_ position: Int) throws {
        let prefix = String(repeating: "a", count: position)
        let suffix = String(repeating: "a", count: 23 - position)
        #expect(throws: JSONError(kind: .controlCharacterInString, offset: 1 + position, byte: 0x01)) {
            try JSONReader.parse(document([0x01], at: position))
        }
        #expect(throws: JSONError(kind: .controlCharacterInString, offset: 1 + position, byte: 0x1F)) {
            try JSONReader.parse(document([0x1F], at: position))
        }
        #expect(throws: JSONError(kind: .invalidUTF8, offset: 1 + position)) {
            try JSONReader.parse(document([0xFF], at: position))
        }
        let afterQuote = UInt8(ascii: position == 23 ? "\"" : "a")
        #expect(throws: JSONError(kind: .trailingData, offset: 2 + position, byte: afterQuote)) {
            try JSONReader.parse(document([UInt8(ascii: "\"")], at: position))
        }
        #expect(try JSONReader.parse(document([0x7F], at: position)) == .string(prefix + "\u{7F}" + suffix))
        #expect(try JSONReader.parse(document([0x20], at: position)) == .string(prefix + " " + suffix))
        #expect(try JSONReader.parse(document([0xC3, 0xA9], at: position)) == .string(prefix + "é" + suffix))
        #expect(
            try JSONReader.parse(document(Array(#"\""#.utf8), at: position)) == .string(prefix + "\"" + suffix))
        #expect(try JSONReader.parse(document(Array(#"\\"#.utf8), at: position)) == .string(prefix + "\\" + suffix))
    }
}
