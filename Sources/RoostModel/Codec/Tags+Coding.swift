extension Tags {
    /// Writes the tags sorted by key: count `u8`, then per entry the key as a
    /// field and a type byte (0 string + field, 1 number + 8 bytes, 2 false, 3 true).
    func encode(into writer: inout LittleEndianWriter) {
        writer.appendFields(bytesMax: Swift.max(encoded.count, 1)) { encode(into: &$0) }
    }

    /// `encode(into:)` through a cursor (the device upsert's): the stored
    /// encoding as it is, or a zero count. The one spelling of the tags' bytes.
    func encode(into cursor: inout FieldCursor) {
        if encoded.isEmpty {
            cursor.u8(0)
        } else {
            encoded.withUnsafeBytes { cursor.bytes($0) }
        }
    }

    /// Reads what `encode` wrote and checks the tag limits.
    static func decode(from reader: inout LittleEndianReader) throws(ByteDecodingError) -> Tags {
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
    static func decodeCanonical(from reader: inout LittleEndianReader) -> Tags? {
        let start = reader.offset
        guard skipCanonical(&reader) else { return nil }
        if reader.offset == start + 1 { return Tags() }
        return Tags(storedEncoding: Array(UnsafeRawBufferPointer(rebasing: reader.bytes[start..<reader.offset])))
    }

    /// Checks tags in `encode`'s form (see `decodeCanonical`) and moves past
    /// them; false (and `reader` somewhere inside them) for anything else.
    /// The replay fast path stores the bytes it passed over as they are.
    static func skipCanonical(_ reader: inout LittleEndianReader) -> Bool {
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
    /// Keys are `TagKey`s: an NFC key and its NFD form are two entries, and only
    /// the same scalars twice is a duplicate.
    static func decodeValues(from reader: inout LittleEndianReader) throws(ByteDecodingError) -> [TagKey: TagValue] {
        let count = Int(try reader.u8())
        guard count <= Limits.tagKeysMax else {
            throw .lengthOutOfBounds(field: "tags", length: count, max: Limits.tagKeysMax)
        }
        var values: [TagKey: TagValue] = [:]
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
            guard !key.isEmpty, values.updateValue(value, forKey: TagKey(key)) == nil else {
                throw .invalidValue(field: "tag key", offset: keyOffset)
            }
        }
        return values
    }
}
