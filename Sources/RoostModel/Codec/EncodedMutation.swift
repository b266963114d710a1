/// The one reader of the device and person upsert layouts (`MutationCodec`
/// kinds 1 and 3). Each view borrows the record's bytes and checks every
/// field as it reads it, throwing the codec's `ByteDecodingError`; it builds
/// no `String`. `MutationCodec.decode` turns a view into a `Device` or
/// `Person`; replay's fast path (`DeviceStore.applyEncodedUpsert`) stores a
/// view's borrowed fields as they are. So both accept exactly the same bytes.
///
/// Device upsert fields, after version and kind (little-endian, `u16`-prefixed
/// fields, optional = presence byte, optional timestamp = -1):
/// id (app `u32`, mode `u8`, platform `u8`, sequence `u64`) · environment `u8` ·
/// token field (empty: none) · bundle id? · installation id? · secret digest?
/// (32 bytes) · external id? · created_at `i64` · last_seen_at `i64` ·
/// bound_at `i64` · app version? · time zone? · locale? · push_permission `u8`
/// (0 none, 1 false, 2 true) · opted_in `u8` · tags (`Tags.encode`) ·
/// invalidated_at `i64` · invalidation reason? · strikes `u32` — and, from
/// format version 2 on, version `u32` (≥ 1) · client sequence? (`u64`,
/// ≤ 2^53 − 1). A version 1 record is a device at version 1 without one.
struct EncodedDevice {
    var id: DeviceID
    var environment: APNsEnvironment
    /// Empty: no token.
    var token: UnsafeRawBufferPointer
    var bundleID: UnsafeRawBufferPointer?
    var installation: UnsafeRawBufferPointer?
    var digest: SecretDigest?
    var externalID: UnsafeRawBufferPointer?
    var createdAt: Timestamp
    var lastSeenAt: Timestamp
    var boundAt: Timestamp?
    var appVersion: UnsafeRawBufferPointer?
    var timezone: UnsafeRawBufferPointer?
    var locale: UnsafeRawBufferPointer?
    var pushPermission: Bool?
    var optedIn: Bool
    /// The tags as the record holds them (one zero byte: none).
    var tags: UnsafeRawBufferPointer
    /// Where `tags` start in the record (for `Tags.decode` when not canonical).
    var tagsOffset: Int
    /// Whether `tags` are in the form `Tags.encode` writes (see `Tags.decodeCanonical`),
    /// so that they can be stored as they are.
    var tagsAreCanonical: Bool
    var invalidatedAt: Timestamp?
    var invalidationReason: UnsafeRawBufferPointer?
    var strikes: UInt32
    var version: UInt32
    var clientSequence: UInt64?

