/// Why `Base64.decode` refused a text.
package enum Base64Error: Error, Hashable, Sendable, CustomStringConvertible {
    /// The length is not a multiple of 4 (padding is required).
    case length(Int)
    /// A byte outside the standard alphabet, or `=` before the end, at this offset.
    case character(offset: Int)
    /// The bits after the last byte are not zero (a second spelling of the same bytes).
    case nonZeroPadBits

    package var description: String {
        switch self {
        case .length(let count): "base64 text of \(count) bytes is not a multiple of 4"
        case .character(let offset): "base64 text has a byte outside its alphabet at offset \(offset)"
        case .nonZeroPadBits: "base64 text ends with padding bits that are not zero"
        }
    }
}

/// Base64 with the standard alphabet and padding (RFC 4648 §4), as etcd's
/// JSON gateway carries `bytes` fields (keys and values). Decoding is strict:
/// one spelling per byte string, so no two texts decode to the same key.
package enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    /// 255 for a byte outside the alphabet, else its 6-bit value.
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 255, count: 256)
        for (index, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(index) }
        return table
    }()

    /// Returns the padded base64 text of `bytes`. O(n).
    package static func encode(_ bytes: some Collection<UInt8>) -> String {
        var output: [UInt8] = []
        output.reserveCapacity((bytes.count + 2) / 3 * 4)
        var iterator = bytes.makeIterator()
        while let first = iterator.next() {
            let second = iterator.next()
            let third = iterator.next()
            let group = UInt32(first) << 16 | UInt32(second ?? 0) << 8 | UInt32(third ?? 0)
            output.append(alphabet[Int(group >> 18 & 63)])
            output.append(alphabet[Int(group >> 12 & 63)])
            output.append(second == nil ? UInt8(ascii: "=") : alphabet[Int(group >> 6 & 63)])
            output.append(third == nil ? UInt8(ascii: "=") : alphabet[Int(group & 63)])
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Returns the bytes that padded, standard-alphabet base64 `text` spells.
    /// Refuses a length that is not a multiple of 4, any byte outside the
    /// alphabet (whitespace included), `=` other than one or two at the end,
    /// and non-zero bits after the last byte. O(n).
    package static func decode(_ text: String) throws(Base64Error) -> [UInt8] {
        let input = Array(text.utf8)
        guard input.count % 4 == 0 else { throw .length(input.count) }
        var padding = 0
        if input.last == UInt8(ascii: "=") {
            padding = input[input.count - 2] == UInt8(ascii: "=") ? 2 : 1
        }
        var output: [UInt8] = []
        output.reserveCapacity(input.count / 4 * 3)
        var offset = 0
        while offset < input.count {
            let isLast = offset + 4 == input.count
            let padded = isLast ? padding : 0
            var group: UInt32 = 0
            for index in offset..<(offset + 4 - padded) {
                let value = values[Int(input[index])]
                guard value != 255 else { throw .character(offset: index) }
                group = group << 6 | UInt32(value)
            }
            group <<= UInt32(6 * padded)
            output.append(UInt8(truncatingIfNeeded: group >> 16))
            switch padded {
            case 0:
                output.append(UInt8(truncatingIfNeeded: group >> 8))
                output.append(UInt8(truncatingIfNeeded: group))
            case 1:
                guard group & 0xFF == 0 else { throw .nonZeroPadBits }
                output.append(UInt8(truncatingIfNeeded: group >> 8))
            default:
                precondition(padded == 2, "a base64 group has at most 2 padding bytes, got \(padded)")
                guard group & 0xFFFF == 0 else { throw .nonZeroPadBits }
            }
            offset += 4
        }
        return output
    }
}
