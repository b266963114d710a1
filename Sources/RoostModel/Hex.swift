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
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = digitValue(utf8[index]), let low = digitValue(utf8[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        return out
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
