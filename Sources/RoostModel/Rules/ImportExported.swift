// The rule of an NDJSON import (spec §11): a device as `GET /v1/devices/export`
// wrote it comes back with its id and timestamps kept, where they are free;
// otherwise the line is rejected and nothing changes (rule 7).

extension DeviceStore {
    /// Stores `device` exactly as given (id, timestamps, strikes, invalidation),
    /// when everything it names is free in this index: its id is of this app
    /// and mode and its sequence was never handed out here (at or above
    /// `nextDeviceSequence`: an export lists devices in creation order, so a
    /// whole export into an empty index keeps every id); no device holds its
    /// token or its installation id; its person, when named, may take one more
    /// device (`max_devices_per_person`, no eviction) and is known when
    /// `require_known_person`. A new person is created as of the device's
    /// `bound_at`. Returns the mutations (person, then device), or the
    /// rejection. O(1) expected.
    mutating func importExported(_ device: Device, settings: AppSettings) -> Result<[Mutation], RegistryRejection> {
        guard device.id.appID == appID, device.mode == mode else {
            return .failure(.deviceIdentityConflict(field: "id"))
        }
        // The largest sequence would leave no next one (`nextDeviceSequence` is sequence + 1).
        guard device.id.sequence < UInt64.max - 1 else { return .failure(.invalidField("id")) }
        guard device.id.sequence >= nextDeviceSequence else { return .failure(.alreadyTaken(field: "id")) }
        if device.violation() != nil { return .failure(.invalidField("device")) }
        if let token = device.token, slot(ofToken: token) != nil { return .failure(.alreadyTaken(field: "token")) }
        if let installationID = device.installationID, slot(ofInstallation: installationID) != nil {
            return .failure(.alreadyTaken(field: "installation_id"))
        }
        var mutations: [Mutation] = []
        if let externalID = device.externalID {
            if let personSlot = personSlot(of: externalID) {
                guard Int(people[Int(personSlot)].deviceCount) < settings.maxDevicesPerPerson else {
                    return .failure(.personDeviceLimit)
                }
            } else {
                guard !settings.requireKnownPerson else { return .failure(.unknownIdentity) }
                guard let boundAt = device.boundAt else { preconditionFailure("violation() checks bound_at") }
                let person = Person(externalID: externalID, createdAt: boundAt)
                applyPersonUpsert(person)
                mutations.append(.personUpsert(person))
            }
        }
        do throws(MutationApplyError) {
            try applyDeviceUpsert(device)
        } catch {
            preconditionFailure("an import checked free failed to apply: \(error)")
        }
        mutations.append(.deviceUpsert(device))
        return .success(mutations)
    }
}
