/// One operation of the API on one (app, mode) index, as a value: decoded on
/// the event loop that read the request, executed by the shard that owns the
/// index (`AppIndex.execute`), answered with an `Outcome` that the same event
/// loop renders. Values cross threads; closures do not (docs/architecture.md).
///
/// The dialects (Barua, Native Notify, Connect) decode into the same cases
/// where their operation is the native one (a registration is `register`);
/// where a dialect needs another rule sequence inside one shard turn, that
/// sequence is a case of its own, implemented here in the model.
package enum Command: Sendable {
    /// `POST /v1/devices` and the registrations of Barua and Native Notify.
    case register(RegisterRequest, at: Timestamp)
    /// `GET /v1/devices/{id}`.
    case getDevice(DeviceID)
    /// `PATCH /v1/devices/{id}`, with its `If-Match` condition if any (spec §7).
    case patchDevice(DeviceID, tags: TagsChange, optedIn: Bool?, ifMatch: VersionCondition?, at: Timestamp)
    /// `GET /v1/devices/{id}/history` (`Outcome.history`).
    case deviceHistory(DeviceID)
    /// `DELETE /v1/devices/{id}`, with its `If-Match` condition if any (spec §7).
    case deleteDevice(DeviceID, ifMatch: VersionCondition? = nil)
    /// `GET /v1/devices`: one page of a filtered listing (`Outcome.devicePage`).
    case listDevices(DeviceQuery)
    /// `GET /v1/devices/export` (spec §9): a frozen view of the devices and
    /// the change-feed cursor it holds (`Outcome.exportView`).
    case beginExport
    /// `GET /v1/changes`: up to `limit` changes after `cursor` (nil: from the
    /// oldest retained) (`Outcome.changes`). With a `wait` above zero, the
    /// shard that runs it holds an empty answer back until a change of the
    /// index is recorded or that much time passed on the shard's clock (a
    /// timer of the loop that runs the shard; the model itself never waits).
    case changes(after: UInt64?, limit: Int, wait: Duration)
    /// `POST /v1/devices/import`: one batch of CSV rows, registered in order
    /// as `register` would (`Outcome.imported`).
    case importRows([ImportRow], at: Timestamp)
    /// `POST /v1/devices/batch`: registrations applied in order in one turn,
    /// each as `register` would apply it alone (`Outcome.batch`).
    case registerBatch([RegisterRequest], at: Timestamp)
    /// `POST /v1/feedback`: a provider reports `token` dead (`Outcome.feedback`).
    case reportFeedback(token: PushToken, reason: InvalidationReason, reportedAt: Timestamp?, at: Timestamp)
    /// `GET /v1/stats`, the counts of `GET /v1/apps/{app}` and Native Notify's
    /// health (`Outcome.stats`).
    case stats
    /// `GET /v1/devices/inactive`: one bounded preview step, changing nothing;
    /// at most `keep` of the oldest matches come back (`Outcome.inactivePreview`).
    case previewInactive(InactivityStep, keep: Int)
    /// The sweep and `POST /v1/devices/inactive/invalidate`: one bounded step
    /// that invalidates with reason `Inactive` at `at` (`Outcome.inactiveInvalidated`).
    case invalidateInactive(InactivityStep, at: Timestamp)
    /// `PATCH /v1/apps/{app}` settings, sent to each mode (`Outcome.settings`).
    case updateSettings(AppSettings)
    /// `PUT /v1/people/{external_id}` (`Outcome.personPut`).
    case putPerson(ExternalID, at: Timestamp)
    /// `GET /v1/people/{external_id}` (`Outcome.person`).
    case getPerson(ExternalID)
    /// `GET /v1/people/{external_id}/export` (`Outcome.personExport`).
    case exportPerson(ExternalID)
    /// `GET /v1/people`: one page from a slot on (`Outcome.peoplePage`).
    case listPeople(fromSlot: UInt32, limit: Int)
    /// `DELETE /v1/people/{external_id}` (`Outcome.removed`; an unknown
    /// person is `removed(deleted: false, devicesRemoved: 0)`).
    case erasePerson(ExternalID, at: Timestamp)
    /// `PUT /v1/credentials/apns/{bundle_id}/{environment}` (`Outcome.credential`).
    case putCredential(APNsCredential)
    /// `DELETE /v1/credentials/apns/{bundle_id}/{environment}` (`Outcome.removed`).
    case deleteCredential(CredentialKey)
    /// Barua's `DELETE`: removes the token's device only while it belongs to
    /// `ownedBy` (`Outcome.deleted`).
    case deleteDeviceByToken(PushToken, ownedBy: ExternalID)
    /// Native Notify's deregister: removes the installation's device, whoever
    /// owns it (`Outcome.deregistered`).
    case deregisterInstallation(InstallationID)
    /// Connect's `PUT /v1/me/devices`: registers `request` bound to `owner`
    /// (the identity token's principal). A guest owner is made known first
    /// (the server minted it), and a guest left without devices is forgotten;
    /// a refusal changes nothing (`Outcome.registered` / `.rejected`).
    /// `tokenIssuedAt` is when the identity token was issued (nil for a
    /// format without it): a token issued before `owner` was erased is
    /// `identityTokenRevoked` (decision 0079).
    case registerForPrincipal(RegisterRequest, owner: ExternalID, at: Timestamp, tokenIssuedAt: Timestamp? = nil)
    /// Connect's `DELETE /v1/me/devices/{installation_id}`: removes the
    /// installation's device only when it belongs to `owner`, then forgets a
    /// guest owner left without devices (`Outcome.deleted`).
    /// The token is checked as for `registerForPrincipal`.
    case deletePrincipalDevice(InstallationID, owner: ExternalID, tokenIssuedAt: Timestamp? = nil)
    /// A write sent with an `Idempotency-Key` (spec §7): the answer
    /// remembered for the tag's owner and key is given again
    /// (`Outcome.replayed`, nothing applied), or `idempotencyKeyReused` for
    /// another request's digest; else `command` runs and its outcome is
    /// remembered in the same append as its mutations (`RememberedAnswers`).
    indirect case idempotent(IdempotencyTag, Command)
    /// An answer a route made without the engine (an identity token it
    /// minted, an import's summary), sent inside `idempotent` to be
    /// remembered: changes nothing (`Outcome.answered`).
    case answer(status: Int, body: [UInt8])
    /// Looks up the answer remembered for the tag without running anything:
    /// `replayed`, `idempotencyKeyReused` or `notRemembered` (a CSV import
    /// asks before it starts; decision 0050).
    case lookUpAnswer(IdempotencyTag)
    /// A function run in the shard's turn: tools and tests only
    /// (`Registry.perform`), never a route. The request path asserts that no
    /// route emits it (`RoostService`), so what crosses from a loop to a shard
    /// is always a value.
    case custom(CustomWork)

    /// True for `custom`: work that is a closure, not a value.
    package var isCustom: Bool {
        switch self {
        case .custom: true
        case .idempotent(_, let inner): inner.isCustom
        default: false
        }
    }
}

