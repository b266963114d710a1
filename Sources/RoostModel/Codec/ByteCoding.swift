/// Appends little-endian integers and length-prefixed fields to a byte array.
struct ByteWriter {
    var bytes: [UInt8] = []

    mutating func u8(_ value: UInt8) { bytes.append(value) }
    mutating func u16(_ value: UInt16) { integer(value) }
    mutating func u32(_ value: UInt32) { integer(value) }
    mutating func u64(_ value: UInt64) { integer(value) }
    mutating func i64(_ value: Int64) { integer(UInt64(bitPattern: value)) }

    private mutating func integer<T: FixedWidthInteger>(_ value: T) {
        var little = value.littleEndian
        withUnsafeBytes(of: &little) { bytes.append(contentsOf: $0) }
    }

    /// A field of at most 65,535 bytes, prefixed by its length as `u16`.
    mutating func field(_ value: some Collection<UInt8>) {
        precondition(value.count <= Int(UInt16.max), "field of \(value.count) bytes")
        u16(UInt16(value.count))
        bytes.append(contentsOf: value)
    }

    mutating func string(_ value: String) { field(Array(value.utf8)) }

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

/// Reads what `ByteWriter` wrote, checking every bound. Borrows the bytes:
/// use it inside the `withUnsafeBytes` (or similar) scope that lends them.
struct ByteReader {
    let bytes: UnsafeRawBufferPointer
    private(set) var offset = 0

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    /// A reader of `bytes` that starts at `offset` (which is within them).
    init(_ bytes: UnsafeRawBufferPointer, offset: Int) {
        precondition(offset >= 0 && offset <= bytes.count, "reader offset \(offset) outside \(bytes.count) bytes")
        self.bytes = bytes
        self.offset = offset
    }

    var remaining: Int { bytes.count - offset }

    mutating func u8() throws(ByteDecodingError) -> UInt8 {
        guard remaining >= 1 else { throw .truncated(offset: offset) }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func u16() throws(ByteDecodingError) -> UInt16 { try integer() }
    mutating func u32() throws(ByteDecodingError) -> UInt32 { try integer() }
    mutating func u64() throws(ByteDecodingError) -> UInt64 { try integer() }
    mutating func i64() throws(ByteDecodingError) -> Int64 { Int64(bitPattern: try integer() as UInt64) }

    @inline(__always)
    private mutating func integer<T: FixedWidthInteger>() throws(ByteDecodingError) -> T {
        let size = MemoryLayout<T>.size
        guard remaining >= size else { throw .truncated(offset: offset) }
        let value = T(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: T.self))
        offset += size
        return value
    }

