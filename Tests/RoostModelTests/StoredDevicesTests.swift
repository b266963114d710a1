import Testing

@testable import RoostModel

/// A person read carries its devices as stored fields (`StoredDevices`), not
/// as `Device` values: what it gives must be the stored devices, field for
/// field, in creation order.
@Suite("Stored devices: a person read's devices as their stored fields")
struct StoredDevicesTests {
    @Test(
        "after random registrations, moves, feedback, patches and erasures, every person's stored devices are their devices",
        arguments: [UInt64(1), 2, 3, 4])
    func matchesTheStore(seed: UInt64) throws {
        var workload = RandomWorkload(seed: seed)
        for _ in 0..<600 { try workload.step() }
        var devicesByPerson: [ExternalID: [Device]] = [:]
        workload.harness.index.forEachDevice { device in
            if let owner = device.externalID { devicesByPerson[owner, default: []].append(device) }
        }
        var checked = 0
        for name in (0..<8).map({ person("p\($0)") }) {
            guard let found = workload.harness.index.person(name) else {
                #expect(devicesByPerson[name] == nil, "\(name) holds devices but is unknown")
                continue
            }
            let expected = (devicesByPerson[name] ?? []).sorted { $0.id.sequence < $1.id.sequence }
            #expect(found.devices == expected, "seed \(seed), \(name)")
            #expect(found.stored.count == expected.count)
            checked += expected.count
        }
        #expect(checked > 0, "seed \(seed) bound no device to a person: the check checked nothing")
    }

    @Test("every field survives: both platforms, a secret, tags, a client sequence, an invalidation, no token")
    func everyField() throws {
        var harness = Harness()
        let ios = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.externalID = .set(person("ada"))
                $0.installationID = installation("install-1")
                $0.installationSecretDigest = digest(7)
                $0.tags = .merge([TagKey("plan"): .string("pro"), TagKey("n"): .number(3)])
                $0.appVersion = .set("2.4.0")
                $0.timezone = .set("Europe/Berlin")
                $0.locale = .set("de-DE")
                $0.pushPermission = .set(true)
                $0.clientSequence = 41
            }
        ).device
        _ = try harness.mustRegister(request(fcmToken(2)) { $0.externalID = .set(person("ada")) })
        let feedback = harness.index.invalidate(
            token: fcmToken(2), reason: try InvalidationReason("Unregistered"), reportedAt: nil, at: harness.now)
        harness.record(feedback.mutations)
        // Another installation registers the first device's token: the first loses it (rule 4).
        _ = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.externalID = .set(person("ada"))
                $0.installationID = installation("install-3")
            })
        let found = try #require(harness.index.person(person("ada")))
        var expected: [Device] = []
        harness.index.forEachDevice { if $0.externalID == person("ada") { expected.append($0) } }
        expected.sort { $0.id.sequence < $1.id.sequence }
        #expect(found.devices == expected)
        #expect(found.devices.first?.installationSecretDigest == digest(7))
        #expect(found.devices.first?.clientSequence == 41)
        #expect(found.devices.first?.id == ios.id)
        #expect(found.devices.contains { $0.invalidatedAt != nil })
        #expect(found.devices.first?.token == nil, "rule 4 took the first device's token")
        #expect(found.devices.count == 3)
        try harness.verify()
    }
}
