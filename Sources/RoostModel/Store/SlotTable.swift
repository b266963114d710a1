/// An open-addressing hash set of slot numbers whose keys live elsewhere.
///
/// Each bucket is 8 bytes: the low 32 bits of the key's hash and `slot + 1`
/// (0 marks an empty bucket). The table never stores keys: `find` asks the
/// caller whether a candidate slot holds the key, so a 32-byte token or a
/// 200-character installation id costs 8 bytes here instead of a `Dictionary`
/// entry. Linear probing, at most 3/4 full, deletion by backward shift (no
/// tombstones). Hashes come from `SlotHashKeys`, random per table, so chosen
/// keys cannot force collisions.
struct SlotTable: Sendable {
    private var buckets: [UInt64]
    private var mask: Int
    private(set) var count: Int
    /// The hash function's keys (this table's own, random).
    let keys: SlotHashKeys

    init(minimumCapacity: Int = 0, keys: SlotHashKeys = SlotHashKeys()) {
        self.keys = keys
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

    /// A table of `entries`, each `hash << 32 | slot` (what `insert` is
    /// given), built at its final size in one sweep: the entries are first
    /// grouped by the high bits of their home bucket, so that each group's
    /// inserts fall in a window of the table that stays in cache, instead of
    /// one cache miss per key (start-up from an index image, decision 0056).
    /// `sameKey(a, b)` is asked only for two slots whose hashes are equal;
    /// the first slot found to repeat a key is returned in `duplicate` (and
    /// left out). O(entries).
    init(
        building entries: [UInt64], keys: SlotHashKeys = SlotHashKeys(),
        sameKey: (UInt32, UInt32) -> Bool
    ) throws(DuplicateSlotKey) {
        self.init(minimumCapacity: entries.count, keys: keys)
        let bucketBits = buckets.count.trailingZeroBitCount
        let groupBits = min(bucketBits, 12)
        let shift = bucketBits - groupBits
        var starts = [Int](repeating: 0, count: (1 << groupBits) + 1)
        for entry in entries { starts[(Int(truncatingIfNeeded: entry >> 32) & mask) >> shift + 1] += 1 }
        for group in 0..<(1 << groupBits) { starts[group + 1] += starts[group] }
        var grouped = [UInt64](repeating: 0, count: entries.count)
        var next = starts
        for entry in entries {
            let group = (Int(truncatingIfNeeded: entry >> 32) & mask) >> shift
            grouped[next[group]] = entry
            next[group] += 1
        }
        let mask = self.mask
        var duplicate: UInt32?
        buckets.withUnsafeMutableBufferPointer { table in
            for entry in grouped {
                let hash = UInt32(truncatingIfNeeded: entry >> 32)
                let slot = UInt32(truncatingIfNeeded: entry)
                var index = Int(hash) & mask
                var repeated = false
                while table[index] != 0 {
                    if UInt32(truncatingIfNeeded: table[index] >> 32) == hash
                        && sameKey(UInt32(truncatingIfNeeded: table[index]) &- 1, slot)
                    {
                        repeated = true
                        break
                    }
                    index = (index + 1) & mask
                }
                if repeated {
                    if duplicate == nil { duplicate = slot }
                    continue
                }
                table[index] = UInt64(hash) << 32 | UInt64(slot + 1)
            }
        }
        if let duplicate { throw DuplicateSlotKey(slot: duplicate) }
        count = entries.count
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

/// A key found twice while a `SlotTable` was built in bulk: the slot that repeated it.
struct DuplicateSlotKey: Error {
    var slot: UInt32
}

/// The random keys of one `SlotTable`'s hash function, drawn when the table is made.
///
/// Keys are per table and secret, so a client that chooses tokens or ids cannot
/// compute colliding ones (HashDoS) any more than with the stdlib's seeded `Hasher`.
/// The shard's per-token limit keys its table with the 64-bit form (`hash64`).
package struct SlotHashKeys: Sendable {
    let seed: UInt64
    let key0: UInt64
    let key1: UInt64

    /// Fresh keys from the system's random number generator.
    package init() {
        var random = SystemRandomNumberGenerator()
        // Odd keys: an all-zero key would let a chosen word zero one multiplication.
        seed = random.next()
        key0 = random.next() | 1
        key1 = random.next() | 1
    }

    /// Returns a 32-bit hash of `bytes` after a domain byte: a wyhash-style
    /// multiply-fold over 16-byte blocks with these keys. About 4 multiplications
    /// for a 32-byte token, against `Hasher`'s SipHash setup and finalization.
    @inline(__always)
    func hash(domain: UInt8, bytes: UnsafeRawBufferPointer) -> UInt32 {
        UInt32(truncatingIfNeeded: hash64(domain: domain, context: 0, bytes: bytes))
    }

    /// The 64-bit hash `hash(domain:bytes:)` truncates, with a 32-bit
    /// `context` (an app's number, say) hashed before the bytes: the keys are
    /// secret, so a client that chooses `bytes` cannot aim two keys at one value.
    @inline(__always)
    package func hash64(domain: UInt8, context: UInt32, bytes: UnsafeRawBufferPointer) -> UInt64 {
        let count = bytes.count
        // Bits 0–7 the domain, 8–31 the length (ours are far below 2^24 bytes), 32–63 the context.
        var state = Self.fold(
            seed ^ UInt64(context) << 32 ^ UInt64(truncatingIfNeeded: count) << 8 ^ UInt64(domain), key0)
        var offset = 0
        while count - offset > 16 {
            let low = bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            let high = bytes.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self)
            state = Self.fold(low ^ key1, high ^ state)
            offset += 16
        }
        // The last 1 to 16 bytes (0 only for an empty key): two possibly overlapping words.
        let rest = count - offset
        var low: UInt64 = 0
        var high: UInt64 = 0
        if rest >= 8 {
            low = bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            high = bytes.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self)
        } else if rest > 0 {
            for index in 0..<rest { low |= UInt64(bytes[offset + index]) << UInt64(index * 8) }
        }
        state = Self.fold(low ^ key1, high ^ state)
        return Self.fold(state ^ key0, seed ^ UInt64(truncatingIfNeeded: count))
    }

    /// The 128-bit product of `a` and `b`, its halves xor-ed.
    @inline(__always)
    static func fold(_ a: UInt64, _ b: UInt64) -> UInt64 {
        let product = a.multipliedFullWidth(by: b)
        return product.high ^ product.low
    }
}
