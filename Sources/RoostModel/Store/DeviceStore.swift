/// The devices and people of one (app, mode) and every index over them: the
/// storage half of `AppIndex` (the identity rules, in `Rules/`, are the other).
///
/// It knows the memory layout and keeps it consistent: devices are
/// `DeviceRecord`s in chunks addressed by `UInt32` slots; the token,
/// installation and person indexes are `SlotTable`s of 8-byte buckets that
/// point at slots; the device id index is `order`/`orderSlots`; long byte
/// strings live in a `BlobStore`, repeated short strings in a
/// `StringInterner`; a person's devices form a linked list through the
/// records (docs/model.md §2). It stores, finds, materializes and removes
/// values, replays mutations (`DeviceStore+Replay`, `+FastReplay`) and cuts
/// snapshots; it decides nothing about who may register what.
struct DeviceStore: Sendable {
    let appID: AppID
    let mode: AppMode
    /// The sequence the next created device gets (never reused).
    var nextDeviceSequence: UInt64

    var records = ChunkedArray<DeviceRecord>()
    var freeDeviceSlots: [UInt32] = []
    var tokenSlots = SlotTable()
    var installationSlots = SlotTable()
    var people = ChunkedArray<PersonRecord>()
    var freePersonSlots: [UInt32] = []
    var personSlots = SlotTable()
    var strings = StringInterner()
    var blobs = BlobStore()
    var digests = ChunkedArray<SecretDigest>(chunkBytes: 64 << 10)
    /// Interned tag sets (`DeviceStore+TagSets.swift`): a record's `tags` is
    /// the blob of its set's canonical bytes, stored once for every device
    /// holding the same set and counted here.
    var tagSets = ChunkedArray<TagSetEntry>(chunkBytes: 64 << 10)
    var freeTagSetSlots: [UInt32] = []
    var tagSetSlots = SlotTable()
    var freeDigestSlots: [UInt32] = []
    /// Spec §7 client sequences by device slot, only for devices that carry
    /// one (`DeviceRecord.hasClientSequence`): most never do, and pay nothing.
    var clientSequences: [UInt32: UInt64] = [:]
    /// Device sequences in ascending order, including deleted ones until compaction:
    /// the stable list order behind cursors, and the device id index (binary
    /// search; 12 bytes a device instead of a third hash table). Chunked, so
    /// that a snapshot's frozen copy shares it and an append or delete during
    /// a snapshot copies one chunk, not the whole list (decision 0054).
    var order = ChunkedArray<UInt64>()
    /// The slot of `order[i]`'s device, or `DeviceRecord.noSlot` once deleted.
    var orderSlots = ChunkedArray<UInt32>()
    var orderDeadCount = 0
    /// The histories of devices that changed (spec §9).
    var history = DeviceHistoryStore()
    var deviceCount = 0
    var invalidatedCount = 0
    var iosCount = 0
    var personCount = 0
    /// Replay's guesses at the next device's person, tried before hashing (a
    /// wrong guess costs one comparison): the previous device's person, and
    /// the person inserted last. Any slot number is safe: a guess is used
    /// only when that live person's name equals the wanted one.
    var previousDevicePerson = DeviceRecord.noSlot
    var lastInsertedPerson = DeviceRecord.noSlot
    /// Replay's guess at where the next device's sequence is in `order` (the
    /// previous device's position; checked before it is used).
    var previousOrderPosition = 0

    /// An empty store.
    init(appID: AppID, mode: AppMode) {
        self.appID = appID
        self.mode = mode
        self.nextDeviceSequence = 1
    }

    /// Reserves room for `deviceCount` devices (before a bulk replay).
    mutating func reserveCapacity(devices deviceCount: Int) {
        tokenSlots.reserveCapacity(deviceCount)  // `order` and `orderSlots` grow by chunks: nothing to reserve
    }

    /// Reserves room for `deviceCount` devices and `personCount` people (before
    /// a bulk replay, e.g. from a snapshot's index-size hint). Never shrinks.
    mutating func reserveCapacity(devices deviceCount: Int, people personCount: Int) {
        reserveCapacity(devices: deviceCount)
        personSlots.reserveCapacity(personCount)
    }

    // MARK: A frozen copy for a snapshot (decision 0054)

