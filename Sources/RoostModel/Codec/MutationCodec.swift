/// The binary form of a `Mutation`, for the write-ahead log and snapshots.
///
/// Format version 2 (written) and 1 (still read): byte 0 is the version, byte 1 the kind, then the fields,
/// little-endian, strings and byte strings prefixed by a `u16` length. Every
/// length is bounded by `Limits`, every value is re-validated on decode (a token
/// must fit its platform's shape, a device must be self-consistent), and the
/// record must end exactly where its last field does. A record never exceeds
/// `Limits.mutationBytesMax` bytes. Decoding throws `ByteDecodingError` on any
/// bad input and never traps. The storage layer adds its own framing and CRC.
///
/// Kinds: 1 device upsert, 2 device tombstone, 3 person upsert, 4 person erase,
/// 5 credential upsert, 6 credential delete, 7 settings, 8 device sequence floor,
/// 9 remembered answer part, 10 remembered answer seal (idempotency keys, spec §7),
/// 19 device history (spec §9: device id, first ordinal, 1 to
/// `Limits.historyEventsPerRecordMax` events of `at i64 · kind u8 ·
/// external_id opt · previous_external_id opt · fingerprint (u8 presence, u64) ·
/// reason opt`).
/// 20 change time (spec §9: `at i64`, the commit time of the device changes
/// of the index that follow it in the log), 21 change-feed slice (a
/// snapshot's copy: `expired_through u64 · last_position u64 · count u16 ·`
/// count × `position u64 · sequence u64 · at i64 · platform u8 · deleted u8`,
/// positions ascending, at most `ChangeFeed.entriesPerSnapshotRecordMax`).
/// 22 erasure mark (decision 0079: `digest 32 bytes · at i64`), 23 history
/// redaction (decision 0079: the fields of kind 19, the events as they are
/// once the erased person is removed from them). 24 counted change-feed
/// slice (decision 0084: `expired_through u64 · last_position u64 ·
/// record_count u64 · counted_through u64 ·` then kind 21's count and
/// entries; the positions count the index's records): written since
/// positions count them; kind 21 is still read, as a legacy slice.
/// 13 settings with `inactive_after_days` (spec §8). Settings without that value
/// are written as kind 7, byte for byte as before it existed after the
/// format byte (decision 0052).
///
/// Version 2 differs from version 1 only in the device upsert, which ends
/// with spec §7's `version` and `client_sequence`; a version 1 device upsert
/// (logs and snapshots written before) reads as version 1 without a client
/// sequence. Every other kind reads the same under both.
package enum MutationCodec {
    /// The version `encode` writes.
    package static let formatVersion: UInt8 = 2
    /// The versions `decode` reads.
    package static let readableFormatVersions: ClosedRange<UInt8> = 1...2

    enum Kind: UInt8 {
        case deviceUpsert = 1
        case deviceTombstone = 2
        case personUpsert = 3
        case personErase = 4
        case credentialUpsert = 5
        case credentialDelete = 6
        case settings = 7
        case deviceSequenceFloor = 8
        case rememberedAnswerPart = 9
        case rememberedAnswer = 10
        case settingsWithInactivity = 13
        case deviceHistory = 19
        case changeTime = 20
        case changeFeed = 21
        case erasureMark = 22
        case historyRedaction = 23
        case countedChangeFeed = 24
    }

    /// Returns the bytes of `mutation`.
    package static func encode(_ mutation: Mutation) -> [UInt8] {
        var writer = LittleEndianWriter(capacity: encodedBytesReserved)
        encode(mutation, into: &writer)
        return writer.bytes
    }

    /// Bytes reserved up front for one mutation's encoding: a device upsert
    /// with a few tags fits, so it allocates its buffer once instead of
    /// growing it four or five times (issue 25's allocation budget).
    package static let encodedBytesReserved = 256

    /// Appends the bytes of `mutation` to `writer`: after a record's framing
    /// (`EngineRecord`), so that record and mutation share one buffer.
    package static func encode(_ mutation: Mutation, into writer: inout LittleEndianWriter) {
        let start = writer.bytes.count
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
            writer.u8((settings.inactiveAfterDays == nil ? Kind.settings : Kind.settingsWithInactivity).rawValue)
            writer.u32(UInt32(settings.maxDevicesPerPerson))
            writer.u8(settings.requireKnownPerson ? 1 : 0)
            if let days = settings.inactiveAfterDays {
                precondition(Limits.inactiveAfterDaysRange.contains(days), "inactive_after_days \(days)")
                writer.u16(UInt16(days))
            }
        case .deviceSequenceFloor(let floor):
            writer.u8(Kind.deviceSequenceFloor.rawValue)
            writer.u64(floor)
        case .rememberedAnswerPart(let owner, let key, let bytes):
            writer.u8(Kind.rememberedAnswerPart.rawValue)
            writer.string(owner.rawValue)
            writer.string(key.rawValue)
            writer.field(bytes)
        case .rememberedAnswer(let seal):
            writer.u8(Kind.rememberedAnswer.rawValue)
            writer.string(seal.owner.rawValue)
            writer.string(seal.key.rawValue)
            writer.bytes.append(contentsOf: seal.digest.bytes)
            writer.i64(seal.at.millisecondsSinceEpoch)
            writer.u32(UInt32(seal.byteCount))
        case .deviceHistory(let id, let firstOrdinal, let events),
            .historyRedaction(let id, let firstOrdinal, let events):
            precondition(
                (1...Limits.historyEventsPerRecordMax).contains(events.count), "history record of \(events.count)")
            precondition(firstOrdinal >= 1, "history ordinal 0")
            let isRedaction = if case .historyRedaction = mutation { true } else { false }
            writer.u8((isRedaction ? Kind.historyRedaction : Kind.deviceHistory).rawValue)
            encode(id, into: &writer)
            writer.u64(firstOrdinal)
            writer.u8(UInt8(events.count))
            for event in events { encode(event, into: &writer) }
        case .changeTime(let at):
            writer.u8(Kind.changeTime.rawValue)
            writer.i64(at.millisecondsSinceEpoch)
        case .erasureMark(let mark):
            writer.u8(Kind.erasureMark.rawValue)
            writer.bytes.append(contentsOf: mark.digest)
            writer.i64(mark.at.millisecondsSinceEpoch)
        case .changeFeed(let slice):
            precondition(
                slice.entries.count <= ChangeFeed.entriesPerSnapshotRecordMax,
                "change-feed slice of \(slice.entries.count)")
            writer.u8((slice.counted == nil ? Kind.changeFeed : Kind.countedChangeFeed).rawValue)
            writer.u64(slice.expiredThrough)
            writer.u64(slice.lastPosition)
            if let counted = slice.counted {
                writer.u64(counted.recordCount)
                writer.u64(counted.countedThrough)
            }
            writer.u16(UInt16(slice.entries.count))
            for entry in slice.entries {
                writer.u64(entry.position)
                writer.u64(entry.sequence)
                writer.i64(entry.at.millisecondsSinceEpoch)
                writer.u8(entry.platform.rawValue)
                writer.u8(entry.deleted ? 1 : 0)
            }
        }
        let count = writer.bytes.count - start
        precondition(count <= Limits.mutationBytesMax, "mutation of \(count) bytes")
    }

    /// Whether `bytes` start as a device or person upsert of this format version
    /// (what replay's fast path takes); the rest is not checked.
    package static func isUpsert(_ bytes: UnsafeRawBufferPointer) -> Bool {
        bytes.count >= 2 && readableFormatVersions.contains(bytes[0])
            && (bytes[1] == Kind.deviceUpsert.rawValue || bytes[1] == Kind.personUpsert.rawValue)
    }

    /// The device a device upsert's or tombstone's bytes name, and which of
    /// the two it is (read from the id's fixed place: both start with it, not
    /// validated beyond that); nil for any other bytes.
    package static func deviceChange(in bytes: UnsafeRawBufferPointer) -> ChangedDevice? {
        // version · kind · app u32 · mode u8 · platform u8 · sequence u64
        guard bytes.count >= 16, readableFormatVersions.contains(bytes[0]),
            bytes[1] == Kind.deviceUpsert.rawValue || bytes[1] == Kind.deviceTombstone.rawValue,
            let platform = Platform(rawValue: bytes[7])
        else { return nil }
        let sequence = LittleEndianReader.u64(at: 8, of: bytes)
        guard sequence > 0 else { return nil }
        return ChangedDevice(sequence: sequence, platform: platform, deleted: bytes[1] == Kind.deviceTombstone.rawValue)
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
        var reader = LittleEndianReader(bytes)
        let version = try reader.u8()
        guard readableFormatVersions.contains(version) else { throw .unsupportedVersion(version) }
        let kindOffset = reader.offset
        let rawKind = try reader.u8()
        guard let kind = Kind(rawValue: rawKind) else { throw .unknownKind(rawKind, offset: kindOffset) }
        let mutation: Mutation
        switch kind {
        case .deviceUpsert:
            mutation = .deviceUpsert(try EncodedDevice(reading: &reader, formatVersion: version).device())
        case .deviceTombstone:
            mutation = .deviceTombstone(try reader.deviceID())
        case .personUpsert:
            mutation = .personUpsert(try EncodedPerson(reading: &reader).person)
        case .personErase:
            mutation = .personErase(ExternalID(unchecked: String(decoding: try reader.externalID(), as: UTF8.self)))
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
        case .settings, .settingsWithInactivity:
            let offset = reader.offset
            let maxDevices = Int(try reader.u32())
            var settings = AppSettings(maxDevicesPerPerson: maxDevices, requireKnownPerson: try reader.bool("settings"))
            // Kind 13 always holds a value: "off" is written as kind 7.
            if kind == .settingsWithInactivity { settings.inactiveAfterDays = Int(try reader.u16()) }
            guard settings.validationError() == nil else { throw .invalidValue(field: "settings", offset: offset) }
            mutation = .settings(settings)
        case .deviceSequenceFloor:
            // The next sequence to hand out: an id, so below `UInt64.max` (see `deviceID()`).
            let offset = reader.offset
            let floor = try reader.u64()
            guard floor < .max else { throw .invalidValue(field: "sequence_floor", offset: offset) }
            mutation = .deviceSequenceFloor(floor)
        case .rememberedAnswerPart:
            let owner = try decodeOwner(&reader)
            let key = try decodeIdempotencyKey(&reader)
            let partOffset = reader.offset
            let part = try reader.rawField("answer_part", max: IdempotencyLimits.partBytesMax)
            guard !part.isEmpty else { throw .invalidValue(field: "answer_part", offset: partOffset) }
            mutation = .rememberedAnswerPart(owner: owner, key: key, bytes: Array(part))
        case .rememberedAnswer:
            let owner = try decodeOwner(&reader)
            let key = try decodeIdempotencyKey(&reader)
            let digest = RequestDigest(Array(try reader.raw(RequestDigest.byteCount)))
            let at = try reader.timestamp("remembered_at")
            let countOffset = reader.offset
            let byteCount = Int(try reader.u32())
            guard byteCount <= IdempotencyLimits.answerBytesMax else {
                throw .invalidValue(field: "answer_bytes", offset: countOffset)
            }
            mutation = .rememberedAnswer(
                RememberedAnswerSeal(owner: owner, key: key, digest: digest, at: at, byteCount: byteCount))
        case .deviceHistory:
            mutation = try decodeHistory(&reader)
        case .historyRedaction:
            guard case .deviceHistory(let id, let firstOrdinal, let events) = try decodeHistory(&reader) else {
                preconditionFailure("decodeHistory made another kind")
            }
            mutation = .historyRedaction(id, firstOrdinal: firstOrdinal, events: events)
        case .erasureMark:
            let digest = Array(try reader.raw(ErasureMark.digestBytes))
            mutation = .erasureMark(ErasureMark(digest: digest, at: try reader.timestamp("erased_at")))
        case .changeTime:
            mutation = .changeTime(try reader.timestamp("change_time"))
        case .changeFeed:
            mutation = .changeFeed(try decodeChangeFeed(&reader, counted: false))
        case .countedChangeFeed:
            mutation = .changeFeed(try decodeChangeFeed(&reader, counted: true))
        }
        guard reader.remaining == 0 else { throw .trailingBytes(count: reader.remaining) }
        return mutation
    }

    /// A change-feed slice: positions ascending, above `expired_through` and
    /// at most `last_position`, itself at most `record_count` (kind 24);
    /// sequences positive; a known platform.
    private static func decodeChangeFeed(
        _ reader: inout LittleEndianReader, counted isCounted: Bool
    ) throws(ByteDecodingError) -> ChangeFeedSlice {
        let offset = reader.offset
        let expiredThrough = try reader.u64()
        let lastPosition = try reader.u64()
        guard lastPosition >= expiredThrough else { throw .invalidValue(field: "change_feed", offset: offset) }
        var counted: ChangeFeedSlice.Counted? = nil
        if isCounted {
            let recordCount = try reader.u64()
            let countedThrough = try reader.u64()
            guard recordCount >= lastPosition else {
                throw .invalidValue(field: "change_feed_count", offset: offset)
            }
            counted = ChangeFeedSlice.Counted(recordCount: recordCount, countedThrough: countedThrough)
        }
        let count = Int(try reader.u16())
        guard count <= ChangeFeed.entriesPerSnapshotRecordMax else {
            throw .lengthOutOfBounds(field: "change_feed", length: count, max: ChangeFeed.entriesPerSnapshotRecordMax)
        }
        var entries: [ChangeFeed.Entry] = []
        entries.reserveCapacity(count)
        var previous = expiredThrough
        for _ in 0..<count {
            let entryOffset = reader.offset
            let position = try reader.u64()
            let sequence = try reader.u64()
            let at = try reader.timestamp("change_at")
            let platform = Platform(rawValue: try reader.u8())
            let deleted = try reader.bool("change_deleted")
            guard let platform, position > previous, position <= lastPosition, sequence > 0, sequence < .max else {
                throw .invalidValue(field: "change_entry", offset: entryOffset)
            }
            previous = position
            entries.append(
                ChangeFeed.Entry(position: position, sequence: sequence, platform: platform, deleted: deleted, at: at))
        }
        return ChangeFeedSlice(
            expiredThrough: expiredThrough, lastPosition: lastPosition, entries: entries, counted: counted)
    }

    // MARK: Devices (read by `EncodedDevice`)

    private static func encode(_ id: DeviceID, into writer: inout LittleEndianWriter) {
        writer.appendFields(bytesMax: deviceIDBytes) { encode(id, into: &$0) }
    }

    /// A device id's bytes: the one spelling of them, for the device upsert
    /// and the records that name a device.
    private static func encode(_ id: DeviceID, into cursor: inout FieldCursor) {
        cursor.u32(id.appID.rawValue)
        cursor.u8(id.mode.rawValue)
        cursor.u8(id.platform.rawValue)
        cursor.u64(id.sequence)
    }

    /// The bytes `encode(_:into:)` writes for a device id.
    private static let deviceIDBytes = 14

    /// The device's fields written straight into the record through a
    /// `FieldCursor` (`LittleEndianWriter.appendFields`): one bounds-checked
    /// store a field instead of an `Array.append` a field. The bytes are
    /// `LittleEndianWriter`'s, field by field (`MutationFormatTests`).
    private static func encode(_ device: Device, into writer: inout LittleEndianWriter) {
        writer.appendFields(bytesMax: encodedBytesMax(of: device)) { cursor in
            encode(device.id, into: &cursor)
            cursor.u8(device.environment.rawValue)
            if let token = device.token {
                token.withBytes { cursor.field($0) }
            } else {
                cursor.u16(0)
            }
            cursor.optionalString(device.bundleID?.rawValue)
            cursor.optionalString(device.installationID?.rawValue)
            if let digest = device.installationSecretDigest {
                cursor.u8(1)
                // Word by word: an array literal of the words allocates in a debug build.
                cursor.u64(digest.word0)
                cursor.u64(digest.word1)
                cursor.u64(digest.word2)
                cursor.u64(digest.word3)
            } else {
                cursor.u8(0)
            }
            cursor.optionalString(device.externalID?.rawValue)
            cursor.i64(device.createdAt.millisecondsSinceEpoch)
            cursor.i64(device.lastSeenAt.millisecondsSinceEpoch)
            cursor.optionalTimestamp(device.boundAt)
            cursor.optionalString(device.appVersion)
            cursor.optionalString(device.timezone)
            cursor.optionalString(device.locale)
            cursor.u8(device.pushPermission.map { $0 ? 2 : 1 } ?? 0)
            cursor.u8(device.optedIn ? 1 : 0)
            device.tags.encode(into: &cursor)
            cursor.optionalTimestamp(device.invalidatedAt)
            cursor.optionalString(device.invalidationReason?.rawValue)
            cursor.u32(device.strikes)
            // Format version 2.
            cursor.u32(device.version)
            if let clientSequence = device.clientSequence {
                cursor.u8(1)
                cursor.u64(clientSequence)
            } else {
                cursor.u8(0)
            }
        }
    }

    /// The most bytes `encode(_:into:)` writes for `device`.
    private static func encodedBytesMax(of device: Device) -> Int {
        // id, environment 1, token length 2, digest 33, three timestamps 24,
        // permission and opt-in 2, tags' count 1, invalidation time 8, strikes 4,
        // version 4, client sequence 9.
        let fixed = deviceIDBytes + 1 + 2 + 33 + 24 + 2 + 1 + 8 + 4 + 4 + 9
        return fixed + (device.token?.byteCount ?? 0) + device.tags.encoded.count
            + FieldCursor.bytesMax(ofOptionalString: device.bundleID?.rawValue)
            + FieldCursor.bytesMax(ofOptionalString: device.installationID?.rawValue)
            + FieldCursor.bytesMax(ofOptionalString: device.externalID?.rawValue)
            + FieldCursor.bytesMax(ofOptionalString: device.appVersion)
            + FieldCursor.bytesMax(ofOptionalString: device.timezone)
            + FieldCursor.bytesMax(ofOptionalString: device.locale)
            + FieldCursor.bytesMax(ofOptionalString: device.invalidationReason?.rawValue)
    }

    // MARK: Remembered answers

    private static func decodeOwner(_ reader: inout LittleEndianReader) throws(ByteDecodingError) -> IdempotencyOwner {
        let offset = reader.offset
        let text = try reader.string("owner", max: IdempotencyLimits.ownerBytesMax)
        guard !text.isEmpty else { throw .invalidValue(field: "owner", offset: offset) }
        return IdempotencyOwner(text)
    }

    private static func decodeIdempotencyKey(_ reader: inout LittleEndianReader) throws(ByteDecodingError)
        -> IdempotencyKey
    {
        let offset = reader.offset
        let text = try reader.string("idempotency_key", max: IdempotencyLimits.keyCharactersMax)
        guard let key = IdempotencyKey(text[...]) else { throw .invalidValue(field: "idempotency_key", offset: offset) }
        return key
    }

    // MARK: History

    private static func encode(_ event: HistoryEvent, into writer: inout LittleEndianWriter) {
        writer.i64(event.at.millisecondsSinceEpoch)
        writer.u8(event.kind.rawValue)
        writer.optionalString(event.externalID?.rawValue)
        writer.optionalString(event.previousExternalID?.rawValue)
        if let fingerprint = event.tokenFingerprint {
            writer.u8(1)
            writer.u64(fingerprint.rawValue)
        } else {
            writer.u8(0)
        }
        writer.optionalString(event.reason?.rawValue)
    }

    private static func decodeHistory(_ reader: inout LittleEndianReader) throws(ByteDecodingError) -> Mutation {
        let id = try reader.deviceID()
        let ordinalOffset = reader.offset
        let firstOrdinal = try reader.u64()
        guard firstOrdinal >= 1, firstOrdinal <= UInt64.max - UInt64(Limits.historyEventsPerRecordMax) else {
            throw .invalidValue(field: "history_ordinal", offset: ordinalOffset)
        }
        let countOffset = reader.offset
        let count = Int(try reader.u8())
        guard (1...Limits.historyEventsPerRecordMax).contains(count) else {
            throw .invalidValue(field: "history_events", offset: countOffset)
        }
        var events: [HistoryEvent] = []
        events.reserveCapacity(count)
        for _ in 0..<count {
            let at = try reader.timestamp("history_at")
            let kindOffset = reader.offset
            guard let kind = HistoryEventKind(rawValue: try reader.u8()) else {
                throw .invalidValue(field: "history_kind", offset: kindOffset)
            }
            let externalID = try historyExternalID(&reader)
            let previous = try historyExternalID(&reader)
            let fingerprint: TokenFingerprint?
            switch try reader.bool("token_fingerprint") {
            case true: fingerprint = TokenFingerprint(rawValue: try reader.u64())
            case false: fingerprint = nil
            }
            let reasonOffset = reader.offset
            let reasonBytes = try reader.optionalField("reason", max: Limits.invalidationReasonBytesMax)
            if let reasonBytes, !InvalidationReason.isValid(utf8: reasonBytes) {
                throw .invalidValue(field: "reason", offset: reasonOffset)
            }
            events.append(
                HistoryEvent(
                    at: at, kind: kind, externalID: externalID, previousExternalID: previous,
                    tokenFingerprint: fingerprint,
                    reason: reasonBytes.map { InvalidationReason(unchecked: String(decoding: $0, as: UTF8.self)) }))
        }
        return .deviceHistory(id, firstOrdinal: firstOrdinal, events: events)
    }

    private static func historyExternalID(_ reader: inout LittleEndianReader) throws(ByteDecodingError)
        -> ExternalID?
    {
        let offset = reader.offset
        guard let bytes = try reader.optionalField("external_id", max: 4 * Limits.externalIDCharactersMax) else {
            return nil
        }
        guard EncodedDevice.hasScalars(bytes, max: Limits.externalIDCharactersMax) else {
            throw .invalidValue(field: "external_id", offset: offset)
        }
        return ExternalID(unchecked: String(decoding: bytes, as: UTF8.self))
    }

    // MARK: Credentials

    private static func encode(_ key: CredentialKey, into writer: inout LittleEndianWriter) {
        writer.string(key.bundleID.rawValue)
        writer.u8(key.environment.rawValue)
    }

    private static func decodeCredentialKey(_ reader: inout LittleEndianReader) throws(ByteDecodingError)
        -> CredentialKey
    {
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
