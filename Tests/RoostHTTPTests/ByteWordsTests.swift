import RoostPlatform
import Testing

@testable import RoostTesting

/// The eight-bytes-at-a-time scans (`RoostPlatform/ByteWords.swift`) against
/// the plain byte loops they replace.
@Suite("Byte scans eight bytes at a time")
struct ByteWordsTests {
    @Test("a word has a byte below a limit, or a given byte, exactly when one of its eight bytes does")
    func wordTests() {
        var generator = SeededRandom(seed: 20_261_207)
        let limits: [UInt8] = [0, 1, 0x20, 0x7F, 0x80]
        let wanted: [UInt8] = [0, 0x0D, 0x22, 0x5C, 0x7F, 0x80, 0xFF]
        for _ in 0..<20_000 {
            // Bytes near the edges the tests use, so that each answer is often true and often false.
            let bytes = (0..<8).map { _ in
                Bool.random(using: &generator)
                    ? UInt8.random(in: 0x1E...0x24, using: &generator)
                    : (Bool.random(using: &generator)
                        ? UInt8.random(in: 0x5B...0x81, using: &generator)
                        : UInt8.random(in: 0...255, using: &generator))
            }
            let word = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
            for limit in limits {
                #expect(wordHasByte(below: limit, in: word) == bytes.contains { $0 < limit }, "\(bytes) < \(limit)")
            }
            for byte in wanted {
                #expect(wordHasByte(byte, in: word) == bytes.contains(byte), "\(bytes) has \(byte)")
            }
            #expect(wordHasHighByte(word) == bytes.contains { $0 >= 0x80 }, "\(bytes)")
        }
    }

    @Test("the first byte that stops, from every start, in buffers of 0 to 40 bytes, as a byte loop finds it")
    func firstIndexMatchesALoop() {
        var generator = SeededRandom(seed: 7)
        let stops: [(name: String, word: (UInt64) -> Bool, byte: (UInt8) -> Bool)] = [
            ("CR", { wordHasByte(13, in: $0) }, { $0 == 13 }),
            (
                "control but tab", { wordHasByte(below: 0x20, in: $0) || wordHasByte(0x7F, in: $0) },
                { ($0 < 0x20 && $0 != 9) || $0 == 0x7F }
            ),
            (
                "not plain JSON string text",
                {
                    wordHasByte(below: 0x20, in: $0) || wordHasHighByte($0) || wordHasByte(0x7F, in: $0)
                        || wordHasByte(0x22, in: $0) || wordHasByte(0x5C, in: $0)
                }, { $0 < 0x20 || $0 >= 0x7F || $0 == 0x22 || $0 == 0x5C }
            ),
        ]
        for _ in 0..<3_000 {
            let count = Int.random(in: 0...40, using: &generator)
            let rare = UInt8.random(in: 1...12, using: &generator)
            let bytes = (0..<count).map { _ in
                UInt8.random(in: 0...rare, using: &generator) == 0
                    ? [9, 13, 0x1F, 0x22, 0x5C, 0x7F, 0x80, 0xE2].randomElement(using: &generator)!
                    : UInt8.random(in: 0x20...0x7E, using: &generator)
            }
            bytes.withUnsafeBufferPointer { buffer in
                for (name, word, byte) in stops {
                    for start in 0...count {
                        let expected = (start..<count).first { byte(buffer[$0]) } ?? count
                        let found = firstByteIndex(in: buffer, from: start, mayStop: word, stops: byte)
                        #expect(found == expected, "\(name) in \(bytes) from \(start)")
                    }
                }
            }
        }
    }

    @Test("the count of a byte from every start, in buffers of 0 to 40 bytes, as a byte loop counts it")
    func countMatchesALoop() {
        var generator = SeededRandom(seed: 11)
        for _ in 0..<3_000 {
            let count = Int.random(in: 0...40, using: &generator)
            let wanted = [0x0A, 0x00, 0x80, 0xFF].randomElement(using: &generator)! as UInt8
            // The wanted byte often, next to its neighbours (a carry between bytes would miscount).
            let bytes = (0..<count).map { _ in
                Bool.random(using: &generator)
                    ? [wanted, wanted &+ 1, wanted &- 1, 0x7F, 0x80, 0x00, 0xFF].randomElement(using: &generator)!
                    : UInt8.random(in: 0...255, using: &generator)
            }
            bytes.withUnsafeBufferPointer { buffer in
                for start in 0...count {
                    let expected = buffer[start...].count { $0 == wanted }
                    #expect(
                        countOfByte(wanted, in: buffer, from: start) == expected, "\(wanted) in \(bytes) from \(start)")
                }
            }
        }
    }
}