/// The function of a `Command.custom`: runs on the index in the shard's turn
/// and returns the mutations to log and a value for the caller. Tools and
/// tests only (`Registry.perform`); routes send value commands.
package struct CustomWork: Sendable {
    package let run: @Sendable (inout AppIndex) -> (value: any Sendable, mutations: [Mutation])

    package init(_ run: @escaping @Sendable (inout AppIndex) -> (value: any Sendable, mutations: [Mutation])) {
        self.run = run
    }
}

/// What a `Command` did, as a value the route renders on its own loop. Plain
/// model values only: never a closure, never an HTTP type. `indirect`: an
/// outcome is copied several times on its way back to its loop, and a boxed
/// payload copies as one retain instead of one per field of a device.
package indirect enum Outcome: Sendable {
    /// A registration: the device as it is now, 201 when it was created.
    case registered(RegisterOutcome)
    /// A device read, patched or found.
    case device(Device)
    /// A delete of one device: whether a device was removed.
    case deleted(Bool)
    /// A delete that may remove many devices (a person, a credential):
    /// whether the named thing existed, and how many devices went with it.
    case removed(deleted: Bool, devicesRemoved: Int)
    /// `DELETE /v1/people/{external_id}`: whether the person existed, how
    /// many devices went with them, and when (spec §10 `erased_at`; nil when
    /// nothing was erased). The time is the request's, kept in the outcome so
    /// that a replayed answer (spec §7) says the same.
    case personErased(erased: Bool, devicesRemoved: Int, at: Timestamp?)
    /// A page of a device listing.
    case devicePage(DevicePage)
    /// A point-in-time export's frozen view and cursor.
    case exportView(IndexExportView)
    /// A page of the change feed, or why the cursor cannot be read.
    case changes(Result<ChangesPage, ChangeFeed.CursorFault>)
    /// One import batch: what its rows did.
    case imported(ImportBatch)
    /// A registration batch: one `registered` or `rejected` per request, in order.
    case batch([Outcome])
    /// What provider feedback did.
    case feedback(FeedbackResult)
    /// The counts of the index.
    case stats(RegistryStats)
    /// One inactivity preview step.
    case inactivePreview(InactivePreviewSlice)
    /// One inactivity invalidation step.
    case inactiveInvalidated(InactiveInvalidationSlice)
    /// The index now holds these settings.
    case settings(AppSettings)
    /// A person made known (`created`) or already known.
    case personPut(Person, created: Bool)
    /// A person and their devices.
    case person(PersonDevices)
    /// A device's history, newest first.
    case history([HistoryEvent])
    /// A person's devices, each with its history (spec §10).
    case personExport(PersonExport)
    /// A page of the people listing.
    case peoplePage(PeoplePage)
    /// A credential as it is stored now.
    case credential(APNsCredential)
    /// Native Notify's deregister: whether the device was removed, and how
    /// many tokens went with it (0 or 1).
    case deregistered(removed: Bool, tokensRemoved: Int)
    /// A rule of the model refused the command; nothing changed.
    case rejected(RegistryRejection)
    /// The remembered first answer to an `Idempotency-Key`; nothing was applied.
    case replayed(Outcome)
    /// The `Idempotency-Key` was first used for another request (method,
    /// path or body); nothing was applied (422 `idempotency_key_reused`).
    case idempotencyKeyReused
    /// No answer is remembered for the key (`Command.lookUpAnswer`).
    case notRemembered
    /// A route's own answer (`Command.answer`): its status and JSON body.
    case answered(status: Int, body: [UInt8])
    /// The value a `Command.custom` returned (tools and tests only).
    case custom(any Sendable)
    /// Records the caller appended itself (a catalog change) are acknowledged.
    case logAcknowledged
    /// Both modes of an app were dropped, with this many devices.
    case appRemoved(devices: Int)
}

