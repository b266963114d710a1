/// Everything the registry knows about one (app, mode), as one value: the
/// engine's and the API's entry point.
///
/// A façade over two halves (docs/model.md §2–3): the `DeviceStore`
/// (`Store/`: layout, slots, hash indexes, blobs, replay, snapshot slices) and
/// the identity rules (`Rules/`: registration, moves, evictions, proofs,
/// strikes, deletes, feedback), which are functions over the store that check
/// first, write second and return the `Mutation`s to log. `AppIndex` adds the
/// app's settings and APNs credentials, which the rules read.
///
/// A pure value with no I/O and no clock: the shard actor that owns it passes
/// `now`, gets the `Mutation`s of each change back and logs them. Every
/// operation either succeeds and returns its mutations, or is rejected and
/// changes nothing (spec §5 rule 7).
package struct AppIndex: Sendable {
    package internal(set) var settings: AppSettings
    package internal(set) var credentials: [CredentialKey: APNsCredential]
    /// The devices, people and their indexes.
    var store: DeviceStore
    /// The answers remembered for idempotency keys (spec §7).
    package internal(set) var remembered = RememberedAnswers()
    /// Who was erased, as digests, for refusing their older identity tokens
    /// (decision 0079).
    package internal(set) var erasures = ErasureMarks()
    /// Which devices changed, at which log position (spec §9, `GET /v1/changes`).
    package internal(set) var changes: ChangeFeed
    /// Replay's clock: the time of the last `changeTime` record read for
    /// this index (nil before one), the `at` of the changes replayed after it.
    package internal(set) var replayChangeTime: Timestamp? = nil

    /// An empty index with default settings; its change feed keeps the latest
    /// change of `changesRetained` devices.
    package init(
        appID: AppID, mode: AppMode, settings: AppSettings = .defaults,
        changesRetained: Int = ChangeFeed.retainedDefault
    ) {
        precondition(settings.validationError() == nil, "invalid settings \(settings)")
        self.settings = settings
        self.credentials = [:]
        self.store = DeviceStore(appID: appID, mode: mode)
        self.changes = ChangeFeed(retainedMax: changesRetained)
    }

    package var appID: AppID { store.appID }
    package var mode: AppMode { store.mode }
    /// The sequence the next created device gets (never reused).
    package var nextDeviceSequence: UInt64 { store.nextDeviceSequence }

    /// Reserves room for `deviceCount` devices (before a bulk replay).
    package mutating func reserveCapacity(devices deviceCount: Int) {
        store.reserveCapacity(devices: deviceCount)
    }

    /// Reserves room for `deviceCount` devices and `personCount` people (before
    /// a bulk replay, e.g. from a snapshot's index-size hint). Never shrinks.
    package mutating func reserveCapacity(devices deviceCount: Int, people personCount: Int) {
        store.reserveCapacity(devices: deviceCount, people: personCount)
    }

    // MARK: Rules (Rules/)

    /// Registers a device: spec §5 rules 1 to 7 in one step (`DeviceStore.register`).
    /// O(1) expected plus O(devices of the person).
    /// The outcome carries the registration's mutations.
    package mutating func register(
        _ request: RegisterRequest, at now: Timestamp
    ) -> Result<RegisterOutcome, RegistryRejection> {
        var mutations: [Mutation] = []
        return register(request, at: now, appendingTo: &mutations).map { registered in
            var registered = registered
            registered.mutations = mutations
            return registered
        }
    }

    /// `register(_:at:)` with the mutations appended to `mutations` (none
    /// when rejected) and not in the outcome: the shard's and the batches' form.
    package mutating func register(
        _ request: RegisterRequest, at now: Timestamp, appendingTo mutations: inout [Mutation]
    ) -> Result<RegisterOutcome, RegistryRejection> {
        store.register(request, settings: settings, credentials: credentials, at: now, appendingTo: &mutations)
    }

    /// `PATCH /v1/devices/{id}`: merges tags and sets `opted_in`; never touches `last_seen_at`.
    /// With `ifMatch`, 412 unless the device's version satisfies it (spec §7).
    /// Its history events are at `now`.
    package mutating func patchDevice(
        _ id: DeviceID, tags change: TagsChange, optedIn: Bool?, ifMatch: VersionCondition? = nil, at now: Timestamp
    ) -> Result<DeviceChange, RegistryRejection> {
        store.patchDevice(id, tags: change, optedIn: optedIn, ifMatch: ifMatch, at: now)
    }

    /// Adds one strike to a device (rule 6).
    package mutating func recordStrike(_ id: DeviceID) -> Result<DeviceChange, RegistryRejection> {
        store.recordStrike(id)
    }

    /// Invalidates a device with `reason` at `now`.
    package mutating func invalidateDevice(
        _ id: DeviceID, reason: InvalidationReason, at now: Timestamp
    ) -> Result<DeviceChange, RegistryRejection> {
        store.invalidateDevice(id, reason: reason, at: now)
    }

    /// `DELETE /v1/devices/{id}`.
    package mutating func deleteDevice(_ id: DeviceID) -> Removal {
        switch store.deleteDevice(id, ifMatch: nil) {
        case .success(let removal): return removal
        case .failure(let rejection): preconditionFailure("an unconditional delete was rejected: \(rejection)")
        }
    }

    /// `DELETE /v1/devices/{id}` with `If-Match` (spec §7): 412 unless the
    /// device's version satisfies it; an unknown id is `deleted: false`.
    package mutating func deleteDevice(
        _ id: DeviceID, ifMatch: VersionCondition?
    ) -> Result<Removal, RegistryRejection> {
        store.deleteDevice(id, ifMatch: ifMatch)
    }

    /// Deletes the device of an installation, when `owner` (if given) holds it.
    package mutating func deleteDevice(installation: InstallationID, ownedBy owner: ExternalID? = nil) -> Removal {
        store.deleteDevice(installation: installation, ownedBy: owner)
    }

    /// Deletes the device holding `token`, when `owner` (if given) holds it.
    package mutating func deleteDevice(token: PushToken, ownedBy owner: ExternalID? = nil) -> Removal {
        store.deleteDevice(token: token, ownedBy: owner)
    }

    /// `PUT /v1/people/{external_id}`.
    package mutating func putPerson(_ externalID: ExternalID, at now: Timestamp) -> PersonPut {
        store.putPerson(externalID, at: now)
    }

    /// `DELETE /v1/people/{external_id}`: the person and their devices.
    /// Takes the app's settings from their owner, the catalog, without a
    /// mutation: the index keeps a copy for its rules, rebuilt at every turn.
    package mutating func adoptSettings(_ newSettings: AppSettings) {
        settings = newSettings
    }

    package mutating func erasePerson(_ externalID: ExternalID) -> Result<Removal, RegistryRejection> {
        store.erasePerson(externalID)
    }

    /// Provider feedback for `token` (`POST /v1/feedback`).
    package mutating func invalidate(
        token: PushToken, reason: InvalidationReason, reportedAt: Timestamp?, at now: Timestamp
    ) -> (result: FeedbackResult, mutations: [Mutation]) {
        store.invalidate(token: token, reason: reason, reportedAt: reportedAt, at: now)
    }

    // MARK: Queries (Store/DeviceStore+Queries.swift)

    /// Returns the device with `id`, or nil (also for another app's or mode's id).
    package func device(_ id: DeviceID) -> Device? { store.device(id) }
    /// Returns the device holding `token`, or nil.
    package func device(token: PushToken) -> Device? { store.device(token: token) }
    /// Returns the device of `installation`, or nil.
    package func device(installation: InstallationID) -> Device? { store.device(installation: installation) }
    /// Returns a person and their devices, or nil.
    package func person(_ externalID: ExternalID) -> PersonDevices? { store.person(externalID) }
    /// `GET /v1/devices/{id}/history`: the device's events, newest first (at
    /// most `Limits.historyEventsPerDeviceMax`), or nil for no such device.
    package func history(_ id: DeviceID) -> [HistoryEvent]? { store.history(id) }
    /// `GET /v1/people/{external_id}/export`: the person, their devices and
    /// each device's history, frozen (the histories shared copy-on-write);
    /// nil for an unknown person. O(their devices' events).
    package func exportPerson(_ externalID: ExternalID) -> PersonExport? {
        guard let found = store.person(externalID) else { return nil }
        let histories = store.frozenHistories(found.devices.map(\.id.sequence))
        return PersonExport(
            person: found.person, devices: found.devices, rings: histories.rings, names: histories.names)
    }
    /// `GET /v1/stats`. O(1).
    package func stats() -> RegistryStats { store.stats() }
    /// Number of devices.
    package var count: Int { store.count }
    /// `GET /v1/devices` (see `DeviceStore.listDevices`).
    package func listDevices(_ query: DeviceQuery) -> Result<DevicePage, RegistryRejection> {
        store.listDevices(query)
    }
    /// `GET /v1/people` (see `DeviceStore.listPeople`).
    package func listPeople(fromSlot: UInt32, limit: Int) -> Result<PeoplePage, RegistryRejection> {
        store.listPeople(fromSlot: fromSlot, limit: limit)
    }
    /// Calls `body` with every device in creation order. O(devices).
    package func forEachDevice(_ body: (Device) -> Void) { store.forEachDevice(body) }
    /// Returns every known person, by external id.
    package func allPeople() -> [Person] { store.allPeople() }
    /// Returns the approximate heap bytes held by this index.
    package func memoryEstimate() -> MemoryEstimate { store.memoryEstimate() }
    /// Returns every broken internal invariant (empty when consistent). O(devices).
    package func invariantViolations() -> [String] { store.invariantViolations() + changeFeedViolations() }

    // MARK: Replay and snapshots (Store/DeviceStore+Replay.swift, +FastReplay, +Snapshot)

    /// Replays one mutation: afterwards the index holds exactly its after-image.
    /// Idempotent and tolerant of a fuzzy snapshot (see `DeviceStore.applyDeviceUpsert`);
    /// after a complete replay the state equals the one that wrote the log.
    package mutating func apply(_ mutation: Mutation) throws(MutationApplyError) {
        switch mutation {
        case .deviceUpsert(let device): try store.applyDeviceUpsert(device)
        case .deviceTombstone(let id): try store.applyDeviceTombstone(id)
        case .personUpsert(let person): store.applyPersonUpsert(person)
        case .personErase(let externalID): store.applyPersonErase(externalID)
        case .credentialUpsert(let credential): credentials[credential.key] = credential
        case .credentialDelete(let key): credentials[key] = nil
        case .settings(let newSettings):
            guard newSettings.validationError() == nil else { throw .invalidSettings }
            settings = newSettings
        case .deviceSequenceFloor(let floor): store.applySequenceFloor(floor)
        case .deviceHistory(let id, let firstOrdinal, let events):
            try store.applyDeviceHistory(id, firstOrdinal: firstOrdinal, events: events)
        case .rememberedAnswerPart(let owner, let key, let bytes):
            try remembered.applyPart(RememberedAnswers.Name(owner: owner, key: key), bytes: bytes)
        case .rememberedAnswer(let seal): try remembered.applySeal(seal)
        case .changeTime(let at): replayChangeTime = at
        case .changeFeed(let slice): try changes.restore(slice)
        case .erasureMark(let mark): erasures.apply(mark)
        case .historyRedaction(let id, let firstOrdinal, let events):
            try store.applyHistoryRedaction(id, firstOrdinal: firstOrdinal, events: events)
        }
    }

    /// Replays mutations in order.
    package mutating func apply(_ mutations: [Mutation]) throws(MutationApplyError) {
        for mutation in mutations { try apply(mutation) }
    }

    /// Replay's fast path for a device or person upsert's `MutationCodec` bytes
    /// (`DeviceStore.applyEncodedUpsert`); false, having changed nothing, for
    /// anything the general path must take.
    package mutating func applyEncodedUpsert(_ bytes: UnsafeRawBufferPointer) -> Bool {
        store.applyEncodedUpsert(bytes)
    }

    /// The fast path for a device upsert's bytes only.
    package mutating func applyEncodedDeviceUpsert(_ bytes: UnsafeRawBufferPointer) -> Bool {
        store.applyEncodedDeviceUpsert(bytes)
    }

    /// The fast path for a person upsert's bytes only.
    package mutating func applyEncodedPersonUpsert(_ bytes: UnsafeRawBufferPointer) -> Bool {
        store.applyEncodedPersonUpsert(bytes)
    }

    /// The mutations that rebuild this index from empty, in a canonical order:
    /// settings, credentials, people (by external id), devices (by id sequence),
    /// the sequence floor. Two indexes hold the same state exactly when these are
    /// equal. O(devices + people log people).
    package func snapshotMutations() -> [Mutation] {
        var result = snapshotHeader()
        store.forEachDevice {
            result.append(.deviceUpsert($0))
            result += store.historyMutations($0.id)
        }
        result.append(.deviceSequenceFloor(store.nextDeviceSequence))
        return result
    }

    /// The non-device part of a snapshot: settings, credentials, people.
    package func snapshotHeader() -> [Mutation] {
        snapshotSettingsAndCredentials() + store.allPeople().map { .personUpsert($0) }
    }

    /// The non-sliced part of a snapshot: settings, credentials, the
    /// remembered answers of idempotency keys, oldest first (bounded by
    /// `IdempotencyLimits.bytesPerIndexMax`), and the erasure marks
    /// (decision 0079). O(credentials log credentials
    /// + remembered bytes).
    package func snapshotSettingsAndCredentials() -> [Mutation] {
        var result: [Mutation] = [.settings(settings)]
        for key in credentials.keys.sorted() {
            if let credential = credentials[key] { result.append(.credentialUpsert(credential)) }
        }
        return result + remembered.snapshotMutations() + erasures.snapshotMutations()
    }

    /// One bounded slice of a snapshot's devices (`DeviceStore.snapshotDevices`).
    package func snapshotDevices(afterSequence: UInt64, limit: Int) -> (mutations: [Mutation], next: UInt64?) {
        store.snapshotDevices(afterSequence: afterSequence, limit: limit)
    }

    /// One bounded slice of a snapshot's people (`DeviceStore.snapshotPeople`).
    package func snapshotPeople(fromSlot: UInt32, limit: Int) -> (mutations: [Mutation], next: UInt32?) {
        store.snapshotPeople(fromSlot: fromSlot, limit: limit)
    }
}