    /// Reads a device upsert's fields from `reader` (positioned after the
    /// kind byte) in the layout of `formatVersion`, checking each as
    /// `Device`'s and the identifiers' validating initializers and
    /// `Device.violation` would; throws at the first bad one.
    init(reading reader: inout LittleEndianReader, formatVersion: UInt8) throws(ByteDecodingError) {
        let start = reader.offset
        id = try reader.deviceID()
        var offset = reader.offset
        guard let environment = APNsEnvironment(rawValue: try reader.u8()) else {
            throw .invalidValue(field: "environment", offset: offset)
        }
        self.environment = environment
        offset = reader.offset
        token = try reader.rawField("token", max: Limits.fcmTokenCharactersMax)
        if !token.isEmpty && !PushToken.isValidStored(token, platform: id.platform) {
            throw .invalidValue(field: "token", offset: offset)
        }
        offset = reader.offset
        bundleID = try reader.optionalField("bundle_id", max: Limits.bundleIDBytesMax)
        if let bundleID, !BundleID.isValid(utf8: bundleID) { throw .invalidValue(field: "bundle_id", offset: offset) }
        offset = reader.offset
        installation = try reader.optionalField("installation_id", max: 4 * Limits.installationIDCharactersMax)
        if let installation, !Self.hasScalars(installation, max: Limits.installationIDCharactersMax) {
            throw .invalidValue(field: "installation_id", offset: offset)
        }
        offset = reader.offset
        switch try reader.u8() {
        case 0: digest = nil
        case 1: digest = SecretDigest(littleEndianBytes: try reader.raw(32))
        default: throw .invalidValue(field: "installation_secret", offset: offset)
        }
        offset = reader.offset
        externalID = try reader.optionalField("external_id", max: 4 * Limits.externalIDCharactersMax)
        if let externalID, !Self.hasScalars(externalID, max: Limits.externalIDCharactersMax) {
            throw .invalidValue(field: "external_id", offset: offset)
        }
        createdAt = try reader.timestamp("created_at")
        lastSeenAt = try reader.timestamp("last_seen_at")
        boundAt = try reader.optionalTimestamp("bound_at")
        appVersion = try reader.optionalUTF8("app_version", max: Limits.appVersionBytesMax)
        timezone = try reader.optionalUTF8("timezone", max: Limits.timezoneBytesMax)
        locale = try reader.optionalUTF8("locale", max: Limits.localeBytesMax)
        offset = reader.offset
        switch try reader.u8() {
        case 0: pushPermission = nil
        case 1: pushPermission = false
        case 2: pushPermission = true
        default: throw .invalidValue(field: "push_permission", offset: offset)
        }
        optedIn = try reader.bool("opted_in")
        tagsOffset = reader.offset
        var probe = reader
        tagsAreCanonical = Tags.skipCanonical(&probe)
        if tagsAreCanonical {
            reader = probe
        } else {
            _ = try Tags.decode(from: &reader)  // checks them, or says why not
        }
        tags = UnsafeRawBufferPointer(rebasing: reader.bytes[tagsOffset..<reader.offset])
        invalidatedAt = try reader.optionalTimestamp("invalidated_at")
        offset = reader.offset
        invalidationReason = try reader.optionalField("invalidation_reason", max: Limits.invalidationReasonBytesMax)
        if let invalidationReason, !InvalidationReason.isValid(utf8: invalidationReason) {
            throw .invalidValue(field: "invalidation_reason", offset: offset)
        }
        strikes = try reader.u32()
        if formatVersion >= 2 {
            offset = reader.offset
            version = try reader.u32()
            guard version >= 1 else { throw .invalidValue(field: "version", offset: offset) }
            offset = reader.offset
            switch try reader.u8() {
            case 0:
                clientSequence = nil
            case 1:
                let value = try reader.u64()
                guard value <= Limits.clientSequenceMax else {
                    throw .invalidValue(field: "client_sequence", offset: offset)
                }
                clientSequence = value
            default:
                throw .invalidValue(field: "client_sequence", offset: offset)
            }
        } else {
            version = 1
            clientSequence = nil
        }
        // `Device.violation` (the token's platform is the device's by construction;
        // string and tag bounds are checked above).
        guard environment.isAllowed(for: id.platform),
            (invalidatedAt == nil) == (invalidationReason == nil),
            !token.isEmpty || invalidatedAt != nil,
            (externalID == nil) == (boundAt == nil),
            lastSeenAt >= createdAt
        else { throw .invalidValue(field: "device", offset: start) }
    }

    /// Reads a whole device upsert record (version, kind, fields, nothing after);
    /// nil for anything else, including a record the codec refuses.
    @inline(__always)
    static func read(record bytes: UnsafeRawBufferPointer) -> EncodedDevice? {
        MutationCodec.readRecord(bytes, kind: .deviceUpsert) { reader, formatVersion throws(ByteDecodingError) in
            try EncodedDevice(reading: &reader, formatVersion: formatVersion)
        }
    }

    /// The device these fields describe (builds its strings; the codec's path).
    func device() throws(ByteDecodingError) -> Device {
        var device = Device(
            id: id, environment: environment,
            token: token.isEmpty ? nil : PushToken(unchecked: token, platform: id.platform),
            createdAt: createdAt)
        device.bundleID = bundleID.map { BundleID(unchecked: String(decoding: $0, as: UTF8.self)) }
        device.installationID = installation.map { InstallationID(unchecked: String(decoding: $0, as: UTF8.self)) }
        device.installationSecretDigest = digest
        device.externalID = externalID.map { ExternalID(unchecked: String(decoding: $0, as: UTF8.self)) }
        device.lastSeenAt = lastSeenAt
        device.boundAt = boundAt
        device.appVersion = appVersion.map { String(decoding: $0, as: UTF8.self) }
        device.timezone = timezone.map { String(decoding: $0, as: UTF8.self) }
        device.locale = locale.map { String(decoding: $0, as: UTF8.self) }
        device.pushPermission = pushPermission
        device.optedIn = optedIn
        if tagsAreCanonical {
            device.tags = tags.count == 1 ? Tags() : Tags(storedEncoding: Array(tags))
        } else {
            var reader = LittleEndianReader(tags)
            device.tags = try Tags.decode(from: &reader)
        }
        device.invalidatedAt = invalidatedAt
        device.invalidationReason = invalidationReason.map {
            InvalidationReason(unchecked: String(decoding: $0, as: UTF8.self))
        }
        device.strikes = strikes
        device.version = version
        device.clientSequence = clientSequence
        return device
    }

