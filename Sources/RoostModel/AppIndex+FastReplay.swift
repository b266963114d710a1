/// Replay's fast path for device upserts (most of a snapshot and of a log):
/// from the `MutationCodec` bytes straight into the stored record, with no
/// `Device`, no `Mutation` and no `String` per field in between, and the
/// device's person found by a guess before hashing.
extension AppIndex {
    /// Applies the `MutationCodec` encoding of a device upsert, as
    /// `apply(.deviceUpsert(MutationCodec.decode(bytes)))` would, and returns
    /// true; returns false, having changed nothing, for anything it does not
    /// take: another kind of mutation, bytes the codec would refuse, a device
    /// `apply` would refuse, and a few rare shapes it leaves to the general
    /// path (tags not in canonical form, strings that are not valid UTF-8).
    /// The caller then decodes and applies the record the general way, which
    /// applies it or says why not. Every field is checked as the codec and
    /// `Device.violation` check it, and the index changes exactly as there.
    package mutating func applyEncodedDeviceUpsert(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let device = EncodedDevice(bytes), device.app == appID.rawValue, device.mode == mode else {
            return false
        }
        let sequence = device.sequence
        let existing = guessedSlot(ofSequence: sequence)
        if let existing, records[Int(existing)].platform != device.platform { return false }
        // Checked: from here on the upsert is applied, in `apply`'s order.
        var freeTokenHash: UInt32 = 0
        var keepToken = false  // the device keeps its token: it stays in the token index
        if !device.token.isEmpty {
            let hash = tokenHash(platform: device.platform, bytes: device.token)
            if let holder = slot(ofToken: device.token, platform: device.platform, hash: hash) {
                if records[Int(holder)].sequence != sequence { removeToken(at: holder) } else { keepToken = true }
            }
            freeTokenHash = hash
        }
        var installationHash: UInt32 = 0
        if let installation = device.installation {
            let hash = self.installationHash(installation)
            if let holder = installationSlots.find(
                hash: hash, where: { blobs.equals(records[Int($0)].installation, installation) }),
                records[Int(holder)].sequence != sequence
            {
                removeInstallation(at: holder)
            }
            installationHash = hash
        }
        var personSlot = DeviceRecord.noSlot
        if let name = device.externalID {
            if let guessed = guessedPersonSlot(name) {
                personSlot = guessed
            } else {
                let hash = personHash(name)
                personSlot =
                    personSlots.find(hash: hash) { blobs.equals(people[Int($0)].name, name) }
                    ?? insertPerson(name: name, createdAt: device.boundAt, hash: hash)
            }
            previousDevicePerson = personSlot
        }
        let slot: UInt32
        var kept = DeviceRecord.free  // the token fields, when kept
        if let existing {
            if keepToken { kept = records[Int(existing)] }
            unindex(slot: existing, keepingToken: keepToken)
            slot = existing
        } else {
            slot = allocateDeviceSlot(sequence: sequence)
        }
        // As `index(_:at:personSlot:tokenHash:)`, field for field.
        var record = DeviceRecord.free
        record.sequence = sequence
        record.createdAt = device.createdAt
        record.lastSeenAt = device.lastSeenAt
        record.flags = DeviceRecord.flags(
            platform: device.platform, environment: device.environment, pushPermission: device.pushPermission,
            optedIn: device.optedIn)
        if let installation = device.installation {
            record.installation = blobs.store(installation)
            installationSlots.insert(slot: slot, hash: installationHash)
        }
        if let digest = device.digest { record.digest = storeDigest(digest) }
        record.bundleID = retainString(device.bundleID)
        record.appVersion = retainString(device.appVersion)
        record.timezone = retainString(device.timezone)
        record.locale = retainString(device.locale)
        if device.tags.count > 1 { record.tags = blobs.store(device.tags) }  // one byte: no tags
        if let reason = device.invalidationReason {
            record.invalidatedAt = device.invalidatedAt
            record.invalidationReason = retainString(reason)
            invalidatedCount += 1
        }
        record.strikes = device.strikes
        record.boundAt = device.boundAt
        if keepToken {
            (record.tokenLength, record.token0, record.token1) = (kept.tokenLength, kept.token0, kept.token1)
            (record.token2, record.token3) = (kept.token2, kept.token3)
        }
        records[Int(slot)] = record
        if !device.token.isEmpty && !keepToken {
            setFreeToken(bytes: device.token, at: slot, hash: freeTokenHash)
        }
        if personSlot != DeviceRecord.noSlot { link(slot: slot, toPerson: personSlot) }
        deviceCount += 1
        if device.platform == .ios { iosCount += 1 }
        return true
    }

