// The identity rules of registration (spec §5 rules 1 to 7), written as
// functions over the `DeviceStore`: they read the stored fields, check
// everything, then write through the store's primitives and return the
// mutations. `AppIndex.register` calls in with the app's settings and credentials.

extension DeviceStore {
    /// Registers a device: spec §5 rules 1 to 7, as amended by spec §12, in one step.
    ///
    /// Resolution, all before any write (the full decision table is in
    /// docs/model.md, "Resolution order inside `register`"):
    /// 1. Rule 5: a `device_id` of this app minted for another mode or platform is
    ///    422 `device_identity_conflict` (`device_id`). An id of this index with a
    ///    matching secret digest is the *proven* device; anything else is ignored.
    /// 2. Rule 4: the device holding `installation_id`, if any, must be of the same
    ///    platform (else 422 on `installation_id`). Unless it is the proven device:
    ///    when it holds a secret, it is reached only with its proof (spec §12: 409
    ///    `installation_proof_required`) — or by its own token, which rule 1
    ///    reaches anyway; and a proof naming another device is 422 on
    ///    `installation_id` (the proof and the installation name two devices).
    /// 3. The target. With an `installation_id`, rule 4 decides (spec §12): the
    ///    installation's device (the proven one, or the one holding the id, or —
    ///    for a new id — the token's holder when it has no installation id, else a
    ///    new device); a holder of the token of another installation is
    ///    `Reassigned`: it keeps its id and its own installation id, loses its
    ///    token. Without one: the proven device, unless another device holds the
    ///    token, which then wins and the proven one is `Superseded` (rule 5); else
    ///    the token's holder (rule 1); else a new device.
    /// 4. Rule 2/3: binding to another person needs that person known when
    ///    `require_known_person` (409 `unknown_identity`); tags must fit after the merge.
    ///
    /// Then it writes: the displaced device, the person (created if new), evictions
    /// (an invalidated device of the person first, else the least recently
    /// registered), and the target with `last_seen_at = now`, invalidation cleared,
    /// strikes reset only when the token came from another device (rule 6).
    /// O(1) expected plus O(devices of the person).
    /// `settings` and `credentials` are the app's (`AppIndex` holds them): the
    /// person limit, `require_known_person`, and whether a Barua request's
    /// credential exists.
    ///
    /// The writes' mutations are appended to `mutations`, in order (nothing
    /// is appended when the request is rejected), and the outcome's own
    /// `mutations` stays empty: a shard passes the one array it reuses from
    /// command to command, so that a registration allocates no list for them.
    mutating func register(
        _ request: RegisterRequest, settings: AppSettings, credentials: [CredentialKey: APNsCredential],
        at now: Timestamp, appendingTo mutations: inout [Mutation]
    ) -> Result<RegisterOutcome, RegistryRejection> {
        if let rejection = request.validationError() { return .failure(rejection) }
        let platform = request.platform

        var proven: UInt32?
        if let id = request.deviceID, id.appID == appID {
            guard id.mode == mode, id.platform == platform else {
                return .failure(.deviceIdentityConflict(field: "device_id"))
            }
            if let slot = slot(of: id), let presented = request.installationSecretDigest,
                let stored = storedDigest(at: slot), stored.constantTimeEquals(presented)
            {
                proven = slot
            }
        }
        let tokenSlot = slot(ofToken: request.token)
        let installationSlot = request.installationID.flatMap { slot(ofInstallation: $0) }
        if let installationSlot {
            guard records[Int(installationSlot)].platform == platform else {
                return .failure(.deviceIdentityConflict(field: "installation_id"))
            }
            if installationSlot != proven {
                if storedDigest(at: installationSlot) != nil && installationSlot != tokenSlot {
                    return .failure(.installationProofRequired)
                }
                if proven != nil { return .failure(.deviceIdentityConflict(field: "installation_id")) }
            }
        }
        if let sequence = request.clientSequence,
            let stored = highestClientSequence(of: proven, installationSlot, tokenSlot), sequence <= stored
        {
            return .failure(.staleRegistration(stored: stored))
        }

        var target: UInt32?
        var loser: (slot: UInt32, kind: Displacement)?
        var tokenChange = TokenChange.unchanged
        if request.installationID != nil {
            // Rule 4 decides. After the checks above, proven and installation
            // device are the same device when both exist.
            if let named = proven ?? installationSlot {
                target = named
                if let holder = tokenSlot, holder != named {
                    loser = (holder, .reassigned)
                    tokenChange = .reassigned
                } else if tokenSlot == nil {
                    tokenChange = .refreshed
                }
            } else if let holder = tokenSlot {
                // A new installation id: the holder adopts it when it has none;
                // a holder of another installation loses the token to a new device.
                if records[Int(holder)].installation.isNone {
                    target = holder
                } else {
                    loser = (holder, .reassigned)
                    tokenChange = .reassigned
                }
            }
        } else if let proven {
            if let holder = tokenSlot, holder != proven {
                // Rule 5: that device wins; the proven one is Superseded.
                target = holder
                loser = (proven, .superseded)
            } else {
                target = proven
                tokenChange = tokenSlot == nil ? .refreshed : .unchanged
            }
        } else {
            target = tokenSlot
        }

        // Checks that read the target's stored fields, without materializing it.
        var bindTo: ExternalID?
        var knownPerson: UInt32?
        if case .set(let externalID) = request.externalID {
            knownPerson = personSlot(of: externalID)
            let current = target.map { records[Int($0)].person } ?? DeviceRecord.noSlot
            if knownPerson == nil || knownPerson != current {
                if knownPerson == nil && (settings.requireKnownPerson || request.requireKnownPerson) {
                    return .failure(.unknownIdentity)
                }
                bindTo = externalID
            }
        }
        var newTags: Tags?
        switch request.tags {
        case .keep:
            newTags = nil
        case .clear:
            newTags = .empty
        case .merge:
            let stored = target.map { records[Int($0)].tags } ?? .none
            switch request.tags.applied(to: stored.isNone ? .empty : storedTags(stored)) {
            case .success(let merged): newTags = merged
            case .failure(let rejection): return .failure(rejection)
            }
        }
        if request.requireCredential {
            let stored = target.flatMap { strings.string(records[Int($0)].bundleID) }.map(BundleID.init(unchecked:))
            let environment = request.environment ?? target.map { records[Int($0)].environment } ?? .production
            guard let bundleID = request.bundleID.applied(to: stored),
                credentials[CredentialKey(bundleID: bundleID, environment: environment)] != nil
            else { return .failure(.credentialNotFound) }
        }

        // Every check passed: write.
        var displaced: DeviceID?
        if let loser {
            let lostBefore = self.device(at: loser.slot)
            var lost = lostBefore
            switch loser.kind {
            case .reassigned:
                lost.token = nil
                lost.invalidationReason = .reassigned
            case .superseded:
                // Only without an installation id (rule 4 decides otherwise):
                // the loser keeps its own installation id.
                precondition(request.installationID == nil, "a Superseded device with an installation id named")
                lost.installationSecretDigest = nil
                lost.invalidationReason = .superseded
            }
            lost.invalidatedAt = now
            if !lost.hasSameFields(as: lostBefore) { lost.version = DeviceVersion.next(lostBefore.version) }
            storeDevice(lost)
            mutations.append(.deviceUpsert(lost))
            let events = HistoryEvent.events(from: lostBefore, to: lost, registration: false, at: now)
            let synthesized =
                needsSynthesizedHistory(lost.id, events: events) ? HistoryEvent.synthesized(lostBefore) : nil
            recordHistory(of: lost.id, synthesized: synthesized, events: events, into: &mutations)
            displaced = lost.id
        }

        var evicted: [DeviceID] = []
        var personChange = PersonChange.keep
        switch request.externalID {
        case .keep:
            break
        case .clear:
            personChange = .clear
        case .set:
            if let bindTo {
                let room = makeRoom(
                    for: bindTo, knownSlot: knownPerson, excluding: target,
                    limit: request.maxDevicesPerPersonOverride ?? settings.maxDevicesPerPerson,
                    at: now, mutations: &mutations)
                evicted = room.evicted
                personChange = .bind(room.personSlot)
            }
        }

        let device: Device
        if let target {
            let recordBefore = records[Int(target)]
            let tagsChanged = updateRegistered(
                target, with: request, tokenHeld: tokenSlot == target, resetStrikes: tokenChange == .reassigned,
                person: personChange, tags: newTags, at: now)
            var externalID: ExternalID?
            if case .set(let value) = request.externalID { externalID = value }
            // The tags just merged are the stored ones (interned from their bytes): not read back.
            device = self.device(at: target, token: request.token, externalID: externalID, tags: newTags)
            if let violation = device.violation() {
                preconditionFailure("registration left device \(device.id) invalid: \(violation)")
            }
            mutations.append(.deviceUpsert(device))
            let personMoved = records[Int(target)].person != recordBefore.person
            let kinds = Self.registrationEventKinds(
                before: recordBefore, tagsChanged: tagsChanged, personMoved: personMoved, after: device,
                tokenKept: tokenSlot == target)
            // A re-registration with nothing new on a device with no stored
            // history stores nothing: its `registered` is synthesized from
            // `last_seen_at` (`HistoryEvent.synthesized`). Nothing is built for it.
            if !(kinds == HistoryEventKinds(.registered) && history.newestOrdinal(device.id.sequence) == 0) {
                let events = Self.registrationEvents(
                    kinds, personMovedFrom: personMoved ? personName(recordBefore.person) : nil, after: device)
                let synthesized =
                    needsSynthesizedHistory(device.id, events: events)
                    ? HistoryEvent.synthesized(self.device(before: recordBefore, id: device.id)) : nil
                recordHistory(of: device.id, synthesized: synthesized, events: events, into: &mutations)
            }
        } else {
            device = createRegistered(with: request, person: personChange, tags: newTags ?? .empty, at: now)
            mutations.append(.deviceUpsert(device))
        }
        return .success(
            RegisterOutcome(
                created: target == nil, device: device, tokenChange: tokenChange, displaced: displaced,
                evicted: evicted, mutations: []))
    }

