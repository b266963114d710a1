import RoostJSON
import RoostTesting
import Testing

/// Builds random documents from pieces chosen to hit escapes, multi-byte UTF-8 and number forms.
struct DocumentGenerator {
    var random: SeededRandom

    static let stringPieces: [String] = [
        "a", "token", " ", "\"", "\\", "/", "\n", "\t", "\u{0}", "\u{1F}", "\u{7F}", "é", "€", "日本", "😀", "🇫🇷",
        "\u{FFFF}", "\u{10FFFF}", "\r\n",
    ]
    static let numberLiterals: [String] = [
        "0", "-0", "1", "-1", "42", "0.5", "-0.25", "1e10", "1E-7", "2.5e+3", "123456789012345678901234567890",
        "9223372036854775807", "-9223372036854775808", "0.0000001",
    ]

    mutating func string() -> String {
        var text = ""
        for _ in 0..<Int.random(in: 0...6, using: &random) {
            text += Self.stringPieces.randomElement(using: &random)!
        }
        return text
    }

    mutating func value(depth: Int) -> JSONValue {
        let kind = Int.random(in: 0..<(depth > 0 ? 7 : 5), using: &random)
        switch kind {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &random))
        case 2:
            if Bool.random(using: &random) {
                return .number(Self.numberLiterals.randomElement(using: &random)!)
            }
            return .number(String(Int.random(in: Int.min...Int.max, using: &random)))
        case 3, 4: return .string(string())
        case 5:
            return .array((0..<Int.random(in: 0...4, using: &random)).map { _ in value(depth: depth - 1) })
        default:
            // Distinct names: the reader refuses a name twice (I-JSON).
            var names = Set<String>()
            var members: [(key: String, value: JSONValue)] = []
            for _ in 0..<Int.random(in: 0...4, using: &random) {
                let name = string()
                guard names.insert(name).inserted else { continue }
                members.append((name, value(depth: depth - 1)))
            }
            return .object(members)
        }
    }
}

@Suite("Seeded random documents")
struct RandomRoundTripTests {
    @Test("random documents round-trip through the writer and the reader", arguments: 0..<8)
    func randomRoundTrip(_ batch: UInt64) throws {
        for index in 0..<100 as Range<UInt64> {
            let seed = batch * 1000 + index
            var generator = DocumentGenerator(random: SeededRandom(seed: seed))
            let value = generator.value(depth: 5)
            var writer = JSONWriter()
            writer.value(value)
            let parsed = try JSONReader.parse(writer.bytes)
            #expect(parsed == value, "seed \(seed)")
            var again = JSONWriter()
            again.value(parsed)
            #expect(again.bytes == writer.bytes, "seed \(seed)")
        }
    }

    @Test("random byte mutations of valid documents never crash and stay consistent", arguments: 0..<8)
    func mutationsAreHandled(_ batch: UInt64) {
        let interesting: [UInt8] = [
            0x00, 0x09, 0x20, 0x22, 0x2C, 0x2D, 0x2E, 0x30, 0x3A, 0x5B, 0x5C, 0x5D, 0x65, 0x75, 0x7B, 0x7D,
            0x80, 0xBF, 0xC0, 0xE0, 0xED, 0xF0, 0xF4, 0xFF,
        ]
        for index in 0..<100 as Range<UInt64> {
            let seed = 1_000_000 + batch * 1000 + index
            var generator = DocumentGenerator(random: SeededRandom(seed: seed))
            var writer = JSONWriter()
            writer.value(generator.value(depth: 4))
            var bytes = writer.bytes
            for _ in 0...Int.random(in: 0...3, using: &generator.random) where !bytes.isEmpty {
                let position = Int.random(in: 0..<bytes.count, using: &generator.random)
                switch Int.random(in: 0..<3, using: &generator.random) {
                case 0: bytes[position] = interesting.randomElement(using: &generator.random)!
                case 1: bytes.remove(at: position)
                default: bytes.insert(interesting.randomElement(using: &generator.random)!, at: position)
                }
            }
            do {
                // Whatever the mutated bytes parse to must write and read back unchanged.
                let parsed = try JSONReader.parse(bytes)
                var rewritten = JSONWriter()
                rewritten.value(parsed)
                #expect(try JSONReader.parse(rewritten.bytes) == parsed, "seed \(seed)")
            } catch {
                #expect(error.offset >= 0 && error.offset <= bytes.count, "seed \(seed): \(error)")
            }
        }
    }
}
