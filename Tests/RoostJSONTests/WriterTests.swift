import RoostJSON
import Testing

@Suite("JSONWriter")
struct WriterTests {
    private func text(_ writer: JSONWriter) -> String {
        String(decoding: writer.bytes, as: UTF8.self)
    }

    @Test("structural calls insert commas and colons")
    func structure() {
        var writer = JSONWriter()
        writer.beginObject()
        writer.member("id", 7)
        writer.key("tags")
        writer.beginArray()
        writer.string("a")
        writer.int(-2)
        writer.beginObject()
        writer.endObject()
        writer.beginArray()
        writer.endArray()
        writer.endArray()
        writer.member("ok", true)
        writer.member("name", "roost")
        writer.member("locale", nil as String?)
        writer.member("region", "eu" as String?)
        writer.memberNull("gone")
        writer.key("raw")
        writer.rawUTF8(Array(#"{"cached":[1,2]}"#.utf8))
        writer.key("big")
        writer.uint64(UInt64.max)
        writer.key("ratio")
        writer.double(0.5)
        writer.endObject()
        #expect(
            text(writer)
                == #"{"id":7,"tags":["a",-2,{},[]],"ok":true,"name":"roost","locale":null,"region":"eu","#
                + #""gone":null,"raw":{"cached":[1,2]},"big":18446744073709551615,"ratio":0.5}"#)
    }

    @Test("asciiString writes bytes as a string value, with the commas of any value")
    func asciiString() {
        let stamp = Array("2026-09-20T14:02:11.000Z".utf8)
        var writer = JSONWriter()
        writer.beginObject()
        writer.member("id", 7)
        writer.key("at")
        stamp.withUnsafeBufferPointer { writer.asciiString($0) }
        writer.key("list")
        writer.beginArray()
        stamp.withUnsafeBufferPointer { writer.asciiString($0) }
        stamp.withUnsafeBufferPointer { writer.asciiString($0) }
        writer.endArray()
        writer.endObject()
        #expect(
            text(writer)
                == #"{"id":7,"at":"2026-09-20T14:02:11.000Z","list":["2026-09-20T14:02:11.000Z","#
                + #""2026-09-20T14:02:11.000Z"]}"#)
    }

    @Test("rawValue keeps exactly the bytes written within its bound, as a value or an open object")
    func rawValue() {
        func write(_ text: String) -> (UnsafeMutableBufferPointer<UInt8>) -> Int {
            { buffer in
                for (index, byte) in text.utf8.enumerated() { buffer[index] = byte }
                return text.utf8.count
            }
        }
        var writer = JSONWriter(reservingCapacity: 4)  // grows while the values are written
        writer.beginArray()
        writer.rawValue(maxBytes: 64, write(#"{"a":1}"#))
        writer.rawValue(maxBytes: 5, write("12345"))  // exactly the bound
        writer.rawValue(maxBytes: 4096, leavesObjectOpen: true, write(#"{"b":2"#))
        writer.member("c", 3)
        writer.endObject()
        writer.endArray()
        #expect(text(writer) == #"[{"a":1},12345,{"b":2,"c":3}]"#)
        var empty = JSONWriter()
        empty.rawValue(maxBytes: 0, write(""))
        #expect(empty.bytes.isEmpty)
    }

    @Test("a top-level scalar is a whole document")
    func topLevelScalar() {
        var writer = JSONWriter()
        writer.string("x")
        #expect(text(writer) == #""x""#)
    }

    @Test(
        "strings escape quote, backslash and control characters and copy other UTF-8",
        arguments: [
            ("plain", #""plain""#),
            ("a\"b", #""a\"b""#),
            ("a\\b", #""a\\b""#),
            ("\u{08}\u{0C}\n\r\t", #""\b\f\n\r\t""#),
            ("\u{0}\u{1}\u{1F}", #""\u0000\u0001\u001f""#),
            ("/ \u{7F}", "\"/ \u{7F}\""),
            ("é€😀", "\"é€😀\""),
            ("", #""""#),
        ])
    func stringEscapes(_ input: String, _ expected: String) throws {
        var writer = JSONWriter()
        writer.string(input)
        #expect(text(writer) == expected)
        #expect(try JSONReader.parse(writer.bytes) == .string(input))
    }

    @Test(
        "integers are written exactly at the extremes",
        arguments: [
            (0, "0"), (-1, "-1"), (10, "10"), (Int.max, "9223372036854775807"), (Int.min, "-9223372036854775808"),
        ])
    func integers(_ value: Int, _ expected: String) throws {
        var writer = JSONWriter()
        writer.int(value)
        #expect(text(writer) == expected)
        #expect(try JSONReader.parse(writer.bytes).intValue == value)
    }

    @Test(
        "doubles are written in a JSON form that reads back to the same Double",
        arguments: [
            0.0, -0.0, 1.0, 0.1, -2.5, 1e-5, 1e21, 123_456_789.125, Double.leastNonzeroMagnitude,
            Double.greatestFiniteMagnitude,
            -Double.leastNormalMagnitude,
        ])
    func doubles(_ value: Double) throws {
        var writer = JSONWriter()
        writer.double(value)
        let parsed = try JSONReader.parse(writer.bytes)
        let number = try #require(parsed.doubleValue, "\(text(writer))")
        #expect(number == value)
        #expect(number.sign == value.sign)
    }

    @Test(
        "values with tricky strings round-trip: parse(write(v)) == v",
        arguments: [
            JSONValue.null, .bool(true), .number("-0.0e+00"), .number("123456789012345678901234567890"),
            .string("quote \" backslash \\ slash / tab \t nul \u{0} del \u{7F}"),
            .string("non-ASCII é ß 日本語 and emoji 😀👍🏽🇫🇷"),
            .array([.string("\u{1}\u{1E}"), .array([]), .object([])]),
            .object([("", .null), ("a\"b\\c", .string("\n")), ("😀", .array([.number("1")])), ("a", .bool(false))]),
            .object([("dup", .number("1")), ("Dup", .number("2"))]),
        ])
    func roundTrip(_ value: JSONValue) throws {
        var writer = JSONWriter()
        writer.value(value)
        #expect(try JSONReader.parse(writer.bytes) == value)
    }

    @Test("a value naming a member twice is written as it is, and the reader refuses it (I-JSON)")
    func duplicateNamesWrittenThenRefused() {
        var writer = JSONWriter()
        writer.value(.object([("dup", .number("1")), ("dup", .number("2"))]))
        #expect(writer.bytes == Array(#"{"dup":1,"dup":2}"#.utf8))
        #expect(throws: JSONError(kind: .duplicateKey, offset: 9)) { try JSONReader.parse(writer.bytes) }
    }

    @Test("structural misuse stops the process")
    func misuseTraps() async {
        await #expect(processExitsWith: .failure) {
            var writer = JSONWriter()
            writer.key("outside")
        }
        await #expect(processExitsWith: .failure) {
            var writer = JSONWriter()
            writer.beginObject()
            writer.int(1)
        }
        await #expect(processExitsWith: .failure) {
            var writer = JSONWriter()
            writer.beginArray()
            writer.endObject()
        }
        await #expect(processExitsWith: .failure) {
            var writer = JSONWriter()
            writer.endArray()
        }
        await #expect(processExitsWith: .failure) {
            var writer = JSONWriter()
            writer.beginObject()
            writer.key("a")
            writer.endObject()
        }
        await #expect(processExitsWith: .failure) {
            var writer = JSONWriter()
            writer.int(1)
            writer.int(2)
        }
        await #expect(processExitsWith: .failure) {
            var writer = JSONWriter()
            writer.double(.nan)
        }
        await #expect(processExitsWith: .failure) {
            var writer = JSONWriter()
            for _ in 0...64 { writer.beginArray() }
        }
    }

    @Test("64 containers deep: each level keeps its own kind, emptiness and pending key")
    func deepNesting() throws {
        var writer = JSONWriter()
        var expected = ""
        for level in 0..<64 {
            if level % 2 == 0 {
                writer.beginObject()
                writer.key("k\(level)")
                expected += "{\"k\(level)\":"
            } else {
                writer.beginArray()
                writer.int(level)
                expected += "[\(level),"
            }
        }
        writer.null()
        expected += "null"
        for level in (0..<64).reversed() {
            if level % 2 == 0 {
                writer.key("after\(level)")
                writer.bool(true)
                writer.endObject()
                expected += ",\"after\(level)\":true}"
            } else {
                writer.endArray()
                expected += "]"
            }
        }
        #expect(text(writer) == expected)
        #expect(try JSONReader.parse(writer.bytes, limits: JSONLimits(maxDepth: 64)) != .null)
    }

    @Test("a writer over a reused buffer writes the same bytes as a new one, whatever the buffer held")
    func reusedBuffer() {
        func render(_ writer: inout JSONWriter) {
            writer.beginObject()
            writer.key("a")
            writer.int(1)
            writer.key("b")
            writer.beginArray()
            writer.string("x")
            writer.endArray()
            writer.endObject()
        }
        var fresh = JSONWriter()
        render(&fresh)
        var reused = JSONWriter(reusing: Array(#"{"left":"over"}"#.utf8) + [UInt8](repeating: 0, count: 100))
        render(&reused)
        #expect(reused.bytes == fresh.bytes)
        #expect(text(reused) == #"{"a":1,"b":["x"]}"#)
    }
}