    /// The kinds of the history events of a registration of an existing
    /// device, read from its record before, whether its tags changed
    /// (`updateRegistered`'s answer) and the device after: `registered` (or
    /// `token_replaced`), then what else changed, in `HistoryEvent.events`
    /// order. Static: it reads nothing of the store, and a method on the
    /// store would be called on a copy of it from `register` (every reference
    /// in it retained and released, about 0.8 % of a registration's CPU in
    /// the profile). O(1); allocates nothing.
    private static func registrationEventKinds(
        before: DeviceRecord, tagsChanged: Bool, personMoved: Bool, after: Device, tokenKept: Bool
    ) -> HistoryEventKinds {
        var kinds = HistoryEventKinds(tokenKept ? .registered : .tokenReplaced)
        if personMoved { kinds.insert(after.externalID == nil ? .unbound : .moved) }
        if before.isInvalidated { kinds.insert(.revalidated) }
        if tagsChanged { kinds.insert(.tagsChanged) }
        if after.optedIn != before.optedIn { kinds.insert(after.optedIn ? .optedIn : .optedOut) }
        return kinds
    }

    /// The history events of `kinds`, all at the device's new `last_seen_at`
    /// (the request's time, unless the clock stepped back: then the time a
    /// synthesized `registered` shows too). `personMovedFrom` is the previous
    /// person's external id of a `moved` or `unbound` event (nil when it had
    /// none). O(kinds).
    private static func registrationEvents(
        _ kinds: HistoryEventKinds, personMovedFrom: ExternalID?, after: Device
    ) -> [HistoryEvent] {
        let fingerprint = after.token.map(TokenFingerprint.init)
        var result: [HistoryEvent] = []
        result.reserveCapacity(kinds.count)
        for kind in kinds {
            let movedFrom = kind == .moved || kind == .unbound
            result.append(
                HistoryEvent(
                    at: after.lastSeenAt, kind: kind, externalID: after.externalID,
                    previousExternalID: movedFrom ? personMovedFrom : nil, tokenFingerprint: fingerprint))
        }
        return result
    }

