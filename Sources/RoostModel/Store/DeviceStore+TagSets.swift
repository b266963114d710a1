/// One interned tag set: the blob of its canonical bytes and how many
/// devices hold it.
struct TagSetEntry: Sendable {
    var ref: BlobRef
    var uses: UInt32
}

/// Interned tag sets (issue 12 "interned tag sets"): devices with the same
/// tags share one blob of their canonical bytes, so an app whose devices
/// carry a few distinct sets pays for each set once instead of a blob per
/// device (32 B of the benchmark's 120 + 32 + … per device). The index is
/// a `SlotTable` from the bytes' hash to the set's slot, which compares the
/// blob itself: no key is stored twice. A set only one device holds costs
/// its entry (16 B) and table bucket (~11–21 B) beyond the blob it had.
extension DeviceStore {
    /// The shared blob of the canonical tag bytes `bytes`, counted once more.
    /// O(1) expected.
    mutating func internTags(_ bytes: UnsafeRawBufferPointer) -> BlobRef {
        precondition(bytes.count > 1, "an empty tag set is not interned")
        let hash = tagSetSlots.keys.hash(domain: Self.tagSetDomain, bytes: bytes)
        if let slot = tagSetSlots.find(hash: hash, where: { blobs.equals(tagSets[Int($0)].ref, bytes) }) {
            tagSets[Int(slot)].uses += 1
            return tagSets[Int(slot)].ref
        }
        let entry = TagSetEntry(ref: blobs.store(bytes), uses: 1)
        let slot = tagSets.store(entry, reusing: &freeTagSetSlots)
        tagSetSlots.insert(slot: slot, hash: hash)
        return entry.ref
    }

    mutating func internTags(_ bytes: [UInt8]) -> BlobRef {
        bytes.withUnsafeBytes { internTags($0) }
    }

    /// Gives back one use of the interned set `ref`; the last use frees its
    /// blob. O(set bytes) expected.
    mutating func releaseTags(_ ref: BlobRef) {
        let bytes = blobs.bytes(ref)
        let hash = bytes.withUnsafeBytes { tagSetSlots.keys.hash(domain: Self.tagSetDomain, bytes: $0) }
        guard let slot = tagSetSlots.find(hash: hash, where: { tagSets[Int($0)].ref == ref }) else {
            preconditionFailure("tags \(ref) released but not interned")
        }
        precondition(tagSets[Int(slot)].uses > 0, "tag set \(slot) released with no use")
        tagSets[Int(slot)].uses -= 1
        guard tagSets[Int(slot)].uses == 0 else { return }
        let removed = tagSetSlots.remove(slot: slot, hash: hash)
        precondition(removed, "tag set \(slot) missing from its index")
        blobs.release(ref)
        tagSets[Int(slot)] = TagSetEntry(ref: .none, uses: 0)
        freeTagSetSlots.append(slot)
    }

    /// The interning's broken invariants: a set's count differs from the
    /// devices holding its blob, or a device holds a blob no set names. O(devices).
    func tagSetViolations() -> [String] {
        var holders: [BlobRef: UInt32] = [:]
        for slot in 0..<records.count where !records[slot].isFree && !records[slot].tags.isNone {
            holders[records[slot].tags, default: 0] += 1
        }
        var problems: [String] = []
        var named = 0
        for slot in 0..<tagSets.count where tagSets[slot].uses > 0 {
            named += 1
            let held = holders[tagSets[slot].ref] ?? 0
            if held != tagSets[slot].uses {
                problems.append("tag set \(slot): \(tagSets[slot].uses) uses, \(held) devices hold it")
            }
        }
        if named != holders.count { problems.append("\(holders.count) tag blobs held, \(named) sets interned") }
        if named != tagSetSlots.count { problems.append("\(named) sets in use, \(tagSetSlots.count) indexed") }
        return problems
    }
}
