/// An open-addressing hash set of slot numbers whose keys live elsewhere.
///
/// Each bucket is 8 bytes: the low 32 bits of the key's hash and `slot + 1`
/// (0 marks an empty bucket). The table never stores keys: `find` asks the
/// caller whether a candidate slot holds the key, so a 32-byte token or a
/// 200-character installation id costs 8 bytes here instead of a `Dictionary`
/// entry. Linear probing, at most 3/4 full, deletion by backward shift (no
/// tombstones). Hashes come from the per-process seeded `Hasher`, so chosen
/// keys cannot force collisions across restarts.
struct SlotTable: Sendable {
    private var buckets: [UInt64]
    private var mask: Int
    private(set) var count: Int

    init(minimumCapacity: Int = 0) {
        var capacity = 16
        while capacity * 3 / 4 < minimumCapacity { capacity *= 2 }
        buckets = Array(repeating: 0, count: capacity)
        mask = capacity - 1
        count = 0
    }

    /// Bytes of memory the buckets take.
    var bucketBytes: Int { buckets.count * 8 }

    /// Returns the slot whose key has `hash` and satisfies `matches`, or nil. O(1) expected.
    func find(hash: UInt32, where matches: (UInt32) -> Bool) -> UInt32? {
        var index = Int(hash) & mask
        while true {
            let bucket = buckets[index]
            if bucket == 0 { return nil }
            if UInt32(truncatingIfNeeded: bucket >> 32) == hash {
                let slot = UInt32(truncatingIfNeeded: bucket) &- 1
                if matches(slot) { return slot }
            }
            index = (index + 1) & mask
        }
    }

    /// Adds `slot` under `hash`; the caller guarantees that its key is not present.
    mutating func insert(slot: UInt32, hash: UInt32) {
        precondition(slot < UInt32.max - 1, "slot out of range: \(slot)")
        if (count + 1) * 4 > buckets.count * 3 { grow() }
        insertWithoutGrowing(UInt64(hash) << 32 | UInt64(slot + 1))
        count += 1
    }

    /// Removes `slot`, stored under `hash`; returns whether it was present.
    @discardableResult
    mutating func remove(slot: UInt32, hash: UInt32) -> Bool {
        let wanted = UInt64(hash) << 32 | UInt64(slot + 1)
        var index = Int(hash) & mask
        while true {
            let bucket = buckets[index]
            if bucket == 0 { return false }
            if bucket == wanted { break }
            index = (index + 1) & mask
        }
        // Backward shift: pull later members of the cluster into the hole when
        // their home bucket does not lie (cyclically) between the hole and them.
        var hole = index
        var next = (hole + 1) & mask
        while buckets[next] != 0 {
            let home = Int(truncatingIfNeeded: buckets[next] >> 32) & mask
            let distanceFromHome = (next - home) & mask
            let distanceFromHole = (next - hole) & mask
            if distanceFromHome >= distanceFromHole {
                buckets[hole] = buckets[next]
                hole = next
            }
            next = (next + 1) & mask
        }
        buckets[hole] = 0
        count -= 1
        return true
    }

    /// Grows so that `minimumCount` entries fit without rehashing.
    mutating func reserveCapacity(_ minimumCount: Int) {
        while minimumCount * 4 > buckets.count * 3 { grow() }
    }

    /// Calls `body` with every stored (slot, hash), in bucket order.
    func forEach(_ body: (_ slot: UInt32, _ hash: UInt32) -> Void) {
        for bucket in buckets where bucket != 0 {
            body(UInt32(truncatingIfNeeded: bucket) &- 1, UInt32(truncatingIfNeeded: bucket >> 32))
        }
    }

    private mutating func grow() {
        let old = buckets
        buckets = Array(repeating: 0, count: old.count * 2)
        mask = buckets.count - 1
        for bucket in old where bucket != 0 { insertWithoutGrowing(bucket) }
    }

    private mutating func insertWithoutGrowing(_ bucket: UInt64) {
        var index = Int(truncatingIfNeeded: bucket >> 32) & mask
        while buckets[index] != 0 { index = (index + 1) & mask }
        buckets[index] = bucket
    }
}

/// Returns a 32-bit hash of `bytes` prefixed by a domain byte (per-process seed).
func slotHash(domain: UInt8, bytes: UnsafeRawBufferPointer) -> UInt32 {
    var hasher = Hasher()
    hasher.combine(domain)
    hasher.combine(bytes: bytes)
    return UInt32(truncatingIfNeeded: hasher.finalize())
}

/// Returns a 32-bit hash of `bytes` prefixed by a domain byte (per-process seed).
func slotHash(domain: UInt8, bytes: [UInt8]) -> UInt32 {
    bytes.withUnsafeBytes { slotHash(domain: domain, bytes: $0) }
}