    /// Applies a `MutationCodec` person upsert, as `apply(.personUpsert(...))`
    /// would, and returns true; false, having changed nothing, for anything else.
    package mutating func applyEncodedPersonUpsert(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count >= 12, bytes.count <= Limits.mutationBytesMax, bytes[0] == MutationCodec.formatVersion,
            bytes[1] == 3
        else { return false }
        var reader = ByteReader(bytes)
        let name: UnsafeRawBufferPointer
        let createdAt: Int64
        do throws(ByteDecodingError) {
            _ = try reader.raw(2)
            name = try reader.rawField("external_id", max: 4 * Limits.externalIDCharactersMax)
            createdAt = try reader.i64()
        } catch {
            return false
        }
        guard reader.remaining == 0, createdAt >= Timestamp.millisecondsMin, createdAt <= Timestamp.millisecondsMax,
            let count = EncodedDevice.scalarCount(name), count >= 1, count <= Limits.externalIDCharactersMax
        else { return false }
        if let slot = guessedPersonSlot(name) {
            people[Int(slot)].createdAt = createdAt
            return true
        }
        let hash = personHash(name)
        if let slot = personSlots.find(hash: hash, where: { blobs.equals(people[Int($0)].name, name) }) {
            people[Int(slot)].createdAt = createdAt
        } else {
            insertPerson(name: name, createdAt: createdAt, hash: hash)
        }
        return true
    }

    /// Applies a device or person upsert from its `MutationCodec` bytes (see
    /// `applyEncodedDeviceUpsert`, `applyEncodedPersonUpsert`); false, having
    /// changed nothing, for anything the general path must take.
    package mutating func applyEncodedUpsert(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count >= 2 else { return false }
        switch bytes[1] {
        case 1: return applyEncodedDeviceUpsert(bytes)
        case 3: return applyEncodedPersonUpsert(bytes)
        default: return false
        }
    }

    /// `slot(ofSequence:)`, trying the previous device's position in `order`
    /// and the one after it before a binary search (a log replays devices
    /// that registered again mostly in id order, and each search of a large
    /// `order` costs several cache misses).
    @inline(__always)
    mutating func guessedSlot(ofSequence sequence: UInt64) -> UInt32? {
        let position: Int
        let next = previousOrderPosition &+ 1
        if next < order.count && order[next] == sequence {
            position = next
        } else if previousOrderPosition < order.count && order[previousOrderPosition] == sequence {
            position = previousOrderPosition
        } else if let found = orderPosition(of: sequence) {
            position = found
        } else {
            return nil
        }
        previousOrderPosition = position
        let slot = orderSlots[position]
        return slot == DeviceRecord.noSlot ? nil : slot
    }

    /// The slot of the live person named `name` when it is one of replay's
    /// guesses (the previous device's person, the one after it, the person
    /// inserted last): devices mostly come in the order their people were
    /// created, and this skips a cache miss into the person table.
    @inline(__always)
    func guessedPersonSlot(_ name: UnsafeRawBufferPointer) -> UInt32? {
        if isPerson(previousDevicePerson, named: name) { return previousDevicePerson }
        if isPerson(previousDevicePerson &+ 1, named: name) { return previousDevicePerson &+ 1 }
        if isPerson(lastInsertedPerson, named: name) { return lastInsertedPerson }
        return nil
    }

