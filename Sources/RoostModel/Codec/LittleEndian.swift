/// Appends little-endian integers and length-prefixed fields to a byte array:
/// the one writer of the model's and the engine's binary records
/// (`MutationCodec`, `EngineRecord`, tags, digests). RoostStorage, which
/// cannot import this module, has its own (`Bytes`; docs/decisions/0006).
package struct LittleEndianWriter {
    package var bytes: [UInt8] = []

    /// An empty writer.
    @inlinable package init() {}

    /// An empty writer with room for `capacity` bytes.
    @inlinable package init(capacity: Int) { bytes.reserveCapacity(capacity) }

    // Inlinable and concrete: RoostEngine writes its record framing with these,
    // and a cross-module call per field (or generic metadata per call) would
    // cost more than the bytes.
    @inlinable package mutating func u8(_ value: UInt8) { bytes.append(value) }
    @inlinable package mutating func u16(_ value: UInt16) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }
    @inlinable package mutating func u32(_ value: UInt32) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }
    @inlinable package mutating func u64(_ value: UInt64) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }
    @inlinable package mutating func i64(_ value: Int64) { u64(UInt64(bitPattern: value)) }

    /// Appends `value` as it is (already encoded bytes).
    @inlinable package mutating func append(contentsOf value: [UInt8]) { bytes.append(contentsOf: value) }

    /// A field of at most 65,535 bytes, prefixed by its length as `u16`.
    mutating func field(_ value: some Collection<UInt8>) {
        precondition(value.count <= Int(UInt16.max), "field of \(value.count) bytes")
        u16(UInt16(value.count))
        bytes.append(contentsOf: value)
    }

    /// A string's UTF-8 as a `field`, read in place (no copy into an array).
    mutating func string(_ value: String) {
        var value = value
        value.withUTF8 { field($0) }
    }

    mutating func optionalString(_ value: String?) {
        if let value {
            u8(1)
            string(value)
        } else {
            u8(0)
        }
    }

    mutating func optionalTimestamp(_ value: Timestamp?) {
        i64(value?.millisecondsSinceEpoch ?? -1)
    }
}

extension LittleEndianWriter {
    /// Appends the fields `write` stores through a `FieldCursor` into room for
    /// `bytesMax` bytes taken once (not zero-filled, nothing cut off after):
    /// a record of many small fields (the device upsert) in one pass instead
    /// of an `Array.append` a field (35–100 instructions each; issue 25). The
    /// cursor writes the same bytes as the writer's own methods
    /// (`MutationFormatTests` pins them) and traps past `bytesMax`.
    mutating func appendFields(bytesMax: Int, _ write: (inout FieldCursor) -> Void) {
        precondition(bytesMax >= 0, "room for \(bytesMax) bytes")
        bytes.append(addingCapacity: bytesMax) { span in
            span.withUnsafeMutableBufferPointer { buffer, initialized in
                var cursor = FieldCursor(
                    UnsafeMutableRawBufferPointer(UnsafeMutableBufferPointer(rebasing: buffer[0..<bytesMax])))
                write(&cursor)
                initialized = cursor.count
            }
        }
    }
}

/// Writes little-endian fields into room `LittleEndianWriter.appendFields`
/// took, each write's bounds checked (a precondition: the room is the
/// caller's bound on the record, so passing it is a bug). Lives only inside
/// `appendFields`'s closure.
struct FieldCursor: ~Copyable {
    private let room: UnsafeMutableRawBufferPointer
    /// Bytes written from the room's start.
    private(set) var count = 0

    fileprivate init(_ room: UnsafeMutableRawBufferPointer) { self.room = room }

    @inline(__always)
    private mutating func take(_ length: Int) -> Int {
        precondition(length <= room.count - count, "a field of \(length) bytes past the record's \(room.count)")
        let offset = count
        count += length
        return offset
    }

    mutating func u8(_ value: UInt8) { room[take(1)] = value }

    mutating func u16(_ value: UInt16) {
        room.storeBytes(of: value.littleEndian, toByteOffset: take(2), as: UInt16.self)
    }

    mutating func u32(_ value: UInt32) {
        room.storeBytes(of: value.littleEndian, toByteOffset: take(4), as: UInt32.self)
    }

