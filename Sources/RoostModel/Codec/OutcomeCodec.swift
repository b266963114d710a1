/// The binary form of the outcomes a remembered answer holds (idempotency
/// keys, spec §7): what a write answered, so that a retry renders the same
/// status and body from it with the same route's renderer.
///
/// Byte 0 is the format version, then a tag per outcome and its fields;
/// devices, people, credentials and device ids are embedded as the
/// `MutationCodec` record that already holds them (a `u16`-prefixed field),
/// so they are validated on decode exactly as log records are. Only the
/// outcomes of writes are remembered (`encode` returns nil for a read's).
/// A registration keeps what the renderers read: `created`, `tokenChange`,
/// the device, `displaced` and `evicted`; its mutations are in the log.
package enum OutcomeCodec {
    package static let formatVersion: UInt8 = 1

    enum Tag: UInt8 {
        case registered = 1
        case device = 2
        case deleted = 3
        case removed = 4
        case feedback = 5
        case personPut = 6
        case credential = 7
        case deregistered = 8
        case rejected = 9
        case batch = 10
        case imported = 11
        case answered = 12
        case personErased = 13
    }

    /// Returns the bytes of `outcome`, or nil for an outcome that no write
    /// answers (reads, tools'), which is never remembered.
    package static func encode(_ outcome: Outcome) -> [UInt8]? {
        var writer = LittleEndianWriter()
        writer.u8(formatVersion)
        guard write(outcome, into: &writer, nested: false) else { return nil }
        return writer.bytes
    }

    private static func write(_ outcome: Outcome, into writer: inout LittleEndianWriter, nested: Bool) -> Bool {
        switch outcome {
        case .registered(let registered):
            writer.u8(Tag.registered.rawValue)
            writer.u8(registered.created ? 1 : 0)
            let change: UInt8 =
                switch registered.tokenChange {
                case .unchanged: 0
                case .refreshed: 1
                case .reassigned: 2
                }
            writer.u8(change)
            embed(.deviceUpsert(registered.device), into: &writer)
            writer.u8(registered.displaced == nil ? 0 : 1)
            if let displaced = registered.displaced { embed(.deviceTombstone(displaced), into: &writer) }
            writer.u32(UInt32(registered.evicted.count))
            for id in registered.evicted { embed(.deviceTombstone(id), into: &writer) }
        case .device(let device):
            writer.u8(Tag.device.rawValue)
            embed(.deviceUpsert(device), into: &writer)
        case .deleted(let deleted):
            writer.u8(Tag.deleted.rawValue)
            writer.u8(deleted ? 1 : 0)
        case .removed(let deleted, let devicesRemoved):
            writer.u8(Tag.removed.rawValue)
            writer.u8(deleted ? 1 : 0)
            writer.u64(UInt64(devicesRemoved))
        case .personErased(let erased, let devicesRemoved, let at):
            writer.u8(Tag.personErased.rawValue)
            writer.u8(erased ? 1 : 0)
            writer.u64(UInt64(devicesRemoved))
            writer.optionalTimestamp(at)
        case .feedback(let result):
            writer.u8(Tag.feedback.rawValue)
            switch result {
            case .invalidated(let id):
                writer.u8(1)
                embed(.deviceTombstone(id), into: &writer)
            case .alreadyInvalidated(let id):
                writer.u8(2)
                embed(.deviceTombstone(id), into: &writer)
            case .stale(let id):
                writer.u8(3)
                embed(.deviceTombstone(id), into: &writer)
            case .unknownToken:
                writer.u8(4)
            }
        case .personPut(let person, let created):
            writer.u8(Tag.personPut.rawValue)
            embed(.personUpsert(person), into: &writer)
            writer.u8(created ? 1 : 0)
        case .credential(let credential):
            writer.u8(Tag.credential.rawValue)
            embed(.credentialUpsert(credential), into: &writer)
        case .deregistered(let removed, let tokensRemoved):
            writer.u8(Tag.deregistered.rawValue)
            writer.u8(removed ? 1 : 0)
            writer.u64(UInt64(tokensRemoved))
        case .rejected(let rejection):
            // A 429 is never remembered (decision 0050): the retry must be tried again.
            if case .tokenRateLimited = rejection { return false }
            // Nor a refused token: it would be remembered under the erased person's principal.
            if case .identityTokenRevoked = rejection { return false }
            writer.u8(Tag.rejected.rawValue)
            writer.string(rejection.code)
            writer.optionalString(rejection.associatedField)
        case .batch(let items):
            guard !nested else { return false }
            writer.u8(Tag.batch.rawValue)
            writer.u32(UInt32(items.count))
            for item in items {
                guard write(item, into: &writer, nested: true) else { return false }
            }
        case .imported(let batch):
            writer.u8(Tag.imported.rawValue)
            writer.u64(UInt64(batch.created))
            writer.u64(UInt64(batch.updated))
            writer.u32(UInt32(batch.rejected.count))
            for rejection in batch.rejected {
                writer.u64(UInt64(rejection.line))
                writer.string(rejection.code)
            }
        case .answered(let status, let body):
            guard !nested else { return false }
            writer.u8(Tag.answered.rawValue)
            writer.u16(UInt16(status))
            writer.u32(UInt32(body.count))
            writer.append(contentsOf: body)
        case .devicePage, .exportView, .changes, .stats, .settings, .person, .custom, .logAcknowledged,
            .appRemoved,
            .replayed, .idempotencyKeyReused, .notRemembered, .inactivePreview, .inactiveInvalidated, .peoplePage,
            .history, .personExport:
            return false
        }
        return true
    }

    private static func embed(_ mutation: Mutation, into writer: inout LittleEndianWriter) {
        writer.field(MutationCodec.encode(mutation))
    }

    /// Returns the outcome `bytes` hold, or throws why they are not one.
    package static func decode(_ bytes: [UInt8]) throws(ByteDecodingError) -> Outcome {
        let result = bytes.withUnsafeBytes { raw in
            Result { () throws(ByteDecodingError) in
                var reader = LittleEndianReader(raw)
                let version = try reader.u8()
                guard version == formatVersion else { throw .unsupportedVersion(version) }
                let outcome = try read(&reader, nested: false)
                guard reader.remaining == 0 else { throw .trailingBytes(count: reader.remaining) }
                return outcome
            }
        }
        return try result.get()
    }

    private static func read(_ reader: inout LittleEndianReader, nested: Bool) throws(ByteDecodingError) -> Outcome {
        let tagOffset = reader.offset
        let rawTag = try reader.u8()
        guard let tag = Tag(rawValue: rawTag), !(nested && (tag == .batch || tag == .answered)) else {
            throw .unknownKind(rawTag, offset: tagOffset)
        }
        switch tag {
        case .registered:
            let created = try reader.bool("created")
            let changeOffset = reader.offset
            let tokenChange: TokenChange
            switch try reader.u8() {
            case 0: tokenChange = .unchanged
            case 1: tokenChange = .refreshed
            case 2: tokenChange = .reassigned
            default: throw .invalidValue(field: "token_change", offset: changeOffset)
            }
            let device = try embeddedDevice(&reader)
            let displaced = try reader.bool("displaced") ? try embeddedID(&reader) : nil
            let evictedCount = Int(try reader.u32())
            guard evictedCount <= Limits.maxDevicesPerPersonRange.upperBound else {
                throw .lengthOutOfBounds(
                    field: "evicted", length: evictedCount, max: Limits.maxDevicesPerPersonRange.upperBound)
            }
            var evicted: [DeviceID] = []
            for _ in 0..<evictedCount { evicted.append(try embeddedID(&reader)) }
            return .registered(
                RegisterOutcome(
                    created: created, device: device, tokenChange: tokenChange, displaced: displaced,
                    evicted: evicted, mutations: []))
        case .device:
            return .device(try embeddedDevice(&reader))
        case .deleted:
            return .deleted(try reader.bool("deleted"))
        case .removed:
            let deleted = try reader.bool("deleted")
            return .removed(deleted: deleted, devicesRemoved: try count(&reader, "devices_removed"))
        case .personErased:
            let erased = try reader.bool("erased")
            let devicesRemoved = try count(&reader, "devices_removed")
            return .personErased(
                erased: erased, devicesRemoved: devicesRemoved, at: try reader.optionalTimestamp("erased_at"))
        case .feedback:
            let kindOffset = reader.offset
            switch try reader.u8() {
            case 1: return .feedback(.invalidated(try embeddedID(&reader)))
            case 2: return .feedback(.alreadyInvalidated(try embeddedID(&reader)))
            case 3: return .feedback(.stale(try embeddedID(&reader)))
            case 4: return .feedback(.unknownToken)
            default: throw .invalidValue(field: "feedback", offset: kindOffset)
            }
        case .personPut:
            guard case .personUpsert(let person) = try embedded(&reader) else {
                throw .invalidValue(field: "person", offset: reader.offset)
            }
            return .personPut(person, created: try reader.bool("created"))
        case .credential:
            guard case .credentialUpsert(let credential) = try embedded(&reader) else {
                throw .invalidValue(field: "credential", offset: reader.offset)
            }
            return .credential(credential)
        case .deregistered:
            let removed = try reader.bool("removed")
            return .deregistered(removed: removed, tokensRemoved: try count(&reader, "tokens_removed"))
        case .rejected:
            let offset = reader.offset
            let code = try reader.string("code", max: 64)
            let field = try reader.optionalField("field", max: 256).map { String(decoding: $0, as: UTF8.self) }
            guard let rejection = RegistryRejection(code: code, associatedField: field) else {
                throw .invalidValue(field: "rejection", offset: offset)
            }
            return .rejected(rejection)
        case .batch:
            let items = Int(try reader.u32())
            guard (1...DeviceBatch.itemsMax).contains(items) else {
                throw .lengthOutOfBounds(field: "batch", length: items, max: DeviceBatch.itemsMax)
            }
            var outcomes: [Outcome] = []
            outcomes.reserveCapacity(items)
            for _ in 0..<items { outcomes.append(try read(&reader, nested: true)) }
            return .batch(outcomes)
        case .imported:
            var batch = ImportBatch(created: try count(&reader, "created"), updated: try count(&reader, "updated"))
            let rejected = Int(try reader.u32())
            guard rejected <= reader.remaining else { throw .truncated(offset: reader.offset) }
            for _ in 0..<rejected {
                let line = try count(&reader, "line")
                batch.rejected.append(ImportRejection(line: line, code: try reader.string("code", max: 64)))
            }
            return .imported(batch)
        case .answered:
            let statusOffset = reader.offset
            let status = Int(try reader.u16())
            guard (200...599).contains(status) else { throw .invalidValue(field: "status", offset: statusOffset) }
            let length = Int(try reader.u32())
            guard length <= IdempotencyLimits.answerBytesMax else {
                throw .lengthOutOfBounds(field: "body", length: length, max: IdempotencyLimits.answerBytesMax)
            }
            return .answered(status: status, body: Array(try reader.raw(length)))
        }
    }

    private static func count(_ reader: inout LittleEndianReader, _ name: String) throws(ByteDecodingError) -> Int {
        let offset = reader.offset
        let value = try reader.u64()
        guard value <= UInt64(Int32.max) else { throw .invalidValue(field: name, offset: offset) }
        return Int(value)
    }

    private static func embedded(_ reader: inout LittleEndianReader) throws(ByteDecodingError) -> Mutation {
        let field = try reader.rawField("embedded", max: Limits.mutationBytesMax)
        return try MutationCodec.decode(field)
    }

    private static func embeddedDevice(_ reader: inout LittleEndianReader) throws(ByteDecodingError) -> Device {
        let offset = reader.offset
        guard case .deviceUpsert(let device) = try embedded(&reader) else {
            throw .invalidValue(field: "device", offset: offset)
        }
        return device
    }

    private static func embeddedID(_ reader: inout LittleEndianReader) throws(ByteDecodingError) -> DeviceID {
        let offset = reader.offset
        guard case .deviceTombstone(let id) = try embedded(&reader) else {
            throw .invalidValue(field: "device_id", offset: offset)
        }
        return id
    }
}

