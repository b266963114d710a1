/// Replay's fast path for device upserts (most of a snapshot and of a log):
/// from the `MutationCodec` bytes straight into the stored record, with no
/// `Device`, no `Mutation` and no `String` per field in between, and the
/// device's person found by a guess before hashing.
extension DeviceStore {
    /// Applies the `MutationCodec` encoding of a device upsert, as
    /// `apply(.deviceUpsert(MutationCodec.decode(bytes)))` would, and returns
    /// true; returns false, having changed nothing, for anything it does not
    /// take: another kind of mutation, bytes the codec would refuse (the
    /// fields are read by `EncodedDevice`, the codec's own reader), a device
    /// `apply` would refuse, and tags not in canonical form (left to the
    /// general path). The caller then decodes and applies the record the
    /// general way, which applies it or says why not. The store changes
    /// exactly as `applyDeviceUpsert` changes it.
    mutating func applyEncodedDeviceUpsert(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let device = EncodedDevice.read(record: bytes), device.tagsAreCanonical, device.id.appID == appID,
            device.id.mode == mode
        else { return false }
        let sequence = device.id.sequence
        let platform = device.id.platform
        let existing = guessedSlot(ofSequence: sequence)
        if let existing, records[Int(existing)].platform != platform { return false }
        // Checked: from here on the upsert is applied, in `applyDeviceUpsert`'s order.
        var freeTokenHash: UInt32 = 0
        var keepToken = false  // the device keeps its token: it stays in the token index
        if !device.token.isEmpty {
            let hash = tokenHash(platform: platform, bytes: device.token)
            if let holder = slot(ofToken: device.token, platform: platform, hash: hash) {
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
        if let name = device.externalID, let boundAt = device.boundAt {
            if let guessed = guessedPersonSlot(name) {
                personSlot = guessed
            } else {
                let hash = personHash(name)
                personSlot =
                    personSlots.find(hash: hash) { blobs.equals(people[Int($0)].name, name) }
                    ?? insertPerson(name: name, createdAt: boundAt.millisecondsSinceEpoch, hash: hash)
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
        record.createdAt = device.createdAt.millisecondsSinceEpoch
        record.lastSeenAt = device.lastSeenAt.millisecondsSinceEpoch
        record.flags = DeviceRecord.flags(
            platform: platform, environment: device.environment, pushPermission: device.pushPermission,
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
        if device.tags.count > 1 { record.tags = internTags(device.tags) }  // one byte: no tags
        if let reason = device.invalidationReason, let invalidatedAt = device.invalidatedAt {
            record.invalidatedAt = invalidatedAt.millisecondsSinceEpoch
            record.invalidationReason = retainString(reason)
            invalidatedCount += 1
        }
        record.strikes = device.strikes
        record.version = device.version
        record.boundAt = device.boundAt?.millisecondsSinceEpoch ?? DeviceRecord.noTimestamp
        if keepToken {
            (record.tokenLength, record.token0, record.token1) = (kept.tokenLength, kept.token0, kept.token1)
            (record.token2, record.token3) = (kept.token2, kept.token3)
        }
        records[Int(slot)] = record
        if let clientSequence = device.clientSequence { setClientSequence(clientSequence, at: slot) }
        if !device.token.isEmpty && !keepToken {
            setFreeToken(bytes: device.token, at: slot, hash: freeTokenHash)
        }
        if personSlot != DeviceRecord.noSlot { link(slot: slot, toPerson: personSlot) }
        deviceCount += 1
        if platform == .ios { iosCount += 1 }
        return true
    }

    /// Applies a `MutationCodec` person upsert, as `apply(.personUpsert(...))`
    /// would, and returns true; false, having changed nothing, for anything else.
    mutating func applyEncodedPersonUpsert(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let person = EncodedPerson.read(record: bytes) else { return false }
        let name = person.externalID
        let createdAt = person.createdAt.millisecondsSinceEpoch
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
    mutating func applyEncodedUpsert(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count >= 2 else { return false }
        switch bytes[1] {
        case MutationCodec.Kind.deviceUpsert.rawValue: return applyEncodedDeviceUpsert(bytes)
        case MutationCodec.Kind.personUpsert.rawValue: return applyEncodedPersonUpsert(bytes)
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