    /// Whether `slot` is a live person named `name` (false for any slot out of range).
    @inline(__always)
    func isPerson(_ slot: UInt32, named name: UnsafeRawBufferPointer) -> Bool {
        guard Int(slot) < people.count else { return false }
        let stored = people[Int(slot)].name
        return Int(stored.length) == name.count && blobs.equals(stored, name)  // a free slot's length is 0
    }

    /// `strings.retain` of borrowed valid UTF-8 (0 for none).
    @inline(__always)
    mutating func retainString(_ bytes: UnsafeRawBufferPointer?) -> UInt32 {
        guard let bytes else { return 0 }
        return strings.retain(String(decoding: bytes, as: UTF8.self))
    }
}

/// A device upsert's fields, borrowed from its `MutationCodec` bytes and
/// checked as `MutationCodec.decode` and `Device.violation` check them.
/// Timestamps are milliseconds, `DeviceRecord.noTimestamp` for none.
struct EncodedDevice {
    var app: UInt32
    var mode: AppMode
    var platform: Platform
    var sequence: UInt64
    var environment: APNsEnvironment
    /// Empty: no token.
    var token: UnsafeRawBufferPointer
    var bundleID: UnsafeRawBufferPointer?
    var installation: UnsafeRawBufferPointer?
    var digest: SecretDigest?
    var externalID: UnsafeRawBufferPointer?
    var createdAt: Int64
    var lastSeenAt: Int64
    var boundAt: Int64
    var appVersion: UnsafeRawBufferPointer?
    var timezone: UnsafeRawBufferPointer?
    var locale: UnsafeRawBufferPointer?
    var pushPermission: Bool?
    var optedIn: Bool
    /// The tags as `Tags.encode` writes them (one zero byte: none).
    var tags: UnsafeRawBufferPointer
    var invalidatedAt: Int64
    var invalidationReason: UnsafeRawBufferPointer?
    var strikes: UInt32

