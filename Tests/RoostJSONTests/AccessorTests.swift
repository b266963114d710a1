import RoostJSON
import Testing

@Suite("JSONValue accessors")
struct AccessorTests {
    @Test("subscript returns the member with the key, nil when absent or not an object")
    func subscriptFindsMember() throws {
        let value = try JSONReader.parse(Array(#"{"a":"first","b":true}"#.utf8))
        #expect(value["a"] == .string("first"))
        // A value built in code may repeat a name (the reader never gives one): the last wins.
        #expect(JSONValue.object([("a", .number("1")), ("a", .string("second"))])["a"] == .string("second"))
        #expect(value["b"] == .bool(true))
        #expect(value["c"] == nil)
        #expect(JSONValue.array([.null])["a"] == nil)
        #expect(JSONValue.string("a")["a"] == nil)
    }

    @Test(
        "intValue reads integer literals that fit Int and nothing else",
        arguments: [
            ("0", 0), ("-0", 0), ("42", 42), ("-17", -17),
            ("9223372036854775807", Int.max), ("-9223372036854775808", Int.min),
            ("9223372036854775808", nil), ("-9223372036854775809", nil), ("100000000000000000000", nil),
            ("1.0", nil), ("1e3", nil), ("-1E+2", nil), ("0.5", nil),
        ] as [(String, Int?)])
    func intValue(_ literal: String, _ expected: Int?) throws {
        let value = try JSONReader.parse(Array(literal.utf8))
        #expect(value.intValue == expected)
    }

    @Test(
        "doubleValue reads any number literal that is finite as a Double",
        arguments: [
            ("0", 0.0), ("-0.5", -0.5), ("1e3", 1000.0), ("1.25E-2", 0.0125),
            ("9007199254740993", 9_007_199_254_740_992.0), ("1e400", nil), ("-1e400", nil),
        ] as [(String, Double?)])
    func doubleValue(_ literal: String, _ expected: Double?) throws {
        let value = try JSONReader.parse(Array(literal.utf8))
        #expect(value.doubleValue == expected)
    }

    @Test("each accessor answers only for its own kind")
    func accessorsMatchKinds() throws {
        let document = try JSONReader.parse(Array(#"[null,true,7,"s",[1],{"k":null}]"#.utf8))
        let elements = try #require(document.arrayValue)
        #expect(elements.count == 6)
        #expect(elements[0].isNull)
        #expect(elements[1].boolValue == true)
        #expect(elements[2].intValue == 7)
        #expect(elements[2].doubleValue == 7)
        #expect(elements[3].stringValue == "s")
        #expect(elements[4].arrayValue == [.number("1")])
        let members = try #require(elements[5].objectMembers)
        #expect(members.count == 1)
        #expect(members.first?.key == "k")
        #expect(members.first?.value == .null)

        for element in elements {
            #expect(element.isNull == (element == .null))
            #expect((element.stringValue != nil) == (element == .string("s")))
        }
        #expect(elements[3].intValue == nil)
        #expect(elements[3].doubleValue == nil)
        #expect(elements[2].stringValue == nil)
        #expect(elements[0].boolValue == nil)
        #expect(elements[5].arrayValue == nil)
        #expect(elements[4].objectMembers == nil)
        #expect(!elements[1].isNull)
    }

    /// RFC 7493 §2.3 compares names as sequences of code points: canonically
    /// equivalent names (NFC and NFD, a compatibility singleton and its letter)
    /// are two members, small objects (pairwise check) and large ones (set) alike.
    @Test(
        "names that differ only by Unicode normalization are two members, each found by its own spelling",
        arguments: [0, 30])
    func canonicallyEquivalentNamesAreDistinct(padding: Int) throws {
        let others = (0..<padding).map { "\"m\($0)\":0," }.joined()
        let text = "{" + others + "\"caf\u{E9}\":\"nfc\",\"cafe\u{301}\":\"nfd\",\"\u{212A}\":\"kelvin\",\"K\":\"k\"}"
        let value = try JSONReader.parse(Array(text.utf8))
        #expect(value.objectMembers?.count == padding + 4)
        #expect(value["caf\u{E9}"] == .string("nfc"))
        #expect(value["cafe\u{301}"] == .string("nfd"))
        #expect(value["\u{212A}"] == .string("kelvin"))
        #expect(value["K"] == .string("k"))
        #expect(JSONValue.object([("caf\u{E9}", .null)])["cafe\u{301}"] == nil)
    }

    @Test("equal values compare strings and names as code points: NFC and NFD spellings differ")
    func equalityIsByCodePoints() {
        #expect(JSONValue.string("caf\u{E9}") != .string("cafe\u{301}"))
        #expect(JSONValue.object([("caf\u{E9}", .null)]) != .object([("cafe\u{301}", .null)]))
        #expect(JSONValue.string("cafe\u{301}") == .string("cafe\u{301}"))
    }
}