    /// Returns the external id of the person at `slot` (nil for none).
    private func personName(_ slot: UInt32) -> ExternalID? {
        slot == DeviceRecord.noSlot ? nil : ExternalID(unchecked: blobs.string(people[Int(slot)].name))
    }

    /// The device as it was before a registration changed it, for its
    /// synthesized history (only its creation and last-seen times, person and
    /// token are read): built from the record kept before the change.
    private func device(before record: DeviceRecord, id: DeviceID) -> Device {
        let token: PushToken? =
            record.tokenLength == 0
            ? nil : withTokenBytes(of: record) { PushToken(unchecked: $0, platform: record.platform) }
        var device = Device(
            id: id, environment: record.environment, token: token,
            createdAt: Timestamp(millisecondsSinceEpoch: record.createdAt))
        device.lastSeenAt = Timestamp(millisecondsSinceEpoch: record.lastSeenAt)
        device.externalID = personName(record.person)
        return device
    }

    /// What a registration does to its device's person.
    enum PersonChange {
        case keep
        case clear
        /// Binds the device to the person at this slot (`bound_at = now`).
        case bind(UInt32)
    }

    /// Stores a device that a registration creates and returns it.
    private mutating func createRegistered(
        with request: RegisterRequest, person: PersonChange, tags: Tags, at now: Timestamp
    ) -> Device {
        let id = DeviceID(appID: appID, mode: mode, platform: request.platform, sequence: nextDeviceSequence)
        var externalID: ExternalID?
        var personSlot: UInt32?
        if case .bind(let slot) = person, case .set(let value) = request.externalID {
            externalID = value
            personSlot = slot
        }
        // Built in one initializer: assigning field after field to a fresh device copied it whole.
        let device = Device(
            id: id, environment: request.environment ?? .production, token: request.token,
            bundleID: request.bundleID.applied(to: nil), installationID: request.installationID,
            installationSecretDigest: request.installationSecretDigest, externalID: externalID, createdAt: now,
            lastSeenAt: now, boundAt: externalID == nil ? nil : now, appVersion: request.appVersion.applied(to: nil),
            timezone: request.timezone.applied(to: nil), locale: request.locale.applied(to: nil),
            pushPermission: request.pushPermission.applied(to: nil), optedIn: request.optedIn ?? true, tags: tags,
            invalidatedAt: nil, invalidationReason: nil, strikes: 0, version: 1, clientSequence: request.clientSequence)
        storeDevice(device, personSlot: personSlot)
        return device
    }