    /// Parses and checks a whole device upsert record; nil for anything else
    /// (including what the fast path leaves to the general one).
    init?(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count <= Limits.mutationBytesMax, bytes.count >= 2, bytes[0] == MutationCodec.formatVersion,
            bytes[1] == 1
        else { return nil }
        var reader = ByteReader(bytes)
        do throws(ByteDecodingError) {
            _ = try reader.raw(2)
            app = try reader.u32()
            guard app > 0, let mode = AppMode(rawValue: try reader.u8()),
                let platform = Platform(rawValue: try reader.u8())
            else { return nil }
            (self.mode, self.platform) = (mode, platform)
            sequence = try reader.u64()
            guard sequence > 0, let environment = APNsEnvironment(rawValue: try reader.u8()),
                environment.isAllowed(for: platform)
            else { return nil }
            self.environment = environment
            token = try reader.rawField("token", max: Limits.fcmTokenCharactersMax)
            if !token.isEmpty {
                switch platform {
                case .ios:
                    guard token.count >= Limits.apnsTokenHexCharactersMin / 2,
                        token.count <= Limits.apnsTokenHexCharactersMax / 2
                    else { return nil }
                case .android:
                    guard token.count >= Limits.fcmTokenCharactersMin, token.allSatisfy(PushToken.isFCMByte) else {
                        return nil
                    }
                }
            }
            bundleID = try Self.optionalField(&reader, max: Limits.bundleIDBytesMax)
            if let bundleID {
                guard !bundleID.isEmpty,
                    bundleID.allSatisfy({
                        isAlphanumeric($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-")
                            || $0 == UInt8(ascii: "_")
                    })
                else { return nil }
            }
            installation = try Self.optionalField(&reader, max: 4 * Limits.installationIDCharactersMax)
            if let installation {
                guard let count = Self.scalarCount(installation), count >= 1,
                    count <= Limits.installationIDCharactersMax
                else { return nil }
            }
            switch try reader.u8() {
            case 0: digest = nil
            case 1: digest = SecretDigest(littleEndianBytes: try reader.raw(32))
            default: return nil
            }
            externalID = try Self.optionalField(&reader, max: 4 * Limits.externalIDCharactersMax)
            if let externalID {
                guard let count = Self.scalarCount(externalID), count >= 1, count <= Limits.externalIDCharactersMax
                else { return nil }
            }
            guard let createdAt = Self.timestamp(try reader.i64()), let lastSeenAt = Self.timestamp(try reader.i64()),
                let boundAt = Self.optionalTimestamp(try reader.i64())
            else { return nil }
            (self.createdAt, self.lastSeenAt, self.boundAt) = (createdAt, lastSeenAt, boundAt)
            appVersion = try Self.optionalField(&reader, max: Limits.appVersionBytesMax)
            timezone = try Self.optionalField(&reader, max: Limits.timezoneBytesMax)
            locale = try Self.optionalField(&reader, max: Limits.localeBytesMax)
            if let appVersion, Self.scalarCount(appVersion) == nil { return nil }
            if let timezone, Self.scalarCount(timezone) == nil { return nil }
            if let locale, Self.scalarCount(locale) == nil { return nil }
            switch try reader.u8() {
            case 0: pushPermission = nil
            case 1: pushPermission = false
            case 2: pushPermission = true
            default: return nil
            }
            switch try reader.u8() {
            case 0: optedIn = false
            case 1: optedIn = true
            default: return nil
            }
            let tagsStart = reader.offset
            guard Tags.skipCanonical(&reader) else { return nil }
            tags = UnsafeRawBufferPointer(rebasing: bytes[tagsStart..<reader.offset])
            guard let invalidatedAt = Self.optionalTimestamp(try reader.i64()) else { return nil }
            self.invalidatedAt = invalidatedAt
            invalidationReason = try Self.optionalField(&reader, max: Limits.invalidationReasonBytesMax)
            if let invalidationReason {
                guard !invalidationReason.isEmpty, invalidationReason.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
                    return nil
                }
            }
            strikes = try reader.u32()
            guard reader.remaining == 0 else { return nil }
        } catch {
            return nil
        }
        // `Device.violation` (the token's platform is the device's by construction).
        guard (invalidatedAt == DeviceRecord.noTimestamp) == (invalidationReason == nil),
            !token.isEmpty || invalidatedAt != DeviceRecord.noTimestamp,
            (externalID == nil) == (boundAt == DeviceRecord.noTimestamp),
            lastSeenAt >= createdAt
        else { return nil }
    }

    /// An optional length-prefixed field: flag byte 0 (none) or 1, then the field.
    private static func optionalField(
        _ reader: inout ByteReader, max: Int
    ) throws(ByteDecodingError) -> UnsafeRawBufferPointer? {
        switch try reader.u8() {
        case 0: return nil
        case 1: return try reader.rawField("string", max: max)
        default: throw reader.invalid("string")
        }
    }

    /// The number of Unicode scalars of valid UTF-8, or nil when not valid.
    @inline(__always)
    static func scalarCount(_ bytes: UnsafeRawBufferPointer) -> Int? {
        if Tags.isASCII(bytes) { return bytes.count }
        return String(validating: bytes, as: UTF8.self)?.unicodeScalars.count
    }

    private static func timestamp(_ raw: Int64) -> Int64? {
        raw >= Timestamp.millisecondsMin && raw <= Timestamp.millisecondsMax ? raw : nil
    }

    /// -1 is none (`DeviceRecord.noTimestamp`); nil when out of range.
    private static func optionalTimestamp(_ raw: Int64) -> Int64? {
        raw == -1 ? DeviceRecord.noTimestamp : timestamp(raw)
    }
}

extension SecretDigest {
    /// A digest from exactly 32 borrowed bytes, as `init(bytes:)` reads them.
    init(littleEndianBytes bytes: UnsafeRawBufferPointer) {
        precondition(bytes.count == 32, "digest of \(bytes.count) bytes")
        word0 = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt64.self))
        word1 = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
        word2 = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 16, as: UInt64.self))
        word3 = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 24, as: UInt64.self))
    }
}
