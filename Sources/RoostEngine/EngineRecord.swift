import RoostModel

/// A log record as the engine writes it: which app and mode a mutation belongs
/// to, that a whole app was removed, or a catalog change (apps, keys,
/// settings, counters, identity signing keys). Layout (little-endian):
///
/// | bytes | field |
/// |---|---|
/// | 1 | format version (1) |
/// | 1 | kind: 1 mutation, 2 app removed, 3 index size, 4 catalog, 5 index image part |
/// | 4 | app id; kinds 1–3 and 5 (kind 4 has no app id here) |
/// | 1 | mode (0 live, 1 test); kinds 1, 3 and 5 |
/// | rest | `MutationCodec` bytes; kind 1 only |
/// | 8 + 8 | devices, people (`u64`); kind 3 only |
/// | rest | the catalog's own record bytes (`CatalogRecord` in RoostAPI); kind 4 only |
/// | rest | one part of an index image (`StoreImage.swift` in RoostModel); kind 5 only, snapshots only |
package enum EngineRecord: Equatable, Sendable {
    case mutation(IndexKey, Mutation)
    case appRemoved(AppID)
    /// How many devices and people an index held when a snapshot began to
    /// write it (the first record of each index in a snapshot): recovery
    /// reserves room before the index's records follow. A hint only: applying
    /// it changes no state.
    case indexSize(IndexKey, devices: UInt64, people: UInt64)
    /// A catalog change, opaque to the engine: recovery hands these payloads,
    /// in log order, to the catalog that wrote them (docs/storage.md).
    case catalog([UInt8])
    /// One part of an index's image (decision 0056): its devices and people
    /// as the store's arrays, in a snapshot only. The parts of one image are
    /// consecutive records; the model reads them (`StoreImageLoader`).
    case indexImage(IndexKey, [UInt8])

    package static let formatVersion: UInt8 = 1

    /// Returns the record's bytes.
    package func encoded() -> [UInt8] {
        switch self {
        case .mutation(let key, let mutation):
            var bytes: [UInt8] = []
            Self.encodeMutation(mutation, of: key, into: &bytes)
            return bytes
        case .appRemoved(let app):
            return Self.header(kind: 2, app: app, capacity: 6).bytes
        case .indexSize(let key, let devices, let people):
            var writer = Self.header(kind: 3, app: key.app, capacity: 23)
            writer.u8(key.mode.rawValue)
            writer.u64(devices)
            writer.u64(people)
            return writer.bytes
        case .catalog(let payload):
            return [EngineRecord.formatVersion, 4] + payload
        case .indexImage(let key, let part):
            return Self.imagePrefix(key) + part
        }
    }

    /// The framing of an index image part of `key` (the part's bytes follow).
    package static func imagePrefix(_ key: IndexKey) -> [UInt8] {
        var writer = Self.header(kind: 5, app: key.app, capacity: imageOffset)
        writer.u8(key.mode.rawValue)
        return writer.bytes
    }

    /// Where an index image part's bytes start.
    private static let imageOffset = 7

    /// The index key and part bytes of an index image record, read from its
    /// framing; nil for any other record or a framing `decode` would refuse.
    package static func framedImagePart(
        in record: UnsafeRawBufferPointer
    ) -> (key: IndexKey, part: UnsafeRawBufferPointer)? {
        framed(record, kind: 5, bodyOffset: imageOffset).map { (key: $0.key, part: $0.body) }
    }

    /// The index key and the bytes after it of a record of `kind` framed as
    /// version, kind, app (`u32`, not 0), mode, then at least one byte; nil otherwise.
    private static func framed(
        _ record: UnsafeRawBufferPointer, kind: UInt8, bodyOffset: Int
    ) -> (key: IndexKey, body: UnsafeRawBufferPointer)? {
        guard record.count >= bodyOffset + 1, record[0] == formatVersion, record[1] == kind,
            let mode = AppMode(rawValue: record[6])
        else { return nil }
        let app = LittleEndianReader.u32(at: 2, of: record)
        guard app > 0 else { return nil }
        return (IndexKey(app: AppID(app), mode: mode), UnsafeRawBufferPointer(rebasing: record[bodyOffset...]))
    }

    /// Where a mutation record's `MutationCodec` bytes start.
    private static let mutationOffset = 7

    /// A writer holding version, `kind` and `app`.
    private static func header(kind: UInt8, app: AppID, capacity: Int) -> LittleEndianWriter {
        var writer = LittleEndianWriter(capacity: capacity)
        writeHeader(kind: kind, app: app, into: &writer)
        return writer
    }

    private static func writeHeader(kind: UInt8, app: AppID, into writer: inout LittleEndianWriter) {
        writer.u8(formatVersion)
        writer.u8(kind)
        writer.u32(app.rawValue)
    }

    /// Writes the record of `mutation` on `key`'s index into `buffer`,
    /// emptied first: the bytes `EngineRecord.mutation(key, mutation).encoded()`
    /// returns. The mutation is encoded straight after the framing, into
    /// `buffer`'s memory when nothing else holds it (a shard reuses its
    /// records' buffers from turn to turn, issue 25), else into one buffer
    /// allocated once for a typical record.
    package static func encodeMutation(_ mutation: Mutation, of key: IndexKey, into buffer: inout [UInt8]) {
        var writer = LittleEndianWriter()
        swap(&writer.bytes, &buffer)
        writer.bytes.removeAll(keepingCapacity: true)
        writer.bytes.reserveCapacity(mutationOffset + MutationCodec.encodedBytesReserved)
        writeHeader(kind: 1, app: key.app, into: &writer)
        writer.u8(key.mode.rawValue)
        MutationCodec.encode(mutation, into: &writer)
        swap(&writer.bytes, &buffer)
    }

    /// Decodes a record; throws on anything this version did not write.
    package static func decode(_ bytes: [UInt8]) throws(EngineRecordError) -> EngineRecord {
        let result = bytes.withUnsafeBytes { raw in
            Result { () throws(EngineRecordError) in try decode(raw) }
        }
        return try result.get()
    }

    /// Decodes a record from borrowed bytes (no copy of the payload).
    package static func decode(_ bytes: UnsafeRawBufferPointer) throws(EngineRecordError) -> EngineRecord {
        guard bytes.count >= 2 else { throw .truncated(bytes.count) }
        guard bytes[0] == formatVersion else { throw .unknownVersion(bytes[0]) }
        if bytes[1] == 4 {
            guard bytes.count > 2 else { throw .invalid("empty catalog record") }
            return .catalog(Array(bytes[2...]))
        }
        guard bytes.count >= 6 else { throw .truncated(bytes.count) }
        let rawApp = LittleEndianReader.u32(at: 2, of: bytes)
        guard rawApp > 0 else { throw .invalid("app id 0") }
        let app = AppID(rawApp)
        switch bytes[1] {
        case 1:
            guard bytes.count >= mutationOffset + 1 else { throw .truncated(bytes.count) }
            guard let mode = AppMode(rawValue: bytes[6]) else { throw .invalid("mode \(bytes[6])") }
            do {
                let mutation = try MutationCodec.decode(UnsafeRawBufferPointer(rebasing: bytes[mutationOffset...]))
                return .mutation(IndexKey(app: app, mode: mode), mutation)
            } catch {
                throw .invalid("mutation: \(error)")
            }
        case 2:
            guard bytes.count == 6 else { throw .invalid("app-removed record of \(bytes.count) bytes") }
            return .appRemoved(app)
        case 3:
            guard bytes.count == 23 else { throw .invalid("index-size record of \(bytes.count) bytes") }
            guard let mode = AppMode(rawValue: bytes[6]) else { throw .invalid("mode \(bytes[6])") }
            return .indexSize(
                IndexKey(app: app, mode: mode),
                devices: LittleEndianReader.u64(at: 7, of: bytes),
                people: LittleEndianReader.u64(at: 15, of: bytes))
        case 5:
            guard let framed = framedImagePart(in: bytes) else {
                throw bytes.count <= imageOffset ? .truncated(bytes.count) : .invalid("mode \(bytes[6])")
            }
            return .indexImage(framed.key, Array(framed.part))
        default:
            throw .unknownKind(bytes[1])
        }
    }

    /// The device a mutation record's device upsert or tombstone names, read
    /// from the encoded bytes' fixed places (the shard's feed needs no second
    /// look at the `Mutation`); nil for any other record.
    package static func deviceChange(inEncoded record: [UInt8]) -> ChangedDevice? {
        record.withUnsafeBytes { bytes in
            framedMutation(in: bytes).flatMap { MutationCodec.deviceChange(in: $0.mutation) }
        }
    }

    /// The index a mutation record (`encoded`'s bytes) belongs to, read from
    /// its framing; nil for any other record. What the shard counts in the
    /// index's positions once the append gives the record its LSN.
    package static func mutationKey(inEncoded record: [UInt8]) -> IndexKey? {
        record.withUnsafeBytes { bytes in framedMutation(in: bytes)?.key }
    }

    /// The index key and `MutationCodec` bytes of a mutation record, read from
    /// its framing without decoding the mutation; nil for any other record or
    /// a framing `decode` would refuse.
    package static func framedMutation(
        in record: UnsafeRawBufferPointer
    ) -> (key: IndexKey, mutation: UnsafeRawBufferPointer)? {
        framed(record, kind: 1, bodyOffset: mutationOffset).map { (key: $0.key, mutation: $0.body) }
    }
}

/// A record the engine cannot read: recovery stops and names it.
package enum EngineRecordError: Error, Equatable, Sendable {
    case truncated(Int)
    case unknownVersion(UInt8)
    case unknownKind(UInt8)
    case invalid(String)
}
