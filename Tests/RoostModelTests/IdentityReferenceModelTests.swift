import Testing

@testable import RoostModel

/// A reference model of the identity rules (spec §5 rules 1, 4 and 5 as
/// amended by spec §12), written as plainly as the decision table in
/// docs/model.md reads: a list of devices and linear searches, no slots, no
/// hashing, no in-place updates. Random registrations and deletions run on it
/// and on the real `AppIndex`; after every step both must agree on the answer
/// and on every device's token, installation id, secret, environment,
/// invalidation, client sequence and version (spec §7: a registration is
/// stale when any device it names stores a client sequence at or above its
/// own; every registration, one second after the last, changes its target
/// and any displaced device, and nothing else).
struct IdentityReferenceModel {
    struct Device: Equatable {
        var id: DeviceID
        var token: Int?
        var installation: Int?
        var secret: UInt8?
        var environment: APNsEnvironment
        var reason: InvalidationReason?
        var clientSequence: UInt64?
        var version: UInt32 = 1
    }

    /// One registration: token number, optional installation number, optional
    /// claimed device (by position in `devices`, or an id never minted), optional
    /// secret (proof and new secret at once, as on the wire), optional environment.
    struct Request: CustomStringConvertible {
        var token: Int
        var installation: Int?
        var deviceID: DeviceID?
        var secret: UInt8?
        var environment: APNsEnvironment?
        var clientSequence: UInt64?

        var description: String {
            "token \(token) installation \(installation.map(String.init) ?? "-") device \(deviceID.map { "\($0.sequence)" } ?? "-") "
                + "secret \(secret.map(String.init) ?? "-") environment \(environment?.name ?? "-") "
                + "client_sequence \(clientSequence.map(String.init) ?? "-")"
        }
    }

    enum Answer: Equatable {
        case registered(id: DeviceID, created: Bool, displaced: DeviceID?)
        case rejected(RegistryRejection)
    }

    var devices: [Device] = []
    var nextSequence: UInt64 = 1

    /// The decision table, row by row.
    mutating func register(_ request: Request) -> Answer {
        let proven = request.deviceID.flatMap { id in
            devices.firstIndex { $0.id == id && $0.secret != nil && $0.secret == request.secret }
        }
        let holder = devices.firstIndex { $0.token == request.token }
        let named = request.installation.flatMap { wanted in devices.firstIndex { $0.installation == wanted } }
        // Rows 1–2: the installation's device is reached only with its proof
        // (or by its own token); a proof of another device names two devices.
        if let named, named != proven {
            if devices[named].secret != nil && named != holder { return .rejected(.installationProofRequired) }
            if proven != nil { return .rejected(.deviceIdentityConflict(field: "installation_id")) }
        }
        // Spec §7: every device the request names (proof, installation, token).
        if let sequence = request.clientSequence {
            let stored = [proven, named, holder].compactMap { $0.flatMap { devices[$0].clientSequence } }
            if let highest = stored.max(), sequence <= highest { return .rejected(.staleRegistration(stored: highest)) }
        }
        var target: Int?
        var reassigned: Int?
        var superseded: Int?
        if request.installation != nil {
            // Rows 3–6: rule 4 decides.
            if let owner = proven ?? named {
                target = owner
                if let holder, holder != owner { reassigned = holder }
            } else if let holder {
                if devices[holder].installation == nil { target = holder } else { reassigned = holder }
            }
        } else if let proven {
            // Rows 7–8: rule 5.
            if let holder, holder != proven {
                target = holder
                superseded = proven
            } else {
                target = proven
            }
        } else {
            // Rows 9–10: rule 1.
            target = holder
        }
        var displaced: DeviceID?
        if let reassigned {
            devices[reassigned].token = nil
            devices[reassigned].reason = .reassigned
            devices[reassigned].version += 1
            displaced = devices[reassigned].id
        }
        if let superseded {
            devices[superseded].secret = nil
            devices[superseded].reason = .superseded
            devices[superseded].version += 1
            displaced = devices[superseded].id
        }
        guard let target else {
            let id = DeviceID(appID: testApp, mode: .live, platform: .ios, sequence: nextSequence)
            nextSequence += 1
            devices.append(
                Device(
                    id: id, token: request.token, installation: request.installation, secret: request.secret,
                    environment: request.environment ?? .production, reason: nil,
                    clientSequence: request.clientSequence))
            return .registered(id: id, created: true, displaced: displaced)
        }
        devices[target].token = request.token
        if let installation = request.installation { devices[target].installation = installation }
        if let secret = request.secret { devices[target].secret = secret }
        if let environment = request.environment { devices[target].environment = environment }
        devices[target].reason = nil
        if let sequence = request.clientSequence { devices[target].clientSequence = sequence }
        devices[target].version += 1  // last_seen_at moves on (one second per step) if nothing else
        return .registered(id: devices[target].id, created: false, displaced: displaced)
    }