extension AppIndex {
    /// `execute(_:)` with the mutations appended to `mutations` (none for a
    /// rejected command or a read): the shard's form, which reuses one array
    /// from command to command. A registration, the one write of the hot
    /// path, appends its own (`executeRegistration`, which the shard calls
    /// itself with the request read out of its command); another command's
    /// list is appended after it is made. A registration's outcome holds no
    /// mutations (the log has them).
    package mutating func execute(_ command: Command, appendingMutationsTo mutations: inout [Mutation]) -> Outcome {
        if case .register(let request, let now) = command {
            return executeRegistration(request, at: now, appendingMutationsTo: &mutations)
        }
        let (outcome, produced) = execute(command)
        mutations.append(contentsOf: produced)
        return outcome
    }

    /// `Command.register` as `execute(_:appendingMutationsTo:)` runs it, for a
    /// caller that holds the request itself (the shard reads it straight out
    /// of its command).
    package mutating func executeRegistration(
        _ request: RegisterRequest, at now: Timestamp, appendingMutationsTo mutations: inout [Mutation]
    ) -> Outcome {
        switch register(request, at: now, appendingTo: &mutations) {
        case .success(let registered): .registered(registered)
        case .failure(let rejection): .rejected(rejection)
        }
    }

    /// Executes `command` on this index and returns its outcome with the
    /// mutations to log before the outcome may be acknowledged. Pure: the
    /// same index and command give the same result. A rejected command
    /// changes nothing and logs nothing.
    package mutating func execute(_ command: Command) -> (outcome: Outcome, mutations: [Mutation]) {
        switch command {
        case .register(let request, let now):
            var mutations: [Mutation] = []
            switch register(request, at: now, appendingTo: &mutations) {
            case .success(let registered): return (.registered(registered), mutations)
            case .failure(let rejection): return (.rejected(rejection), [])
            }
        case .getDevice(let id):
            guard let found = device(id) else { return (.rejected(.deviceNotFound), []) }
            return (.device(found), [])
        case .patchDevice(let id, let tags, let optedIn, let ifMatch, let now):
            switch patchDevice(id, tags: tags, optedIn: optedIn, ifMatch: ifMatch, at: now) {
            case .success(let change): return (.device(change.device), change.mutations)
            case .failure(let rejection): return (.rejected(rejection), [])
            }
        case .deviceHistory(let id):
            guard let events = history(id) else { return (.rejected(.deviceNotFound), []) }
            return (.history(events), [])
        case .deleteDevice(let id, let ifMatch):
            switch deleteDevice(id, ifMatch: ifMatch) {
            case .success(let removal): return (.deleted(removal.deleted), removal.mutations)
            case .failure(let rejection): return (.rejected(rejection), [])
            }
        case .listDevices(let query):
            switch listDevices(query) {
            case .success(let page): return (.devicePage(page), [])
            case .failure(let rejection): return (.rejected(rejection), [])
            }
        case .beginExport:
            return (.exportView(freezeForExport()), [])
        case .changes(let cursor, let limit, _):
            return (.changes(changesPage(after: cursor, limit: limit)), [])
        case .importRows(let rows, let now):
            let (batch, mutations) = importRows(rows, at: now)
            return (.imported(batch), mutations)
        case .registerBatch(let requests, let now):
            return registerBatch(requests, at: now)
        case .reportFeedback(let token, let reason, let reportedAt, let now):
            let (result, mutations) = invalidate(token: token, reason: reason, reportedAt: reportedAt, at: now)
            return (.feedback(result), mutations)
        case .stats:
            return (.stats(stats()), [])
        case .previewInactive(let step, let keep):
            return (.inactivePreview(previewInactive(step, keep: keep)), [])
        case .invalidateInactive(let step, let now):
            let (slice, mutations) = invalidateInactive(step, at: now)
            return (.inactiveInvalidated(slice), mutations)
        case .updateSettings(let newSettings):
            switch updateSettings(newSettings) {
            case .success(let mutations): return (.settings(settings), mutations)
            case .failure(let rejection): return (.rejected(rejection), [])
            }
        case .putPerson(let externalID, let now):
            let put = putPerson(externalID, at: now)
            return (.personPut(put.person, created: put.created), put.mutations)
        case .getPerson(let externalID):
            guard let found = person(externalID) else { return (.rejected(.personNotFound), []) }
            return (.person(found), [])
        case .exportPerson(let externalID):
            guard let found = exportPerson(externalID) else { return (.rejected(.personNotFound), []) }
            return (.personExport(found), [])
        case .listPeople(let fromSlot, let limit):
            switch listPeople(fromSlot: fromSlot, limit: limit) {
            case .success(let page): return (.peoplePage(page), [])
            case .failure(let rejection): return (.rejected(rejection), [])
            }
        case .erasePerson(let externalID, let now):
            let (removal, mutations) = erasePersonEverywhere(externalID, at: now)
            guard let removal else { return (.personErased(erased: false, devicesRemoved: 0, at: nil), mutations) }
            return (.personErased(erased: true, devicesRemoved: removal.devicesRemoved, at: now), mutations)
        case .putCredential(let credential):
            return (.credential(credential), putCredential(credential))
        case .deleteCredential(let key):
            let removal = deleteCredential(key)
            return (.removed(deleted: removal.deleted, devicesRemoved: removal.devicesRemoved), removal.mutations)
        case .deleteDeviceByToken(let token, let owner):
            let removal = deleteDevice(token: token, ownedBy: owner)
            return (.deleted(removal.deleted), removal.mutations)
        case .deregisterInstallation(let installation):
            return deregisterInstallation(installation)
        case .registerForPrincipal(let request, let owner, let now, let issuedAt):
            guard !identityTokenRevoked(owner: owner, issuedAt: issuedAt) else {
                return (.rejected(.identityTokenRevoked), [])
            }
            return registerForPrincipal(request, owner: owner, at: now)
        case .deletePrincipalDevice(let installation, let owner, let issuedAt):
            guard !identityTokenRevoked(owner: owner, issuedAt: issuedAt) else {
                return (.rejected(.identityTokenRevoked), [])
            }
            return deletePrincipalDevice(installation, owner: owner)
        case .idempotent(let tag, let inner):
            return executeIdempotent(tag, inner)
        case .answer(let status, let body):
            return (.answered(status: status, body: body), [])
        case .lookUpAnswer(let tag):
            return (lookUpAnswer(tag), [])
        case .custom(let work):
            let (value, mutations) = work.run(&self)
            return (.custom(value), mutations)
        }
    }
}

