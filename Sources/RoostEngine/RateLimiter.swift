/// A rate as a burst and a steady interval: `burst` requests at once, then
/// one per `interval` (the generic cell rate algorithm's terms: emission
/// interval `interval`, tolerance `(burst - 1) × interval`).
package struct RateLimit: Sendable, Equatable, CustomStringConvertible {
    /// Requests allowed back to back by a key that was idle long enough.
    package let burst: Int
    /// The steady rate once the burst is spent: one request per interval.
    package let intervalNanoseconds: UInt64

    package init(burst: Int, intervalNanoseconds: UInt64) {
        precondition(burst >= 1, "a rate limit's burst must be at least 1, got \(burst)")
        precondition(intervalNanoseconds >= 1, "a rate limit's interval must be positive")
        precondition(
            UInt64(burst) <= UInt64.max / 4 / intervalNanoseconds,
            "burst \(burst) × interval \(intervalNanoseconds) ns overflows")
        self.burst = burst
        self.intervalNanoseconds = intervalNanoseconds
    }

    /// `burst` at once, then `perSecond` each second.
    package init(burst: Int, perSecond: Int) {
        precondition(perSecond >= 1 && perSecond <= 1_000_000_000, "a rate of \(perSecond) per second")
        self.init(burst: burst, intervalNanoseconds: 1_000_000_000 / UInt64(perSecond))
    }

    /// How far ahead of `now` a key's theoretical arrival time may run and
    /// still admit a request.
    var toleranceNanoseconds: UInt64 { UInt64(burst - 1) * intervalNanoseconds }

    package var description: String {
        "burst \(burst), then one per \(Double(intervalNanoseconds) / 1e9) s"
    }
}

/// What a rate limiter answers for one request.
package enum RateVerdict: Sendable, Equatable {
    case allowed
    /// Over the rate: a retry succeeds after this many whole seconds (≥ 1).
    case refused(retryAfterSeconds: Int)
}

/// A bounded table of rate-limited keys: a fixed number of entries in sets
/// of `ways`, each entry a 64-bit key hash and the key's theoretical arrival
/// time (GCRA). Memory is fixed at creation (`capacity` × 16 bytes) whatever
/// the number of keys.
///
/// A key seen for the first time is always allowed: it takes a free entry,
/// or the entry of its set whose key is closest to idle (smallest arrival
/// time), evicting what that key had spent. An entry whose arrival time has
/// passed is the same as no entry (a fresh key has its whole burst), so the
/// table only has to remember keys that spent part of their burst recently;
/// when more than `capacity` keys did, the least indebted are forgotten and
/// may burst again (counted in `evictions`). A key that floods keeps its
/// arrival time far ahead and is never the one evicted while its set holds
/// quieter keys. A value: confined to its owner (a shard's turn, or a mutex).
package struct RateLimiter: Sendable {
    /// Entries compared per lookup: one set.
    package static let ways = 8

    package let rate: RateLimit
    /// Key hashes; 0 marks a free entry (a key hashing to 0 is stored as 1).
    private var keys: [UInt64]
    /// Theoretical arrival times in nanoseconds of the caller's clock.
    private var arrivals: [UInt64]
    private let setMask: Int
    /// Requests refused so far.
    package private(set) var refusals = 0
    /// Keys forgotten while they still had part of their burst spent.
    package private(set) var evictions = 0

    /// Creates a table of `capacity` entries (a power of two, at least `ways`).
    package init(rate: RateLimit, capacity: Int) {
        precondition(
            capacity >= RateLimiter.ways && capacity & (capacity - 1) == 0,
            "a rate limiter's capacity must be a power of two ≥ \(RateLimiter.ways), got \(capacity)")
        self.rate = rate
        keys = Array(repeating: 0, count: capacity)
        arrivals = Array(repeating: 0, count: capacity)
        setMask = capacity / RateLimiter.ways - 1
    }

    package var capacity: Int { keys.count }

    /// Counts one request of `key` at `now` (nanoseconds of a monotonic
    /// clock that never goes back). O(ways).
    package mutating func admit(_ key: UInt64, now: UInt64) -> RateVerdict {
        let tag = key == 0 ? 1 : key
        let base = (Int(truncatingIfNeeded: tag >> 32) & setMask) * RateLimiter.ways
        var victim = base
        for slot in base..<(base + RateLimiter.ways) {
            if keys[slot] == tag { return admitKnown(slot, now: now) }
            if keys[victim] != 0 && (keys[slot] == 0 || arrivals[slot] < arrivals[victim]) { victim = slot }
        }
        if keys[victim] != 0 && arrivals[victim] > now { evictions += 1 }
        keys[victim] = tag
        arrivals[victim] = now + rate.intervalNanoseconds
        return .allowed
    }

    private mutating func admitKnown(_ slot: Int, now: UInt64) -> RateVerdict {
        let arrival = arrivals[slot]
        let tolerance = rate.toleranceNanoseconds
        if arrival > now, arrival - now > tolerance {
            refusals += 1
            let waitNanoseconds = arrival - now - tolerance
            let seconds = (waitNanoseconds + 999_999_999) / 1_000_000_000
            return .refused(retryAfterSeconds: Int(max(1, seconds)))
        }
        arrivals[slot] = max(arrival, now) + rate.intervalNanoseconds
        return .allowed
    }

    /// Returns how many entries hold a key that has part of its burst spent
    /// at `now` (tests and diagnostics). O(capacity).
    package func activeEntries(now: UInt64) -> Int {
        zip(keys, arrivals).reduce(0) { $0 + ($1.0 != 0 && $1.1 > now ? 1 : 0) }
    }
}
