import CSystemShims

/// Little-endian integer access on byte arrays, and CRC-32C. Every on-disk
/// integer in RoostStorage is little-endian (docs/storage.md).
package enum Bytes {
    /// Appends `value` as `width` little-endian bytes.
    package static func append<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
        var remaining = value.littleEndian
        withUnsafeBytes(of: &remaining) { bytes.append(contentsOf: $0) }
    }

    /// Returns the little-endian integer at `offset`; the caller has checked the bounds.
    package static func read<T: FixedWidthInteger>(_: T.Type, _ bytes: ArraySlice<UInt8>, at offset: Int) -> T {
        precondition(
            offset >= bytes.startIndex && offset + MemoryLayout<T>.size <= bytes.endIndex,
            "read of \(MemoryLayout<T>.size) bytes at \(offset) outside \(bytes.startIndex)..<\(bytes.endIndex)")
        var value: T = 0
        for index in 0..<MemoryLayout<T>.size {
            value |= T(bytes[offset + index]) << (8 * index)
        }
        return value
    }

    /// Returns the little-endian integer at `offset` of `bytes`.
    package static func read<T: FixedWidthInteger>(_ type: T.Type, _ bytes: [UInt8], at offset: Int) -> T {
        read(type, bytes[...], at: offset)
    }

    /// Overwrites `width` bytes at `offset` with `value`, little-endian.
    package static func store<T: FixedWidthInteger>(_ value: T, into bytes: inout [UInt8], at offset: Int) {
        precondition(offset >= 0 && offset + MemoryLayout<T>.size <= bytes.count, "store outside buffer at \(offset)")
        for index in 0..<MemoryLayout<T>.size {
            bytes[offset + index] = UInt8(truncatingIfNeeded: value >> (8 * index))
        }
    }

    /// Returns true when every byte of `bytes` is zero. O(n).
    package static func allZero(_ bytes: ArraySlice<UInt8>) -> Bool {
        firstNonZero(bytes) == nil
    }

    /// Returns the index of the first nonzero byte, or nil. Scans eight bytes
    /// at a time: recovery checks the whole preallocated tail of a segment
    /// (up to 64 MiB of zeros), and a byte loop made start-up slow.
    package static func firstNonZero(_ bytes: ArraySlice<UInt8>) -> Int? {
        bytes.withUnsafeBufferPointer { buffer -> Int? in
            guard let base = buffer.baseAddress else { return nil }
            let raw = UnsafeRawPointer(base)
            var offset = 0
            while offset + 8 <= buffer.count {
                if raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self) != 0 { break }
                offset += 8
            }
            while offset < buffer.count {
                if buffer[offset] != 0 { return bytes.startIndex + offset }
                offset += 1
            }
            return nil
        }
    }

    /// Returns `count` rounded up to a multiple of 8.
    static func aligned8(_ count: Int) -> Int {
        (count + 7) & ~7
    }
}

/// CRC-32C (Castagnoli) through the SSE4.2 instruction in CSystemShims.
package enum CRC32C {
    /// Returns the CRC-32C of `bytes`, continuing from `crc` (0 to start). O(n).
    package static func checksum(_ bytes: ArraySlice<UInt8>, continuing crc: UInt32 = 0) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0, continuing: crc) }
    }

    /// Returns the CRC-32C of `bytes`, continuing from `crc` (0 to start). O(n).
    package static func checksum(_ bytes: [UInt8], continuing crc: UInt32 = 0) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0, continuing: crc) }
    }

    /// Returns the CRC-32C of `bytes`, continuing from `crc` (0 to start). O(n).
    package static func checksum(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        roost_crc32c(crc, bytes.baseAddress, bytes.count)
    }
}
