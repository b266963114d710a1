/// Index images (decision 0056, `StoreImage.swift`): a frozen store writes
/// its arrays as they are; a loaded one derives what they imply.
extension DeviceStore {
    /// The most bytes a token stored in a record may have (an APNs token of
    /// `apnsTokenHexCharactersMax` hex digits; FCM tokens are counted in characters of one byte).
    static let tokenBytesMax = max(Limits.apnsTokenHexCharactersMax / 2, Limits.fcmTokenCharactersMax)

    /// An encoder of this store's image; call it on a frozen view (`freezeForSnapshot`).
    func imageEncoder() -> StoreImageEncoder { StoreImageEncoder(store: self) }

    /// Completes a store whose arrays an image just filled: checks that every
    /// reference in it points at something that exists and is used once
    /// (tag-set blobs excepted, which devices share), that the id index, the
    /// person lists and the counts agree, and that no token, installation,
    /// person or tag set appears twice; then derives the free lists, counts,
    /// interned tag sets, reference counts and the four hash tables, each
    /// built once at its final size (`SlotTable(building:)`). O(devices +
    /// people + blob cells); throws, naming the first inconsistency, instead
    /// of trapping later.
    mutating func completeLoadedImage(strings loadedStrings: [String?]) throws(StoreImageError) {
        let noSlot = DeviceRecord.noSlot
        try checkLoadedOrder()
        var cells = LoadedCellUses(blobs)
        var stringUses = [UInt32](repeating: 0, count: loadedStrings.count)
        var digestUsed = [Bool](repeating: false, count: digests.count)
        var personDevices = [UInt32](repeating: 0, count: people.count)
        var newTagSets = ChunkedArray<TagSetEntry>(chunkBytes: 64 << 10)
        var newFreeDeviceSlots: [UInt32] = []
        var (live, ios, invalidated, withClientSequence) = (0, 0, 0, 0)
        var tokenEntries: [UInt64] = []
        var installationEntries: [UInt64] = []
        let tokenKeys = SlotHashKeys()
        let installationKeys = SlotHashKeys()
        tokenEntries.reserveCapacity(records.count)

        // Devices: every reference checked and claimed once; tag sets and string uses counted.
        for index in 0..<records.count {
            let record = records[index]
            let slot = UInt32(index)
            if record.isFree {
                newFreeDeviceSlots.append(slot)
                continue
            }
            live += 1
            guard record.version != 0 else { throw Self.imageError(slot, "version 0") }
            guard Self.isStoredTime(record.createdAt), Self.isStoredTime(record.lastSeenAt),
                record.boundAt == DeviceRecord.noTimestamp || Self.isStoredTime(record.boundAt),
                record.invalidatedAt == DeviceRecord.noTimestamp || Self.isStoredTime(record.invalidatedAt)
            else { throw Self.imageError(slot, "a time outside the timestamp range") }
            guard record.flags < DeviceRecord.clientSequenceFlag << 1, (record.flags >> 2) & 3 != 3 else {
                throw Self.imageError(slot, "flags \(record.flags)")
            }
            if record.platform == .ios { ios += 1 }
            guard Int(record.tokenLength) <= Self.tokenBytesMax else {
                throw Self.imageError(slot, "token of \(record.tokenLength) bytes")
            }
            if record.tokenLength > 32 {
                guard record.token0 <= UInt64(UInt32.max),
                    cells.claim(BlobRef(cell: UInt32(record.token0), length: record.tokenLength), in: blobs)
                else { throw Self.imageError(slot, "token blob \(record.token0) missing or shared") }
            }
            if record.tokenLength > 0 {
                let hash = withTokenBytes(of: record) {
                    Self.tokenHash(keys: tokenKeys, platform: record.platform, bytes: $0)
                }
                tokenEntries.append(UInt64(hash) << 32 | UInt64(slot))
            }
            if !record.installation.isNone {
                guard cells.claim(record.installation, in: blobs) else {
                    throw Self.imageError(slot, "installation blob \(record.installation) missing or shared")
                }
                let hash = blobs.withBytes(record.installation) {
                    installationKeys.hash(domain: Self.installationDomain, bytes: $0)
                }
                installationEntries.append(UInt64(hash) << 32 | UInt64(slot))
            }
            if !record.tags.isNone {
                guard let set = cells.tagSet(record.tags, in: blobs, entries: &newTagSets) else {
                    throw Self.imageError(slot, "tags blob \(record.tags) missing or not a tag set")
                }
                newTagSets[Int(set)].uses += 1
            }
            for id in [record.bundleID, record.appVersion, record.timezone, record.locale] where id != 0 {
                guard Int(id) < loadedStrings.count, loadedStrings[Int(id)] != nil else {
                    throw Self.imageError(slot, "string \(id) is not live")
                }
                stringUses[Int(id)] += 1
            }
            if record.isInvalidated {
                invalidated += 1
                let id = record.invalidationReason
                guard Int(id) < loadedStrings.count, loadedStrings[Int(id)] != nil else {
                    throw Self.imageError(slot, "invalidation reason \(id) is not live")
                }
                stringUses[Int(id)] += 1
            } else if record.invalidationReason != 0 {
                throw Self.imageError(slot, "an invalidation reason on a valid device")
            }
            if record.digest != noSlot {
                guard Int(record.digest) < digests.count, !digestUsed[Int(record.digest)] else {
                    throw Self.imageError(slot, "digest \(record.digest) missing or shared")
                }
                digestUsed[Int(record.digest)] = true
            }
            if record.person != noSlot {
                guard Int(record.person) < people.count, !people[Int(record.person)].isFree else {
                    throw Self.imageError(slot, "person \(record.person) does not exist")
                }
                personDevices[Int(record.person)] += 1
            } else if record.nextOfPerson != noSlot {
                throw Self.imageError(slot, "in a person's list without a person")
            }
            if record.hasClientSequence {
                withClientSequence += 1
                guard clientSequences[slot] != nil else { throw Self.imageError(slot, "client sequence missing") }
            }
        }
        guard live == deviceCountInOrder else {
            throw StoreImageError("\(live) live devices, \(deviceCountInOrder) in the id index")
        }
        guard withClientSequence == clientSequences.count else {
            throw StoreImageError("\(clientSequences.count) client sequences for \(withClientSequence) devices")
        }

        // People: names claimed once, each list exactly the devices that name the person.
        var newFreePersonSlots: [UInt32] = []
        var personEntries: [UInt64] = []
        personEntries.reserveCapacity(people.count)
        let personKeys = SlotHashKeys()
        for index in 0..<people.count {
            let person = people[index]
            if person.isFree {
                newFreePersonSlots.append(UInt32(index))
                continue
            }
            guard cells.claim(person.name, in: blobs) else {
                throw StoreImageError("person slot \(index): name blob \(person.name) missing or shared")
            }
            let hash = blobs.withBytes(person.name) { personKeys.hash(domain: Self.personDomain, bytes: $0) }
            personEntries.append(UInt64(hash) << 32 | UInt64(index))
            guard person.deviceCount == personDevices[index] else {
                throw StoreImageError(
                    "person slot \(index): \(person.deviceCount) devices listed, \(personDevices[index]) bound")
            }
            var slot = person.firstDevice
            var steps: UInt32 = 0
            while slot != noSlot {
                guard steps < person.deviceCount, Int(slot) < records.count, records[Int(slot)].person == UInt32(index)
                else { throw StoreImageError("person slot \(index): device list broken at slot \(slot)") }
                steps += 1
                slot = records[Int(slot)].nextOfPerson
            }
            guard steps == person.deviceCount else {
                throw StoreImageError("person slot \(index): device list too short")
            }
        }

        // What the references imply.
        guard let interner = StringInterner(loadedStrings: loadedStrings, referenceCounts: stringUses) else {
            throw StoreImageError(
                "interned strings and their uses disagree (a live string unused, or one string twice)")
        }
        strings = interner
        blobs.adoptLoadedCells { cells.isUsed(classIndex: $0, cell: $1) }
        freeDeviceSlots = newFreeDeviceSlots.reversed()
        freePersonSlots = newFreePersonSlots.reversed()
        freeDigestSlots = (0..<digests.count).filter { !digestUsed[$0] }.reversed().map(UInt32.init)
        tagSets = newTagSets
        freeTagSetSlots = []
        deviceCount = live
        iosCount = ios
        invalidatedCount = invalidated
        personCount = personEntries.count

        // The hash tables, each built once at its final size; a key found twice is damage.
        do {
            tokenSlots = try SlotTable(building: tokenEntries, keys: tokenKeys) { held, other in
                let (a, b) = (records[Int(held)], records[Int(other)])
                return a.platform == b.platform
                    && withTokenBytes(of: a) { x in withTokenBytes(of: b) { x.hasSameBytes(as: $0) } }
            }
            installationSlots = try SlotTable(building: installationEntries, keys: installationKeys) { held, other in
                blobs.withBytes(records[Int(other)].installation) { blobs.equals(records[Int(held)].installation, $0) }
            }
        } catch {
            throw Self.imageError(error.slot, "its token or installation is another device's too")
        }
        do {
            personSlots = try SlotTable(building: personEntries, keys: personKeys) { held, other in
                blobs.withBytes(people[Int(other)].name) { blobs.equals(people[Int(held)].name, $0) }
            }
        } catch {
            throw StoreImageError("person slot \(error.slot): external id held twice")
        }
        let tagSetKeys = SlotHashKeys()
        let tagSetEntries = (0..<tagSets.count).map { index in
            UInt64(blobs.withBytes(tagSets[index].ref) { tagSetKeys.hash(domain: Self.tagSetDomain, bytes: $0) }) << 32
                | UInt64(index)
        }
        do {
            tagSetSlots = try SlotTable(building: tagSetEntries, keys: tagSetKeys) { held, other in
                blobs.withBytes(tagSets[Int(other)].ref) { blobs.equals(tagSets[Int(held)].ref, $0) }
            }
        } catch {
            throw StoreImageError("tag set \(tagSets[Int(error.slot)].ref): the same tags in two blobs")
        }
    }