    /// Whether `bytes` are valid UTF-8 of 1 to `max` Unicode scalars.
    @inline(__always)
    static func hasScalars(_ bytes: UnsafeRawBufferPointer, max: Int) -> Bool {
        guard let count = scalarCount(bytes) else { return false }
        return count >= 1 && count <= max
    }

    /// The number of Unicode scalars of valid UTF-8, or nil when not valid.
    @inline(__always)
    static func scalarCount(_ bytes: UnsafeRawBufferPointer) -> Int? {
        if Tags.isASCII(bytes) { return bytes.count }
        return String(validating: bytes, as: UTF8.self)?.unicodeScalars.count
    }
}

/// A person upsert's fields (`MutationCodec` kind 3), borrowed from its bytes:
/// external id (`u16`-prefixed UTF-8, 1 to 256 scalars) · created_at `i64`.
struct EncodedPerson {
    var externalID: UnsafeRawBufferPointer
    var createdAt: Timestamp

    /// Reads a person upsert's fields from `reader` (after the kind byte).
    init(reading reader: inout LittleEndianReader) throws(ByteDecodingError) {
        externalID = try reader.externalID()
        createdAt = try reader.timestamp("created_at")
    }

    /// Reads a whole person upsert record; nil for anything else.
    @inline(__always)
    static func read(record bytes: UnsafeRawBufferPointer) -> EncodedPerson? {
        MutationCodec.readRecord(bytes, kind: .personUpsert) { reader, _ throws(ByteDecodingError) in
            try EncodedPerson(reading: &reader)
        }
    }

    /// The person these fields describe.
    var person: Person {
        Person(externalID: ExternalID(unchecked: String(decoding: externalID, as: UTF8.self)), createdAt: createdAt)
    }
}

extension LittleEndianReader {
    /// A device id: app `u32` (> 0), mode `u8`, platform `u8`, sequence `u64`
    /// (> 0, and below `UInt64.max`: every id handed out has a successor).
    mutating func deviceID() throws(ByteDecodingError) -> DeviceID {
        let start = offset
        let app = try u32()
        let mode = AppMode(rawValue: try u8())
        let platform = Platform(rawValue: try u8())
        let sequence = try u64()
        guard app > 0, let mode, let platform, sequence > 0, sequence < .max else {
            throw .invalidValue(field: "id", offset: start)
        }
        return DeviceID(appID: AppID(app), mode: mode, platform: platform, sequence: sequence)
    }

    /// An external id's UTF-8 bytes (1 to 256 scalars), borrowed.
    mutating func externalID() throws(ByteDecodingError) -> UnsafeRawBufferPointer {
        let start = offset
        let bytes = try rawField("external_id", max: 4 * Limits.externalIDCharactersMax)
        guard EncodedDevice.hasScalars(bytes, max: Limits.externalIDCharactersMax) else {
            throw .invalidValue(field: "external_id", offset: start)
        }
        return bytes
    }
}

extension MutationCodec {
    /// Reads a whole record of `kind` with `read` (positioned after version and
    /// kind, given the record's format version; the record must end where
    /// `read` stops); nil for anything else.
    @inline(__always)
    static func readRecord<Fields>(
        _ bytes: UnsafeRawBufferPointer, kind: Kind,
        _ read: (inout LittleEndianReader, UInt8) throws(ByteDecodingError) -> Fields
    ) -> Fields? {
        guard bytes.count <= Limits.mutationBytesMax, bytes.count >= 2, readableFormatVersions.contains(bytes[0]),
            bytes[1] == kind.rawValue
        else { return nil }
        var reader = LittleEndianReader(bytes, offset: 2)
        do throws(ByteDecodingError) {
            let fields = try read(&reader, bytes[0])
            return reader.remaining == 0 ? fields : nil
        } catch {
            return nil
        }
    }
}