    /// Applies a registration to an existing device's record in place, touching
    /// only what changes: re-registering a known token with nothing new stores
    /// `last_seen_at` (and clears an invalidation) and nothing else. The caller
    /// has checked everything; the token is `tokenHeld` by this device already
    /// or free, and so is the request's installation id (and its client
    /// sequence, if any, is above the stored one).
    ///
    /// The version moves on (spec §7) when any stored field changes, each
    /// compared where it is written; `last_seen_at` is a field like any other,
    /// so only a registration in the same millisecond (or with the clock
    /// behind) that brings nothing new leaves the version alone. Returns
    /// whether the tags changed (compared where they are written, so that
    /// the history needs no copy of the bytes before).
    private mutating func updateRegistered(
        _ slot: UInt32, with request: RegisterRequest, tokenHeld: Bool, resetStrikes: Bool,
        person: PersonChange, tags: Tags?, at now: Timestamp
    ) -> Bool {
        let index = Int(slot)
        let before = records[index]
        var changed = false
        var tagsChanged = false
        if !tokenHeld {
            if records[index].tokenLength > 0 { removeToken(at: slot) }
            setToken(request.token, at: slot)
            changed = true
        }
        if resetStrikes && records[index].strikes != 0 {
            records[index].strikes = 0
            changed = true
        }
        records[index].lastSeenAt = max(now.millisecondsSinceEpoch, records[index].lastSeenAt)
        if records[index].isInvalidated {
            changed = true
            strings.release(records[index].invalidationReason)
            records[index].invalidationReason = 0
            records[index].invalidatedAt = DeviceRecord.noTimestamp
            invalidatedCount -= 1
        }
        if let installationID = request.installationID {
            withUTF8Bytes(of: installationID.rawValue) { wanted in
                let held = records[index].installation
                if !held.isNone && blobs.equals(held, wanted) { return }
                changed = true
                if !held.isNone { removeInstallation(at: slot) }
                let hash = installationHash(wanted)
                precondition(
                    installationSlots.find(hash: hash) { blobs.equals(records[Int($0)].installation, wanted) } == nil,
                    "installation id already held by another device")
                records[index].installation = blobs.store(wanted)
                installationSlots.insert(slot: slot, hash: hash)
            }
        }
        if let digest = request.installationSecretDigest {
            let digestSlot = records[index].digest
            if digestSlot == DeviceRecord.noSlot {
                records[index].digest = storeDigest(digest)
                changed = true
            } else if digests[Int(digestSlot)] != digest {
                digests[Int(digestSlot)] = digest
                changed = true
            }
        }
        // Each field written only when the request changes it: every write to
        // a record is a checked access that tests its chunk for uniqueness.
        let bundleID = request.bundleID.map(\.rawValue)
        if !bundleID.isKeep { records[index].bundleID = interned(records[index].bundleID, changedBy: bundleID) }
        let appVersion = request.appVersion
        if !appVersion.isKeep { records[index].appVersion = interned(records[index].appVersion, changedBy: appVersion) }
        let timezone = request.timezone
        if !timezone.isKeep { records[index].timezone = interned(records[index].timezone, changedBy: timezone) }
        let locale = request.locale
        if !locale.isKeep { records[index].locale = interned(records[index].locale, changedBy: locale) }
        let record = records[index]
        let flags =
            DeviceRecord.flags(
                platform: record.platform, environment: request.environment ?? record.environment,
                pushPermission: request.pushPermission.applied(to: record.pushPermission),
                optedIn: request.optedIn ?? record.optedIn) | (record.flags & DeviceRecord.clientSequenceFlag)
        if flags != record.flags { records[index].flags = flags }
        if let tags {
            let stored = records[index].tags
            if stored.isNone ? !tags.isEmpty : !blobs.equals(stored, tags.encoded) {
                changed = true
                tagsChanged = true
                if !stored.isNone { releaseTags(stored) }
                records[index].tags = tags.isEmpty ? .none : internTags(tags.encoded)
            }
        }
        switch person {
        case .keep:
            break
        case .clear:
            if records[index].person != DeviceRecord.noSlot {
                changed = true
                unlink(slot: slot, fromPerson: records[index].person)
                records[index].person = DeviceRecord.noSlot
                records[index].nextOfPerson = DeviceRecord.noSlot
                records[index].boundAt = DeviceRecord.noTimestamp
            }
        case .bind(let personSlot):
            if records[index].person != DeviceRecord.noSlot { unlink(slot: slot, fromPerson: records[index].person) }
            link(slot: slot, toPerson: personSlot)
            records[index].boundAt = now.millisecondsSinceEpoch
            changed = true
        }
        if let sequence = request.clientSequence {
            precondition(clientSequence(at: slot).map { sequence > $0 } ?? true, "stale client sequence written")
            setClientSequence(sequence, at: slot)
            changed = true
        }
        let after = records[index]
        changed =
            changed || after.lastSeenAt != before.lastSeenAt || after.flags != before.flags
            || after.bundleID != before.bundleID || after.appVersion != before.appVersion
            || after.timezone != before.timezone || after.locale != before.locale
        if changed { records[index].version = DeviceVersion.next(before.version) }
        return tagsChanged
    }

