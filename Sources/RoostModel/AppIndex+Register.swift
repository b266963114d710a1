extension AppIndex {
    /// Registers a device: spec §5 rules 1 to 7 in one step.
    ///
    /// Resolution, all before any write:
    /// 1. Rule 5: a `device_id` of this app minted for another mode or platform is
    ///    422 `device_identity_conflict` (`device_id`). An id of this index with a
    ///    matching secret digest is the *proven* device; anything else is ignored.
    /// 2. Rule 4: the device holding `installation_id`, if any, must be of the same
    ///    platform and, with a proof, be the proven device or the token's holder
    ///    (else 422 on `installation_id`).
    /// 3. The target: the proven or installation device, else the token's holder,
    ///    else a new device. When the token is held by another device: with a
    ///    proof the holder wins and the proven device is `Superseded`; with an
    ///    installation the token moves and the holder is `Reassigned` (keeps its id,
    ///    loses its token); a holder with another installation than the one named
    ///    is `Reassigned` to a new device.
    /// 4. Rule 2/3: binding to another person needs that person known when
    ///    `require_known_person` (409 `unknown_identity`); tags must fit after the merge.
    ///
    /// Then it writes: the displaced device, the person (created if new), evictions
    /// (an invalidated device of the person first, else the least recently
    /// registered), and the target with `last_seen_at = now`, invalidation cleared,
    /// strikes reset only when the token came from another device (rule 6).
    /// O(1) expected plus O(devices of the person).
    package mutating func register(
        _ request: RegisterRequest, at now: Timestamp
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
            if let proven, installationSlot != proven, installationSlot != tokenSlot {
                return .failure(.deviceIdentityConflict(field: "installation_id"))
            }
        }

        var target: UInt32?
        var loser: (slot: UInt32, kind: Displacement)?
        var tokenChange = TokenChange.unchanged
        if let named = proven ?? installationSlot {
            if let holder = tokenSlot, holder != named {
                if proven != nil {
                    target = holder
                    loser = (named, .superseded)
                } else {
                    target = named
                    loser = (holder, .reassigned)
                    tokenChange = .reassigned
                }
            } else {
                target = named
                tokenChange = tokenSlot == nil ? .refreshed : .unchanged
            }
        } else if let holder = tokenSlot {
            let held = records[Int(holder)].installation
            if let wanted = request.installationID, !held.isNone, blobs.string(held) != wanted.rawValue {
                loser = (holder, .reassigned)
                tokenChange = .reassigned
            } else {
                target = holder
            }
        }

        var device: Device
        if let target {
            device = self.device(at: target)
        } else {
            let id = DeviceID(appID: appID, mode: mode, platform: platform, sequence: nextDeviceSequence)
            device = Device(id: id, environment: request.environment, token: nil, createdAt: now)
        }

        var bindTo: ExternalID?
        if case .set(let externalID) = request.externalID, device.externalID != externalID {
            if personSlot(of: externalID) == nil && (settings.requireKnownPerson || request.requireKnownPerson) {
                return .failure(.unknownIdentity)
            }
            bindTo = externalID
        }
        let tags: Tags
        switch request.tags.applied(to: device.tags) {
        case .success(let merged): tags = merged
        case .failure(let rejection): return .failure(rejection)
        }
        let bundleID = request.bundleID.applied(to: device.bundleID)
        if request.requireCredential {
            guard let bundleID, credentials[CredentialKey(bundleID: bundleID, environment: request.environment)] != nil
            else { return .failure(.credentialNotFound) }
        }

        // Every check passed: write.
        var mutations: [Mutation] = []
        var displaced: DeviceID?
        if let loser {
            var lost = self.device(at: loser.slot)
            switch loser.kind {
            case .reassigned:
                lost.token = nil
                lost.invalidationReason = .reassigned
            case .superseded:
                lost.installationSecretDigest = nil
                if let wanted = request.installationID, lost.installationID == wanted { lost.installationID = nil }
                lost.invalidationReason = .superseded
            }
            lost.invalidatedAt = now
            storeDevice(lost)
            mutations.append(.deviceUpsert(lost))
            displaced = lost.id
        }

        var evicted: [DeviceID] = []
        switch request.externalID {
        case .keep:
            break
        case .clear:
            device.externalID = nil
            device.boundAt = nil
        case .set:
            if let bindTo {
                evicted = makeRoom(
                    for: bindTo, excluding: target,
                    limit: request.maxDevicesPerPersonOverride ?? settings.maxDevicesPerPerson,
                    at: now, mutations: &mutations)
                device.externalID = bindTo
                device.boundAt = now
            }
        }

        device.token = request.token
        device.environment = request.environment
        if tokenChange == .reassigned { device.strikes = 0 }
        device.lastSeenAt = max(now, device.lastSeenAt)
        device.invalidatedAt = nil
        device.invalidationReason = nil
        if let installationID = request.installationID { device.installationID = installationID }
        if let digest = request.installationSecretDigest { device.installationSecretDigest = digest }
        device.bundleID = bundleID
        device.appVersion = request.appVersion.applied(to: device.appVersion)
        device.timezone = request.timezone.applied(to: device.timezone)
        device.locale = request.locale.applied(to: device.locale)
        device.pushPermission = request.pushPermission.applied(to: device.pushPermission)
        if let optedIn = request.optedIn { device.optedIn = optedIn }
        device.tags = tags
        storeDevice(device)
        mutations.append(.deviceUpsert(device))
        return .success(
            RegisterOutcome(
                created: target == nil, device: device, tokenChange: tokenChange, displaced: displaced,
                evicted: evicted, mutations: mutations))
    }

    /// How the device that held the token, or the proven device, loses out.
    enum Displacement {
        /// Rule 4: the holder loses its token to the named installation.
        case reassigned
        /// Rule 5: the proven device loses to the holder of the token.
        case superseded
    }

    /// Makes `externalID` known (creating the person) and evicts their devices
    /// until one more fits under `limit`; returns the evicted ids.
    mutating func makeRoom(
        for externalID: ExternalID, excluding target: UInt32?, limit: Int, at now: Timestamp,
        mutations: inout [Mutation]
    ) -> [DeviceID] {
        precondition(limit >= 1, "max devices per person must be positive, got \(limit)")
        let personSlot: UInt32
        if let known = self.personSlot(of: externalID) {
            personSlot = known
        } else {
            let person = Person(externalID: externalID, createdAt: now)
            personSlot = insertPerson(person)
            mutations.append(.personUpsert(person))
        }
        var members = deviceSlots(ofPerson: personSlot).filter { $0 != target }
        var evicted: [DeviceID] = []
        while members.count >= limit, let victim = evictionVictim(among: members) {
            let id = device(at: victim).id
            removeDevice(at: victim)
            mutations.append(.deviceTombstone(id))
            evicted.append(id)
            members.removeAll { $0 == victim }
        }
        return evicted
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

    /// Returns the stored installation-secret digest of a slot, or nil.
    func storedDigest(at slot: UInt32) -> SecretDigest? {
        let digestSlot = records[Int(slot)].digest
        return digestSlot == DeviceRecord.noSlot ? nil : digests[Int(digestSlot)]
    }
}
