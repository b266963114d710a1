/// Which devices a list returns by invalidation state (`state=` of spec §4).
package enum DeviceState: Hashable, Sendable {
    case active
    case invalidated
    case all
}

/// An opaque position in the stable device order (creation order, by id sequence).
package struct DeviceCursor: Hashable, Sendable {
    /// Devices after this sequence come next.
    package var afterSequence: UInt64

    package init(afterSequence: UInt64) { self.afterSequence = afterSequence }

    private static let mask: UInt64 = 0x5DEE_CE66_D1CE_B00C

    /// The cursor as the API sends it: `c` + 16 hex digits.
    package var encoded: String {
        let value = afterSequence ^ Self.mask
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = [UInt8(ascii: "c")]
        for shift in stride(from: 60, through: 0, by: -4) { out.append(digits[Int((value >> UInt64(shift)) & 0xF)]) }
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses `encoded`'s form; nil for anything else (the API answers 400 `invalid_field` `cursor`).
    package init?(encoded text: some StringProtocol) {
        let utf8 = Array(text.utf8)
        guard utf8.count == 17, utf8[0] == UInt8(ascii: "c") else { return nil }
        var value: UInt64 = 0
        for c in utf8[1...] {
            let digit: UInt64
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt64(c - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt64(c - UInt8(ascii: "a") + 10)
            default: return nil
            }
            value = value << 4 | digit
        }
        afterSequence = value ^ Self.mask
    }
}

/// `GET /v1/devices` filters (spec §4).
package struct DeviceQuery: Hashable, Sendable {
    package var externalID: ExternalID?
    package var platform: Platform?
    /// `tag.KEY=VALUE`: every pair must match (see `TagValue.matches(filterText:)`);
    /// keys compared as Unicode scalars, as stored keys are (`TagKey`).
    package var tags: [TagKey: String]
    package var state: DeviceState
    /// `last_seen_before` (spec §8): only devices whose `last_seen_at` is strictly earlier.
    package var lastSeenBefore: Timestamp?
    /// `last_seen_after` (spec §8): only devices whose `last_seen_at` is strictly later.
    package var lastSeenAfter: Timestamp?
    /// 1 to 1,000; default 100.
    package var limit: Int
    package var cursor: DeviceCursor?

    package init(
        externalID: ExternalID? = nil, platform: Platform? = nil, tags: [TagKey: String] = [:],
        state: DeviceState = .all, lastSeenBefore: Timestamp? = nil, lastSeenAfter: Timestamp? = nil,
        limit: Int = Limits.listLimitDefault, cursor: DeviceCursor? = nil
    ) {
        self.externalID = externalID
        self.platform = platform
        self.tags = tags
        self.state = state
        self.lastSeenBefore = lastSeenBefore
        self.lastSeenAfter = lastSeenAfter
        self.limit = limit
        self.cursor = cursor
    }
}

/// One page of devices; `nextCursor` is nil at the end.
package struct DevicePage: Hashable, Sendable {
    package var devices: [Device]
    package var nextCursor: DeviceCursor?
}

/// `GET /v1/people` (spec §11): a page of people in the store's slot order,
/// from `fromSlot` on. The slot is the position a person keeps for as long
/// as they exist; `nextSlot` nil at the end.
package struct PeoplePage: Hashable, Sendable {
    package var people: [PersonSummary]
    package var nextSlot: UInt32?
}

/// A person and how many devices they hold now.
package struct PersonSummary: Hashable, Sendable {
    package var person: Person
    package var devices: Int
}

/// A person with their devices (`GET /v1/people/{external_id}`).
package struct PersonDevices: Hashable, Sendable {
    package var person: Person
    /// The devices' stored fields, in creation order: what the answer renders.
    package var stored: StoredDevices

    /// The devices, in creation order (tests and tools). O(devices).
    package var devices: [Device] { stored.materialized }

    package static func == (lhs: PersonDevices, rhs: PersonDevices) -> Bool {
        lhs.person == rhs.person && lhs.devices == rhs.devices
    }

    package func hash(into hasher: inout Hasher) {
        hasher.combine(person)
        hasher.combine(devices)
    }
}

extension DeviceStore {
    /// Returns the device with `id`, or nil (also for another app's or mode's id).
    func device(_ id: DeviceID) -> Device? {
        slot(of: id).map { device(at: $0) }
    }

    /// Returns the device holding `token`, or nil.
    func device(token: PushToken) -> Device? {
        slot(ofToken: token).map { device(at: $0) }
    }

    /// Returns the device of an installation, or nil.
    func device(installation: InstallationID) -> Device? {
        slot(ofInstallation: installation).map { device(at: $0) }
    }

    /// Variable bytes a device stores, about (an FCM token's 163, an
    /// installation id, an external id, a few tags): a person read's buffer
    /// is reserved for this many per device and grows past it.
    static let variableBytesPerDeviceTypical = 256

    /// Returns a known person and their devices, or nil (404 `person_not_found`).
    func person(_ externalID: ExternalID) -> PersonDevices? {
        guard let personSlot = personSlot(of: externalID) else { return nil }
        // The slots are put in creation order before any device is built:
        // sorting the built values moved each (a `Device` is a few hundred
        // bytes) several times, 1.4 % of a person read's CPU in `memmove`.
        var slots = deviceSlots(ofPerson: personSlot)
        sortByCreation(&slots)
        // Their stored fields, copied once: no `Device` is built (issue 25).
        var devices = StoredDevices(reservingCapacity: slots.count, bytesPerDevice: Self.variableBytesPerDeviceTypical)
        for slot in slots { devices.append(slot: slot, of: self) }
        return PersonDevices(person: person(at: personSlot), stored: devices)
    }

    /// `GET /v1/stats`. O(1).
    func stats() -> RegistryStats {
        RegistryStats(
            devices: deviceCount, active: deviceCount - invalidatedCount, invalidated: invalidatedCount,
            people: personCount, byPlatform: [.ios: iosCount, .android: deviceCount - iosCount])
    }

    /// Number of devices.
    var count: Int { deviceCount }

    /// `GET /v1/devices`: devices in creation order after the cursor that match the query.
    ///
    /// With `externalID` it reads that person's devices only; otherwise it walks the
    /// order and stops after `Limits.listScanMax` examined devices, returning a
    /// shorter page with a cursor, so a rare filter costs bounded work per request.
    /// 400 `invalid_field` (`limit`) outside 1...1,000.
    func listDevices(_ query: DeviceQuery) -> Result<DevicePage, RegistryRejection> {
        guard query.limit >= 1 && query.limit <= Limits.listLimitMax else { return .failure(.invalidField("limit")) }
        let after = query.cursor?.afterSequence ?? 0
        var page: [Device] = []
        func matches(_ slot: UInt32) -> Bool {
            let record = records[Int(slot)]
            if let platform = query.platform, record.platform != platform { return false }
            switch query.state {
            case .all: break
            case .active: if record.isInvalidated { return false }
            case .invalidated: if !record.isInvalidated { return false }
            }
            if let before = query.lastSeenBefore, record.lastSeenAt >= before.millisecondsSinceEpoch { return false }
            if let after = query.lastSeenAfter, record.lastSeenAt <= after.millisecondsSinceEpoch { return false }
            return true
        }
        func accept(_ slot: UInt32) -> Bool {
            guard matches(slot) else { return false }
            let device = device(at: slot)
            for (key, value) in query.tags {
                guard let tag = device.tags[key], tag.matches(filterText: value) else { return false }
            }
            page.append(device)
            return true
        }
        if let externalID = query.externalID {
            guard let personSlot = personSlot(of: externalID) else {
                return .success(DevicePage(devices: [], nextCursor: nil))
            }
            var slots = deviceSlots(ofPerson: personSlot)
            slots.removeAll { records[Int($0)].sequence <= after }
            sortByCreation(&slots)
            for (position, slot) in slots.enumerated() {
                guard accept(slot), page.count == query.limit else { continue }
                let more = position + 1 < slots.count
                let cursor = DeviceCursor(afterSequence: records[Int(slot)].sequence)
                return .success(DevicePage(devices: page, nextCursor: more ? cursor : nil))
            }
            return .success(DevicePage(devices: page, nextCursor: nil))
        }
        var position = lowerBound(in: order, after == UInt64.max ? after : after + 1)
        var scanned = 0
        while position < order.count {
            let sequence = order[position]
            let slot = orderSlots[position]
            position += 1
            guard slot != DeviceRecord.noSlot else { continue }
            scanned += 1
            if accept(slot) && page.count == query.limit || scanned >= Limits.listScanMax {
                let more = position < order.count
                return .success(
                    DevicePage(devices: page, nextCursor: more ? DeviceCursor(afterSequence: sequence) : nil))
            }
        }
        return .success(DevicePage(devices: page, nextCursor: nil))
    }

    /// Calls `body` with every device in creation order (export, snapshots). O(devices).
    func forEachDevice(_ body: (Device) -> Void) {
        for slot in orderSlots where slot != DeviceRecord.noSlot { body(device(at: slot)) }
    }

    /// `GET /v1/people`: up to `limit` people from slot `fromSlot` on, in slot
    /// order, each with their device count. A person keeps their slot while
    /// they exist, so a walk by `nextSlot` returns every person who exists
    /// throughout it exactly once; one created or erased during it may or may
    /// not appear. Examines at most `Limits.listScanMax` slots (erased
    /// people leave free slots), then returns a shorter page with a cursor.
    /// `nextSlot` is nil when no person is left after the page.
    /// O(limit + free slots examined).
    func listPeople(fromSlot: UInt32, limit: Int) -> Result<PeoplePage, RegistryRejection> {
        guard limit >= 1 && limit <= Limits.listLimitMax else { return .failure(.invalidField("limit")) }
        var page: [PersonSummary] = []
        var slot = Int(fromSlot)
        var scanned = 0
        while slot < people.count && scanned < Limits.listScanMax {
            let record = people[slot]
            if !record.isFree {
                guard page.count < limit else { break }
                page.append(PersonSummary(person: person(at: UInt32(slot)), devices: Int(record.deviceCount)))
            }
            slot += 1
            scanned += 1
        }
        return .success(PeoplePage(people: page, nextSlot: slot < people.count ? UInt32(slot) : nil))
    }

    /// Every known person, sorted by external id. O(people log people).
    func allPeople() -> [Person] {
        people.indices.filter { !people[$0].isFree }.map { person(at: UInt32($0)) }.sorted {
            $0.externalID < $1.externalID
        }
    }
}

/// Where an index's memory goes, in bytes (capacities, not just counts).
package struct MemoryEstimate: Hashable, Sendable {
    package var deviceRecords: Int
    package var hashTables: Int
    package var blobs: Int
    package var digests: Int
    package var order: Int
    package var people: Int
    /// The side table of spec §7 client sequences (only devices that carry one).
    package var clientSequences: Int
    /// Device histories (spec §9): nothing for devices that never changed.
    package var history: Int = 0

    package var total: Int {
        deviceRecords + hashTables + blobs + digests + order + people + clientSequences + history
    }
}

extension DeviceStore {
    /// What one bucket of `clientSequences` costs: the dictionary keeps keys
    /// (4 bytes) and values (8) in separate arrays, plus a metadata bit.
    static let clientSequenceEntryBytes = 13

    /// Returns the approximate heap bytes held by this index (interned strings and
    /// credentials, a few kilobytes per app, are left out). Chunked storage counts
    /// what is filled; arrays and hash tables count their capacity.
    func memoryEstimate() -> MemoryEstimate {
        MemoryEstimate(
            deviceRecords: records.usedBytes + freeDeviceSlots.capacity * 4,
            hashTables: tokenSlots.bucketBytes + installationSlots.bucketBytes + personSlots.bucketBytes,
            blobs: blobs.reservedBytes,
            digests: digests.usedBytes + freeDigestSlots.capacity * 4,
            order: order.capacity * 8 + orderSlots.capacity * 4,
            people: people.usedBytes + freePersonSlots.capacity * 4,
            clientSequences: clientSequences.capacity * Self.clientSequenceEntryBytes,
            history: history.memoryBytes)
    }
}
