/// One catalog change as it is logged: a logical after-image (the app or key
/// as it is after the change, or a tombstone), so replaying a record whose
/// effect is already in the state changes nothing, and a fuzzy snapshot plus
/// replay from its start LSN is exact. Carried inside `EngineRecord.catalog`;
/// the byte layout is in docs/storage.md ("Catalog records").
package enum CatalogRecord: Equatable, Sendable {
    /// An app with its name and settings, created or changed.
    case app(AppRecord)
    /// An app deleted: it and every key of it are gone; its id is never reused.
    case appDeleted(AppID)
    /// A key (its SHA-256 digest, never the key), created.
    case key(KeyRecord)
    /// A key revoked.
    case keyRevoked(id: String)
    /// The next app id is at least this: ids never go backwards, also after
    /// the apps that used them are deleted (written in every snapshot).
    case nextAppID(UInt32)
    /// An identity signing key; `current` makes it the key that signs.
    case identityKey(IdentitySigningKey, current: Bool)
    /// An identity signing key removed: its tokens stop verifying.
    case identityKeyRemoved(id: String)
    /// A key was last used at this time, at the latest (written coarsely:
    /// `KeyUsage.persistIntervalMilliseconds`; kind 15, decision 0053).
    case keyUsed(id: String, atMilliseconds: Int64)

    /// The catalog's own format version (byte 0 of the payload).
    package static let formatVersion: UInt8 = 1
    /// The kind of an app record that carries `inactive_after_days` (spec §8).
    static let appWithInactivityKind: UInt8 = 13
    /// The longest string field (names, labels and ids are far shorter).
    package static let stringBytesMax = 4096

    /// Returns the payload bytes (the part after `EngineRecord`'s two bytes).
    package func encoded() -> [UInt8] {
        var out = CatalogRecordWriter()
        out.u8(CatalogRecord.formatVersion)
        switch self {
        case .app(let app):
            // Kind 13 adds `inactive_after_days`; an app without it is written
            // as kind 1, byte for byte as before it existed (decision 0052).
            let days = app.settings.inactiveAfterDays
            out.u8(days == nil ? 1 : CatalogRecord.appWithInactivityKind)
            out.u32(app.id.rawValue)
            out.string(app.name)
            out.i64(app.createdAtMilliseconds)
            out.u32(UInt32(app.settings.maxDevicesPerPerson))
            out.u8(app.settings.requireKnownPerson ? 1 : 0)
            if let days {
                precondition(Limits.inactiveAfterDaysRange.contains(days), "inactive_after_days \(days)")
                out.u32(UInt32(days))
            }
        case .appDeleted(let app):
            out.u8(2)
            out.u32(app.rawValue)
        case .key(let key):
            out.u8(3)
            out.string(key.id)
            out.u32(key.appID.rawValue)
            out.u8(key.kind == .secret ? 0 : 1)
            out.u8(key.mode.rawValue)
            out.u8(CatalogRecord.capabilityBits(key.capabilities))
            out.string(key.label)
            out.i64(key.createdAtMilliseconds)
            out.u32(UInt32(key.rateLimitPerSecond ?? 0))
            out.bytes.append(contentsOf: key.digest.bytes)
        case .keyRevoked(let id):
            out.u8(4)
            out.string(id)
        case .nextAppID(let next):
            out.u8(5)
            out.u32(next)
        case .identityKey(let key, let current):
            out.u8(6)
            out.string(key.id)
            precondition(
                key.secret.count == IdentitySigningKey.secretBytes, "identity secret of \(key.secret.count) bytes")
            out.bytes.append(contentsOf: key.secret)
            out.i64(key.createdAtMilliseconds)
            out.u8(current ? 1 : 0)
        case .identityKeyRemoved(let id):
            out.u8(7)
            out.string(id)
        case .keyUsed(let id, let at):
            out.u8(15)
            out.string(id)
            out.i64(at)
        }
        return out.bytes
    }

    /// Decodes a payload; throws on anything this version did not write.
    package static func decode(_ bytes: [UInt8]) throws(CatalogRecordError) -> CatalogRecord {
        var input = CatalogRecordReader(bytes: bytes)
        guard try input.u8() == formatVersion else { throw CatalogRecordError("unknown catalog record version") }
        let record: CatalogRecord
        let kind = try input.u8()
        switch kind {
        case 1, CatalogRecord.appWithInactivityKind:
            let withInactivity = kind == CatalogRecord.appWithInactivityKind
            let id = try input.appID()
            let name = try input.string()
            let created = try input.i64()
            let maxDevices = Int(try input.u32())
            guard Limits.maxDevicesPerPersonRange.contains(maxDevices) else {
                throw CatalogRecordError("max_devices_per_person \(maxDevices) out of range")
            }
            let requireKnown = try input.flag()
            var days: Int?
            if withInactivity {
                let value = Int(try input.u32())
                guard Limits.inactiveAfterDaysRange.contains(value) else {
                    throw CatalogRecordError("inactive_after_days \(value) out of range")
                }
                days = value
            }
            record = .app(
                AppRecord(
                    id: id, name: name, createdAtMilliseconds: created,
                    settings: AppSettings(
                        maxDevicesPerPerson: maxDevices, requireKnownPerson: requireKnown, inactiveAfterDays: days)))
        case 2:
            record = .appDeleted(try input.appID())
        case 3:
            let id = try input.string()
            let app = try input.appID()
            let kind: KeyKind
            switch try input.u8() {
            case 0: kind = .secret
            case 1: kind = .mobile
            case let other: throw CatalogRecordError("key kind \(other)")
            }
            let rawMode = try input.u8()
            guard let mode = AppMode(rawValue: rawMode) else { throw CatalogRecordError("key mode \(rawMode)") }
            let capabilities = try capabilities(fromBits: try input.u8())
            let label = try input.string()
            let created = try input.i64()
            let rate = try input.u32()
            guard rate <= KeyRecord.rateLimitPerSecondMax else { throw CatalogRecordError("rate limit \(rate)") }
            guard let digest = KeyDigest(bytes: try input.take(32)) else { preconditionFailure("32 bytes taken") }
            record = .key(
                KeyRecord(
                    id: id, appID: app, kind: kind, mode: mode, capabilities: capabilities, label: label,
                    createdAtMilliseconds: created, rateLimitPerSecond: rate == 0 ? nil : Int(rate), digest: digest))
        case 4:
            record = .keyRevoked(id: try input.string())
        case 5:
            let next = try input.u32()
            guard next >= 1 else { throw CatalogRecordError("next app id 0") }
            record = .nextAppID(next)
        case 6:
            let id = try input.string()
            guard IdentitySigningKey.isValidID(id) else { throw CatalogRecordError("identity key id") }
            let secret = try input.take(IdentitySigningKey.secretBytes)
            let created = try input.i64()
            let current = try input.flag()
            record = .identityKey(
                IdentitySigningKey(id: id, secret: secret, createdAtMilliseconds: created), current: current)
        case 7:
            record = .identityKeyRemoved(id: try input.string())
        case 15:
            record = .keyUsed(id: try input.string(), atMilliseconds: try input.i64())
        case let other:
            throw CatalogRecordError("unknown catalog record kind \(other)")
        }
        guard input.isAtEnd else { throw CatalogRecordError("bytes after the end of the record") }
        return record
    }

    /// Bit i stands for `capabilityOrder[i]`; the order is part of the format.
    private static let capabilityOrder: [Capability] = [
        .devicesWrite, .devicesRead, .devicesDelete, .peopleWrite, .setupWrite,
    ]

    private static func capabilityBits(_ capabilities: Set<Capability>) -> UInt8 {
        var bits: UInt8 = 0
        for (bit, capability) in capabilityOrder.enumerated() where capabilities.contains(capability) {
            bits |= 1 << UInt8(bit)
        }
        return bits
    }

    private static func capabilities(fromBits bits: UInt8) throws(CatalogRecordError) -> Set<Capability> {
        guard bits >> UInt8(capabilityOrder.count) == 0 else { throw CatalogRecordError("capability bits \(bits)") }
        var result = Set<Capability>()
        for (bit, capability) in capabilityOrder.enumerated() where bits & (1 << UInt8(bit)) != 0 {
            result.insert(capability)
        }
        return result
    }
}

