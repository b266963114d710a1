/// The binary form of a `Mutation`, for the write-ahead log and snapshots.
///
/// Format version 1: byte 0 is the version, byte 1 the kind, then the fields,
/// little-endian, strings and byte strings prefixed by a `u16` length. Every
/// length is bounded by `Limits`, every value is re-validated on decode (a token
/// must fit its platform's shape, a device must be self-consistent), and the
/// record must end exactly where its last field does. A record never exceeds
/// `Limits.mutationBytesMax` bytes. Decoding throws `ByteDecodingError` on any
/// bad input and never traps. The storage layer adds its own framing and CRC.
///
/// Kinds: 1 device upsert, 2 device tombstone, 3 person upsert, 4 person erase,
/// 5 credential upsert, 6 credential delete, 7 settings, 8 device sequence floor.
package enum MutationCodec {
    package static let formatVersion: UInt8 = 1

    private enum Kind: UInt8 {
        case deviceUpsert = 1
        case deviceTombstone = 2
        case personUpsert = 3
        case personErase = 4
        case credentialUpsert = 5
        case credentialDelete = 6
        case settings = 7
        case deviceSequenceFloor = 8
    }

    /// Returns the bytes of `mutation`.
    package static func encode(_ mutation: Mutation) -> [UInt8] {
        var writer = ByteWriter()
        writer.u8(formatVersion)
        switch mutation {
        case .deviceUpsert(let device):
            writer.u8(Kind.deviceUpsert.rawValue)
            encode(device, into: &writer)
        case .deviceTombstone(let id):
            writer.u8(Kind.deviceTombstone.rawValue)
            encode(id, into: &writer)
        case .personUpsert(let person):
            writer.u8(Kind.personUpsert.rawValue)
            writer.string(person.externalID.rawValue)
            writer.i64(person.createdAt.millisecondsSinceEpoch)
        case .personErase(let externalID):
            writer.u8(Kind.personErase.rawValue)
            writer.string(externalID.rawValue)
        case .credentialUpsert(let credential):
            writer.u8(Kind.credentialUpsert.rawValue)
            encode(credential.key, into: &writer)
            writer.string(credential.teamID)
            writer.string(credential.keyID)
        case .credentialDelete(let key):
            writer.u8(Kind.credentialDelete.rawValue)
            encode(key, into: &writer)
        case .settings(let settings):
            writer.u8(Kind.settings.rawValue)
            writer.u32(UInt32(settings.maxDevicesPerPerson))
            writer.u8(settings.requireKnownPerson ? 1 : 0)
        case .deviceSequenceFloor(let floor):
            writer.u8(Kind.deviceSequenceFloor.rawValue)
            writer.u64(floor)
        }
        precondition(writer.bytes.count <= Limits.mutationBytesMax, "mutation of \(writer.bytes.count) bytes")
        return writer.bytes
    }

    /// Returns the mutation `bytes` hold, or throws why they are not one.
    package static func decode(_ bytes: [UInt8]) throws(ByteDecodingError) -> Mutation {
        let result = bytes.withUnsafeBytes { raw in
            Result { () throws(ByteDecodingError) in try decode(raw) }
        }
        return try result.get()
    }

    /// Returns the mutation `bytes` hold, or throws why they are not one; reads
    /// the borrowed bytes in place (recovery decodes from the snapshot's buffer).
    package static func decode(_ bytes: UnsafeRawBufferPointer) throws(ByteDecodingError) -> Mutation {
        guard bytes.count <= Limits.mutationBytesMax else {
            throw .lengthOutOfBounds(field: "record", length: bytes.count, max: Limits.mutationBytesMax)
        }
        var reader = ByteReader(bytes)
        let version = try reader.u8()
        guard version == formatVersion else { throw .unsupportedVersion(version) }
        let kindOffset = reader.offset
        let rawKind = try reader.u8()
        guard let kind = Kind(rawValue: rawKind) else { throw .unknownKind(rawKind, offset: kindOffset) }
        let mutation: Mutation
        switch kind {
        case .deviceUpsert:
            mutation = .deviceUpsert(try decodeDevice(&reader))
        case .deviceTombstone:
            mutation = .deviceTombstone(try decodeDeviceID(&reader))
        case .personUpsert:
            let externalID = try decodeExternalID(&reader)
            mutation = .personUpsert(Person(externalID: externalID, createdAt: try reader.timestamp("created_at")))
        case .personErase:
            mutation = .personErase(try decodeExternalID(&reader))
        case .credentialUpsert:
            let key = try decodeCredentialKey(&reader)
            let offset = reader.offset
            let teamID = try reader.string("team_id", max: Limits.credentialFieldBytesMax)
            let keyID = try reader.string("key_id", max: Limits.credentialFieldBytesMax)
            do throws(RegistryRejection) {
                mutation = .credentialUpsert(try APNsCredential(key: key, teamID: teamID, keyID: keyID))
            } catch {
                throw .invalidValue(field: "credential", offset: offset)
            }
        case .credentialDelete:
            mutation = .credentialDelete(try decodeCredentialKey(&reader))
        case .settings:
            let offset = reader.offset
            let maxDevices = Int(try reader.u32())
            let settings = AppSettings(maxDevicesPerPerson: maxDevices, requireKnownPerson: try reader.bool("settings"))
            guard settings.validationError() == nil else { throw .invalidValue(field: "settings", offset: offset) }
            mutation = .settings(settings)
        case .deviceSequenceFloor:
            mutation = .deviceSequenceFloor(try reader.u64())
        }
        guard reader.remaining == 0 else { throw .trailingBytes(count: reader.remaining) }
        return mutation
    }

    // MARK: Devices

    private static func encode(_ id: DeviceID, into writer: inout ByteWriter) {
        writer.u32(id.appID.rawValue)
        writer.u8(id.mode.rawValue)
        writer.u8(id.platform.rawValue)
        writer.u64(id.sequence)
    }

    private static func decodeDeviceID(_ reader: inout ByteReader) throws(ByteDecodingError) -> DeviceID {
        let offset = reader.offset
        let app = try reader.u32()
        let mode = AppMode(rawValue: try reader.u8())
        let platform = Platform(rawValue: try reader.u8())
        let sequence = try reader.u64()
        guard app > 0, let mode, let platform, sequence > 0 else { throw .invalidValue(field: "id", offset: offset) }
        return DeviceID(appID: AppID(app), mode: mode, platform: platform, sequence: sequence)
    }

    private static func encode(_ device: Device, into writer: inout ByteWriter) {
        encode(device.id, into: &writer)
        writer.u8(device.environment.rawValue)
        writer.field(device.token?.bytes ?? [])
        writer.optionalString(device.bundleID?.rawValue)
        writer.optionalString(device.installationID?.rawValue)
        if let digest = device.installationSecretDigest {
            writer.u8(1)
            writer.bytes.append(contentsOf: digest.bytes)
        } else {
            writer.u8(0)
        }
        writer.optionalString(device.externalID?.rawValue)
        writer.i64(device.createdAt.millisecondsSinceEpoch)
        writer.i64(device.lastSeenAt.millisecondsSinceEpoch)
        writer.optionalTimestamp(device.boundAt)
        writer.optionalString(device.appVersion)
        writer.optionalString(device.timezone)
        writer.optionalString(device.locale)
        writer.u8(device.pushPermission.map { $0 ? 2 : 1 } ?? 0)
        writer.u8(device.optedIn ? 1 : 0)
        device.tags.encode(into: &writer)
        writer.optionalTimestamp(device.invalidatedAt)
        writer.optionalString(device.invalidationReason?.rawValue)
        writer.u32(device.strikes)
    }

    private static func decodeDevice(_ reader: inout ByteReader) throws(ByteDecodingError) -> Device {
        let start = reader.offset
        let id = try decodeDeviceID(&reader)
        var offset = reader.offset
        guard let environment = APNsEnvironment(rawValue: try reader.u8()) else {
            throw .invalidValue(field: "environment", offset: offset)
        }
        offset = reader.offset
        let tokenBytes = try reader.rawField("token", max: Limits.fcmTokenCharactersMax)
        var token: PushToken?
        if !tokenBytes.isEmpty {
            do throws(RegistryRejection) {
                token = try PushToken(validatingBytes: Array(tokenBytes), platform: id.platform)
            } catch {
                throw .invalidValue(field: "token", offset: offset)
            }
        }
        var device = Device(
            id: id, environment: environment, token: token, createdAt: Timestamp(millisecondsSinceEpoch: 0))
        offset = reader.offset
        if let text = try reader.optionalString("bundle_id", max: Limits.bundleIDBytesMax) {
            device.bundleID = try validated("bundle_id", at: offset) { () throws(RegistryRejection) in
                try BundleID(text)
            }
        }
        offset = reader.offset
        if let text = try reader.optionalString("installation_id", max: 4 * Limits.installationIDCharactersMax) {
            device.installationID = try validated("installation_id", at: offset) { () throws(RegistryRejection) in
                try InstallationID(text)
            }
        }
        offset = reader.offset
        switch try reader.u8() {
        case 0: break
        case 1:
            device.installationSecretDigest = SecretDigest(bytes: try reader.raw(32))
        default: throw .invalidValue(field: "installation_secret", offset: offset)
        }
        device.externalID = try decodeOptionalExternalID(&reader)
        device.createdAt = try reader.timestamp("created_at")
        device.lastSeenAt = try reader.timestamp("last_seen_at")
        device.boundAt = try reader.optionalTimestamp("bound_at")
        device.appVersion = try reader.optionalString("app_version", max: Limits.appVersionBytesMax)
        device.timezone = try reader.optionalString("timezone", max: Limits.timezoneBytesMax)
        device.locale = try reader.optionalString("locale", max: Limits.localeBytesMax)
        offset = reader.offset
        switch try reader.u8() {
        case 0: device.pushPermission = nil
        case 1: device.pushPermission = false
        case 2: device.pushPermission = true
        default: throw .invalidValue(field: "push_permission", offset: offset)
        }
        device.optedIn = try reader.bool("opted_in")
        device.tags = try Tags.decode(from: &reader)
        device.invalidatedAt = try reader.optionalTimestamp("invalidated_at")
        offset = reader.offset
        if let reason = try reader.optionalString("invalidation_reason", max: Limits.invalidationReasonBytesMax) {
            do throws(RegistryRejection) {
                device.invalidationReason = try InvalidationReason(reason)
            } catch {
                throw .invalidValue(field: "invalidation_reason", offset: offset)
            }
        }
        device.strikes = try reader.u32()
        guard device.violation() == nil else { throw .invalidValue(field: "device", offset: start) }
        return device
    }

    /// Returns `make()`, turning its rejection into a decoding error at `offset`.
    private static func validated<Value>(
        _ field: String, at offset: Int, _ make: () throws(RegistryRejection) -> Value
    ) throws(ByteDecodingError) -> Value {
        do throws(RegistryRejection) {
            return try make()
        } catch {
            throw .invalidValue(field: field, offset: offset)
        }
    }

    // MARK: People and credentials

    private static func decodeExternalID(_ reader: inout ByteReader) throws(ByteDecodingError) -> ExternalID {
        let offset = reader.offset
        let text = try reader.string("external_id", max: 4 * Limits.externalIDCharactersMax)
        do throws(RegistryRejection) {
            return try ExternalID(text)
        } catch {
            throw .invalidValue(field: "external_id", offset: offset)
        }
    }

    private static func decodeOptionalExternalID(_ reader: inout ByteReader) throws(ByteDecodingError) -> ExternalID? {
        let offset = reader.offset
        switch try reader.u8() {
        case 0: return nil
        case 1: return try decodeExternalID(&reader)
        default: throw .invalidValue(field: "external_id", offset: offset)
        }
    }

    private static func encode(_ key: CredentialKey, into writer: inout ByteWriter) {
        writer.string(key.bundleID.rawValue)
        writer.u8(key.environment.rawValue)
    }

    private static func decodeCredentialKey(_ reader: inout ByteReader) throws(ByteDecodingError) -> CredentialKey {
        let offset = reader.offset
        let text = try reader.string("bundle_id", max: Limits.bundleIDBytesMax)
        let bundleID: BundleID
        do throws(RegistryRejection) {
            bundleID = try BundleID(text)
        } catch {
            throw .invalidValue(field: "bundle_id", offset: offset)
        }
        let environmentOffset = reader.offset
        guard let environment = APNsEnvironment(rawValue: try reader.u8()) else {
            throw .invalidValue(field: "environment", offset: environmentOffset)
        }
        return CredentialKey(bundleID: bundleID, environment: environment)
    }
}
