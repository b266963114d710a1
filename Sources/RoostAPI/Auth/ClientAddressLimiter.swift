import RoostEngine
import RoostHTTP
import RoostModel
import RoostPlatform
import Synchronization

/// The per-address limit of the routes that a credential shipped inside apps
/// authorizes: a mobile key (public: anyone can read it out of an app) and
/// the identity tokens of the Connect routes (a guest one is minted with the
/// mobile key). Counted per (app, client address); an IPv6 client counts by
/// its /64 (one host gets a whole /64 to pick addresses from).
///
/// Behind a reverse proxy every client arrives from the proxy's address and
/// shares one budget, unless the proxy is named with `--trusted-proxy`: then
/// the client is the right-most `X-Forwarded-For` entry that is not itself a
/// trusted proxy (docs/limits.md). One table for every loop, behind a mutex
/// (held for one lookup of ~8 entries).
package final class ClientAddressLimiter: Sendable {
    /// Requests per (app, client address) on those routes: a burst of 200,
    /// then 20 a second. A carrier-grade NAT puts hundreds of phones behind
    /// one IPv4 address and each registers at launch; one host that loops on
    /// a leaked mobile key gets at most 1.73 million requests a day through.
    package static let rate = RateLimit(burst: 200, perSecond: 20)
    /// (App, address) pairs remembered: 16 bytes each, 1 MiB. Beyond it the
    /// least indebted pairs are forgotten (`RateLimiter`); a new address is
    /// never refused.
    package static let entriesMax = 65_536
    /// Proxies `--trusted-proxy` may name.
    package static let trustedProxiesMax = 16
    /// `X-Forwarded-For` entries looked at, from the right.
    package static let forwardedEntriesMax = 32

    private let table: Mutex<RateLimiter>
    private let clock: any MonotonicClock
    /// Peers whose `X-Forwarded-For` names the client (empty: none is trusted).
    package let trustedProxies: [IPAddress]

    package init(
        trustedProxies: [IPAddress] = [], rate: RateLimit = ClientAddressLimiter.rate, clock: any MonotonicClock
    ) {
        precondition(
            trustedProxies.count <= ClientAddressLimiter.trustedProxiesMax,
            "\(trustedProxies.count) trusted proxies, at most \(ClientAddressLimiter.trustedProxiesMax)")
        self.trustedProxies = trustedProxies
        self.table = Mutex(RateLimiter(rate: rate, capacity: ClientAddressLimiter.entriesMax))
        self.clock = clock
    }

    /// Counts one request of `app` from the request's client; 429
    /// `rate_limited` (reason `client_address`) over the rate. A request
    /// with no peer address (made outside a server: tests, tools) is not
    /// counted. O(1).
    package func admit(app: AppID, _ head: HTTPRequestHead) throws(APIError) {
        guard let client = clientAddress(head) else { return }
        var hasher = Hasher()
        hasher.combine(app)
        // IPv4: the whole address; IPv6: its /64.
        if client.isIPv4 {
            hasher.combine(4 as UInt8)
            hasher.combine(client.low)
        } else {
            hasher.combine(6 as UInt8)
            hasher.combine(client.high)
        }
        let key = UInt64(UInt(bitPattern: hasher.finalize()))
        let now = clock.monotonicNanoseconds()
        switch table.withLock({ $0.admit(key, now: now) }) {
        case .allowed: return
        case .refused(let seconds): throw APIError.rateLimited(.clientAddress, retryAfterSeconds: seconds)
        }
    }

    /// Returns the client a request counts for: the peer, or, when the peer
    /// is a trusted proxy, the right-most `X-Forwarded-For` entry that is not
    /// a trusted proxy (the peer when there is no usable entry).
    package func clientAddress(_ head: HTTPRequestHead) -> IPAddress? {
        guard let peer = head.peerAddress else { return nil }
        guard !trustedProxies.isEmpty, trustedProxies.contains(peer) else { return peer }
        var client = peer
        var looked = 0
        // Later fields and later entries were appended by nearer hops.
        for value in head.headers.values("X-Forwarded-For").reversed() {
            for entry in value.split(separator: ",", omittingEmptySubsequences: false).reversed() {
                looked += 1
                guard looked <= ClientAddressLimiter.forwardedEntriesMax,
                    let address = IPAddress(parsing: entry.trimmingSpaces)
                else { return client }
                client = address
                if !trustedProxies.contains(address) { return address }
            }
        }
        return client
    }

    /// Requests refused and pairs forgotten early, since start (metrics).
    package func counts() -> (refusals: Int, evictions: Int) {
        table.withLock { ($0.refusals, $0.evictions) }
    }
}

extension Substring {
    /// The text without leading and trailing spaces and tabs.
    fileprivate var trimmingSpaces: Substring {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return self[first...last]
    }
}