    /// Returns a read-only copy of this store's devices and people for a
    /// snapshot encoded outside the shard's turn, and marks every chunk it
    /// shares: a later write copies the chunk it touches (once) and counts
    /// the bytes in `pin`. The copy drops what a reader does not need (the
    /// hash tables, free lists, the interner's lookup table), so writes to
    /// those copy nothing. O(chunks) reference counts; no element is copied.
    /// Call `endSnapshotSharing()` once the copy is dropped.
    mutating func freezeForSnapshot(pin: SnapshotPin) -> DeviceStore {
        records.shareChunks(pin: pin)
        people.shareChunks(pin: pin)
        digests.shareChunks(pin: pin)
        order.shareChunks(pin: pin)
        orderSlots.shareChunks(pin: pin)
        strings.shareChunks(pin: pin)
        blobs.shareChunks(pin: pin)
        return frozenWithoutLookups()
    }

    /// The shared, read-only copy both frozen views are: every chunked array
    /// shares its chunks (`frozenCopy`), and what a reader of slices does not
    /// need is dropped (hash tables, free lists), so writes to those copy nothing.
    private func frozenWithoutLookups() -> DeviceStore {
        var copy = self
        copy.records = records.frozenCopy()
        copy.people = people.frozenCopy()
        copy.digests = digests.frozenCopy()
        copy.order = order.frozenCopy()
        copy.orderSlots = orderSlots.frozenCopy()
        copy.strings = strings.frozenCopy()
        copy.blobs = blobs.frozenCopy()
        copy.tokenSlots = SlotTable()
        copy.installationSlots = SlotTable()
        copy.personSlots = SlotTable()
        copy.freeDeviceSlots = []
        copy.freePersonSlots = []
        copy.freeDigestSlots = []
        // A view reads tags through the records' blobs; the counts are the writer's.
        copy.tagSets = ChunkedArray(chunkBytes: 64 << 10)
        copy.tagSetSlots = SlotTable()
        copy.freeTagSetSlots = []
        return copy
    }

    /// A read-only copy for a point-in-time export (`IndexExportView`): the
    /// chunked arrays shared as in `freezeForSnapshot`, but with no sharing
    /// marks and no pin (a write to a shared chunk still copies it: chunks
    /// are copy-on-write values), and without the hash tables, so that the
    /// next write does not copy a whole table, nor the histories. Slices by
    /// sequence work on it; lookups by token, installation or person do not.
    /// O(chunks).
    func frozenForExport() -> DeviceStore {
        var copy = frozenWithoutLookups()
        // Not in the device JSON; the next history write would copy it whole.
        copy.history = DeviceHistoryStore()
        return copy
    }

    /// Forgets the sharing marks of `freezeForSnapshot` (its copy is gone). O(blob classes).
    mutating func endSnapshotSharing() {
        records.endSharing()
        people.endSharing()
        digests.endSharing()
        order.endSharing()
        orderSlots.endSharing()
        strings.endSharing()
        blobs.endSharing()
    }

    // MARK: Lookups

    static let tokenDomain: UInt8 = 1
    static let installationDomain: UInt8 = 2
    static let personDomain: UInt8 = 3
    static let tagSetDomain: UInt8 = 4

