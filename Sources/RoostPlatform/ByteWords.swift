/// Byte scans eight bytes at a time (SWAR: a `UInt64` read from the buffer
/// and tested with carries, no vector unit), for the loops that look at
/// every byte of a request's head for the few that matter (the CR ending a
/// line, a control character in a header value): ~8 instructions a byte one
/// at a time, ~2 this way (issue 25: the head parser 6.6k → 6.1k
/// instructions a registration), and a plain body's strings (its 64-byte
/// token above all: 83,905 → 83,390 a registration). A run shorter than
/// eight bytes is scanned byte by byte, as before.
///
/// Free functions, `@inlinable`: members of a `package` type are not inlined
/// into another module, and the scans' predicates are closures that must be.

/// Ones in every byte of a word.
@usableFromInline let byteWordOnes: UInt64 = 0x0101_0101_0101_0101
/// The high bit of every byte of a word.
@usableFromInline let byteWordHighBits: UInt64 = 0x8080_8080_8080_8080

/// Whether some byte of `word` is below `limit` (at most 0x80). Exact, not a
/// filter: the borrow of a subtraction only reaches a byte's high bit when
/// that byte is below the limit or a lower byte already was.
@inlinable
package func wordHasByte(below limit: UInt8, in word: UInt64) -> Bool {
    precondition(limit <= 0x80, "limit \(limit) above 0x80")
    return (word &- byteWordOnes &* UInt64(limit)) & ~word & byteWordHighBits != 0
}

/// Whether some byte of `word` is `byte`.
@inlinable
package func wordHasByte(_ byte: UInt8, in word: UInt64) -> Bool {
    let difference = word ^ (byteWordOnes &* UInt64(byte))
    return (difference &- byteWordOnes) & ~difference & byteWordHighBits != 0
}

/// Whether some byte of `word` is 0x80 or above.
@inlinable
package func wordHasHighByte(_ word: UInt64) -> Bool { word & byteWordHighBits != 0 }

/// The index of the first byte at or after `start` for which `stops` is
/// true, or `bytes.count`. `mayStop` looks at eight bytes at once and must
/// be true for every word holding a byte that stops (it may be true for
/// others: those bytes are then looked at one by one). O(bytes).
@inlinable
package func firstByteIndex(
    in bytes: UnsafeBufferPointer<UInt8>, from start: Int, mayStop: (UInt64) -> Bool, stops: (UInt8) -> Bool
) -> Int {
    precondition(start >= 0 && start <= bytes.count, "scan from \(start) of \(bytes.count) bytes")
    var index = start
    if let base = bytes.baseAddress {
        let raw = UnsafeRawPointer(base)
        while index + 8 <= bytes.count {
            let word = raw.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            if mayStop(word) {
                for offset in index..<index + 8 where stops(bytes[offset]) { return offset }
            }
            index += 8
        }
    }
    while index < bytes.count {
        if stops(bytes[index]) { return index }
        index += 1
    }
    return index
}

/// How many bytes of `bytes` at or after `start` are `byte`, eight at a time:
/// an exact mark per equal byte (the high bit of each byte of `difference`
/// that is zero; no carry crosses bytes, as the low seven bits are added
/// apart from the eighth), summed eight at a time. O(bytes).
@inlinable
package func countOfByte(_ byte: UInt8, in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
    precondition(start >= 0 && start <= bytes.count, "count from \(start) of \(bytes.count) bytes")
    let lowBits = ~byteWordHighBits
    let pattern = byteWordOnes &* UInt64(byte)
    var count = 0
    var index = start
    if let base = bytes.baseAddress {
        let raw = UnsafeRawPointer(base)
        while index + 8 <= bytes.count {
            let difference = raw.loadUnaligned(fromByteOffset: index, as: UInt64.self) ^ pattern
            let nonzero = ((difference & lowBits) &+ lowBits) | difference
            // One bit a byte moved to the byte's bottom, summed by a multiply into the
            // top byte (at most 8: no carry); `nonzeroBitCount` is ~18 instructions
            // a word without the `popcnt` instruction (this build's x86-64 baseline).
            // (`>>` binds tighter than `&*` in Swift: the product is parenthesized.)
            count += Int(truncatingIfNeeded: (((~nonzero & byteWordHighBits) >> 7) &* byteWordOnes) >> 56)
            index += 8
        }
    }
    while index < bytes.count {
        if bytes[index] == byte { count += 1 }
        index += 1
    }
    return count
}