/// A catalog record that cannot be read: recovery stops and names it.
package struct CatalogRecordError: Error, CustomStringConvertible, Equatable {
    package var reason: String
    package init(_ reason: String) { self.reason = reason }
    package var description: String { "catalog record: \(reason)" }
}

/// Little-endian integers and `u32`-length-prefixed strings.
private struct CatalogRecordWriter {
    var bytes: [UInt8] = []

    mutating func u8(_ value: UInt8) { bytes.append(value) }
    mutating func u32(_ value: UInt32) { integer(value) }
    mutating func i64(_ value: Int64) { integer(UInt64(bitPattern: value)) }

    private mutating func integer<T: FixedWidthInteger>(_ value: T) {
        var little = value.littleEndian
        withUnsafeBytes(of: &little) { bytes.append(contentsOf: $0) }
    }

    mutating func string(_ value: String) {
        let utf8 = Array(value.utf8)
        precondition(utf8.count <= CatalogRecord.stringBytesMax, "catalog string of \(utf8.count) bytes")
        u32(UInt32(utf8.count))
        bytes.append(contentsOf: utf8)
    }
}

/// Reads what `CatalogRecordWriter` wrote, checking every bound; never traps.
private struct CatalogRecordReader {
    let bytes: [UInt8]
    var offset = 0

    var isAtEnd: Bool { offset == bytes.count }

    mutating func take(_ count: Int) throws(CatalogRecordError) -> [UInt8] {
        guard count <= bytes.count - offset else { throw CatalogRecordError("truncated at byte \(offset)") }
        defer { offset += count }
        return Array(bytes[offset..<(offset + count)])
    }

    mutating func u8() throws(CatalogRecordError) -> UInt8 { try take(1)[0] }

    mutating func u32() throws(CatalogRecordError) -> UInt32 {
        try take(4).reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
    }

    mutating func i64() throws(CatalogRecordError) -> Int64 {
        Int64(bitPattern: try take(8).reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
    }

    mutating func flag() throws(CatalogRecordError) -> Bool {
        switch try u8() {
        case 0: return false
        case 1: return true
        case let other: throw CatalogRecordError("flag \(other)")
        }
    }

    mutating func appID() throws(CatalogRecordError) -> AppID {
        let raw = try u32()
        guard raw > 0 else { throw CatalogRecordError("app id 0") }
        return AppID(raw)
    }

    mutating func string() throws(CatalogRecordError) -> String {
        let count = Int(try u32())
        guard count <= CatalogRecord.stringBytesMax else { throw CatalogRecordError("string of \(count) bytes") }
        let utf8 = try take(count)
        guard let value = String(validating: utf8, as: UTF8.self) else {
            throw CatalogRecordError("string is not UTF-8")
        }
        return value
    }
}