    /// Returns the interned id after `change`: the same id when the value stays,
    /// else the new value's id (retained) with the old one released.
    private mutating func interned(_ id: UInt32, changedBy change: FieldChange<String>) -> UInt32 {
        switch change {
        case .keep:
            return id
        case .clear:
            strings.release(id)
            return 0
        case .set(let value):
            if id != 0 && ExactText.equal(strings.string(id), value) { return id }
            let new = strings.retain(value)
            strings.release(id)
            return new
        }
    }

    /// How the device that held the token, or the proven device, loses out.
    enum Displacement {
        /// Rule 4: the holder loses its token to the named installation.
        case reassigned
        /// Rule 5: the proven device loses to the holder of the token.
        case superseded
    }

    /// Makes `externalID` known (creating the person unless `knownSlot` is
    /// theirs) and evicts their devices until one more fits under `limit`;
    /// returns the person's slot and the evicted ids.
    mutating func makeRoom(
        for externalID: ExternalID, knownSlot: UInt32?, excluding target: UInt32?, limit: Int, at now: Timestamp,
        mutations: inout [Mutation]
    ) -> (personSlot: UInt32, evicted: [DeviceID]) {
        precondition(limit >= 1, "max devices per person must be positive, got \(limit)")
        let personSlot: UInt32
        if let known = knownSlot {
            personSlot = known
        } else {
            let person = Person(externalID: externalID, createdAt: now)
            personSlot = insertPerson(person)
            mutations.append(.personUpsert(person))
        }
        // The person's record counts their devices: below the limit nothing
        // is evicted, and their slots are not listed (issue 25: the list was
        // an allocation and a walk of the person's devices on every bound
        // registration).
        let targetIsMember = target.map { records[Int($0)].person == personSlot } ?? false
        let othersHeld = Int(people[Int(personSlot)].deviceCount) - (targetIsMember ? 1 : 0)
        guard othersHeld >= limit else {
            return (personSlot, [])
        }
        var members = deviceSlots(ofPerson: personSlot)
        if let target { members.removeAll { $0 == target } }  // in place: no second array
        precondition(
            members.count == othersHeld, "person \(personSlot) lists \(members.count) devices, counts \(othersHeld)")
        var evicted: [DeviceID] = []
        while members.count >= limit, let victim = evictionVictim(among: members) {
            let id = device(at: victim).id
            removeDevice(at: victim)
            mutations.append(.deviceTombstone(id))
            evicted.append(id)
            members.removeAll { $0 == victim }
        }
        return (personSlot, evicted)
    }

    /// Returns the device to evict among `slots`: the invalidated one registered
    /// longest ago if any, else the one registered longest ago (ties: oldest id).
    func evictionVictim(among slots: [UInt32]) -> UInt32? {
        func key(_ slot: UInt32) -> (Int64, UInt64) {
            (records[Int(slot)].lastSeenAt, records[Int(slot)].sequence)
        }
        let invalidated = slots.filter { records[Int($0)].isInvalidated }
        let candidates = invalidated.isEmpty ? slots : invalidated
        return candidates.min { key($0) < key($1) }
    }

    /// Returns the highest client sequence stored by any of the named
    /// devices (spec §7: the proven one, the installation's, the token's
    /// holder), or nil when none stores one.
    func highestClientSequence(of slots: UInt32?...) -> UInt64? {
        var highest: UInt64?
        for case let slot? in slots {
            if let stored = clientSequence(at: slot) { highest = max(highest ?? 0, stored) }
        }
        return highest
    }

    /// Returns the stored installation-secret digest of a slot, or nil.
    func storedDigest(at slot: UInt32) -> SecretDigest? {
        let digestSlot = records[Int(slot)].digest
        return digestSlot == DeviceRecord.noSlot ? nil : digests[Int(digestSlot)]
    }
}
