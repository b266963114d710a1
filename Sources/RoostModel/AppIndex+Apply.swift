/// Why a logged mutation cannot be applied to an index (a routing or storage bug,
/// or a damaged record that passed its checksum). Nothing is changed when thrown.
package enum MutationApplyError: Error, Hashable, Sendable {
    /// A device of another app or mode.
    case foreignDevice(DeviceID)
    /// A device whose fields contradict each other.
    case invalidDevice(DeviceID, String)
    /// Settings out of range.
    case invalidSettings
}

extension AppIndex {
    /// Replays one mutation: afterwards the index holds exactly its after-image.
    ///
    /// Idempotent: applying a mutation the index already reflects changes nothing.
    /// Robust to a fuzzy snapshot: an upsert whose token or installation id is held
    /// by another device takes it from that device (whose own after-image follows
    /// later in the log), and an upsert naming an unknown person creates them. After
    /// a complete replay the state equals the one that wrote the log.
    package mutating func apply(_ mutation: Mutation) throws(MutationApplyError) {
        switch mutation {
        case .deviceUpsert(let device):
            guard device.id.appID == appID, device.mode == mode else { throw .foreignDevice(device.id) }
            if let violation = device.violation() { throw .invalidDevice(device.id, violation) }
            if let existing = slot(ofSequence: device.id.sequence), records[Int(existing)].platform != device.platform {
                throw .invalidDevice(device.id, "platform differs from the stored device's")
            }
            // Each key is hashed and probed once; the hashes go on to the insert.
            var freeTokenHash: UInt32?
            if let token = device.token {
                let (holder, hash) = token.bytes.withUnsafeBytes { wanted in
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
        case .deviceTombstone(let id):
            guard id.appID == appID, id.mode == mode else { throw .foreignDevice(id) }
            if let slot = slot(of: id) { removeDevice(at: slot) }
            if id.sequence >= nextDeviceSequence { nextDeviceSequence = id.sequence + 1 }
        case .personUpsert(let person):
            let (found, hash) = personLookup(person.externalID)
            if let slot = found {
                people[Int(slot)].createdAt = person.createdAt.millisecondsSinceEpoch
            } else {
                insertPerson(person, hash: hash)
            }
        case .personErase(let externalID):
            if let personSlot = personSlot(of: externalID) {
                for slot in deviceSlots(ofPerson: personSlot) { removeDevice(at: slot) }
                removePerson(at: personSlot)
            }
        case .credentialUpsert(let credential):
            credentials[credential.key] = credential
        case .credentialDelete(let key):
            credentials[key] = nil
        case .settings(let newSettings):
            guard newSettings.validationError() == nil else { throw .invalidSettings }
            settings = newSettings
        case .deviceSequenceFloor(let floor):
            if floor > nextDeviceSequence { nextDeviceSequence = floor }
        }
    }

    /// Replays mutations in order.
    package mutating func apply(_ mutations: [Mutation]) throws(MutationApplyError) {
        for mutation in mutations { try apply(mutation) }
    }

    /// The mutations that rebuild this index from empty, in a canonical order:
    /// settings, credentials, people (by external id), devices (by id sequence),
    /// the sequence floor. Two indexes hold the same state exactly when these are
    /// equal. O(devices + people log people).
    package func snapshotMutations() -> [Mutation] {
        var result = snapshotHeader()
        forEachDevice { result.append(.deviceUpsert($0)) }
        result.append(.deviceSequenceFloor(nextDeviceSequence))
        return result
    }

    /// One bounded slice of a snapshot's devices: the upserts of at most `limit`
    /// devices created after `afterSequence`, in creation order, and the sequence
    /// to continue from (nil when done). With `snapshotHeader()` written first and
    /// the floor last, slices taken between requests form a fuzzy snapshot that
    /// replay from its starting LSN makes exact. O(limit + log devices).
    package func snapshotDevices(afterSequence: UInt64, limit: Int) -> (mutations: [Mutation], next: UInt64?) {
        precondition(limit >= 1, "snapshot slice limit must be positive, got \(limit)")
        var position = afterSequence == UInt64.max ? order.count : lowerBound(in: order, afterSequence + 1)
        var result: [Mutation] = []
        while position < order.count && result.count < limit {
            let slot = orderSlots[position]
            position += 1
            if slot != DeviceRecord.noSlot { result.append(.deviceUpsert(device(at: slot))) }
        }
        return (result, position < order.count ? order[position - 1] : nil)
    }

    /// The non-device part of a snapshot: settings, credentials, people.
    package func snapshotHeader() -> [Mutation] {
        var result: [Mutation] = [.settings(settings)]
        for key in credentials.keys.sorted() {
            if let credential = credentials[key] { result.append(.credentialUpsert(credential)) }
        }
        for person in allPeople() { result.append(.personUpsert(person)) }
        return result
    }

    /// Returns every broken internal invariant (empty when consistent). O(devices);
    /// for tests and `roost` self-checks, not for the request path.
    package func invariantViolations() -> [String] {
        var problems: [String] = []
        var live = 0
        var withToken = 0
        var withInstallation = 0
        var invalidated = 0
        var ios = 0
        var stringUses: [UInt32: UInt32] = [:]
        var personDevices: [UInt32: Int] = [:]
        for (index, record) in records.enumerated() where !record.isFree {
            let slot = UInt32(index)
            live += 1
            if self.slot(ofSequence: record.sequence) != slot { problems.append("slot \(slot): id index") }
            if record.tokenLength > 0 {
                withToken += 1
                let token = PushToken(unchecked: withTokenBytes(of: record) { Array($0) }, platform: record.platform)
                if self.slot(ofToken: token) != slot { problems.append("slot \(slot): token index") }
            }
            if !record.installation.isNone {
                withInstallation += 1
                let installation = InstallationID(unchecked: blobs.string(record.installation))
                if self.slot(ofInstallation: installation) != slot {
                    problems.append("slot \(slot): installation index")
                }
            }
            if record.isInvalidated { invalidated += 1 }
            if record.platform == .ios { ios += 1 }
            for id in [record.bundleID, record.appVersion, record.timezone, record.locale] where id != 0 {
                stringUses[id, default: 0] += 1
            }
            if record.isInvalidated { stringUses[record.invalidationReason, default: 0] += 1 }
            if record.person != DeviceRecord.noSlot {
                personDevices[record.person, default: 0] += 1
                if people[Int(record.person)].isFree { problems.append("slot \(slot): bound to a free person") }
            }
            if let violation = device(at: slot).violation() { problems.append("slot \(slot): \(violation)") }
        }
        if live != deviceCount { problems.append("device count \(deviceCount) != \(live)") }
        if withToken != tokenSlots.count {
            problems.append("token index has \(tokenSlots.count), devices \(withToken)")
        }
        if withInstallation != installationSlots.count { problems.append("installation index size") }
        if order.count != orderSlots.count { problems.append("order arrays differ in length") }
        if orderSlots.filter({ $0 == DeviceRecord.noSlot }).count != orderDeadCount { problems.append("dead count") }
        if invalidated != invalidatedCount { problems.append("invalidated count") }
        if ios != iosCount { problems.append("ios count") }
        strings.forEachLive { id, references in
            if stringUses[id, default: 0] != references { problems.append("interned \(id): \(references) refs") }
        }
        if stringUses.count != strings.count { problems.append("interned strings in use not live") }
        var livePeople = 0
        for (index, person) in people.enumerated() where !person.isFree {
            livePeople += 1
            let slot = UInt32(index)
            let listed = deviceSlots(ofPerson: slot)
            if listed.count != Int(person.deviceCount) || listed.count != personDevices[slot, default: 0] {
                problems.append("person \(slot): device list")
            }
            if listed.contains(where: { records[Int($0)].person != slot }) { problems.append("person \(slot): list") }
            if personSlot(of: self.person(at: slot).externalID) != slot { problems.append("person \(slot): index") }
        }
        if livePeople != personCount || livePeople != personSlots.count { problems.append("person count") }
        if zip(order, order.dropFirst()).contains(where: { $0 >= $1 }) { problems.append("order not ascending") }
        if order.count - orderDeadCount != live { problems.append("order has \(order.count - orderDeadCount) live") }
        if let last = order.last, last >= nextDeviceSequence { problems.append("sequence floor below an id") }
        return problems
    }
}
