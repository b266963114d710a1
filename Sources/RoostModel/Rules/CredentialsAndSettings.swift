// The rules that change the app's own state (credentials, settings), on the
// `AppIndex` that holds it; deleting a credential also removes its devices.
extension AppIndex {
    /// `PUT /v1/credentials/apns/{bundle_id}/{environment}`.
    package mutating func putCredential(_ credential: APNsCredential) -> [Mutation] {
        if credentials[credential.key] == credential { return [] }
        credentials[credential.key] = credential
        return [.credentialUpsert(credential)]
    }

    /// `DELETE /v1/credentials/apns/{bundle_id}/{environment}`: removes the credential
    /// and the ios devices registered for that bundle id and environment (even when
    /// no credential was stored, so the call is idempotent). O(devices).
    package mutating func deleteCredential(_ key: CredentialKey) -> Removal {
        let existed = credentials.removeValue(forKey: key) != nil
        var removal = store.removeIOSDevices(of: key)
        removal.deleted = existed
        if existed { removal.mutations.append(.credentialDelete(key)) }
        return removal
    }

    /// `PATCH /v1/apps/{app}` settings (the engine applies them to both modes).
    /// Lowering `max_devices_per_person` evicts nothing now; the next binding does.
    package mutating func updateSettings(_ newSettings: AppSettings) -> Result<[Mutation], RegistryRejection> {
        if let rejection = newSettings.validationError() { return .failure(rejection) }
        if newSettings == settings { return .success([]) }
        settings = newSettings
        return .success([.settings(newSettings)])
    }
}
