import RoostModel

/// A log record as the engine writes it: which app and mode a mutation belongs
/// to, that a whole app was removed, or a catalog change (apps, keys,
/// settings, counters, identity signing keys). Layout (little-endian):
///
/// | bytes | field |
/// |---|---|
/// | 1 | format version (1) |
/// | 1 | kind: 1 mutation, 2 app removed, 3 index size, 4 catalog |
/// | 4 | app id; kinds 1–3 (kind 4 has no app id here) |
/// | 1 | mode (0 live, 1 test); kinds 1 and 3 |
/// | rest | `MutationCodec` bytes; kind 1 only |
/// | 8 + 8 | devices, people (`u64`); kind 3 only |
/// | rest | the catalog's own record bytes (`CatalogRecord` in RoostAPI); kind 4 only |
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

    package static let formatVersion: UInt8 = 1

    /// Returns the record's bytes.
    package func encoded() -> [UInt8] {
        switch self {
        case .mutation(let key, let mutation):
            let payload = MutationCodec.encode(mutation)
            var bytes: [UInt8] = []
            bytes.reserveCapacity(7 + payload.count)
            bytes.append(EngineRecord.formatVersion)
            bytes.append(1)
            appendAppID(key.app, to: &bytes)
            bytes.append(key.mode.rawValue)
            bytes.append(contentsOf: payload)
            return bytes
        case .appRemoved(let app):
            var bytes: [UInt8] = [EngineRecord.formatVersion, 2]
            appendAppID(app, to: &bytes)
            return bytes
        case .indexSize(let key, let devices, let people):
            var bytes: [UInt8] = [EngineRecord.formatVersion, 3]
            appendAppID(key.app, to: &bytes)
            bytes.append(key.mode.rawValue)
            for value in [devices, people] {
                for shift in stride(from: UInt64(0), to: 64, by: 8) {
                    bytes.append(UInt8(truncatingIfNeeded: value >> shift))
                }
            }
            return bytes
        case .catalog(let payload):
            return [EngineRecord.formatVersion, 4] + payload
        }
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
        let rawApp = UInt32(bytes[2]) | UInt32(bytes[3]) << 8 | UInt32(bytes[4]) << 16 | UInt32(bytes[5]) << 24
        guard rawApp > 0 else { throw .invalid("app id 0") }
        let app = AppID(rawApp)
        switch bytes[1] {
        case 1:
            guard bytes.count >= 8 else { throw .truncated(bytes.count) }
            guard let mode = AppMode(rawValue: bytes[6]) else { throw .invalid("mode \(bytes[6])") }
            do {
                let mutation = try MutationCodec.decode(UnsafeRawBufferPointer(rebasing: bytes[7...]))
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
                devices: bytes.loadUnaligned(fromByteOffset: 7, as: UInt64.self).littleEndian,
                people: bytes.loadUnaligned(fromByteOffset: 15, as: UInt64.self).littleEndian)
        default:
            throw .unknownKind(bytes[1])
        }
    }

    private func appendAppID(_ app: AppID, to bytes: inout [UInt8]) {
        let raw = app.rawValue
        bytes.append(UInt8(truncatingIfNeeded: raw))
        bytes.append(UInt8(truncatingIfNeeded: raw >> 8))
        bytes.append(UInt8(truncatingIfNeeded: raw >> 16))
        bytes.append(UInt8(truncatingIfNeeded: raw >> 24))
    }
}

/// A record the engine cannot read: recovery stops and names it.
package enum EngineRecordError: Error, Equatable, Sendable {
    case truncated(Int)
    case unknownVersion(UInt8)
    case unknownKind(UInt8)
    case invalid(String)
}
