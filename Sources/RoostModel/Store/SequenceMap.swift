/// A map from device sequence (≥ 1) to a `UInt64` value, open addressing
/// with linear probing and backward-shift deletion: the change feed's
/// "position of each device's live entry". Sequences are handed out by the
/// server, never chosen by a client, so a multiplicative (Fibonacci) hash
/// needs no key; one multiply per lookup instead of SipHash's setup and
/// rounds, and 16 bytes a slot at a load of at most 7/8 (~18–37 B an entry:
/// the keys are nearly sequential, which a Fibonacci hash spreads evenly).
struct SequenceMap: Sendable {
    /// `keys[i] == 0`: slot `i` is empty (sequences are ≥ 1).
    private var keys: [UInt64] = []
    private var values: [UInt64] = []
    private(set) var count = 0
    /// log2 of the slot count (0 while empty).
    private var bits = 0

    /// The smallest table, in slots.
    static let slotsMin = 16

    var capacity: Int { keys.count }

    subscript(key: UInt64) -> UInt64? {
        guard count > 0 else { return nil }
        var slot = home(key)
        let mask = keys.count - 1
        while true {
            let found = keys[slot]
            if found == key { return values[slot] }
            if found == 0 { return nil }
            slot = (slot + 1) & mask
        }
    }

    /// Sets `value` for `key`; returns the value it replaced, if any.
    @discardableResult
    mutating func updateValue(_ value: UInt64, forKey key: UInt64) -> UInt64? {
        precondition(key != 0, "sequence 0 in a SequenceMap")
        if (count + 1) * 8 > keys.count * 7 { grow() }
        var slot = home(key)
        let mask = keys.count - 1
        while true {
            let found = keys[slot]
            if found == key {
                let old = values[slot]
                values[slot] = value
                return old
            }
            if found == 0 {
                keys[slot] = key
                values[slot] = value
                count += 1
                return nil
            }
            slot = (slot + 1) & mask
        }
    }

    /// Removes `key`; returns its value, if it was there.
    @discardableResult
    mutating func removeValue(forKey key: UInt64) -> UInt64? {
        guard count > 0 else { return nil }
        let mask = keys.count - 1
        var slot = home(key)
        while keys[slot] != key {
            if keys[slot] == 0 { return nil }
            slot = (slot + 1) & mask
        }
        let old = values[slot]
        // Backward shift: move later members of the run into the hole when
        // their home slot does not lie after the hole (no tombstones).
        var hole = slot
        var next = (hole + 1) & mask
        while keys[next] != 0 {
            let wanted = home(keys[next])
            let distanceToNext = (next &- wanted) & mask
            let distanceToHole = (hole &- wanted) & mask
            if distanceToHole <= distanceToNext {
                keys[hole] = keys[next]
                values[hole] = values[next]
                hole = next
            }
            next = (next + 1) & mask
        }
        keys[hole] = 0
        values[hole] = 0
        count -= 1
        return old
    }

    private func home(_ key: UInt64) -> Int {
        Int(truncatingIfNeeded: (key &* 0x9E37_79B9_7F4A_7C15) >> UInt64(64 - bits))
    }

    private mutating func grow() {
        let oldKeys = keys
        let oldValues = values
        let slots = max(Self.slotsMin, oldKeys.count * 2)
        bits = slots.trailingZeroBitCount
        keys = Array(repeating: 0, count: slots)
        values = Array(repeating: 0, count: slots)
        count = 0
        for index in oldKeys.indices where oldKeys[index] != 0 {
            updateValue(oldValues[index], forKey: oldKeys[index])
        }
    }
}
