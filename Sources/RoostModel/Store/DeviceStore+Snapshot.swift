extension DeviceStore {
    /// One bounded slice of a snapshot's devices: the upserts of at most `limit`
    /// devices created after `afterSequence`, in creation order, and the sequence
    /// to continue from (nil when done). With `snapshotHeader()` written first and
    /// the floor last, slices taken between requests form a fuzzy snapshot that
    /// replay from its starting LSN makes exact. Each device's upsert is
    /// followed by its history's records, if it has one (`historyMutations`);
    /// `limit` counts devices. O(limit + log devices + their events).
    func snapshotDevices(afterSequence: UInt64, limit: Int) -> (
        mutations: [Mutation], next: UInt64?
    ) {
        precondition(limit >= 1, "snapshot slice limit must be positive, got \(limit)")
        var position = afterSequence == UInt64.max ? order.count : lowerBound(in: order, afterSequence + 1)
        var result: [Mutation] = []
        var devices = 0
        while position < order.count && devices < limit {
            let slot = orderSlots[position]
            position += 1
            if slot != DeviceRecord.noSlot {
                let device = device(at: slot)
                result.append(.deviceUpsert(device))
                result += historyMutations(device.id)
                devices += 1
            }
        }
        return (result, position < order.count ? order[position - 1] : nil)
    }

    /// One bounded slice of a snapshot's people, in slot order from `fromSlot`:
    /// at most `limit` upserts and the slot to continue from (nil when done).
    /// A person created or erased after its slot was read has a log record at
    /// or after the snapshot's start LSN, so replay makes the slices exact.
    /// O(limit) (plus free slots skipped).
    func snapshotPeople(fromSlot: UInt32, limit: Int) -> (mutations: [Mutation], next: UInt32?) {
        precondition(limit >= 1, "snapshot slice limit must be positive, got \(limit)")
        var slot = Int(fromSlot)
        var result: [Mutation] = []
        while slot < people.count && result.count < limit {
            if !people[slot].isFree { result.append(.personUpsert(person(at: UInt32(slot)))) }
            slot += 1
        }
        return (result, slot < people.count ? UInt32(slot) : nil)
    }

    /// Returns every broken internal invariant (empty when consistent). O(devices);
    /// for tests and `roost` self-checks, not for the request path.
    func invariantViolations() -> [String] {
        var problems: [String] = tagSetViolations()
        var live = 0
        var withToken = 0
        var withInstallation = 0
        var invalidated = 0
        var ios = 0
        var withClientSequence = 0
        var stringUses: [UInt32: UInt32] = [:]
        var personDevices: [UInt32: Int] = [:]
        for (index, record) in records.enumerated() where !record.isFree {
            let slot = UInt32(index)
            live += 1
            if self.slot(ofSequence: record.sequence) != slot { problems.append("slot \(slot): id index") }
            if record.tokenLength > 0 {
                withToken += 1
                let token = withTokenBytes(of: record) { PushToken(unchecked: $0, platform: record.platform) }
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
            if record.version == 0 { problems.append("slot \(slot): version 0") }
            if record.hasClientSequence { withClientSequence += 1 }
            if record.hasClientSequence != (clientSequences[slot] != nil) {
                problems.append("slot \(slot): client sequence flag and table differ")
            }
        }
        if withClientSequence != clientSequences.count { problems.append("client sequences of free slots") }
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
        problems += history.invariantViolations()
        for sequence in history.rings.keys where slot(ofSequence: sequence) == nil {
            problems.append("history of absent device \(sequence)")
        }
        return problems
    }
}
