import Testing

@testable import RoostModel

/// `Hex.decodeWord` (eight characters at a time) against `Hex.digitValue`
/// (one at a time), and a token parsed through it against the bytes the
/// characters spell.
@Suite("Hex: eight digits decoded at once, exactly as one at a time")
struct HexTests {
    /// The four bytes `digitValue` gives for eight characters, or nil.
    static func reference(_ characters: [UInt8]) -> UInt32? {
        var result: UInt32 = 0
        for pair in 0..<4 {
            guard let high = Hex.digitValue(characters[2 * pair]), let low = Hex.digitValue(characters[2 * pair + 1])
            else { return nil }
            result |= UInt32(high << 4 | low) << (8 * pair)
        }
        return result
    }

    static func word(_ characters: [UInt8]) -> UInt64 {
        characters.enumerated().reduce(0) { $0 | UInt64($1.element) << (8 * $1.offset) }
    }

    @Test("every byte value at every position, among valid digits, decodes as digitValue says")
    func everyByteAtEveryPosition() {
        let valid = Array("0aF9b7Ce".utf8)
        #expect(Hex.decodeWord(Self.word(valid)) == Self.reference(valid))
        #expect(Hex.decodeWord(Self.word(valid)) == 0xCE_B7_F9_0A)
        for position in 0..<8 {
            for value in 0...255 {
                var characters = valid
                characters[position] = UInt8(value)
                #expect(
                    Hex.decodeWord(Self.word(characters)) == Self.reference(characters),
                    "byte \(value) at \(position)")
            }
        }
    }

    @Test("random words, mostly digits, and the bytes next to each digit range")
    func randomWords() {
        let edges: [UInt8] = Array("/0:@9AFGaf`g".utf8) + [0x00, 0x7F, 0x80, 0xB0, 0xE1, 0xFF, 0x10, 0x50]
        let digits = Array("0123456789abcdefABCDEF".utf8)
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let characters = (0..<8).map { _ in
                Int.random(in: 0..<4, using: &generator) == 0
                    ? edges.randomElement(using: &generator)! : digits.randomElement(using: &generator)!
            }
            #expect(Hex.decodeWord(Self.word(characters)) == Self.reference(characters), "\(characters)")
        }
    }

    @Test("a token's text of every accepted length parses to the bytes it spells, and a bad digit anywhere is refused")
    func tokensThroughTheWordPath() throws {
        let spelled = (0..<200).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
        for length in stride(from: Limits.apnsTokenHexCharactersMin, through: 90, by: 2) {
            let bytes = Array(spelled.prefix(length / 2))
            let upper = Hex.encode(bytes).uppercased()
            for text in [Hex.encode(bytes), upper] {
                let token = try PushToken(parsing: text, platform: .ios)
                #expect(token.withBytes { Array($0) } == bytes)
                for position in [0, 7, 8, length - 1] {
                    var broken = Array(text.utf8)
                    broken[position] = UInt8(ascii: "g")
                    #expect(throws: RegistryRejection.invalidTokenFormat) {
                        try PushToken(parsing: String(decoding: broken, as: UTF8.self), platform: .ios)
                    }
                }
            }
        }
    }
}
