import RoostModel
import RoostPlatform
import RoostStorage
import RoostTesting
import Synchronization
import Testing

@testable import RoostEngine

private let second: UInt64 = 1_000_000_000

@Suite("Rate limiter (bounded GCRA table)")
struct RateLimiterTests {
    @Test("a key gets its burst at once, then one request per interval; Retry-After is the whole seconds to the next")
    func burstThenSteady() {
        var limiter = RateLimiter(rate: RateLimit(burst: 10, intervalNanoseconds: 6 * second), capacity: 64)
        let start: UInt64 = 5 * second
        for _ in 0..<10 { #expect(limiter.admit(42, now: start) == .allowed) }
        #expect(limiter.admit(42, now: start) == .refused(retryAfterSeconds: 6))
        #expect(limiter.admit(42, now: start + 1) == .refused(retryAfterSeconds: 6))
        #expect(limiter.admit(42, now: start + 5 * second + 1) == .refused(retryAfterSeconds: 1))
        #expect(limiter.admit(42, now: start + 6 * second) == .allowed)
        #expect(limiter.admit(42, now: start + 6 * second) == .refused(retryAfterSeconds: 6))
        // Another key has its own burst.
        for _ in 0..<10 { #expect(limiter.admit(43, now: start) == .allowed) }
        // Idle for the whole burst: the burst is back.
        let later = start + 6 * second + 60 * second
        for _ in 0..<10 { #expect(limiter.admit(42, now: later) == .allowed) }
        #expect(limiter.admit(42, now: later) == .refused(retryAfterSeconds: 6))
        #expect(limiter.refusals == 5)
    }

    @Test("a refused request spends nothing: a client that retries without pause still gets one through per interval")
    func refusalsAreFree() {
        var limiter = RateLimiter(rate: RateLimit(burst: 2, intervalNanoseconds: second), capacity: 8)
        var allowed = 0
        // 100 ms steps for 10 s: 2 at once, then one a second.
        for step in 0...100 {
            if limiter.admit(7, now: UInt64(step) * second / 10) == .allowed { allowed += 1 }
        }
        #expect(allowed == 2 + 10)
    }

    @Test("a full table never refuses a new key; it forgets the quietest keys first and keeps remembering a flooder")
    func fullTable() {
        let rate = RateLimit(burst: 3, intervalNanoseconds: 10 * second)
        var limiter = RateLimiter(rate: rate, capacity: RateLimiter.ways)
        let now: UInt64 = 100 * second
        // A flooder spends its burst: it is 30 s ahead of the clock.
        for _ in 0..<3 { #expect(limiter.admit(1, now: now) == .allowed) }
        #expect(limiter.admit(1, now: now) != .allowed)
        // Far more keys than entries, one request each, a second apart: every one is allowed.
        for key in UInt64(2)..<UInt64(1_000) {
            #expect(limiter.admit(key << 32, now: now + key * second / 1_000) == .allowed)
        }
        #expect(limiter.activeEntries(now: now + 2 * second) == RateLimiter.ways)
        #expect(limiter.evictions > 0)
        // The flooder was never the one forgotten.
        #expect(limiter.admit(1, now: now + 2 * second) != .allowed)
    }

    @Test("every set keeps its own keys and arrival times, and a copy answers the same without changing the original")
    func setsAreApart() {
        let rate = RateLimit(burst: 1, intervalNanoseconds: 10 * second)
        let capacity = 8 * RateLimiter.ways
        var limiter = RateLimiter(rate: rate, capacity: capacity)
        // The set is chosen by the hash's high half: `ways` keys in each of the 8 sets.
        let keys = (0..<8).flatMap { set in (0..<RateLimiter.ways).map { UInt64(set) << 32 | UInt64($0 + 1) } }
        for key in keys { #expect(limiter.admit(key, now: second) == .allowed) }
        #expect(limiter.activeEntries(now: second) == capacity)
        #expect(limiter.evictions == 0)
        var copy = limiter
        for key in keys {
            #expect(copy.admit(key, now: 2 * second) == .refused(retryAfterSeconds: 9))
        }
        // The copy's refusals changed nothing in the original, and the reverse.
        #expect(limiter.refusals == 0)
        #expect(limiter.admit(keys[0], now: 11 * second) == .allowed)
        #expect(copy.admit(keys[1], now: 2 * second) == .refused(retryAfterSeconds: 9))
        #expect(copy.activeEntries(now: 2 * second) == capacity)
        // Arrival times belong to their keys: the first key's is 21 s in the original, 11 s in the copy.
        #expect(limiter.admit(keys[0], now: 12 * second) == .refused(retryAfterSeconds: 9))
        #expect(copy.admit(keys[0], now: 12 * second) == .allowed)
    }

    @Test("an entry whose key went idle is reused without counting an eviction")
    func idleEntriesAreFree() {
        var limiter = RateLimiter(rate: RateLimit(burst: 1, intervalNanoseconds: second), capacity: RateLimiter.ways)
        for key in UInt64(1)...UInt64(RateLimiter.ways) { _ = limiter.admit(key << 32, now: 0) }
        for key in UInt64(100)..<UInt64(108) { #expect(limiter.admit(key << 32, now: 2 * second) == .allowed) }
        #expect(limiter.evictions == 0)
    }
}

/// A log that counts the records appended to it.
final class CountingLog: MutationLog {
    let records = Mutex(0)

    func append(_ records: [[UInt8]]) -> LogSequenceNumber? {
        LogSequenceNumber(
            self.records.withLock { count in
                count += records.count
                return UInt64(count)
            })
    }

    var appendedThrough: LogSequenceNumber { LogSequenceNumber(UInt64(records.withLock { $0 })) }
    var acknowledgedThrough: LogSequenceNumber { appendedThrough }
    var acceptsWrites: Bool { true }

    func wakeWhenAcknowledged(_ lsn: LogSequenceNumber, _ executor: LoopExecutor) {
        executor.wake()
    }
}

@Suite("Per-token registration limit (shards)")
struct TokenLimitTests {
    /// Registers `token` on `key` through the value command a route sends.
    static func register(_ registry: Registry, _ key: IndexKey, _ token: PushToken) async -> Outcome? {
        await registry.execute(key, .register(RegisterRequest(token: token), at: now))
    }

    static func isTokenRefusal(_ outcome: Outcome?) -> Int? {
        guard case .rejected(.tokenRateLimited(let seconds))? = outcome else { return nil }
        return seconds
    }

    @Test("the 11th registration of one token in a burst is refused with Retry-After and appends nothing")
    func eleventhRefused() async throws {
        let clock = ManualMonotonicClock()
        let log = CountingLog()
        let registry = Registry(shardCount: 2, log: log, clock: clock)
        let token = try apnsToken(1)
        for attempt in 0..<10 {
            guard case .registered? = await TokenLimitTests.register(registry, liveKey, token) else {
                Issue.record("registration \(attempt + 1) was not answered as a registration")
                return
            }
        }
        let logged = log.records.withLock { $0 }
        for _ in 0..<5 {
            #expect(TokenLimitTests.isTokenRefusal(await TokenLimitTests.register(registry, liveKey, token)) == 6)
        }
        #expect(log.records.withLock { $0 } == logged, "a refused registration reached the log")
        // Its own token, the other mode, another app: each has its own budget.
        let others = [
            (liveKey, try apnsToken(2)), (IndexKey(app: AppID(1), mode: .test), token),
            (IndexKey(app: AppID(2), mode: .live), token),
        ]
        for (key, other) in others {
            guard case .registered? = await TokenLimitTests.register(registry, key, other) else {
                Issue.record("\(key) was refused by another token's budget")
                continue
            }
        }
        // Once the interval has passed, one more gets through, then the next waits again.
        clock.advance(by: .seconds(5))
        #expect(TokenLimitTests.isTokenRefusal(await TokenLimitTests.register(registry, liveKey, token)) == 1)
        clock.advance(by: .seconds(1))
        guard case .registered? = await TokenLimitTests.register(registry, liveKey, token) else {
            Issue.record("the registration after the interval was refused")
            return
        }
        #expect(TokenLimitTests.isTokenRefusal(await TokenLimitTests.register(registry, liveKey, token)) == 6)
        let counts = await registry.shardSet.shards[registry.shardSet.shardNumber(for: AppID(1))].tokenLimiterCounts()
        #expect(counts.refusals == 7)
    }

    @Test(
        "a token's budget is its index's: spent in one app's live mode, the same token registers in another app and mode on that shard"
    )
    func budgetPerIndex() async throws {
        // One shard: every app shares its limiter, so only the key's hash keeps the budgets apart.
        let registry = Registry(shardCount: 1, log: CountingLog(), clock: ManualMonotonicClock())
        let token = try apnsToken(4)
        for _ in 0..<10 { _ = await TokenLimitTests.register(registry, liveKey, token) }
        #expect(TokenLimitTests.isTokenRefusal(await TokenLimitTests.register(registry, liveKey, token)) == 6)
        for key in [IndexKey(app: AppID(1), mode: .test), IndexKey(app: AppID(2), mode: .live)] {
            for attempt in 0..<10 {
                guard case .registered? = await TokenLimitTests.register(registry, key, token) else {
                    Issue.record("\(key): registration \(attempt + 1) refused by another index's budget")
                    break
                }
            }
            #expect(TokenLimitTests.isTokenRefusal(await TokenLimitTests.register(registry, key, token)) == 6)
        }
    }

    @Test("Connect's registration for a principal counts against the same token budget")
    func principalRegistrations() async throws {
        let registry = Registry(shardCount: 1, log: CountingLog(), clock: ManualMonotonicClock())
        let token = try apnsToken(3)
        for n in 0..<10 {
            var request = RegisterRequest(token: token)
            request.installationID = try InstallationID("install-\(n % 2)")
            let outcome = await registry.execute(
                liveKey, .registerForPrincipal(request, owner: try ExternalID("user_1"), at: now))
            #expect(TokenLimitTests.isTokenRefusal(outcome) == nil)
        }
        #expect(TokenLimitTests.isTokenRefusal(await TokenLimitTests.register(registry, liveKey, token)) == 6)
    }
}
