/// Lower-case hex, the one encoder and decoder of the model and the API
/// (tokens, key digests, signing secrets). RoostHTTP keeps its own digit
/// reader for chunk sizes: it must not depend on the model.
package enum Hex {
    private static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Returns the lower-case hex form of `bytes`. O(bytes).
    package static func encode(_ bytes: [UInt8]) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { out in
            bytes.withUnsafeBytes { spell($0, into: out) }
            return bytes.count * 2
        }
    }

    /// Writes the lower-case hex form of `bytes` into `out`, which holds
    /// exactly twice as many: the one loop behind `encode`, a token's text
    /// (`PushToken.withText`) and a device's JSON (`DeviceLineWriter`). O(bytes).
    package static func spell(_ bytes: UnsafeRawBufferPointer, into out: UnsafeMutableBufferPointer<UInt8>) {
        precondition(out.count == bytes.count * 2, "\(out.count) places for the hex of \(bytes.count) bytes")
        digits.withUnsafeBufferPointer { digits in
            // Index loops: an iterator here allocates in a debug build.
            for index in 0..<bytes.count {
                out[2 * index] = digits[Int(bytes[index] >> 4)]
                out[2 * index + 1] = digits[Int(bytes[index] & 0x0F)]
            }
        }
    }

    /// Returns the bytes of a hex string (either case), or nil when its length
    /// is odd or a character is not a hex digit. O(text).
    package static func decode(_ text: some StringProtocol) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var decoded = true
        let out = [UInt8](unsafeUninitializedCapacity: utf8.count / 2) { out, initialized in
            decoded = utf8.withUnsafeBufferPointer { decode($0, into: out) }
            initialized = decoded ? utf8.count / 2 : 0
        }
        return decoded ? out : nil
    }

    /// Writes the bytes of the hex digits `text` (either case; an even count)
    /// into `out`, which has room for exactly half as many; returns false, with
    /// `out` partly written, when a character is not a hex digit. Eight
    /// characters at a time (`decodeWord`), the rest in pairs: the one loop
    /// behind `decode` and a token's text (`PushToken.init(parsingUTF8:)`). O(text).
    @inline(__always)
    package static func decode(_ text: UnsafeBufferPointer<UInt8>, into out: UnsafeMutableBufferPointer<UInt8>) -> Bool
    {
        precondition(text.count % 2 == 0 && out.count == text.count / 2, "\(out.count) places for \(text.count) digits")
        var index = 0
        if let source = text.baseAddress, let target = out.baseAddress {
            let (characters, bytes) = (UnsafeRawPointer(source), UnsafeMutableRawPointer(target))
            while index + 8 <= text.count {
                let word = UInt64(littleEndian: characters.loadUnaligned(fromByteOffset: index, as: UInt64.self))
                guard let four = decodeWord(word) else { return false }
                bytes.storeBytes(of: four.littleEndian, toByteOffset: index / 2, as: UInt32.self)
                index += 8
            }
        }
        while index < text.count {
            guard let high = digitValue(text[index]), let low = digitValue(text[index + 1]) else { return false }
            out[index / 2] = high << 4 | low
            index += 2
        }
        return true
    }

    /// Decodes eight hex digits (either case), loaded little-endian from
    /// text (the first character in the lowest byte), into their four bytes
    /// (the first byte in the lowest byte of the result), or nil when a
    /// character is not a hex digit: `digitValue` for a word at once (SWAR,
    /// ~40 instructions for eight characters against ~16 a character one at
    /// a time, inlined into `decode(_:into:)`: a token's 64 characters on
    /// every registration, issue 25).
    @inline(__always)
    package static func decodeWord(_ word: UInt64) -> UInt32? {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highBits: UInt64 = 0x8080_8080_8080_8080
        guard word & highBits == 0 else { return nil }
        // Upper-case letters folded onto lower-case ones: only 0x41–0x46 and
        // 0x61–0x66 fold into a–f. Digits are checked unfolded (0x10–0x19
        // would fold onto them), and keep their values (the 0x20 bit is set).
        let folded = word | (ones &* 0x20)
        // A byte below 0x80 plus (0x80 − low) reaches its high bit exactly when
        // it is at least `low`; no carry leaves the byte.
        let atLeastZero = word &+ ones &* (0x80 - 0x30)
        let aboveNine = word &+ ones &* (0x7F - 0x39)
        let atLeastA = folded &+ ones &* (0x80 - 0x61)
        let aboveF = folded &+ ones &* (0x7F - 0x66)
        let digits = atLeastZero & ~aboveNine & highBits
        let letters = atLeastA & ~aboveF & highBits
        guard digits | letters == highBits else { return nil }
        // A digit's value is its low nibble; a letter's low nibble is 1–6 for a–f.
        let nibbles = (folded & (ones &* 0x0F)) &+ (letters >> 7) &* 9
        // Pairs of nibbles into bytes, one in each 16-bit lane, then packed.
        let laneNibbles: UInt64 = 0x000F_000F_000F_000F
        var packed = ((nibbles & laneNibbles) << 4) | ((nibbles >> 8) & laneNibbles)
        packed = (packed | (packed >> 8)) & 0x0000_FFFF_0000_FFFF
        packed = (packed | (packed >> 16)) & 0x0000_0000_FFFF_FFFF
        return UInt32(truncatingIfNeeded: packed)
    }

    /// Returns the value of one hex digit (either case), or nil.
    package static func digitValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
