/// The result of a change to one device.
package struct DeviceChange: Hashable, Sendable {
    package var device: Device
    /// Empty when nothing changed (an empty tag map, a repeated value).
    package var mutations: [Mutation]
}

/// The result of a delete: whether something was removed, and the log entries.
package struct Removal: Hashable, Sendable {
    package var deleted: Bool
    package var devicesRemoved: Int
    package var mutations: [Mutation]

    static let nothing = Removal(deleted: false, devicesRemoved: 0, mutations: [])
}

/// The result of `PUT /v1/people/{external_id}`.
package struct PersonPut: Hashable, Sendable {
    /// True for 201 (the person was not known).
    package var created: Bool
    package var person: Person
    package var mutations: [Mutation]
}

/// What provider feedback did (`POST /v1/feedback`).
package enum FeedbackResult: Hashable, Sendable {
    /// The device is now invalidated with the feedback's reason.
    case invalidated(DeviceID)
    /// The device was already invalidated; nothing changed.
    case alreadyInvalidated(DeviceID)
    /// APNs feedback not later than the device's latest registration: ignored.
    case stale(DeviceID)
    /// No device holds this token.
    case unknownToken
}

// The rules of every other change to devices and people (patch, strikes,
// invalidation, deletes, people, feedback), as functions over the
// `DeviceStore` that check first, write second and return the mutations.
extension DeviceStore {
    /// `PATCH /v1/devices/{id}`: merges tags and sets `opted_in`. Never touches
    /// `last_seen_at` or registration metadata. Rejected merges change nothing.
    /// With `ifMatch`, a device whose version does not satisfy it is 412
    /// `precondition_failed` (spec §7); an unknown id stays 404. Its history
    /// events (`tags_changed`, `opted_in`/`opted_out`) are at `now`.
    mutating func patchDevice(
        _ id: DeviceID, tags change: TagsChange, optedIn: Bool?, ifMatch: VersionCondition? = nil, at now: Timestamp
    ) -> Result<DeviceChange, RegistryRejection> {
        guard let slot = slot(of: id) else { return .failure(.deviceNotFound) }
        if let rejection = unmet(ifMatch, at: slot) { return .failure(rejection) }
        var device = device(at: slot)
        switch change.applied(to: device.tags) {
        case .success(let tags): device.tags = tags
        case .failure(let rejection): return .failure(rejection)
        }
        if let optedIn { device.optedIn = optedIn }
        return .success(write(device, unlessEqualTo: slot, at: now))
    }

    /// Adds one failed-delivery strike to a device (saturating); Native Notify's
    /// route decides what a number of strikes means.
    mutating func recordStrike(_ id: DeviceID) -> Result<DeviceChange, RegistryRejection> {
        guard let slot = slot(of: id) else { return .failure(.deviceNotFound) }
        var device = device(at: slot)
        device.strikes = device.strikes == UInt32.max ? device.strikes : device.strikes + 1
        return .success(write(device, unlessEqualTo: slot, at: nil))
    }

    /// Invalidates a device by id (a dead flag, an operator action) with `reason` at `now`.
    mutating func invalidateDevice(
        _ id: DeviceID, reason: InvalidationReason, at now: Timestamp
    ) -> Result<DeviceChange, RegistryRejection> {
        guard let slot = slot(of: id) else { return .failure(.deviceNotFound) }
        var device = device(at: slot)
        if device.invalidatedAt != nil { return .success(DeviceChange(device: device, mutations: [])) }
        device.invalidatedAt = now
        device.invalidationReason = reason
        return .success(write(device, unlessEqualTo: slot, at: now))
    }

    /// Stores `device` (a changed copy of the one at `slot`) with its version
    /// moved on, unless it equals the stored one (no change, no new version),
    /// with the history events of the change at `now` (nil only for a change
    /// no event shows: a strike).
    private mutating func write(_ device: Device, unlessEqualTo slot: UInt32, at now: Timestamp?) -> DeviceChange {
        let before = self.device(at: slot)
        if device.hasSameFields(as: before) { return DeviceChange(device: before, mutations: []) }
        var device = device
        device.version = DeviceVersion.next(before.version)
        storeDevice(device)
        var mutations: [Mutation] = [.deviceUpsert(device)]
        let events = HistoryEvent.events(from: before, to: device, registration: false, at: now ?? before.lastSeenAt)
        precondition(now != nil || events.isEmpty, "a change with history events but no time: \(events)")
        let synthesized =
            needsSynthesizedHistory(device.id, events: events) ? HistoryEvent.synthesized(before) : nil
        recordHistory(of: device.id, synthesized: synthesized, events: events, into: &mutations)
        return DeviceChange(device: device, mutations: mutations)
    }

    /// Returns the 412 of an `If-Match` the device at `slot` does not satisfy, or nil.
    private func unmet(_ condition: VersionCondition?, at slot: UInt32) -> RegistryRejection? {
        guard let condition else { return nil }
        let version = records[Int(slot)].version
        return condition.isMet(byVersion: version) ? nil : .preconditionFailed(currentVersion: version)
    }

