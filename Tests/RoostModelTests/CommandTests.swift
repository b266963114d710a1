import Testing

@testable import RoostModel

extension Harness {
    /// Executes `command` one second after the previous call and records its
    /// mutations; a rejected outcome must log nothing and change nothing.
    mutating func execute(_ command: Command, sourceLocation: SourceLocation = #_sourceLocation) -> (
        outcome: Outcome, mutations: [Mutation]
    ) {
        advance()
        let before = index.snapshotMutations()
        let result = index.execute(command)
        log += result.mutations
        if case .rejected = result.outcome {
            #expect(result.mutations.isEmpty, "a rejection logged", sourceLocation: sourceLocation)
            #expect(index.snapshotMutations() == before, "a rejection changed state", sourceLocation: sourceLocation)
        }
        return result
    }
}

/// Returns the rejection of an outcome, or nil.
func rejection(_ outcome: Outcome) -> RegistryRejection? {
    if case .rejected(let rejection) = outcome { return rejection }
    return nil
}

@Suite("Commands: native operations as values")
struct NativeCommandTests {
    @Test("putPerson answers created once; getPerson lists the devices; an unknown person is person_not_found")
    func people() throws {
        var harness = Harness()
        let put = harness.execute(.putPerson(person("ada"), at: harness.now))
        guard case .personPut(let made, created: true) = put.outcome else { Issue.record("\(put.outcome)"); return }
        #expect(made.externalID == person("ada"))
        #expect(put.mutations == [.personUpsert(made)])
        let again = harness.execute(.putPerson(person("ada"), at: harness.now))
        guard case .personPut(let known, created: false) = again.outcome else {
            Issue.record("\(again.outcome)"); return
        }
        #expect(known == made)
        #expect(again.mutations.isEmpty)

        let device = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("ada")) }).device
        let read = harness.execute(.getPerson(person("ada")))
        guard case .person(let found) = read.outcome else { Issue.record("\(read.outcome)"); return }
        #expect(found.person == made)
        #expect(found.devices == [device])
        #expect(read.mutations.isEmpty)
        #expect(rejection(harness.execute(.getPerson(person("nobody"))).outcome) == .personNotFound)
        try harness.verify()
    }

    @Test("erasePerson removes the person and their devices; an unknown person is removed: false, 0, nothing logged")
    func erase() throws {
        var harness = Harness()
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("ada")) })
        _ = try harness.mustRegister(request(apnsToken(2)) { $0.externalID = .set(person("ada")) })
        _ = try harness.mustRegister(request(apnsToken(3)))
        let erasedAt = harness.now
        let erased = harness.execute(.erasePerson(person("ada"), at: erasedAt))
        guard case .personErased(erased: true, devicesRemoved: 2, at: erasedAt) = erased.outcome else {
            Issue.record("\(erased.outcome)")
            return
        }
        #expect(erased.mutations.contains(.personErase(person("ada"))))
        // Decision 0079: the erasure's mark, which refuses the person's older identity tokens, comes last.
        guard case .erasureMark(let mark) = erased.mutations.last else { Issue.record("\(erased.mutations)"); return }
        #expect(mark == ErasureMark(digest: ErasureMark.digest(of: person("ada")), at: erasedAt))
        #expect(harness.index.stats().devices == 1)
        #expect(harness.index.person(person("ada")) == nil)
        let unknown = harness.execute(.erasePerson(person("ada"), at: harness.now))
        guard case .personErased(erased: false, devicesRemoved: 0, at: nil) = unknown.outcome else {
            Issue.record("\(unknown.outcome)")
            return
        }
        #expect(unknown.mutations.isEmpty)
        try harness.verify()
    }

    @Test("putCredential answers the credential and logs a change only; deleteCredential removes its ios devices")
    func credentials() throws {
        var harness = Harness()
        let bundle = try BundleID("com.example.app")
        let key = CredentialKey(bundleID: bundle, environment: .production)
        let credential = try APNsCredential(key: key, teamID: "T1", keyID: "K1")
        let put = harness.execute(.putCredential(credential))
        guard case .credential(let stored) = put.outcome else { Issue.record("\(put.outcome)"); return }
        #expect(stored == credential)
        #expect(put.mutations == [.credentialUpsert(credential)])
        #expect(harness.execute(.putCredential(credential)).mutations.isEmpty)

        _ = try harness.mustRegister(request(apnsToken(1)) { $0.bundleID = .set(bundle) })
        let removed = harness.execute(.deleteCredential(key))
        guard case .removed(deleted: true, devicesRemoved: 1) = removed.outcome else {
            Issue.record("\(removed.outcome)")
            return
        }
        #expect(removed.mutations.last == .credentialDelete(key))
        let again = harness.execute(.deleteCredential(key))
        guard case .removed(deleted: false, devicesRemoved: 0) = again.outcome else {
            Issue.record("\(again.outcome)")
            return
        }
        #expect(again.mutations.isEmpty)
        try harness.verify()
    }

    @Test("reportFeedback invalidates once; repeated and unknown tokens log nothing")
    func feedback() throws {
        var harness = Harness()
        let device = try harness.mustRegister(request(fcmToken(1))).device
        let reason = try InvalidationReason("UNREGISTERED")
        let first = harness.execute(
            .reportFeedback(token: fcmToken(1), reason: reason, reportedAt: nil, at: harness.now))
        guard case .feedback(.invalidated(let id)) = first.outcome else { Issue.record("\(first.outcome)"); return }
        #expect(id == device.id)
        #expect(first.mutations.count == 2, "the device's upsert and its history's invalidated event")
        guard case .deviceHistory(_, _, let events) = first.mutations.last else {
            Issue.record("\(first.mutations)")
            return
        }
        #expect(events.map(\.kind) == [.created, .invalidated])
        let second = harness.execute(
            .reportFeedback(token: fcmToken(1), reason: reason, reportedAt: nil, at: harness.now))
        guard case .feedback(.alreadyInvalidated) = second.outcome else { Issue.record("\(second.outcome)"); return }
        #expect(second.mutations.isEmpty)
        let unknown = harness.execute(
            .reportFeedback(token: fcmToken(2), reason: reason, reportedAt: nil, at: harness.now))
        guard case .feedback(.unknownToken) = unknown.outcome else { Issue.record("\(unknown.outcome)"); return }
        #expect(unknown.mutations.isEmpty)
        try harness.verify()
    }

    @Test("stats reads the counts; updateSettings logs a change and rejects invalid settings unchanged")
    func statsAndSettings() throws {
        var harness = Harness()
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("ada")) })
        _ = try harness.mustRegister(request(fcmToken(2)))
        let read = harness.execute(.stats)
        guard case .stats(let stats) = read.outcome else { Issue.record("\(read.outcome)"); return }
        #expect(stats == harness.index.stats())
        #expect(stats.devices == 2)
        #expect(stats.people == 1)
        #expect(read.mutations.isEmpty)

        let changed = AppSettings(maxDevicesPerPerson: 3, requireKnownPerson: true)
        let update = harness.execute(.updateSettings(changed))
        guard case .settings(let now) = update.outcome else { Issue.record("\(update.outcome)"); return }
        #expect(now == changed)
        #expect(update.mutations == [.settings(changed)])
        #expect(harness.execute(.updateSettings(changed)).mutations.isEmpty)
        let invalid = AppSettings(maxDevicesPerPerson: 0, requireKnownPerson: false)
        #expect(rejection(harness.execute(.updateSettings(invalid)).outcome) == .invalidField("max_devices_per_person"))
        #expect(harness.index.settings == changed)
        try harness.verify()
    }

    @Test("listDevices answers a page with a cursor; a limit out of range is rejected")
    func listing() throws {
        var harness = Harness()
        var devices: [Device] = []
        for n in 1...3 { devices.append(try harness.mustRegister(request(apnsToken(UInt64(n)))).device) }
        let first = harness.execute(.listDevices(DeviceQuery(limit: 2)))
        guard case .devicePage(let page) = first.outcome else { Issue.record("\(first.outcome)"); return }
        #expect(page.devices == Array(devices[0..<2]))
        let cursor = try #require(page.nextCursor)
        let second = harness.execute(.listDevices(DeviceQuery(limit: 2, cursor: cursor)))
        guard case .devicePage(let rest) = second.outcome else { Issue.record("\(second.outcome)"); return }
        #expect(rest.devices == [devices[2]])
        #expect(rest.nextCursor == nil)
        #expect(rejection(harness.execute(.listDevices(DeviceQuery(limit: 0))).outcome) == .invalidField("limit"))
        try harness.verify()
    }

    @Test("an export's view reads devices in creation order, a slice at a time, skipping deleted ones")
    func exportSlices() throws {
        var harness = Harness()
        var devices: [Device] = []
        for n in 1...4 { devices.append(try harness.mustRegister(request(apnsToken(UInt64(n)))).device) }
        harness.record(harness.index.deleteDevice(devices[1].id).mutations)
        let begun = harness.execute(.beginExport)
        guard case .exportView(let view) = begun.outcome else { Issue.record("\(begun.outcome)"); return }
        func take(_ view: IndexExportView, after: UInt64, limit: Int) -> (ids: [DeviceID], next: UInt64?) {
            var ids: [DeviceID] = []
            let next = view.forEachDevice(afterSequence: after) { fields in
                guard ids.count < limit else { return false }
                ids.append(fields.id)
                return true
            }
            return (ids, next)
        }
        let first = take(view, after: 0, limit: 2)
        #expect(first.ids == [devices[0].id, devices[2].id])
        #expect(begun.mutations.isEmpty)
        let after = try #require(first.next)
        let second = take(view, after: after, limit: 2)
        #expect(second.next == nil)
        #expect(second.ids == [devices[3].id])
        let empty = AppIndex(appID: testApp, mode: .live)
        var copy = empty
        guard case .exportView(let emptyView) = copy.execute(.beginExport).outcome else {
            Issue.record("an export answered another outcome")
            return
        }
        let none = take(emptyView, after: 0, limit: 5)
        #expect(none.ids.isEmpty)
        #expect(none.next == nil)
        try harness.verify()
    }

    @Test("importRows registers rows in order; refused and rejected rows are listed by line and change nothing")
    func importRows() throws {
        var harness = Harness(settings: AppSettings(maxDevicesPerPerson: 5, requireKnownPerson: true))
        let existing = try harness.mustRegister(request(apnsToken(1))).device
        let rows: [ImportRow] = [
            .register(line: 2, request(apnsToken(1)) { $0.appVersion = .set("2.0") }),
            .refused(line: 3, code: "invalid_csv_row"),
            .register(line: 4, request(apnsToken(2)) { $0.externalID = .set(person("unknown")) }),
            .register(line: 5, request(fcmToken(3))),
        ]
        let imported = harness.execute(.importRows(rows, at: harness.now))
        guard case .imported(let batch) = imported.outcome else { Issue.record("\(imported.outcome)"); return }
        #expect(batch.created == 1)
        #expect(batch.updated == 1)
        #expect(
            batch.rejected == [
                ImportRejection(line: 3, code: "invalid_csv_row"), ImportRejection(line: 4, code: "unknown_identity"),
            ])
        #expect(harness.index.stats().devices == 2)
        #expect(harness.index.device(existing.id)?.appVersion == "2.0")
        #expect(harness.index.device(token: apnsToken(2)) == nil)
        let nothing = harness.execute(.importRows([], at: harness.now))
        guard case .imported(ImportBatch()) = nothing.outcome else { Issue.record("\(nothing.outcome)"); return }
        #expect(nothing.mutations.isEmpty)
        try harness.verify()
    }
}