extension RegistryRejection {
    /// The string a case carries, where it carries one (a field name, or the
    /// decimal number of `staleRegistration` and `preconditionFailed`).
    var associatedField: String? {
        switch self {
        case .missingField(let name), .invalidField(let name): name
        case .deviceIdentityConflict(let name), .alreadyTaken(let name): name
        case .staleRegistration(let stored): String(stored)
        case .preconditionFailed(let version): String(version)
        case .invalidPlatform, .invalidEnvironment, .invalidTokenFormat, .unsupportedTokenType, .invalidTags,
            .tagsTooLarge, .unknownIdentity, .credentialNotFound, .installationProofRequired, .deviceNotFound,
            .personNotFound, .tokenRateLimited, .personDeviceLimit, .personErased, .identityTokenRevoked:
            nil
        }
    }

    /// The rejection whose `code` (and string, where the case carries one)
    /// these are; nil for anything else. The inverse of `code` and
    /// `associatedField` (a test walks every case).
    init?(code: String, associatedField field: String?) {
        let candidates: [RegistryRejection] = [
            .invalidPlatform, .invalidEnvironment, .invalidTokenFormat, .unsupportedTokenType, .invalidTags,
            .tagsTooLarge, .unknownIdentity, .credentialNotFound, .installationProofRequired, .deviceNotFound,
            .personNotFound, .personDeviceLimit, .personErased,
        ]
        if let field {
            switch code {
            case "missing_field": self = .missingField(field)
            case "invalid_field": self = .invalidField(field)
            case "device_identity_conflict": self = .deviceIdentityConflict(field: field)
            case RegistryRejection.alreadyTaken(field: field).code: self = .alreadyTaken(field: field)
            case "stale_registration":
                guard let stored = UInt64(field), stored <= Limits.clientSequenceMax else { return nil }
                self = .staleRegistration(stored: stored)
            case "precondition_failed":
                guard let version = UInt32(field), version >= 1 else { return nil }
                self = .preconditionFailed(currentVersion: version)
            default: return nil
            }
        } else {
            guard let found = candidates.first(where: { $0.code == code }) else { return nil }
            self = found
        }
    }
}
