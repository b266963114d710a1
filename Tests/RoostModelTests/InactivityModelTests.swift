import Testing

@testable import RoostModel

/// Spec §8 in the model: the settings codec (old and new kinds) and the
/// bounded inactivity steps.
@Suite("Inactivity in the model: settings codec and bounded steps")
struct InactivityModelTests {
    static let day = Limits.millisecondsPerDay

    @Test("settings without inactive_after_days keep the old kind-7 bytes; with it they are kind 13 and round-trip")
    func settingsCodec() throws {
        // Kind 7 as the previous release wrote it: max 10, require_known_person false.
        // Format 2 (spec §7's device fields) changed only the device upsert, so
        // the settings record is the same after its format byte.
        let old: [UInt8] = [1, 7, 10, 0, 0, 0, 0]
        #expect(try MutationCodec.decode(old) == .settings(.defaults))
        #expect(MutationCodec.encode(.settings(.defaults)) == [MutationCodec.formatVersion] + old.dropFirst())
        let on = AppSettings(maxDevicesPerPerson: 10, requireKnownPerson: false, inactiveAfterDays: 270)
        let encoded = MutationCodec.encode(.settings(on))
        #expect(encoded == [MutationCodec.formatVersion, 13, 10, 0, 0, 0, 0, 0x0E, 0x01])
        #expect(try MutationCodec.decode([1] + encoded.dropFirst()) == .settings(on))
        #expect(try MutationCodec.decode(encoded) == .settings(on))
        for bad: [UInt8] in [[0, 0], [0x43, 0x0E], [0xFF, 0xFF]] {
            #expect(throws: ByteDecodingError.invalidValue(field: "settings", offset: 2)) {
                try MutationCodec.decode(Array(encoded.prefix(7)) + bad)
            }
        }
        #expect(throws: ByteDecodingError.self) { try MutationCodec.decode(Array(encoded.prefix(8))) }
    }

    @Test("inactive_after_days outside 1...3650 is a settings rejection")
    func settingsValidation() {
        for days in [0, 3651, -1] {
            let settings = AppSettings(maxDevicesPerPerson: 10, requireKnownPerson: false, inactiveAfterDays: days)
            #expect(settings.validationError() == .invalidField("inactive_after_days"))
        }
        for days in [1, 270, 3650] {
            let settings = AppSettings(maxDevicesPerPerson: 10, requireKnownPerson: false, inactiveAfterDays: days)
            #expect(settings.validationError() == nil)
        }
    }

    /// An index with `count` ios devices, device k registered k days after
    /// the first, every third invalidated; returns it and the time of the last.
    static func agedIndex(_ count: Int) throws -> Harness {
        var harness = Harness()
        for k in 0..<count {
            harness.clockMilliseconds += day
            let outcome = try harness.mustRegister(request(apnsToken(UInt64(k))))
            if k % 3 == 0 {
                let id = outcome.device.id
                harness.record(
                    harness.index.invalidateDevice(id, reason: .dead, at: harness.now).value?.mutations ?? [])
            }
        }
        return harness
    }

    @Test("preview steps of any size add up to one whole step, change nothing, and skip invalidated devices")
    func previewStepsAddUp() throws {
        let harness = try Self.agedIndex(30)
        let cutoff = harness.now.adding(milliseconds: -10 * Self.day)
        let whole = harness.index.previewInactive(InactivityStep(lastSeenBefore: cutoff), keep: 1000)
        #expect(whole.next == nil)
        // Devices 0...19 are older than 10 days; a third of them invalidated.
        #expect(whole.matched == (0..<20).filter { $0 % 3 != 0 }.count)
        #expect(whole.oldest.allSatisfy { $0.invalidatedAt == nil && $0.lastSeenAt < cutoff })
        #expect(whole.oldest.map(\.lastSeenAt) == whole.oldest.map(\.lastSeenAt).sorted())
        let before = harness.index.snapshotMutations()
        for examine in [1, 2, 7, 29, 30, 31] {
            var step = InactivityStep(lastSeenBefore: cutoff, examineMax: examine)
            var matched = 0
            var steps = 0
            while true {
                let slice = harness.index.previewInactive(step, keep: 1000)
                matched += slice.matched
                steps += 1
                guard let next = slice.next else { break }
                step = step.continued(after: next)
            }
            #expect(matched == whole.matched, "examine \(examine)")
            #expect(steps == max(1, (30 + examine - 1) / examine), "examine \(examine)")
        }
        #expect(harness.index.snapshotMutations() == before)
        let two = harness.index.previewInactive(InactivityStep(lastSeenBefore: cutoff), keep: 2)
        #expect(two.oldest == Array(whole.oldest.prefix(2)))
    }

    @Test("an invalidation step invalidates at most its bound, continues where it stopped, and replays exactly")
    func invalidationStepsAreBounded() throws {
        var harness = try Self.agedIndex(30)
        let cutoff = harness.now.adding(milliseconds: -10 * Self.day)
        let expected = harness.index.previewInactive(InactivityStep(lastSeenBefore: cutoff), keep: 1).matched
        var step = InactivityStep(lastSeenBefore: cutoff, invalidateMax: 4)
        var total = 0
        var steps = 0
        while true {
            let (slice, mutations) = harness.index.invalidateInactive(step, at: harness.now)
            #expect(slice.invalidated <= 4)
            #expect(mutations.count == slice.invalidated)
            harness.record(mutations)
            total += slice.invalidated
            steps += 1
            guard let next = slice.next else { break }
            step = step.continued(after: next)
        }
        #expect(total == expected)
        #expect(steps >= (expected + 3) / 4)
        var inactive = 0
        harness.index.forEachDevice { device in
            if device.invalidationReason == .inactive {
                inactive += 1
                #expect(device.invalidatedAt == harness.now)
                #expect(device.lastSeenAt < cutoff)
            }
        }
        #expect(inactive == expected)
        // Nothing left to do; the Dead ones kept their reason.
        let again = harness.index.invalidateInactive(InactivityStep(lastSeenBefore: cutoff), at: harness.now)
        #expect(again.slice.invalidated == 0)
        #expect(again.mutations.isEmpty)
        try harness.verify()
    }

    @Test("the cutoff is now minus the days, clamped at the epoch")
    func cutoff() {
        let now = Timestamp(millisecondsSinceEpoch: 100 * Self.day)
        #expect(InactivityStep.cutoff(olderThanDays: 30, now: now).millisecondsSinceEpoch == 70 * Self.day)
        #expect(InactivityStep.cutoff(olderThanDays: 3650, now: now).millisecondsSinceEpoch == 0)
    }
}
