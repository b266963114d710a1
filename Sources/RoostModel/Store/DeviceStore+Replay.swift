/// Why a logged mutation cannot be applied to an index (a routing or storage bug,
/// or a damaged record that passed its checksum). Nothing is changed when thrown.
package enum MutationApplyError: Error, Hashable, Sendable {
    /// A device of another app or mode.
    case foreignDevice(DeviceID)
    /// A device whose fields contradict each other.
    case invalidDevice(DeviceID, String)
    /// Settings out of range.
    case invalidSettings
    /// A remembered answer's seal without all of its parts just before it.
    case incompleteAnswer
    /// A change-feed slice out of order or out of its own bounds.
    case invalidChangeFeed
}

extension DeviceStore {
    /// Replays a device upsert: afterwards the store holds exactly this after-image.
    ///
    /// Idempotent, and robust to a fuzzy snapshot: a token or installation id
    /// held by another device is taken from it (that device's own after-image
    /// follows later in the log), and an unknown person is created. Throws
    /// (and changes nothing) for a device of another app or mode or one that
    /// contradicts itself or the stored device's platform.
    mutating func applyDeviceUpsert(_ device: Device) throws(MutationApplyError) {
        guard device.id.appID == appID, device.mode == mode else { throw .foreignDevice(device.id) }
        if let violation = device.violation() { throw .invalidDevice(device.id, violation) }
        if let existing = slot(ofSequence: device.id.sequence), records[Int(existing)].platform != device.platform {
            throw .invalidDevice(device.id, "platform differs from the stored device's")
        }
        // Each key is hashed and probed once; the hashes go on to the insert.
        var freeTokenHash: UInt32?
        if let token = device.token {
            let (holder, hash) = token.withBytes { wanted in
                let hash = tokenHash(platform: token.platform, bytes: wanted)
                return (slot(ofToken: wanted, platform: token.platform, hash: hash), hash)
            }
            if let holder, records[Int(holder)].sequence != device.id.sequence { removeToken(at: holder) }
            freeTokenHash = hash  // free, or this device's own: `storeDevice` unindexes it first
        }
        if let installationID = device.installationID, let holder = slot(ofInstallation: installationID),
            records[Int(holder)].sequence != device.id.sequence
        {
            removeInstallation(at: holder)
        }
        var personSlot: UInt32?
        if let externalID = device.externalID {
            let (found, hash) = personLookup(externalID)
            personSlot =
                found
                ?? insertPerson(
                    Person(externalID: externalID, createdAt: device.boundAt ?? device.createdAt), hash: hash)
        }
        storeDevice(device, personSlot: personSlot, tokenHash: freeTokenHash)
    }

    /// Replays a device tombstone: the device is gone and its id never handed out again.
    mutating func applyDeviceTombstone(_ id: DeviceID) throws(MutationApplyError) {
        guard id.appID == appID, id.mode == mode else { throw .foreignDevice(id) }
        if let slot = slot(of: id) { removeDevice(at: slot) }
        if id.sequence >= nextDeviceSequence { nextDeviceSequence = id.sequence + 1 }
    }

    /// Replays a person upsert (creates the person or sets `created_at`).
    mutating func applyPersonUpsert(_ person: Person) {
        let (found, hash) = personLookup(person.externalID)
        if let slot = found {
            people[Int(slot)].createdAt = person.createdAt.millisecondsSinceEpoch
        } else {
            insertPerson(person, hash: hash)
        }
    }

    /// Replays a person erasure: the person and their devices are gone.
    mutating func applyPersonErase(_ externalID: ExternalID) {
        if let personSlot = personSlot(of: externalID) {
            for slot in deviceSlots(ofPerson: personSlot) { removeDevice(at: slot) }
            removePerson(at: personSlot)
        }
    }

    /// Replays a sequence floor: no id below it is handed out again.
    mutating func applySequenceFloor(_ floor: UInt64) {
        if floor > nextDeviceSequence { nextDeviceSequence = floor }
    }
}
