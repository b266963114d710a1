/// Writes little-endian fields straight into memory a caller reserved, with
/// every write's bounds checked: a record of many small fields (the device
/// upsert) in one pass instead of an `Array.append` a field (35–100
/// instructions each, ~2,500 a device; issue 25). Writes the same bytes as
/// `LittleEndianWriter` (`MutationFormatTests` pins them).
struct FieldCursor: ~Copyable {
    private let base: UnsafeMutableRawBufferPointer
    /// Bytes written from `base`'s start.
    private(set) var count: Int

    init(_ base: UnsafeMutableRawBufferPointer, from start: Int) {
        precondition(start >= 0 && start <= base.count, "cursor at \(start) of \(base.count) bytes")
        self.base = base
        self.count = start
    }

    @inline(__always)
    private mutating func reserve(_ length: Int) -> Int {
        precondition(length <= base.count - count, "field of \(length) bytes past the record's \(base.count)")
        let offset = count
        count += length
        return offset
    }

    mutating func u8(_ value: UInt8) { base[reserve(1)] = value }

    mutating func u16(_ value: UInt16) {
        base.storeBytes(of: value.littleEndian, toByteOffset: reserve(2), as: UInt16.self)
    }

    mutating func u32(_ value: UInt32) {
        base.storeBytes(of: value.littleEndian, toByteOffset: reserve(4), as: UInt32.self)
    }

    mutating func u64(_ value: UInt64) {
        base.storeBytes(of: value.littleEndian, toByteOffset: reserve(8), as: UInt64.self)
    }

    mutating func i64(_ value: Int64) { u64(UInt64(bitPattern: value)) }

    /// Bytes as they are.
    mutating func bytes(_ value: UnsafeRawBufferPointer) {
        let offset = reserve(value.count)
        if !value.isEmpty { (base.baseAddress! + offset).copyMemory(from: value.baseAddress!, byteCount: value.count) }
    }

    /// A field: its length as `u16`, then its bytes (`LittleEndianWriter.field`).
    mutating func field(_ value: UnsafeRawBufferPointer) {
        precondition(value.count <= Int(UInt16.max), "field of \(value.count) bytes")
        u16(UInt16(value.count))
        bytes(value)
    }

    mutating func optionalString(_ value: String?) {
        guard let value else { return u8(0) }
        u8(1)
        // In place when contiguous (a native string always is); else a contiguous copy.
        if value.utf8.withContiguousStorageIfAvailable({ field(UnsafeRawBufferPointer($0)) }) == nil {
            var contiguous = value
            contiguous.withUTF8 { field(UnsafeRawBufferPointer($0)) }
        }
    }

    mutating func optionalTimestamp(_ value: Timestamp?) { i64(value?.millisecondsSinceEpoch ?? -1) }

    /// The most bytes `optionalString` writes for `value`.
    static func bytesMax(ofOptionalString value: String?) -> Int { value.map { 3 + $0.utf8.count } ?? 1 }
}