extension AppIndex {
    /// `Command.idempotent`: replays, refuses or runs and remembers (spec §7).
    /// A command whose outcome no write has (a read) runs unremembered.
    /// O(1) plus the command and the bytes of its encoded outcome.
    mutating func executeIdempotent(_ tag: IdempotencyTag, _ command: Command) -> (Outcome, [Mutation]) {
        precondition(!command.isIdempotent, "an idempotent command inside another")
        let name = tag.name
        switch lookUpAnswer(tag) {
        case .notRemembered: break
        case let found: return (found, [])
        }
        let (outcome, mutations) = execute(command)
        guard let encoded = OutcomeCodec.encode(outcome) else { return (outcome, mutations) }
        remembered.remember(name, digest: tag.digest, at: tag.at, encoded: encoded)
        return (
            outcome, mutations + RememberedAnswers.mutations(name, digest: tag.digest, at: tag.at, encoded: encoded)
        )
    }
}

extension AppIndex {
    /// `replayed` with the outcome remembered for the tag's (owner, key)
    /// within its 24 hours, `idempotencyKeyReused` when it answered another
    /// request's digest, else `notRemembered`. O(1) plus decoding.
    func lookUpAnswer(_ tag: IdempotencyTag) -> Outcome {
        guard let entry = remembered.lookup(tag.name, at: tag.at) else { return .notRemembered }
        guard entry.digest == tag.digest else { return .idempotencyKeyReused }
        do throws(ByteDecodingError) {
            return .replayed(try OutcomeCodec.decode(entry.encoded))
        } catch {
            // Encoded here, or read back from a log record whose checksum held.
            preconditionFailure("a remembered answer does not decode: \(error)")
        }
    }
}

extension Command {
    /// True for `idempotent`.
    package var isIdempotent: Bool {
        if case .idempotent = self { return true }
        return false
    }
}
