import RoostJSON
import Testing

/// A document RFC 8259 allows and the value it must parse to.
struct AcceptedCase: Sendable, CustomTestStringConvertible {
    var name: String
    var text: String
    var expected: JSONValue
    var testDescription: String { name }
}

@Suite("JSONReader accepts what RFC 8259 allows")
struct ReaderAcceptanceTests {
    static let cases: [AcceptedCase] = [
        AcceptedCase(name: "null", text: "null", expected: .null),
        AcceptedCase(name: "true", text: "true", expected: .bool(true)),
        AcceptedCase(name: "false", text: "false", expected: .bool(false)),
        AcceptedCase(name: "zero", text: "0", expected: .number("0")),
        AcceptedCase(name: "negative zero", text: "-0", expected: .number("-0")),
        AcceptedCase(name: "integer", text: "1234", expected: .number("1234")),
        AcceptedCase(name: "fraction and exponent", text: "-12.50E-3", expected: .number("-12.50E-3")),
        AcceptedCase(name: "exponent with plus", text: "1e+10", expected: .number("1e+10")),
        AcceptedCase(name: "zero with fraction", text: "0.001", expected: .number("0.001")),
        AcceptedCase(
            name: "integer beyond 2^64 kept as its literal", text: "123456789012345678901234567890",
            expected: .number("123456789012345678901234567890")),
        AcceptedCase(name: "empty string", text: #""""#, expected: .string("")),
        AcceptedCase(name: "plain string", text: #""push token""#, expected: .string("push token")),
        AcceptedCase(
            name: "every short escape", text: #""\" \\ \/ \b \f \n \r \t""#,
            expected: .string("\" \\ / \u{08} \u{0C} \n \r \t")),
        AcceptedCase(
            name: "unicode escapes in both cases", text: #""\u0041\u00e9\u20AC""#, expected: .string("Aé€")),
        AcceptedCase(name: "surrogate pair escape", text: #""\uD83D\uDE00""#, expected: .string("😀")),
        AcceptedCase(name: "escaped NUL", text: #""a\u0000b""#, expected: .string("a\u{0}b")),
        AcceptedCase(name: "raw multi-byte UTF-8", text: #""é€😀 日本""#, expected: .string("é€😀 日本")),
        AcceptedCase(name: "DEL is not a control character for JSON", text: "\"\u{7F}\"", expected: .string("\u{7F}")),
        AcceptedCase(name: "noncharacter U+FFFF", text: "\"\u{FFFF}\"", expected: .string("\u{FFFF}")),
        AcceptedCase(name: "highest scalar U+10FFFF", text: "\"\u{10FFFF}\"", expected: .string("\u{10FFFF}")),
        AcceptedCase(name: "escape then raw UTF-8", text: #""\né""#, expected: .string("\né")),
        AcceptedCase(name: "empty array", text: "[]", expected: .array([])),
        AcceptedCase(name: "empty object", text: "{}", expected: .object([])),
        AcceptedCase(
            name: "empty containers with whitespace", text: "[ { } , [ ] ]",
            expected: .array([.object([]), .array([])])),
        AcceptedCase(
            name: "array of every kind", text: #"[null,true,false,1,"s",[],{}]"#,
            expected: .array([.null, .bool(true), .bool(false), .number("1"), .string("s"), .array([]), .object([])])),
        AcceptedCase(
            name: "all four whitespace bytes around and between tokens", text: " \t\r\n{ \"a\" \t: [ 1 ,\n2 ] }\r\n",
            expected: .object([("a", .array([.number("1"), .number("2")]))])),
        AcceptedCase(
            name: "nested objects keep member order", text: #"{"z":{"y":[null]},"a":1}"#,
            expected: .object([("z", .object([("y", .array([.null]))])), ("a", .number("1"))])),
        AcceptedCase(
            name: "the same name in sibling and nested objects is not a duplicate",
            text: #"{"a":{"a":1},"b":[{"a":2},{"a":3}]}"#,
            expected: .object([
                ("a", .object([("a", .number("1"))])),
                ("b", .array([.object([("a", .number("2"))]), .object([("a", .number("3"))])])),
            ])),
        AcceptedCase(
            name: "names differing only in case are different names", text: #"{"a":1,"A":2}"#,
            expected: .object([("a", .number("1")), ("A", .number("2"))])),
        AcceptedCase(name: "key with escapes", text: #"{"a\"b":true}"#, expected: .object([("a\"b", .bool(true))])),
        AcceptedCase(
            name: "realistic registration body",
            text:
                #"{"token":"a1b2c3","platform":"apns","tags":["news","sport"],"badge":3,"sandbox":false,"locale":null}"#,
            expected: .object([
                ("token", .string("a1b2c3")), ("platform", .string("apns")),
                ("tags", .array([.string("news"), .string("sport")])), ("badge", .number("3")),
                ("sandbox", .bool(false)), ("locale", .null),
            ])),
    ]

    @Test("parses each valid document to the expected value", arguments: cases)
    func parsesValidDocument(_ testCase: AcceptedCase) throws {
        let value = try JSONReader.parse(Array(testCase.text.utf8))
        #expect(value == testCase.expected)
    }

    @Test("nesting exactly at maxDepth is accepted")
    func nestingAtLimit() throws {
        let depth = JSONLimits.default.maxDepth
        let text = String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
        var value = try JSONReader.parse(Array(text.utf8))
        for _ in 1..<depth {
            let elements = try #require(value.arrayValue)
            #expect(elements.count == 1)
            value = elements[0]
        }
        #expect(value == .array([]))
    }

    @Test("every overload gives the same value")
    func overloadsAgree() throws {
        let text = #"{"a":[1,"x",null]}"#
        let bytes = Array(text.utf8)
        let expected = try JSONReader.parse(bytes)
        #expect(try JSONReader.parse(text.utf8) == expected)
        #expect(try JSONReader.parse(bytes[...]) == expected)
        #expect(try JSONReader.parse(bytes.lazy.map { $0 }) == expected)  // not contiguous: copied
        let raw = try bytes.withUnsafeBytes { buffer throws(JSONError) in try JSONReader.parse(buffer) }
        #expect(raw == expected)
    }

    @Test("offsets in errors count from the start of a slice")
    func sliceOffsets() {
        let bytes = Array("xx[1,]".utf8)
        #expect(throws: JSONError(kind: .unexpectedByte, offset: 3, byte: UInt8(ascii: "]"))) {
            try JSONReader.parse(bytes[2...])
        }
    }

    @Test("a string exactly maxStringBytes long is accepted, escaped or not")
    func stringAtLimit() throws {
        let limits = JSONLimits(maxStringBytes: 4)
        #expect(try JSONReader.parse(Array(#""abcd""#.utf8), limits: limits) == .string("abcd"))
        #expect(try JSONReader.parse(Array(#""ab\n\u0041""#.utf8), limits: limits) == .string("ab\nA"))
        #expect(try JSONReader.parse(Array("1234".utf8), limits: limits) == .number("1234"))
    }

    @Test("input exactly maxInputBytes long is accepted")
    func inputAtLimit() throws {
        _ = try JSONReader.parse(Array("[1,2]".utf8), limits: JSONLimits(maxInputBytes: 5))
    }
}
