/// Everything the registry knows about one (app, mode), as one value: devices,
/// their token, installation, id and person indexes, known people, APNs
/// credentials and settings.
///
/// `AppIndex` is a pure value with no I/O and no clock: the shard actor that owns
/// it passes `now`, gets the `Mutation`s of each change back and logs them.
/// Every operation either succeeds and returns its mutations, or is rejected and
/// changes nothing (spec §5 rule 7): operations check everything first, then write.
///
/// Memory layout (see docs/model.md): devices are `DeviceRecord`s in one
/// contiguous array addressed by `UInt32` slots; the token, installation, device
/// id and person indexes are `SlotTable`s holding 8-byte buckets that point at
/// slots; long byte strings live in a `BlobStore`, repeated short strings in a
/// `StringInterner`; a person's devices form a linked list through the records.
package struct AppIndex: Sendable {
    package let appID: AppID
    package let mode: AppMode
    package internal(set) var settings: AppSettings
    package internal(set) var credentials: [CredentialKey: APNsCredential]
    /// The sequence the next created device gets (never reused).
    package internal(set) var nextDeviceSequence: UInt64

    var records: ContiguousArray<DeviceRecord> = []
    var freeDeviceSlots: [UInt32] = []
    var tokenSlots = SlotTable()
    var installationSlots = SlotTable()
    var people: ContiguousArray<PersonRecord> = []
    var freePersonSlots: [UInt32] = []
    var personSlots = SlotTable()
    var strings = StringInterner()
    var blobs = BlobStore()
    var digests: ContiguousArray<SecretDigest> = []
    var freeDigestSlots: [UInt32] = []
    /// Device sequences in ascending order, including deleted ones until compaction:
    /// the stable list order behind cursors, and the device id index (binary
    /// search; 12 bytes a device instead of a third hash table).
    var order: [UInt64] = []
    /// The slot of `order[i]`'s device, or `DeviceRecord.noSlot` once deleted.
    var orderSlots: [UInt32] = []
    var orderDeadCount = 0
    var deviceCount = 0
    var invalidatedCount = 0
    var iosCount = 0
    var personCount = 0

    /// An empty index with default settings.
    package init(appID: AppID, mode: AppMode, settings: AppSettings = .defaults) {
        precondition(settings.validationError() == nil, "invalid settings \(settings)")
        self.appID = appID
        self.mode = mode
        self.settings = settings
        self.credentials = [:]
        self.nextDeviceSequence = 1
    }

    /// Reserves room for `deviceCount` devices (before a bulk replay).
    package mutating func reserveCapacity(devices deviceCount: Int) {
        records.reserveCapacity(deviceCount)
        tokenSlots.reserveCapacity(deviceCount)
        order.reserveCapacity(deviceCount)
        orderSlots.reserveCapacity(deviceCount)
    }

    // MARK: Lookups

    static let tokenDomain: UInt8 = 1
    static let installationDomain: UInt8 = 2
    static let personDomain: UInt8 = 3

    /// Returns the position of `sequence` in `order`, or nil. O(log devices).
    func orderPosition(of sequence: UInt64) -> Int? {
        let position = lowerBound(in: order, sequence)
        return position < order.count && order[position] == sequence ? position : nil
    }

    /// Returns the slot of the device with `sequence`, or nil. O(log devices).
    func slot(ofSequence sequence: UInt64) -> UInt32? {
        guard let position = orderPosition(of: sequence) else { return nil }
        let slot = orderSlots[position]
        return slot == DeviceRecord.noSlot ? nil : slot
    }

    /// Returns the slot of `id` when it is a device of this index.
    func slot(of id: DeviceID) -> UInt32? {
        guard id.appID == appID, id.mode == mode, let slot = slot(ofSequence: id.sequence) else { return nil }
        return records[Int(slot)].platform == id.platform ? slot : nil
    }

    static func tokenHash(platform: Platform, bytes: UnsafeRawBufferPointer) -> UInt32 {
        slotHash(domain: tokenDomain &+ platform.rawValue &* 16, bytes: bytes)
    }

    /// Returns the slot of the device holding `token`, or nil. O(1) expected.
    func slot(ofToken token: PushToken) -> UInt32? {
        token.bytes.withUnsafeBytes { wanted in
            tokenSlots.find(hash: Self.tokenHash(platform: token.platform, bytes: wanted)) { slot in
                let record = records[Int(slot)]
                return record.platform == token.platform && withTokenBytes(of: record) { $0.elementsEqual(wanted) }
            }
        }
    }

    /// Returns the slot of the device with `installationID`, or nil.
    func slot(ofInstallation installationID: InstallationID) -> UInt32? {
        let bytes = Array(installationID.rawValue.utf8)
        return bytes.withUnsafeBytes { wanted in
            installationSlots.find(hash: slotHash(domain: Self.installationDomain, bytes: wanted)) { slot in
                blobs.equals(records[Int(slot)].installation, wanted)
            }
        }
    }

    /// Returns the slot of the person `externalID`, or nil.
    func personSlot(of externalID: ExternalID) -> UInt32? {
        let bytes = Array(externalID.rawValue.utf8)
        return bytes.withUnsafeBytes { wanted in
            personSlots.find(hash: slotHash(domain: Self.personDomain, bytes: wanted)) { slot in
                blobs.equals(people[Int(slot)].name, wanted)
            }
        }
    }

    /// Calls `body` with the token bytes of a record that has a token.
    func withTokenBytes<Result>(of record: DeviceRecord, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        precondition(record.tokenLength > 0, "record without token")
        if record.tokenLength <= 32 {
            var words = (record.token0, record.token1, record.token2, record.token3)
            return withUnsafeBytes(of: &words) {
                body(UnsafeRawBufferPointer(rebasing: $0[0..<Int(record.tokenLength)]))
            }
        }
        return blobs.withBytes(BlobRef(cell: UInt32(record.token0), length: record.tokenLength), body)
    }

    /// Returns the slots of a person's devices (at most `deviceCount` of them). O(devices of the person).
    func deviceSlots(ofPerson personSlot: UInt32) -> [UInt32] {
        var result: [UInt32] = []
        var slot = people[Int(personSlot)].firstDevice
        while slot != DeviceRecord.noSlot {
            result.append(slot)
            slot = records[Int(slot)].nextOfPerson
        }
        return result
    }

    // MARK: Materializing values

    /// Returns the device stored at `slot`.
    func device(at slot: UInt32) -> Device {
        let record = records[Int(slot)]
        precondition(!record.isFree, "reading free device slot \(slot)")
        let platform = record.platform
        let id = DeviceID(appID: appID, mode: mode, platform: platform, sequence: record.sequence)
        let token =
            record.tokenLength == 0
            ? nil : PushToken(unchecked: withTokenBytes(of: record) { Array($0) }, platform: platform)
        var device = Device(
            id: id, environment: record.environment, token: token,
            createdAt: Timestamp(millisecondsSinceEpoch: record.createdAt))
        device.lastSeenAt = Timestamp(millisecondsSinceEpoch: record.lastSeenAt)
        device.bundleID = strings.string(record.bundleID).map(BundleID.init(unchecked:))
        device.installationID =
            record.installation.isNone ? nil : InstallationID(unchecked: blobs.string(record.installation))
        device.installationSecretDigest = record.digest == DeviceRecord.noSlot ? nil : digests[Int(record.digest)]
        if record.person != DeviceRecord.noSlot {
            device.externalID = ExternalID(unchecked: blobs.string(people[Int(record.person)].name))
            device.boundAt = Timestamp(millisecondsSinceEpoch: record.boundAt)
        }
        device.appVersion = strings.string(record.appVersion)
        device.timezone = strings.string(record.timezone)
        device.locale = strings.string(record.locale)
        device.pushPermission = record.pushPermission
        device.optedIn = record.optedIn
        device.tags = record.tags.isNone ? .empty : decodeStoredTags(record.tags)
        if record.isInvalidated {
            device.invalidatedAt = Timestamp(millisecondsSinceEpoch: record.invalidatedAt)
            device.invalidationReason = strings.string(record.invalidationReason).map(
                InvalidationReason.init(unchecked:))
        }
        device.strikes = record.strikes
        return device
    }

    private func decodeStoredTags(_ ref: BlobRef) -> Tags {
        var reader = ByteReader(blobs.bytes(ref))
        do throws(ByteDecodingError) {
            return try Tags.decode(from: &reader)
        } catch {
            preconditionFailure("stored tags do not decode: \(error)")
        }
    }

    /// Returns the person stored at `slot`.
    func person(at slot: UInt32) -> Person {
        let record = people[Int(slot)]
        precondition(!record.isFree, "reading free person slot \(slot)")
        return Person(
            externalID: ExternalID(unchecked: blobs.string(record.name)),
            createdAt: Timestamp(millisecondsSinceEpoch: record.createdAt))
    }

    // MARK: Writing

    /// Stores `device` (new or replacing the one with the same id) and returns its slot.
    ///
    /// The caller guarantees that its token and installation id are free or already
    /// this device's, and that its person exists. O(devices of its old and new person).
    @discardableResult
    mutating func storeDevice(_ device: Device) -> UInt32 {
        precondition(device.id.appID == appID, "device \(device.id) of another app stored in \(appID)")
        precondition(device.mode == mode, "device \(device.id) of another mode stored in \(mode)")
        if let violation = device.violation() {
            preconditionFailure("storing invalid device \(device.id): \(violation)")
        }
        let slot: UInt32
        if let existing = self.slot(ofSequence: device.id.sequence) {
            precondition(records[Int(existing)].platform == device.platform, "device \(device.id) changed platform")
            unindex(slot: existing)
            slot = existing
        } else {
            slot = allocateDeviceSlot(sequence: device.id.sequence)
        }
        index(device, at: slot)
        return slot
    }

    /// Removes the device at `slot` from every index and frees the slot.
    mutating func removeDevice(at slot: UInt32) {
        let sequence = records[Int(slot)].sequence
        precondition(sequence != 0, "removing free device slot \(slot)")
        unindex(slot: slot)
        guard let position = orderPosition(of: sequence), orderSlots[position] == slot else {
            preconditionFailure("device slot \(slot) missing from the id index")
        }
        orderSlots[position] = DeviceRecord.noSlot
        records[Int(slot)] = .free
        freeDeviceSlots.append(slot)
        orderDeadCount += 1
        if orderDeadCount > 1024 && orderDeadCount > order.count / 2 { compactOrder() }
    }

    private mutating func allocateDeviceSlot(sequence: UInt64) -> UInt32 {
        let slot: UInt32
        if let reused = freeDeviceSlots.popLast() {
            slot = reused
        } else {
            precondition(records.count < Limits.devicesPerIndexMax, "device slots exhausted in \(appID)")
            slot = UInt32(records.count)
            records.append(.free)
        }
        records[Int(slot)].sequence = sequence
        insertIntoOrder(sequence, slot: slot)
        if sequence >= nextDeviceSequence { nextDeviceSequence = sequence + 1 }
        return slot
    }

    /// Adds a new device's sequence: appended in the usual case (sequences grow),
    /// inserted when a replay brings an older id back. O(1), or O(devices) for an insert.
    private mutating func insertIntoOrder(_ sequence: UInt64, slot: UInt32) {
        if let last = order.last, last >= sequence {
            let position = lowerBound(in: order, sequence)
            if position < order.count && order[position] == sequence {
                precondition(orderSlots[position] == DeviceRecord.noSlot, "sequence \(sequence) stored twice")
                orderSlots[position] = slot  // a deleted id comes back during replay: revive its entry
                orderDeadCount -= 1
                precondition(orderDeadCount >= 0, "order dead count negative")
            } else {
                order.insert(sequence, at: position)
                orderSlots.insert(slot, at: position)
            }
        } else {
            order.append(sequence)
            orderSlots.append(slot)
        }
    }

    /// Drops deleted entries once they are more than half of `order`. O(devices), amortized O(1).
    private mutating func compactOrder() {
        var write = 0
        for read in order.indices where orderSlots[read] != DeviceRecord.noSlot {
            order[write] = order[read]
            orderSlots[write] = orderSlots[read]
            write += 1
        }
        order.removeLast(order.count - write)
        orderSlots.removeLast(orderSlots.count - write)
        orderDeadCount = 0
    }

    /// Fills a slot whose `sequence` is set and indexes it everywhere.
    private mutating func index(_ device: Device, at slot: UInt32) {
        var record = DeviceRecord.free
        record.sequence = device.id.sequence
        record.createdAt = device.createdAt.millisecondsSinceEpoch
        record.lastSeenAt = device.lastSeenAt.millisecondsSinceEpoch
        record.flags = DeviceRecord.flags(
            platform: device.platform, environment: device.environment,
            pushPermission: device.pushPermission, optedIn: device.optedIn)
        if let token = device.token {
            precondition(self.slot(ofToken: token) == nil, "token of \(device.id) already held by another device")
            record.tokenLength = UInt16(token.bytes.count)
            if token.bytes.count <= 32 {
                var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
                withUnsafeMutableBytes(of: &words) { $0.copyBytes(from: token.bytes) }
                (record.token0, record.token1, record.token2, record.token3) = words
            } else {
                record.token0 = UInt64(blobs.store(token.bytes).cell)
            }
            let hash = token.bytes.withUnsafeBytes { Self.tokenHash(platform: token.platform, bytes: $0) }
            tokenSlots.insert(slot: slot, hash: hash)
        }
        if let installationID = device.installationID {
            precondition(self.slot(ofInstallation: installationID) == nil, "installation of \(device.id) already held")
            let bytes = Array(installationID.rawValue.utf8)
            record.installation = blobs.store(bytes)
            installationSlots.insert(slot: slot, hash: slotHash(domain: Self.installationDomain, bytes: bytes))
        }
        if let digest = device.installationSecretDigest {
            if let reused = freeDigestSlots.popLast() {
                record.digest = reused
                digests[Int(reused)] = digest
            } else {
                record.digest = UInt32(digests.count)
                digests.append(digest)
            }
        }
        record.bundleID = strings.retain(device.bundleID?.rawValue)
        record.appVersion = strings.retain(device.appVersion)
        record.timezone = strings.retain(device.timezone)
        record.locale = strings.retain(device.locale)
        if !device.tags.isEmpty {
            var writer = ByteWriter()
            device.tags.encode(into: &writer)
            record.tags = blobs.store(writer.bytes)
        }
        if let invalidatedAt = device.invalidatedAt, let reason = device.invalidationReason {
            record.invalidatedAt = invalidatedAt.millisecondsSinceEpoch
            record.invalidationReason = strings.retain(reason.rawValue)
            invalidatedCount += 1
        }
        record.strikes = device.strikes
        if let externalID = device.externalID, let boundAt = device.boundAt {
            guard let personSlot = personSlot(of: externalID) else {
                preconditionFailure("device \(device.id) bound to unknown person")
            }
            record.person = personSlot
            record.boundAt = boundAt.millisecondsSinceEpoch
            record.nextOfPerson = people[Int(personSlot)].firstDevice
            people[Int(personSlot)].firstDevice = slot
            people[Int(personSlot)].deviceCount += 1
        }
        records[Int(slot)] = record
        deviceCount += 1
        if device.platform == .ios { iosCount += 1 }
    }

    /// Removes a live slot's keys from every index and releases what it holds;
    /// the slot keeps its sequence (and its place in the id index).
    private mutating func unindex(slot: UInt32) {
        let record = records[Int(slot)]
        if record.tokenLength > 0 {
            let hash = withTokenBytes(of: record) { Self.tokenHash(platform: record.platform, bytes: $0) }
            let removed = tokenSlots.remove(slot: slot, hash: hash)
            precondition(removed, "token of slot \(slot) missing from the token index")
            if record.tokenLength > 32 {
                blobs.release(BlobRef(cell: UInt32(record.token0), length: record.tokenLength))
            }
        }
        if !record.installation.isNone {
            let hash = blobs.withBytes(record.installation) { slotHash(domain: Self.installationDomain, bytes: $0) }
            let removed = installationSlots.remove(slot: slot, hash: hash)
            precondition(removed, "installation of slot \(slot) missing from its index")
            blobs.release(record.installation)
        }
        if record.digest != DeviceRecord.noSlot { freeDigestSlots.append(record.digest) }
        strings.release(record.bundleID)
        strings.release(record.appVersion)
        strings.release(record.timezone)
        strings.release(record.locale)
        if !record.tags.isNone { blobs.release(record.tags) }
        if record.isInvalidated {
            strings.release(record.invalidationReason)
            invalidatedCount -= 1
        }
        if record.person != DeviceRecord.noSlot { unlink(slot: slot, fromPerson: record.person) }
        var cleared = DeviceRecord.free
        cleared.sequence = record.sequence
        cleared.flags = record.flags & 1  // keep the platform: the id index checks it
        records[Int(slot)] = cleared
        deviceCount -= 1
        if record.platform == .ios { iosCount -= 1 }
    }

    private mutating func unlink(slot: UInt32, fromPerson personSlot: UInt32) {
        let next = records[Int(slot)].nextOfPerson
        if people[Int(personSlot)].firstDevice == slot {
            people[Int(personSlot)].firstDevice = next
        } else {
            var previous = people[Int(personSlot)].firstDevice
            while records[Int(previous)].nextOfPerson != slot {
                previous = records[Int(previous)].nextOfPerson
                precondition(previous != DeviceRecord.noSlot, "slot \(slot) missing from its person's list")
            }
            records[Int(previous)].nextOfPerson = next
        }
        people[Int(personSlot)].deviceCount -= 1
    }

    /// Adds a person (who must not exist) and returns the slot.
    @discardableResult
    mutating func insertPerson(_ person: Person) -> UInt32 {
        precondition(personSlot(of: person.externalID) == nil, "person already known")
        let bytes = Array(person.externalID.rawValue.utf8)
        let record = PersonRecord(
            name: blobs.store(bytes), createdAt: person.createdAt.millisecondsSinceEpoch,
            firstDevice: DeviceRecord.noSlot, deviceCount: 0)
        let slot: UInt32
        if let reused = freePersonSlots.popLast() {
            slot = reused
            people[Int(slot)] = record
        } else {
            slot = UInt32(people.count)
            people.append(record)
        }
        personSlots.insert(slot: slot, hash: slotHash(domain: Self.personDomain, bytes: bytes))
        personCount += 1
        return slot
    }

    /// Removes a person who has no devices left.
    mutating func removePerson(at slot: UInt32) {
        let record = people[Int(slot)]
        precondition(!record.isFree, "removing free person slot \(slot)")
        precondition(record.deviceCount == 0, "removing a person who still has \(record.deviceCount) devices")
        let hash = blobs.withBytes(record.name) { slotHash(domain: Self.personDomain, bytes: $0) }
        let removed = personSlots.remove(slot: slot, hash: hash)
        precondition(removed, "person slot \(slot) missing from the person index")
        blobs.release(record.name)
        people[Int(slot)] = PersonRecord(name: .none, createdAt: 0, firstDevice: DeviceRecord.noSlot, deviceCount: 0)
        freePersonSlots.append(slot)
        personCount -= 1
    }
}

/// Returns the first index of a sorted array whose element is not less than `value`.
func lowerBound(in sorted: [UInt64], _ value: UInt64) -> Int {
    var low = 0
    var high = sorted.count
    while low < high {
        let middle = (low + high) / 2
        if sorted[middle] < value { low = middle + 1 } else { high = middle }
    }
    return low
}
