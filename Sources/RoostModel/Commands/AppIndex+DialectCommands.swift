extension ExternalID {
    /// The prefix of the people the server minted for Connect guests
    /// (`guest:<hex>`): known without `PUT /v1/people`, forgotten once their
    /// last device leaves. Customers cannot mint ids with it.
    package static let guestPrefix = "guest:"

    /// True for a guest's person (`guest:…`).
    package var isGuest: Bool { rawValue.hasPrefix(ExternalID.guestPrefix) }
}

extension AppIndex {
    /// Native Notify's deregister: a hard delete of the installation's
    /// device, whoever owns it; `tokensRemoved` is 1 when the device held a token.
    /// A device holding an installation secret is not reached by its
    /// installation id without the proof (spec §12), which this route cannot
    /// carry: 409 `installation_proof_required`, nothing changes.
    mutating func deregisterInstallation(_ installation: InstallationID) -> (outcome: Outcome, mutations: [Mutation]) {
        let found = device(installation: installation)
        if found?.installationSecretDigest != nil { return (.rejected(.installationProofRequired), []) }
        let hadToken = found?.token != nil
        let removal = deleteDevice(installation: installation)
        let tokensRemoved = removal.deleted && hadToken ? 1 : 0
        return (.deregistered(removed: removal.deleted, tokensRemoved: tokensRemoved), removal.mutations)
    }

    /// Connect's registration for a principal, in one turn: makes a guest
    /// `owner` known (the server minted it, so it is known even under
    /// `require_known_person`), registers `request` bound to `owner`, and
    /// forgets the device's previous owner when that was a guest left
    /// without devices. Atomic: on a refusal the guest made here is erased
    /// again and nothing is logged. `request` must name an installation.
    mutating func registerForPrincipal(
        _ request: RegisterRequest, owner: ExternalID, at now: Timestamp
    ) -> (outcome: Outcome, mutations: [Mutation]) {
        guard let installation = request.installationID else {
            return (.rejected(.missingField("installation_id")), [])
        }
        var request = request
        request.externalID = .set(owner)
        let previousOwner = device(installation: installation)?.externalID
        var mutations: [Mutation] = []
        var guestCreated = false
        if owner.isGuest, person(owner) == nil {
            let put = putPerson(owner, at: now)
            mutations += put.mutations
            guestCreated = put.created
        }
        switch register(request, at: now) {
        case .failure(let rejection):
            if guestCreated { _ = erasePerson(owner) }
            return (.rejected(rejection), [])
        case .success(var registered):
            mutations += registered.mutations
            if let previousOwner, previousOwner != owner {
                mutations += forgetEmptyGuest(previousOwner)
            }
            registered.mutations = mutations
            return (.registered(registered), mutations)
        }
    }

    /// Connect's delete: removes the installation's device only when it
    /// belongs to `owner`, then forgets a guest `owner` left without devices.
    mutating func deletePrincipalDevice(
        _ installation: InstallationID, owner: ExternalID
    ) -> (outcome: Outcome, mutations: [Mutation]) {
        var removal = deleteDevice(installation: installation, ownedBy: owner)
        if removal.deleted { removal.mutations += forgetEmptyGuest(owner) }
        return (.deleted(removal.deleted), removal.mutations)
    }

    /// Erases a guest's person once no device is bound to it, so guests do
    /// not pile up as people; returns the mutations. Users are never erased here.
    private mutating func forgetEmptyGuest(_ externalID: ExternalID) -> [Mutation] {
        guard externalID.isGuest, let person = person(externalID), person.devices.isEmpty,
            case .success(let removal) = erasePerson(externalID)
        else { return [] }
        return removal.mutations
    }
}