    /// A length-prefixed field of at most `max` bytes, borrowed (valid as long as `bytes`).
    mutating func rawField(_ name: String, max: Int) throws(ByteDecodingError) -> UnsafeRawBufferPointer {
        let length = Int(try u16())
        guard length <= max else { throw .lengthOutOfBounds(field: name, length: length, max: max) }
        guard remaining >= length else { throw .truncated(offset: offset) }
        defer { offset += length }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length])
    }

    /// A length-prefixed field of at most `max` bytes.
    mutating func field(_ name: String, max: Int) throws(ByteDecodingError) -> [UInt8] {
        Array(try rawField(name, max: max))
    }

    /// The next `count` bytes, borrowed.
    mutating func raw(_ count: Int) throws(ByteDecodingError) -> UnsafeRawBufferPointer {
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

    mutating func optionalString(_ name: String, max: Int) throws(ByteDecodingError) -> String? {
        let start = offset
        switch try u8() {
        case 0: return nil
        case 1: return try string(name, max: max)
        default: throw .invalidValue(field: name, offset: start)
        }
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

    func invalid(_ name: String) -> ByteDecodingError { .invalidValue(field: name, offset: offset) }
}

extension Tags {
    /// Writes the tags sorted by key: count `u8`, then per entry the key as a
    /// field and a type byte (0 string + field, 1 number + 8 bytes, 2 false, 3 true).
    func encode(into writer: inout ByteWriter) {
        if encoded.isEmpty {
            writer.u8(0)
        } else {
            writer.bytes.append(contentsOf: encoded)
        }
    }

    /// Reads what `encode` wrote and checks the tag limits.
    static func decode(from reader: inout ByteReader) throws(ByteDecodingError) -> Tags {
        var probe = reader
        if let tags = decodeCanonical(from: &probe) {
            reader = probe
            return tags
        }
        let tags = Tags(unchecked: try decodeValues(from: &reader))
        guard tags.byteCount <= Limits.tagBytesMax else {
            throw .lengthOutOfBounds(field: "tags", length: tags.byteCount, max: Limits.tagBytesMax)
        }
        return tags
    }

    /// The replay fast path: when the bytes are already in the form `encode`
    /// writes (ASCII keys in strictly ascending order, ASCII string values)
    /// and within every limit, returns them as they are (one copy, no map);
    /// they then equal what the map path would build. Returns nil for
    /// anything else, and the map path decodes it (or reports why not).
    static func decodeCanonical(from reader: inout ByteReader) -> Tags? {
        let start = reader.offset
        guard skipCanonical(&reader) else { return nil }
        if reader.offset == start + 1 { return Tags() }
        return Tags(storedEncoding: Array(UnsafeRawBufferPointer(rebasing: reader.bytes[start..<reader.offset])))
    }

    /// Checks tags in `encode`'s form (see `decodeCanonical`) and moves past
    /// them; false (and `reader` somewhere inside them) for anything else.
    /// The replay fast path stores the bytes it passed over as they are.
    static func skipCanonical(_ reader: inout ByteReader) -> Bool {
        do throws(ByteDecodingError) {
            let count = Int(try reader.u8())
            if count == 0 { return true }
            guard count <= Limits.tagKeysMax else { return false }
            var total = 0
            var previous = UnsafeRawBufferPointer(start: nil, count: 0)
            for index in 0..<count {
                let key = try reader.rawField("tag key", max: Limits.tagKeyBytesMax)
                guard !key.isEmpty, isASCII(key) else { return false }
                if index > 0 && !previous.lexicographicallyPrecedes(key) { return false }
                previous = key
                total += key.count
                switch try reader.u8() {
                case 0:
                    let value = try reader.rawField("tag value", max: Limits.tagBytesMax)
                    guard isASCII(value) else { return false }
                    total += value.count
                case 1:
                    guard Double(bitPattern: try reader.u64()).isFinite else { return false }
                    total += 8
                case 2, 3: total += 1
                default: return false
                }
            }
            return total <= Limits.tagBytesMax
        } catch {
            return false
        }
    }

    @inline(__always)
    static func isASCII(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var union: UInt8 = 0
        for byte in bytes { union |= byte }
        return union < 0x80
    }

    /// Reads what `encode` wrote into a map, checking every bound but the total size.
    static func decodeValues(from reader: inout ByteReader) throws(ByteDecodingError) -> [String: TagValue] {
        let count = Int(try reader.u8())
        guard count <= Limits.tagKeysMax else {
            throw .lengthOutOfBounds(field: "tags", length: count, max: Limits.tagKeysMax)
        }
        var values: [String: TagValue] = [:]
        values.reserveCapacity(count)
        for _ in 0..<count {
            let keyOffset = reader.offset
            let key = try reader.string("tag key", max: Limits.tagKeyBytesMax)
            let kindOffset = reader.offset
            let value: TagValue
            switch try reader.u8() {
            case 0: value = .string(try reader.string("tag value", max: Limits.tagBytesMax))
            case 1:
                let number = Double(bitPattern: try reader.u64())
                guard number.isFinite else { throw .invalidValue(field: "tag value", offset: kindOffset) }
                value = .number(number)
            case 2: value = .bool(false)
            case 3: value = .bool(true)
            default: throw .invalidValue(field: "tag kind", offset: kindOffset)
            }
            guard !key.isEmpty, values.updateValue(value, forKey: key) == nil else {
                throw .invalidValue(field: "tag key", offset: keyOffset)
            }
        }
        return values
    }
}
