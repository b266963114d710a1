import RoostJSON

/// `roost-bench selftest-crash`: checks that the crash harness's comparison
/// (`CrashModel.check`) finds every kind of damage in synthetic exports —
/// a lost device, a changed one, a duplicate, a stray token, a missing
/// background device, a half-applied erasure, an import applied out of
/// order — and accepts the outcomes a correct server may leave. Exits 1 on a
/// mismatch.
enum CrashSelfTest {
    static func run() -> [String] {
        var failures: [String] = []
        // Two clients, four slots each; slots 0–2 present, slot 3 absent.
        var slots: [[SlotState]] = []
        for client in 0..<2 {
            slots.append(
                (0..<4).map { slot in
                    slot == 3
                        ? .absent
                        : SlotState(
                            present: true, generation: UInt32(slot + 1), person: slot % 2, tag: slot == 1 ? 7 : nil,
                            id: "dev_\(client)_\(slot)")
                })
        }
        let background = 3
        func export(_ slots: [[SlotState]], background: Int = 3) -> [ExportedDevice] {
            var devices: [ExportedDevice] = []
            for (client, states) in slots.enumerated() {
                for (slot, state) in states.enumerated() where state.present {
                    devices.append(
                        ExportedDevice(
                            id: state.id ?? "dev_new_\(client)_\(slot)",
                            token: CrashNames.token(client: client, slot: slot, generation: state.generation),
                            installation: CrashNames.installation(client: client, slot: slot),
                            person: CrashNames.person(client: client, state.person),
                            tags: state.tag.map { [(key: "n", value: JSONValue.string("v\($0)"))] } ?? []))
                }
            }
            for index in 0..<background {
                devices.append(
                    ExportedDevice(
                        id: "dev_bg_\(index)", token: CrashNames.backgroundToken(index), installation: nil,
                        person: CrashNames.backgroundPerson(index), tags: []))
            }
            return devices
        }
        let none = [PendingWrite?](repeating: nil, count: 2)
        var cases = 0
        func expect(
            _ name: String, _ devices: [ExportedDevice], pending: [PendingWrite?] = [nil, nil], lost: Int = 0,
            extra: Int = 0, half: Int = 0
        ) {
            cases += 1
            let (counts, _) = CrashModel.check(devices, slots: slots, pending: pending, background: background)
            if counts.lost != lost || counts.extra != extra || counts.halfApplied != half {
                failures.append(
                    "\(name): lost \(counts.lost) extra \(counts.extra) half-applied \(counts.halfApplied), "
                        + "expected \(lost) \(extra) \(half); \(counts.problems)")
            }
        }

        expect("the same state", export(slots), pending: none)
        var missing = export(slots)
        missing.removeFirst()
        expect("a lost device", missing, lost: 1)
        var moved = slots
        moved[1][2].person = 1
        expect("a device on another person", export(moved), lost: 1)
        var retagged = slots
        retagged[0][1].tag = 8
        expect("a tag not kept", export(retagged), lost: 1)
        var duplicated = export(slots)
        duplicated.append(duplicated[0])
        expect("a duplicate device", duplicated, extra: 1)
        var resurrected = slots
        resurrected[0][3] = SlotState(present: true, generation: 9, person: 0)
        expect("a device never acknowledged", export(resurrected), extra: 1)
        var stray = export(slots)
        stray.append(
            ExportedDevice(
                id: "dev_x", token: String(repeating: "ee", count: 32), installation: nil, person: nil, tags: []))
        expect("a token the harness never sent", stray, extra: 1)
        expect("a background device missing", export(slots, background: 2), lost: 1)

        // An erasure of client 0's person 0 (slots 0 and 2) in flight.
        let erase = PendingWrite(
            operation: .erase, changes: [(0, slots[0][0], .absent), (2, slots[0][2], .absent)])
        var erased = slots
        erased[0][0] = .absent
        erased[0][2] = .absent
        expect("an erasure not applied", export(slots), pending: [erase, nil])
        expect("an erasure applied", export(erased), pending: [erase, nil])
        var halfErased = slots
        halfErased[0][2] = .absent
        expect("an erasure half-applied", export(halfErased), pending: [erase, nil], half: 1)

        // An import of three rows (slot 3 created, slots 0 and 1 moved) in flight.
        var after = slots
        after[0][3] = SlotState(present: true, generation: 20, person: 1)
        after[0][0].person = 1
        after[0][1].person = 0
        let rows = PendingWrite(
            operation: .import,
            changes: [(3, slots[0][3], after[0][3]), (0, slots[0][0], after[0][0]), (1, slots[0][1], after[0][1])])
        var prefix = slots
        prefix[0][3] = after[0][3]
        prefix[0][0] = after[0][0]
        expect("an import's first two rows", export(prefix), pending: [rows, nil])
        var gap = slots
        gap[0][3] = after[0][3]
        gap[0][1] = after[0][1]
        expect("an import's first and third rows", export(gap), pending: [rows, nil], half: 1)
        expect("a whole import", export(after), pending: [rows, nil])

        print(
            "selftest-crash: the harness's check on \(cases) synthetic exports: "
                + (failures.isEmpty ? "ok" : "\(failures.count) failures"))
        for failure in failures { print("  \(failure)") }
        return failures
    }
}