    /// Live entries of the id index (valid after `checkLoadedOrder`).
    private var deviceCountInOrder: Int { order.count - orderDeadCount }

    /// Checks a loaded id index (ascending, each live entry naming a record
    /// with its sequence, below the sequence floor) and counts its dead entries.
    private mutating func checkLoadedOrder() throws(StoreImageError) {
        var previous: UInt64 = 0
        var dead = 0
        for entry in 0..<order.count {
            let sequence = order[entry]
            guard sequence > previous else { throw StoreImageError("id index not ascending at entry \(entry)") }
            previous = sequence
            let slot = orderSlots[entry]
            if slot == DeviceRecord.noSlot {
                dead += 1
            } else if Int(slot) >= records.count || records[Int(slot)].sequence != sequence {
                throw StoreImageError(
                    "id index entry \(entry) names slot \(slot), which does not hold device \(sequence)")
            }
        }
        guard previous < nextDeviceSequence else {
            throw StoreImageError("device \(previous) at or above the sequence floor \(nextDeviceSequence)")
        }
        orderDeadCount = dead
    }

    /// Whether `milliseconds` is a time a `Timestamp` can hold (what reading the record back requires).
    private static func isStoredTime(_ milliseconds: Int64) -> Bool {
        milliseconds >= Timestamp.millisecondsMin && milliseconds <= Timestamp.millisecondsMax
    }