    mutating func delete(_ id: DeviceID) {
        devices.removeAll { $0.id == id }
    }
}

@Suite("Identity rules against a reference model (spec §5 as amended by §12)")
struct IdentityReferenceModelTests {
    static let tokens = 6
    static let installations = 4

    @Test("random registrations and deletions: the index and the reference model never diverge", arguments: 0..<6)
    func noDivergence(seed: UInt64) throws {
        var random = SplitMix64(seed: 0x1D_E471 &+ seed)
        var harness = Harness()
        var model = IdentityReferenceModel()
        func pick(_ count: Int) -> Int { Int(random.next() % UInt64(count)) }
        func chance(_ percent: Int) -> Bool { pick(100) < percent }
        var answers: [String: Int] = [:]
        for step in 0..<1_000 {
            if chance(6), !model.devices.isEmpty {
                let id = model.devices[pick(model.devices.count)].id
                model.delete(id)
                harness.record(harness.index.deleteDevice(id).mutations)
                continue
            }
            var request = IdentityReferenceModel.Request(token: pick(Self.tokens))
            if chance(60) { request.installation = pick(Self.installations) }
            if chance(55) { request.secret = UInt8(1 + pick(3)) }
            if chance(45) {
                // A real device, or an id never minted (deleted ones come from deletions).
                if !model.devices.isEmpty && chance(85) {
                    let claimed = model.devices[pick(model.devices.count)]
                    request.deviceID = claimed.id
                    // Mostly its own secret (a proof), else whatever was drawn.
                    if chance(60), let secret = claimed.secret { request.secret = secret }
                } else {
                    request.deviceID = DeviceID(
                        appID: testApp, mode: .live, platform: .ios, sequence: 10_000 + UInt64(pick(5)))
                }
            }
            if chance(40) { request.environment = chance(50) ? .sandbox : .production }
            if chance(35) { request.clientSequence = UInt64(step / 4 + pick(40)) }

            let expected = model.register(request)
            var real = RegisterRequest(token: apnsToken(UInt64(request.token)), environment: request.environment)
            real.installationID = request.installation.map { installation("i\($0)") }
            real.deviceID = request.deviceID
            real.installationSecretDigest = request.secret.map(digest)
            real.clientSequence = request.clientSequence
            let actual: IdentityReferenceModel.Answer
            switch harness.register(real) {
            case .success(let outcome):
                actual = .registered(id: outcome.device.id, created: outcome.created, displaced: outcome.displaced)
            case .failure(let rejection):
                actual = .rejected(rejection)
            }
            #expect(actual == expected, "seed \(seed) step \(step): \(request)")
            switch expected {
            case .registered(_, let created, let displaced):
                answers["\(created ? "created" : "updated")\(displaced == nil ? "" : "+displaced")", default: 0] += 1
            case .rejected(let rejection): answers[rejection.code, default: 0] += 1
            }
            try Self.compare(model, harness.index, "seed \(seed) step \(step): \(request)")
            if actual != expected { return }
        }
        // The workload reaches every row of the table, or the test proves little.
        for answer in [
            "created", "updated", "created+displaced", "updated+displaced", "installation_proof_required",
            "device_identity_conflict", "stale_registration",
        ] {
            #expect(answers[answer, default: 0] >= 3, "seed \(seed): \(answer) only \(answers[answer, default: 0])×")
        }
        try harness.verify()
    }

    /// Checks that every device of the model is in the index with the same
    /// identity fields, and that the index holds nothing else.
    static func compare(_ model: IdentityReferenceModel, _ index: AppIndex, _ where: String) throws {
        #expect(index.stats().devices == model.devices.count, "\(`where`): device count")
        for expected in model.devices {
            let device = try #require(index.device(expected.id), "\(`where`): \(expected.id) missing")
            #expect(device.token == expected.token.map { apnsToken(UInt64($0)) }, "\(`where`): token of \(expected.id)")
            #expect(
                device.installationID == expected.installation.map { installation("i\($0)") },
                "\(`where`): installation of \(expected.id)")
            #expect(
                device.installationSecretDigest == expected.secret.map(digest), "\(`where`): secret of \(expected.id)")
            #expect(device.environment == expected.environment, "\(`where`): environment of \(expected.id)")
            #expect(device.invalidationReason == expected.reason, "\(`where`): reason of \(expected.id)")
            #expect(
                device.clientSequence == expected.clientSequence, "\(`where`): client_sequence of \(expected.id)")
            #expect(device.version == expected.version, "\(`where`): version of \(expected.id)")
        }
    }
}
