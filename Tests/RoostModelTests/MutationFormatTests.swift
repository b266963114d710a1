import Testing

@testable import RoostModel

/// The device upsert's bytes, pinned: logs and snapshots on disk hold them,
/// so a change to the writer (or the reader) that moves one byte must fail
/// here first, not at a user's restart. The format is documented on
/// `MutationCodec` (version 2). Hex, 48 bytes a line.
@Suite("Mutation format: the device upsert's bytes")
struct MutationFormatTests {
    static let fullDevice = [
        "02010700000001014d00000000000000000000010f00636f6d2e6578616d706c652e617070011800d098d0bdd181d182",
        "d0b0d0bbd0bbd18fd186d0b8d18f2d3101eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee",
        "ee010b00757365725f343220e29c93e8030000000000008813000000000000d007000000000000010500322e342e3001",
        "1000416d65726963612f4e65775f596f726b010500656e2d5553010003030061676501000000000000e0bf0400626574",
        "61030400706c616e00030070726f7017000000000000010a00526561737369676e656400286bee0100000000",
    ].joined()

    static let minimalDevice = [
        "020107000000000001000000000000000120001f212bae9a2200e74eae046afb5606bc0c8c48c9b307f6c96f23bb3a57",
        "5484050000000000000000000000000000000000000000ffffffffffffffff000000020100ffffffffffffffff000000",
        "00000100000000",
    ].joined()

    static let sequencedDevice = [
        "020107000000000001000000000000000120001f212bae9a2200e74eae046afb5606bc0c8c48c9b307f6c96f23bb3a57",
        "5484050000000000000000000000000000000000000000ffffffffffffffff000000020100ffffffffffffffff000000",
        "000002000000010000000000000000",
    ].joined()

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        return String(decoding: bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 15)]] }, as: UTF8.self)
    }

    static func bytes(_ hex: String) -> [UInt8] {
        let digits = Array(hex.utf8)
        return stride(from: 0, to: digits.count, by: 2).map {
            UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)!
        }
    }

    @Test(
        "every field of a device, a minimal one and one with a client sequence encode to the pinned bytes, and read back"
    )
    func pinned() throws {
        let samples = try MutationCodecTests.samples()
        for (mutation, pinned) in [
            (samples[0], Self.fullDevice), (samples[1], Self.minimalDevice), (samples[3], Self.sequencedDevice),
        ] {
            #expect(Self.hex(MutationCodec.encode(mutation)) == pinned)
            #expect(try MutationCodec.decode(Self.bytes(pinned)) == mutation)
        }
    }
}