    /// Returns the position of `sequence` in `order`, or nil. O(log devices).
    func orderPosition(of sequence: UInt64) -> Int? {
        guard let last = order.last, sequence <= last else { return nil }  // a new device: no search
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

    /// The token index's hash of a token's bytes (the platform is part of the key).
    @inline(__always)
    func tokenHash(platform: Platform, bytes: UnsafeRawBufferPointer) -> UInt32 {
        Self.tokenHash(keys: tokenSlots.keys, platform: platform, bytes: bytes)
    }

    /// The hash a token index with `keys` files a token under.
    @inline(__always)
    static func tokenHash(keys: SlotHashKeys, platform: Platform, bytes: UnsafeRawBufferPointer) -> UInt32 {
        keys.hash(domain: tokenDomain &+ platform.rawValue &* 16, bytes: bytes)
    }

    /// The installation index's hash of an installation id's UTF-8 bytes.
    @inline(__always)
    func installationHash(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        installationSlots.keys.hash(domain: Self.installationDomain, bytes: bytes)
    }

    /// The person index's hash of an external id's UTF-8 bytes.
    @inline(__always)
    func personHash(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        personSlots.keys.hash(domain: Self.personDomain, bytes: bytes)
    }

    /// Returns the slot of the device holding `token`, or nil. O(1) expected.
    func slot(ofToken token: PushToken) -> UInt32? {
        token.withBytes { wanted in
            slot(ofToken: wanted, platform: token.platform, hash: tokenHash(platform: token.platform, bytes: wanted))
        }
    }

    /// Returns the slot of the device holding the token `wanted` whose hash is `hash`, or nil.
    @inline(__always)
    func slot(ofToken wanted: UnsafeRawBufferPointer, platform: Platform, hash: UInt32) -> UInt32? {
        tokenSlots.find(hash: hash) { slot in
            let record = records[Int(slot)]
            return record.platform == platform && withTokenBytes(of: record) { $0.hasSameBytes(as: wanted) }
        }
    }

    /// Returns the slot of the device with `installationID`, or nil.
    func slot(ofInstallation installationID: InstallationID) -> UInt32? {
        withUTF8Bytes(of: installationID.rawValue) { wanted in
            installationSlots.find(hash: installationHash(wanted)) { slot in
                blobs.equals(records[Int(slot)].installation, wanted)
            }
        }
    }

    /// Returns the slot of the person `externalID`, or nil.
    func personSlot(of externalID: ExternalID) -> UInt32? {
        personLookup(externalID).slot
    }

    /// Returns the slot of the person `externalID` (or nil) and the hash it is
    /// filed under, so that an insert after a miss need not hash again.
    func personLookup(_ externalID: ExternalID) -> (slot: UInt32?, hash: UInt32) {
        withUTF8Bytes(of: externalID.rawValue) { wanted in
            let hash = personHash(wanted)
            let slot = personSlots.find(hash: hash) { slot in
                blobs.equals(people[Int(slot)].name, wanted)
            }
            return (slot, hash)
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
        // One allocation: the person's record counts its devices.
        result.reserveCapacity(Int(people[Int(personSlot)].deviceCount))
        var slot = people[Int(personSlot)].firstDevice
        while slot != DeviceRecord.noSlot {
            result.append(slot)
            slot = records[Int(slot)].nextOfPerson
        }
        return result
    }

    /// Puts device slots in creation order (their records' sequence). The
    /// comparison captures the records alone: a closure that read `records`
    /// through `self` captured a copy of the whole store (every reference in
    /// it retained and released, 0.8 % of a person read). O(n log n).
    func sortByCreation(_ slots: inout [UInt32]) {
        let records = records
        slots.sort { records[Int($0)].sequence < records[Int($1)].sequence }
    }

    // MARK: Materializing values

    /// Returns the device stored at `slot`.
    func device(at slot: UInt32) -> Device {
        device(at: slot, token: nil, externalID: nil)
    }

    /// Returns the device stored at `slot`, reusing `token`, `externalID` and
    /// `tags` (when the caller knows them to equal the stored ones: a
    /// registration that just wrote them) instead of copying them out.
    func device(
        at slot: UInt32, token knownToken: PushToken?, externalID knownExternalID: ExternalID?,
        tags knownTags: Tags? = nil
    ) -> Device {
        let record = records[Int(slot)]
        precondition(!record.isFree, "reading free device slot \(slot)")
        let platform = record.platform
        let id = DeviceID(appID: appID, mode: mode, platform: platform, sequence: record.sequence)
        let token: PushToken?
        if record.tokenLength == 0 {
            token = nil
        } else if let knownToken {
            token = knownToken
        } else {
            token = withTokenBytes(of: record) { PushToken(unchecked: $0, platform: platform) }
        }
        let bound = record.person != DeviceRecord.noSlot
        let invalidated = record.isInvalidated
        // Every field read first, the device built once (see the initializer).
        return Device(
            id: id, environment: record.environment, token: token,
            bundleID: record.bundleID == 0 ? nil : strings.string(record.bundleID).map(BundleID.init(unchecked:)),
            installationID: record.installation.isNone
                ? nil : InstallationID(unchecked: blobs.string(record.installation)),
            installationSecretDigest: record.digest == DeviceRecord.noSlot ? nil : digests[Int(record.digest)],
            externalID: bound
                ? knownExternalID ?? ExternalID(unchecked: blobs.string(people[Int(record.person)].name)) : nil,
            createdAt: Timestamp(millisecondsSinceEpoch: record.createdAt),
            lastSeenAt: Timestamp(millisecondsSinceEpoch: record.lastSeenAt),
            boundAt: bound ? Timestamp(millisecondsSinceEpoch: record.boundAt) : nil,
            appVersion: record.appVersion == 0 ? nil : strings.string(record.appVersion),
            timezone: record.timezone == 0 ? nil : strings.string(record.timezone),
            locale: record.locale == 0 ? nil : strings.string(record.locale),
            pushPermission: record.pushPermission, optedIn: record.optedIn,
            tags: record.tags.isNone ? .empty : knownTags ?? storedTags(record.tags),
            invalidatedAt: invalidated ? Timestamp(millisecondsSinceEpoch: record.invalidatedAt) : nil,
            invalidationReason: invalidated
                ? strings.string(record.invalidationReason).map(InvalidationReason.init(unchecked:)) : nil,
            strikes: record.strikes, version: record.version,
            clientSequence: record.hasClientSequence ? clientSequence(at: slot) : nil)
    }

    /// Returns the client sequence a live slot stores, or nil. O(1) expected.
    func clientSequence(at slot: UInt32) -> UInt64? {
        guard records[Int(slot)].hasClientSequence else { return nil }
        guard let stored = clientSequences[slot] else {
            preconditionFailure("slot \(slot) flags a client sequence that is not stored")
        }
        return stored
    }

    /// Stores a live slot's client sequence (spec §7; the caller checked it is new).
    mutating func setClientSequence(_ sequence: UInt64, at slot: UInt32) {
        precondition(sequence <= Limits.clientSequenceMax, "client sequence \(sequence) over the limit")
        clientSequences[slot] = sequence
        records[Int(slot)].hasClientSequence = true
    }

    /// Returns the tags in a blob, as stored (one copy, no decoding).
    func storedTags(_ ref: BlobRef) -> Tags {
        Tags(storedEncoding: blobs.bytes(ref))
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
    /// `personSlot`, when given, is the slot of the device's person (saves a lookup).
    /// `tokenHash`, when given, is the hash of the device's token, which the
    /// caller guarantees is free once the device's old version is unindexed
    /// (replay: saves hashing and probing the token index twice).
    @discardableResult
    mutating func storeDevice(_ device: Device, personSlot: UInt32? = nil, tokenHash: UInt32? = nil) -> UInt32 {
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
        index(device, at: slot, personSlot: personSlot, tokenHash: tokenHash)
        return slot
    }

    /// Removes the device at `slot` from every index and frees the slot.
    mutating func removeDevice(at slot: UInt32) {
        let sequence = records[Int(slot)].sequence
        precondition(sequence != 0, "removing free device slot \(slot)")
        unindex(slot: slot)
        history.remove(sequence)
        guard let position = orderPosition(of: sequence), orderSlots[position] == slot else {
            preconditionFailure("device slot \(slot) missing from the id index")
        }
        orderSlots[position] = DeviceRecord.noSlot
        records[Int(slot)] = .free
        freeDeviceSlots.append(slot)
        orderDeadCount += 1
        if orderDeadCount > 1024 && orderDeadCount > order.count / 2 { compactOrder() }
    }

    mutating func allocateDeviceSlot(sequence: UInt64) -> UInt32 {
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
    private mutating func index(
        _ device: Device, at slot: UInt32, personSlot knownPersonSlot: UInt32?, tokenHash: UInt32?
    ) {
        var record = DeviceRecord.free
        record.sequence = device.id.sequence
        record.createdAt = device.createdAt.millisecondsSinceEpoch
        record.lastSeenAt = device.lastSeenAt.millisecondsSinceEpoch
        record.flags = DeviceRecord.flags(
            platform: device.platform, environment: device.environment,
            pushPermission: device.pushPermission, optedIn: device.optedIn)
        if let installationID = device.installationID {
            precondition(self.slot(ofInstallation: installationID) == nil, "installation of \(device.id) already held")
            withUTF8Bytes(of: installationID.rawValue) { bytes in
                record.installation = blobs.store(bytes)
                installationSlots.insert(slot: slot, hash: installationHash(bytes))
            }
        }
        if let digest = device.installationSecretDigest { record.digest = storeDigest(digest) }
        record.bundleID = strings.retain(device.bundleID?.rawValue)
        record.appVersion = strings.retain(device.appVersion)
        record.timezone = strings.retain(device.timezone)
        record.locale = strings.retain(device.locale)
        if !device.tags.isEmpty { record.tags = internTags(device.tags.encoded) }
        if let invalidatedAt = device.invalidatedAt, let reason = device.invalidationReason {
            record.invalidatedAt = invalidatedAt.millisecondsSinceEpoch
            record.invalidationReason = strings.retain(reason.rawValue)
            invalidatedCount += 1
        }
        record.strikes = device.strikes
        record.version = device.version
        if let boundAt = device.boundAt { record.boundAt = boundAt.millisecondsSinceEpoch }
        records[Int(slot)] = record
        if let clientSequence = device.clientSequence { setClientSequence(clientSequence, at: slot) }
        if let token = device.token {
            if let tokenHash { setFreeToken(token, at: slot, hash: tokenHash) } else { setToken(token, at: slot) }
        }
        if let externalID = device.externalID {
            if let knownPersonSlot {
                precondition(
                    blobs.equals(people[Int(knownPersonSlot)].name, externalID.rawValue),
                    "device \(device.id) stored with another person's slot")
                link(slot: slot, toPerson: knownPersonSlot)
            } else {
                guard let personSlot = personSlot(of: externalID) else {
                    preconditionFailure("device \(device.id) bound to unknown person")
                }
                link(slot: slot, toPerson: personSlot)
            }
        }
        deviceCount += 1
        if device.platform == .ios { iosCount += 1 }
    }

    /// Removes a live slot's keys from every index and releases what it holds;
    /// the slot keeps its sequence (and its place in the id index).
    /// With `keepingToken` the token stays in the token index (and its blob, if
    /// long, stays allocated): the caller stores the same token at this slot again.
    mutating func unindex(slot: UInt32, keepingToken: Bool = false) {
        let record = records[Int(slot)]
        if record.tokenLength > 0 && !keepingToken { removeToken(at: slot) }
        if !record.installation.isNone { removeInstallation(at: slot) }
        if record.digest != DeviceRecord.noSlot { freeDigestSlots.append(record.digest) }
        strings.release(record.bundleID)
        strings.release(record.appVersion)
        strings.release(record.timezone)
        strings.release(record.locale)
        if !record.tags.isNone { releaseTags(record.tags) }
        if record.isInvalidated {
            strings.release(record.invalidationReason)
            invalidatedCount -= 1
        }
        if record.person != DeviceRecord.noSlot { unlink(slot: slot, fromPerson: record.person) }
        if record.hasClientSequence {
            let removed = clientSequences.removeValue(forKey: slot)
            precondition(removed != nil, "client sequence of slot \(slot) missing")
        }
        var cleared = DeviceRecord.free
        cleared.sequence = record.sequence
        cleared.flags = record.flags & 1  // keep the platform: the id index checks it
        records[Int(slot)] = cleared
        deviceCount -= 1
        if record.platform == .ios { iosCount -= 1 }
    }

    /// Gives the live slot `token` (free in the token index; the slot has none). O(1) expected.
    mutating func setToken(_ token: PushToken, at slot: UInt32) {
        token.withBytes { bytes in
            let hash = tokenHash(platform: token.platform, bytes: bytes)
            precondition(
                tokenSlots.find(hash: hash) { candidate in
                    records[Int(candidate)].platform == token.platform
                        && withTokenBytes(of: records[Int(candidate)]) { $0.hasSameBytes(as: bytes) }
                } == nil, "token already held by another device")
            setFreeToken(bytes: bytes, at: slot, hash: hash)
        }
    }

    /// `setToken` for a token the caller knows is free, whose hash it has: no probe.
    private mutating func setFreeToken(_ token: PushToken, at slot: UInt32, hash: UInt32) {
        token.withBytes { setFreeToken(bytes: $0, at: slot, hash: hash) }
    }

    /// `setFreeToken` from borrowed token bytes (the replay fast path).
    mutating func setFreeToken(bytes: UnsafeRawBufferPointer, at slot: UInt32, hash: UInt32) {
        precondition(records[Int(slot)].tokenLength == 0, "slot \(slot) already has a token")
        records[Int(slot)].tokenLength = UInt16(bytes.count)
        if bytes.count <= 32 {
            var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
            withUnsafeMutableBytes(of: &words) { $0.copyMemory(from: bytes) }
            (records[Int(slot)].token0, records[Int(slot)].token1) = (words.0, words.1)
            (records[Int(slot)].token2, records[Int(slot)].token3) = (words.2, words.3)
        } else {
            records[Int(slot)].token0 = UInt64(blobs.store(bytes).cell)
        }
        tokenSlots.insert(slot: slot, hash: hash)
    }

    /// Drops a slot's token from the token index and the record. O(1) expected.
    mutating func removeToken(at slot: UInt32) {
        let record = records[Int(slot)]
        let hash = withTokenBytes(of: record) { tokenHash(platform: record.platform, bytes: $0) }
        let removed = tokenSlots.remove(slot: slot, hash: hash)
        precondition(removed, "token of slot \(slot) missing from the token index")
        if record.tokenLength > 32 { blobs.release(BlobRef(cell: UInt32(record.token0), length: record.tokenLength)) }
        records[Int(slot)].tokenLength = 0
        (records[Int(slot)].token0, records[Int(slot)].token1) = (0, 0)
        (records[Int(slot)].token2, records[Int(slot)].token3) = (0, 0)
    }

    /// Drops a slot's installation id from its index and the record. O(1) expected.
    mutating func removeInstallation(at slot: UInt32) {
        let ref = records[Int(slot)].installation
        let hash = blobs.withBytes(ref) { installationHash($0) }
        let removed = installationSlots.remove(slot: slot, hash: hash)
        precondition(removed, "installation of slot \(slot) missing from its index")
        blobs.release(ref)
        records[Int(slot)].installation = .none
    }

    /// Stores a secret digest and returns its slot in `digests`.
    mutating func storeDigest(_ digest: SecretDigest) -> UInt32 {
        digests.store(digest, reusing: &freeDigestSlots)
    }

    /// Puts a live slot without a person at the head of a person's device list.
    mutating func link(slot: UInt32, toPerson personSlot: UInt32) {
        records[Int(slot)].person = personSlot
        records[Int(slot)].nextOfPerson = people[Int(personSlot)].firstDevice
        people[Int(personSlot)].firstDevice = slot
        people[Int(personSlot)].deviceCount += 1
    }

    /// Takes a slot out of its person's device list (the record keeps its `person`). O(devices of the person).
    mutating func unlink(slot: UInt32, fromPerson personSlot: UInt32) {
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
        let (existing, hash) = personLookup(person.externalID)
        precondition(existing == nil, "person already known")
        return insertPerson(person, hash: hash)
    }

    /// Adds a person the caller has just looked up and not found; `hash` is
    /// what `personLookup` returned.
    @discardableResult
    mutating func insertPerson(_ person: Person, hash: UInt32) -> UInt32 {
        withUTF8Bytes(of: person.externalID.rawValue) {
            insertPerson(name: $0, createdAt: person.createdAt.millisecondsSinceEpoch, hash: hash)
        }
    }

    /// Adds a person from the UTF-8 bytes of a valid external id the caller
    /// has just looked up and not found (the replay fast path).
    @discardableResult
    mutating func insertPerson(name bytes: UnsafeRawBufferPointer, createdAt: Int64, hash: UInt32) -> UInt32 {
        let name = blobs.store(bytes)
        let record = PersonRecord(name: name, createdAt: createdAt, firstDevice: DeviceRecord.noSlot, deviceCount: 0)
        let slot = people.store(record, reusing: &freePersonSlots)
        personSlots.insert(slot: slot, hash: hash)
        personCount += 1
        lastInsertedPerson = slot
        return slot
    }

    /// Removes a person who has no devices left.
    mutating func removePerson(at slot: UInt32) {
        let record = people[Int(slot)]
        precondition(!record.isFree, "removing free person slot \(slot)")
        precondition(record.deviceCount == 0, "removing a person who still has \(record.deviceCount) devices")
        let hash = blobs.withBytes(record.name) { personHash($0) }
        let removed = personSlots.remove(slot: slot, hash: hash)
        precondition(removed, "person slot \(slot) missing from the person index")
        blobs.release(record.name)
        people[Int(slot)] = PersonRecord(name: .none, createdAt: 0, firstDevice: DeviceRecord.noSlot, deviceCount: 0)
        freePersonSlots.append(slot)
        personCount -= 1
    }
}

/// Calls `body` with the UTF-8 bytes of `text`, without copying a native string.
@inline(__always)
func withUTF8Bytes<Result>(of text: String, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
    var text = text
    return text.withUTF8 { body(UnsafeRawBufferPointer($0)) }
}

/// Returns the first index of a sorted array whose element is not less than `value`. O(log count).
func lowerBound<Sorted: RandomAccessCollection<UInt64>>(in sorted: Sorted, _ value: UInt64) -> Int
where Sorted.Index == Int {
    var low = 0
    var high = sorted.count
    while low < high {
        let middle = (low + high) / 2
        if sorted[middle] < value { low = middle + 1 } else { high = middle }
    }
    return low
}