    private static func imageError(_ slot: UInt32, _ reason: String) -> StoreImageError {
        StoreImageError("device slot \(slot): \(reason)")
    }
}

/// Which blob cells a loading image's records and people refer to: each at
/// most once, except a tag set's, which every device with those tags shares.
private struct LoadedCellUses {
    /// Per class, per cell: 0 unused, 1 used once, 2 a tag set's.
    private var uses: [[UInt8]]
    /// Per class (allocated when a tag set is first seen in it), per cell: its tag set's slot.
    private var tagSetOfCell: [[UInt32]]

    init(_ blobs: BlobStore) {
        uses = (0..<blobs.classCount).map { [UInt8](repeating: 0, count: blobs.cellCount(ofClass: $0)) }
        tagSetOfCell = [[UInt32]](repeating: [], count: blobs.classCount)
    }

    private static func classOf(_ ref: BlobRef) -> Int { BlobStore.classIndex(ofLength: Int(ref.length)) }

    /// Claims `ref`'s cell for one user; false if it does not exist or is taken.
    mutating func claim(_ ref: BlobRef, in blobs: BlobStore) -> Bool {
        guard blobs.holds(ref), uses[Self.classOf(ref)][Int(ref.cell)] == 0 else { return false }
        uses[Self.classOf(ref)][Int(ref.cell)] = 1
        return true
    }

    /// The slot in `entries` of the tag set whose blob is `ref` (a new entry
    /// with no uses the first time); nil if the cell does not exist, has
    /// another user, or another length was seen for it.
    mutating func tagSet(_ ref: BlobRef, in blobs: BlobStore, entries: inout ChunkedArray<TagSetEntry>) -> UInt32? {
        guard blobs.holds(ref) else { return nil }
        let classIndex = Self.classOf(ref)
        let cell = Int(ref.cell)
        if tagSetOfCell[classIndex].isEmpty {
            tagSetOfCell[classIndex] = [UInt32](repeating: DeviceRecord.noSlot, count: uses[classIndex].count)
        }
        let known = tagSetOfCell[classIndex][cell]
        if known != DeviceRecord.noSlot { return entries[Int(known)].ref == ref ? known : nil }
        guard uses[classIndex][cell] == 0 else { return nil }
        uses[classIndex][cell] = 2
        entries.append(TagSetEntry(ref: ref, uses: 0))
        tagSetOfCell[classIndex][cell] = UInt32(entries.count - 1)
        return UInt32(entries.count - 1)
    }

    func isUsed(classIndex: Int, cell: Int) -> Bool { uses[classIndex][cell] != 0 }
}