    mutating func u64(_ value: UInt64) {
        room.storeBytes(of: value.littleEndian, toByteOffset: take(8), as: UInt64.self)
    }

    mutating func i64(_ value: Int64) { u64(UInt64(bitPattern: value)) }

    /// Bytes as they are (`LittleEndianWriter.append(contentsOf:)`).
    mutating func bytes(_ value: UnsafeRawBufferPointer) {
        let offset = take(value.count)
        if !value.isEmpty { (room.baseAddress! + offset).copyMemory(from: value.baseAddress!, byteCount: value.count) }
    }

    /// Its length as `u16`, then its bytes (`LittleEndianWriter.field`).
    mutating func field(_ value: UnsafeRawBufferPointer) {
        precondition(value.count <= Int(UInt16.max), "field of \(value.count) bytes")
        u16(UInt16(value.count))
        bytes(value)
    }

    /// `LittleEndianWriter.optionalString`.
    mutating func optionalString(_ value: String?) {
        guard var value else { return u8(0) }
        u8(1)
        value.withUTF8 { field(UnsafeRawBufferPointer($0)) }
    }

    /// `LittleEndianWriter.optionalTimestamp`.
    mutating func optionalTimestamp(_ value: Timestamp?) { i64(value?.millisecondsSinceEpoch ?? -1) }

    /// The most bytes `optionalString` writes for `value`.
    static func bytesMax(ofOptionalString value: String?) -> Int { value.map { 3 + $0.utf8.count } ?? 1 }
}

/// Why bytes could not be decoded. Decoding never traps on bad input.
package enum ByteDecodingError: Error, Hashable, Sendable, CustomStringConvertible {
    case truncated(offset: Int)
    case unsupportedVersion(UInt8)
    case unknownKind(UInt8, offset: Int)
    case lengthOutOfBounds(field: String, length: Int, max: Int)
    case invalidValue(field: String, offset: Int)
    case trailingBytes(count: Int)

    package var description: String {
        switch self {
        case .truncated(let offset): "record truncated at byte \(offset)"
        case .unsupportedVersion(let version): "unsupported record format version \(version)"
        case .unknownKind(let kind, let offset): "unknown record kind \(kind) at byte \(offset)"
        case .lengthOutOfBounds(let field, let length, let max): "\(field) length \(length) exceeds \(max)"
        case .invalidValue(let field, let offset): "invalid \(field) at byte \(offset)"
        case .trailingBytes(let count): "\(count) bytes after the end of the record"
        }
    }
}

