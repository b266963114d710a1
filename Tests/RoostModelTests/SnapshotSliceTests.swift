import Testing

@testable import RoostModel

@Suite("Snapshot slices of people")
struct SnapshotSliceTests {
    @Test("people read in slices of any size are exactly the known people, each once")
    func peopleSlices() throws {
        var index = AppIndex(appID: AppID(1), mode: .live)
        let now = Timestamp(millisecondsSinceEpoch: 1_790_000_000_000)
        for number in 0..<50 { _ = index.putPerson(try ExternalID("person_\(number)"), at: now) }
        for number in stride(from: 0, to: 50, by: 7) { _ = index.erasePerson(try ExternalID("person_\(number)")) }
        let expected = index.allPeople()
        for limit in [1, 3, 16, 100] {
            var seen: [Person] = []
            var slot: UInt32 = 0
            while true {
                let slice = index.snapshotPeople(fromSlot: slot, limit: limit)
                #expect(slice.mutations.count <= limit)
                for mutation in slice.mutations {
                    guard case .personUpsert(let person) = mutation else {
                        Issue.record("unexpected \(mutation)")
                        continue
                    }
                    seen.append(person)
                }
                guard let next = slice.next else { break }
                slot = next
            }
            #expect(seen.sorted { $0.externalID < $1.externalID } == expected, "limit \(limit)")
        }
        #expect(index.snapshotSettingsAndCredentials().first == .settings(index.settings))
    }
}