@Suite("Commands: dialect operations")
struct DialectCommandTests {
    @Test("deleteDeviceByToken (Barua) removes the token's device only for its owner")
    func baruaDelete() throws {
        var harness = Harness()
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.externalID = .set(person("alice")) })
        let wrong = harness.execute(.deleteDeviceByToken(apnsToken(1), ownedBy: person("bob")))
        guard case .deleted(false) = wrong.outcome else { Issue.record("\(wrong.outcome)"); return }
        #expect(wrong.mutations.isEmpty)
        let right = harness.execute(.deleteDeviceByToken(apnsToken(1), ownedBy: person("alice")))
        guard case .deleted(true) = right.outcome else { Issue.record("\(right.outcome)"); return }
        #expect(harness.index.stats().devices == 0)
        let unknown = harness.execute(.deleteDeviceByToken(apnsToken(9), ownedBy: person("alice")))
        guard case .deleted(false) = unknown.outcome else { Issue.record("\(unknown.outcome)"); return }
        try harness.verify()
    }

    @Test("deregisterInstallation (Native Notify) counts the token; a device whose token moved counts none")
    func nativeNotifyDeregister() throws {
        var harness = Harness()
        _ = try harness.mustRegister(request(fcmToken(1)) { $0.installationID = installation("A") })
        _ = try harness.mustRegister(request(fcmToken(2)) { $0.installationID = installation("B") })
        // The token moves to C: B keeps its id and loses its token.
        _ = try harness.mustRegister(request(fcmToken(2)) { $0.installationID = installation("C") })
        let withToken = harness.execute(.deregisterInstallation(installation("A")))
        guard case .deregistered(removed: true, tokensRemoved: 1) = withToken.outcome else {
            Issue.record("\(withToken.outcome)")
            return
        }
        let tokenless = harness.execute(.deregisterInstallation(installation("B")))
        guard case .deregistered(removed: true, tokensRemoved: 0) = tokenless.outcome else {
            Issue.record("\(tokenless.outcome)")
            return
        }
        let unknown = harness.execute(.deregisterInstallation(installation("Z")))
        guard case .deregistered(removed: false, tokensRemoved: 0) = unknown.outcome else {
            Issue.record("\(unknown.outcome)")
            return
        }
        #expect(unknown.mutations.isEmpty)
        #expect(harness.index.stats().devices == 1)
        try harness.verify()
    }

    @Test("registerForPrincipal makes a guest known even under require_known_person; an unknown user is refused")
    func connectGuestRegistration() throws {
        var harness = Harness(settings: AppSettings(maxDevicesPerPerson: 5, requireKnownPerson: true))
        let guest = person(ExternalID.guestPrefix + "00ff")
        #expect(guest.isGuest)
        #expect(!person("user_42").isGuest)
        let registration = request(fcmToken(1)) { $0.installationID = installation("phone") }
        let made = harness.execute(.registerForPrincipal(registration, owner: guest, at: harness.now))
        guard case .registered(let registered) = made.outcome else { Issue.record("\(made.outcome)"); return }
        #expect(registered.created)
        #expect(registered.device.externalID == guest)
        #expect(registered.mutations == made.mutations)
        guard case .personUpsert(let guestPerson) = made.mutations.first else {
            Issue.record("the guest was not made known first: \(made.mutations)")
            return
        }
        #expect(guestPerson.externalID == guest)
        let user = harness.execute(.registerForPrincipal(registration, owner: person("user_42"), at: harness.now))
        #expect(rejection(user.outcome) == .unknownIdentity)
        #expect(harness.index.device(installation: installation("phone"))?.externalID == guest)
        try harness.verify()
    }

    @Test("a refused guest registration erases the guest it made: nothing changes, nothing is logged")
    func connectRefusalIsAtomic() throws {
        var harness = Harness()
        _ = try harness.mustRegister(request(apnsToken(1)) { $0.installationID = installation("phone") })
        let guest = person(ExternalID.guestPrefix + "abcd")
        // The installation is an ios device: an android registration of it conflicts.
        let conflicting = request(fcmToken(2)) { $0.installationID = installation("phone") }
        let refused = harness.execute(.registerForPrincipal(conflicting, owner: guest, at: harness.now))
        #expect(rejection(refused.outcome) == .deviceIdentityConflict(field: "installation_id"))
        #expect(harness.index.person(guest) == nil)
        let noInstallation = harness.execute(.registerForPrincipal(request(fcmToken(3)), owner: guest, at: harness.now))
        #expect(rejection(noInstallation.outcome) == .missingField("installation_id"))
        try harness.verify()
    }

    @Test("a device moving from a guest to a user forgets the guest; a user keeps their person")
    func connectGuestForgottenOnMove() throws {
        var harness = Harness()
        let guest = person(ExternalID.guestPrefix + "0001")
        let registration = request(apnsToken(1)) { $0.installationID = installation("phone") }
        _ = harness.execute(.registerForPrincipal(registration, owner: guest, at: harness.now))
        harness.record(harness.index.putPerson(person("user_1"), at: harness.now).mutations)
        let moved = harness.execute(.registerForPrincipal(registration, owner: person("user_1"), at: harness.now))
        guard case .registered(let registered) = moved.outcome else { Issue.record("\(moved.outcome)"); return }
        #expect(!registered.created)
        #expect(moved.mutations.last == .personErase(guest))
        #expect(harness.index.person(guest) == nil)
        // Back to another guest: the user is not forgotten.
        let other = person(ExternalID.guestPrefix + "0002")
        let back = harness.execute(.registerForPrincipal(registration, owner: other, at: harness.now))
        #expect(!back.mutations.contains(.personErase(person("user_1"))))
        #expect(harness.index.person(person("user_1")) != nil)
        try harness.verify()
    }

    @Test("deletePrincipalDevice removes only the owner's device and forgets a guest left without devices")
    func connectDelete() throws {
        var harness = Harness()
        let guest = person(ExternalID.guestPrefix + "0003")
        let phone = request(apnsToken(1)) { $0.installationID = installation("phone") }
        let tablet = request(apnsToken(2)) { $0.installationID = installation("tablet") }
        _ = harness.execute(.registerForPrincipal(phone, owner: guest, at: harness.now))
        _ = harness.execute(.registerForPrincipal(tablet, owner: guest, at: harness.now))
        let stranger = harness.execute(.deletePrincipalDevice(installation("phone"), owner: person("user_9")))
        guard case .deleted(false) = stranger.outcome else { Issue.record("\(stranger.outcome)"); return }
        #expect(stranger.mutations.isEmpty)
        let one = harness.execute(.deletePrincipalDevice(installation("phone"), owner: guest))
        guard case .deleted(true) = one.outcome else { Issue.record("\(one.outcome)"); return }
        #expect(harness.index.person(guest) != nil)
        let last = harness.execute(.deletePrincipalDevice(installation("tablet"), owner: guest))
        guard case .deleted(true) = last.outcome else { Issue.record("\(last.outcome)"); return }
        #expect(last.mutations.last == .personErase(guest))
        #expect(harness.index.person(guest) == nil)

        harness.record(harness.index.putPerson(person("user_1"), at: harness.now).mutations)
        _ = harness.execute(.registerForPrincipal(phone, owner: person("user_1"), at: harness.now))
        let user = harness.execute(.deletePrincipalDevice(installation("phone"), owner: person("user_1")))
        guard case .deleted(true) = user.outcome else { Issue.record("\(user.outcome)"); return }
        #expect(harness.index.person(person("user_1")) != nil)
        try harness.verify()
    }

    @Test("custom is reported as custom work (tools and tests only)")
    func customIsMarked() {
        #expect(Command.custom(CustomWork { _ in ((), []) }).isCustom)
        #expect(!Command.stats.isCustom)
    }
}