    /// `DELETE /v1/devices/{id}`. With `ifMatch`, a device whose version does
    /// not satisfy it is 412 and stays; an id that names no device is
    /// `deleted: false` whatever the condition (RFC 9110 §13.1.1 lets a
    /// request that appears already applied succeed).
    mutating func deleteDevice(
        _ id: DeviceID, ifMatch: VersionCondition? = nil
    ) -> Result<Removal, RegistryRejection> {
        guard let slot = slot(of: id) else { return .success(.nothing) }
        if let rejection = unmet(ifMatch, at: slot) { return .failure(rejection) }
        return .success(remove(slots: [slot]))
    }

    /// Native Notify's deregister and Connect's `DELETE /v1/me/devices/{installation_id}`:
    /// removes the installation's device, only if it is bound to `owner` when one is given.
    mutating func deleteDevice(installation: InstallationID, ownedBy owner: ExternalID? = nil) -> Removal {
        guard let slot = slot(ofInstallation: installation), isOwned(slot, by: owner) else { return .nothing }
        return remove(slots: [slot])
    }

    /// Barua's `DELETE`: removes the token's device, only while it belongs to `owner`
    /// when one is given (a late sign-out cannot remove the next person's registration).
    mutating func deleteDevice(token: PushToken, ownedBy owner: ExternalID? = nil) -> Removal {
        guard let slot = slot(ofToken: token), isOwned(slot, by: owner) else { return .nothing }
        return remove(slots: [slot])
    }

    private func isOwned(_ slot: UInt32, by owner: ExternalID?) -> Bool {
        guard let owner else { return true }
        let personSlot = records[Int(slot)].person
        return personSlot != DeviceRecord.noSlot && personSlot == self.personSlot(of: owner)
    }

    private mutating func remove(slots: [UInt32]) -> Removal {
        var mutations: [Mutation] = []
        for slot in slots {
            let id = device(at: slot).id
            removeDevice(at: slot)
            mutations.append(.deviceTombstone(id))
        }
        return Removal(deleted: !slots.isEmpty, devicesRemoved: slots.count, mutations: mutations)
    }

    /// `PUT /v1/people/{external_id}`: makes the person known (201 when new).
    mutating func putPerson(_ externalID: ExternalID, at now: Timestamp) -> PersonPut {
        if let slot = personSlot(of: externalID) {
            return PersonPut(created: false, person: person(at: slot), mutations: [])
        }
        let person = Person(externalID: externalID, createdAt: now)
        insertPerson(person)
        return PersonPut(created: true, person: person, mutations: [.personUpsert(person)])
    }

    /// `DELETE /v1/people/{external_id}`: erases the person and their devices; the
    /// same external id used later starts with none. 404 `person_not_found` when unknown.
    /// O(devices of the person).
    mutating func erasePerson(_ externalID: ExternalID) -> Result<Removal, RegistryRejection> {
        guard let personSlot = personSlot(of: externalID) else { return .failure(.personNotFound) }
        var removal = remove(slots: deviceSlots(ofPerson: personSlot))
        removePerson(at: personSlot)
        removal.deleted = true
        removal.mutations.append(.personErase(externalID))
        return .success(removal)
    }

    /// `POST /v1/feedback`: the provider reports `token` dead.
    ///
    /// APNs feedback carries the time the token was seen invalid; when that is not
    /// later than the device's latest registration (`last_seen_at`), the token was
    /// registered again since and the feedback is ignored. FCM feedback has no such
    /// time and always applies. `invalidated_at` is the reported time when given,
    /// else `now`.
    mutating func invalidate(
        token: PushToken, reason: InvalidationReason, reportedAt: Timestamp?, at now: Timestamp
    ) -> (result: FeedbackResult, mutations: [Mutation]) {
        guard let slot = slot(ofToken: token) else { return (.unknownToken, []) }
        let before = device(at: slot)
        var device = before
        if token.platform == .ios, let reportedAt, reportedAt <= device.lastSeenAt { return (.stale(device.id), []) }
        if device.invalidatedAt != nil { return (.alreadyInvalidated(device.id), []) }
        device.invalidatedAt = max(reportedAt ?? now, device.lastSeenAt)
        device.invalidationReason = reason
        device.version = DeviceVersion.next(device.version)  // it was active: a change
        storeDevice(device)
        var mutations: [Mutation] = [.deviceUpsert(device)]
        let events = HistoryEvent.events(from: before, to: device, registration: false, at: now)
        let synthesized =
            needsSynthesizedHistory(device.id, events: events) ? HistoryEvent.synthesized(before) : nil
        recordHistory(of: device.id, synthesized: synthesized, events: events, into: &mutations)
        return (.invalidated(device.id), mutations)
    }

    /// Removes the ios devices registered for `key`'s bundle id and environment
    /// (`AppIndex.deleteCredential`'s devices). O(devices).
    mutating func removeIOSDevices(of key: CredentialKey) -> Removal {
        var slots: [UInt32] = []
        if let bundle = strings.id(of: key.bundleID.rawValue) {
            for (slot, record) in records.enumerated()
            where !record.isFree && record.bundleID == bundle && record.platform == .ios
                && record.environment == key.environment
            {
                slots.append(UInt32(slot))
            }
        }
        return remove(slots: slots)
    }
}