/// Reads what `LittleEndianWriter` wrote, checking every bound (a short read
/// throws `ByteDecodingError.truncated`). Borrows the bytes: use it inside the
/// `withUnsafeBytes` (or similar) scope that lends them.
package struct LittleEndianReader {
    package let bytes: UnsafeRawBufferPointer
    package private(set) var offset = 0

    package init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    /// A reader of `bytes` that starts at `offset` (which is within them).
    package init(_ bytes: UnsafeRawBufferPointer, offset: Int) {
        precondition(offset >= 0 && offset <= bytes.count, "reader offset \(offset) outside \(bytes.count) bytes")
        self.bytes = bytes
        self.offset = offset
    }

    package var remaining: Int { bytes.count - offset }

    /// The little-endian integer at `offset` of `bytes`, which the caller has
    /// checked hold it (a precondition otherwise).
    @inline(__always)
    static func load<T: FixedWidthInteger>(_: T.Type, from bytes: UnsafeRawBufferPointer, at offset: Int) -> T {
        precondition(
            offset >= 0 && offset <= bytes.count - MemoryLayout<T>.size,
            "read of \(MemoryLayout<T>.size) bytes at \(offset) of \(bytes.count)")
        return T(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: T.self))
    }

    // `load` for callers in other modules (RoostEngine's record framing):
    // concrete, so that no call instantiates generic metadata per record.

    /// The `u16` at `offset` of `bytes` (bounds checked by the caller; a precondition).
    @inlinable
    package static func u16(at offset: Int, of bytes: UnsafeRawBufferPointer) -> UInt16 {
        precondition(offset >= 0 && offset <= bytes.count - 2, "u16 at \(offset) of \(bytes.count) bytes")
        return UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt16.self))
    }

    /// The `u32` at `offset` of `bytes` (bounds checked by the caller; a precondition).
    @inlinable
    package static func u32(at offset: Int, of bytes: UnsafeRawBufferPointer) -> UInt32 {
        precondition(offset >= 0 && offset <= bytes.count - 4, "u32 at \(offset) of \(bytes.count) bytes")
        return UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
    }

    /// The `u64` at `offset` of `bytes` (bounds checked by the caller; a precondition).
    @inlinable
    package static func u64(at offset: Int, of bytes: UnsafeRawBufferPointer) -> UInt64 {
        precondition(offset >= 0 && offset <= bytes.count - 8, "u64 at \(offset) of \(bytes.count) bytes")
        return UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
    }

    package mutating func u8() throws(ByteDecodingError) -> UInt8 {
        guard remaining >= 1 else { throw .truncated(offset: offset) }
        defer { offset += 1 }
        return bytes[offset]
    }

    package mutating func u16() throws(ByteDecodingError) -> UInt16 { try integer() }
    package mutating func u32() throws(ByteDecodingError) -> UInt32 { try integer() }
    package mutating func u64() throws(ByteDecodingError) -> UInt64 { try integer() }
    package mutating func i64() throws(ByteDecodingError) -> Int64 { Int64(bitPattern: try integer() as UInt64) }

    @inline(__always)
    private mutating func integer<T: FixedWidthInteger>() throws(ByteDecodingError) -> T {
        let size = MemoryLayout<T>.size
        guard remaining >= size else { throw .truncated(offset: offset) }
        let value = Self.load(T.self, from: bytes, at: offset)
        offset += size
        return value
    }

    /// A length-prefixed field of at most `max` bytes, borrowed (valid as long as `bytes`).
    package mutating func rawField(_ name: String, max: Int) throws(ByteDecodingError) -> UnsafeRawBufferPointer {
        let length = Int(try u16())
        guard length <= max else { throw .lengthOutOfBounds(field: name, length: length, max: max) }
        guard remaining >= length else { throw .truncated(offset: offset) }
        defer { offset += length }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length])
    }

    /// The next `count` bytes, borrowed.
    package mutating func raw(_ count: Int) throws(ByteDecodingError) -> UnsafeRawBufferPointer {
        guard remaining >= count else { throw .truncated(offset: offset) }
        defer { offset += count }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count])
    }

    /// A length-prefixed UTF-8 string of at most `max` bytes; invalid UTF-8 is rejected.
    mutating func string(_ name: String, max: Int) throws(ByteDecodingError) -> String {
        let start = offset
        let raw = try rawField(name, max: max)
        guard let text = String(validating: raw, as: UTF8.self) else {
            throw .invalidValue(field: name, offset: start)
        }
        return text
    }

    /// An optional field: presence byte 0 (none) or 1, then the field, borrowed.
    mutating func optionalField(_ name: String, max: Int) throws(ByteDecodingError) -> UnsafeRawBufferPointer? {
        let start = offset
        switch try u8() {
        case 0: return nil
        case 1: return try rawField(name, max: max)
        default: throw .invalidValue(field: name, offset: start)
        }
    }

    /// An optional field that must be valid UTF-8, borrowed.
    mutating func optionalUTF8(_ name: String, max: Int) throws(ByteDecodingError) -> UnsafeRawBufferPointer? {
        guard let bytes = try optionalField(name, max: max) else { return nil }
        guard EncodedDevice.scalarCount(bytes) != nil else {
            throw .invalidValue(field: name, offset: offset - 2 - bytes.count)
        }
        return bytes
    }

    mutating func timestamp(_ name: String) throws(ByteDecodingError) -> Timestamp {
        let start = offset
        guard let value = Timestamp(validatingMilliseconds: try i64()) else {
            throw .invalidValue(field: name, offset: start)
        }
        return value
    }

    mutating func optionalTimestamp(_ name: String) throws(ByteDecodingError) -> Timestamp? {
        let start = offset
        let raw = try i64()
        if raw == -1 { return nil }
        guard let value = Timestamp(validatingMilliseconds: raw) else {
            throw .invalidValue(field: name, offset: start)
        }
        return value
    }

    mutating func bool(_ name: String) throws(ByteDecodingError) -> Bool {
        let start = offset
        switch try u8() {
        case 0: return false
        case 1: return true
        default: throw .invalidValue(field: name, offset: start)
        }
    }
}
