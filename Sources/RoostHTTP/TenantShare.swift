import RoostPlatform

/// The party a request is accounted to when tenants share the server's loops
/// (Roost: the app whose key made the request). The responder names it with
/// `HTTPResponderResult.deferred`; a request without one (an operator route,
/// a refusal) is never held back.
public struct HTTPTenant: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64

    public init(_ rawValue: UInt64) { self.rawValue = rawValue }

    public var description: String { "tenant \(rawValue)" }
}

/// One event loop's share of its work between tenants (sans I/O: the loop
/// feeds it what happened and does what it answers; decision 0063).
///
/// A request is *in progress* from its dispatch (deferred by the responder)
/// until its answer reaches the connection. Work queued inside the server
/// ahead of a request — sockets to read, commands, answers to render — is
/// what one tenant's flood makes every other tenant wait for, and it grows
/// with the flood's requests in progress, not with its throughput (past what
/// fills the pipeline, more requests in progress only wait longer). So while
/// the loops *hold back* — tenants contend and a loop is busy — a tenant may
/// have at most `tenantRequestsInProgressMax` requests in progress on each
/// loop (`HTTPServerLimits`, as the other bounds named here): a request
/// read for a tenant at the bound is not started; its connection joins that
/// tenant's queue, and each answer of the tenant lets the queue's first
/// request start. The waiting request is parsed and its answer owed, so the
/// connection reads nothing more meanwhile (`unansweredRequestsMax`), keeps
/// no peer timeout and is no eviction candidate; no system call is spent on
/// it (leaving the socket unread would cost two `epoll_ctl` a request).
/// A request counts for the tenant its credential (`credential(of:)`) was
/// last started for on this loop, whichever connection carries it (a proxy
/// pools connections across apps); one with a credential not seen yet starts.
///
/// - *Contend*: on some loop, a request of one tenant started after one of
///   another tenant within `HTTPServerLimits.tenantContentionWindow`
///   (`ServerShared.tenantsContend`).
/// - *Busy*: some loop spent at most `tenantShareBusyBelowIdleFraction` of
///   a `loadWindow` waiting in `epoll_wait`, and has not had a window idle
///   more than `tenantShareIdleAboveIdleFraction` since
///   (`ServerShared.holdsTenantsBack`). The loop asks before it holds a
///   request back; this type only counts.
///   Any loop, not this one only: the queue a request waits in may be on
///   the loop that runs its shard. A loop waiting for the disk is not what
///   delays other tenants, so a lone app on a slow disk, or several, keep
///   all their requests in progress.
struct TenantShare {
    /// The span over which the loop's idle time is measured.
    static let loadWindow: Duration = .milliseconds(50)
    /// Credentials remembered per loop (`tenant(of:)`); when full the loop
    /// forgets them all and learns again (~16 B each).
    static let credentialsRememberedMax = 4096

    /// `HTTPServerLimits.tenantRequestsInProgressMax`.
    let perTenantMax: Int
    /// `HTTPServerLimits.tenantShareBusyBelowIdleFraction`.
    let busyBelowIdleFraction: Double
    /// `HTTPServerLimits.tenantShareIdleAboveIdleFraction`.
    let idleAboveIdleFraction: Double
    /// Whether this loop counts as busy (see the type).
    private(set) var loopIsBusy = false
    private var inProgress = TenantCounts()
    /// Requests taken from a queue that have not started yet (the loop
    /// starts them in its next round); they count toward their tenant's share.
    private var woken: [HTTPTenant: Int] = [:]
    /// The keys of the connections whose requests wait for their tenant's
    /// turn, oldest first (a connection that closes leaves its queue).
    private var queues: [HTTPTenant: WaitQueue] = [:]
    private var lastStarted: HTTPTenant?
    /// The tenant each credential's last request was started for, by the
    /// hash of its `Authorization` value (`credential(of:)`).
    private var tenantsByCredential: [UInt64: HTTPTenant] = [:]
    private var windowStart: LoopInstant
    private var idleInWindow: Duration = .zero

    init(limits: HTTPServerLimits, now: LoopInstant) {
        perTenantMax = limits.tenantRequestsInProgressMax
        busyBelowIdleFraction = limits.tenantShareBusyBelowIdleFraction
        idleAboveIdleFraction = limits.tenantShareIdleAboveIdleFraction
        precondition(perTenantMax >= 1, "perTenantMax \(perTenantMax) < 1")
        precondition(
            busyBelowIdleFraction <= idleAboveIdleFraction,
            "busy below \(busyBelowIdleFraction) idle yet idle above \(idleAboveIdleFraction)")
        windowStart = now
    }

    /// The credential a request carries: a hash of its `Authorization`
    /// field, or nil without one. A request is attributed by its credential,
    /// not by its connection, which a proxy shares between apps.
    static func credential(of head: HTTPRequestHead) -> UInt64? {
        guard let value = head.headers["Authorization"] else { return nil }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325  // FNV-1a, 64 bits
        for byte in value.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        return hash
    }

    /// The tenant a request with `credential` counts for, if a request with
    /// it started here since the loop last forgot; a request with a
    /// credential not seen yet starts, and its tenant is learnt from it.
    func tenant(of credential: UInt64) -> HTTPTenant? { tenantsByCredential[credential] }

    /// Learns that requests with `credential` count for `tenant`.
    mutating func remember(_ credential: UInt64, as tenant: HTTPTenant) {
        if tenantsByCredential[credential] == tenant { return }
        if tenantsByCredential.count >= Self.credentialsRememberedMax { tenantsByCredential.removeAll() }
        tenantsByCredential[credential] = tenant
    }

    /// The requests `tenant` has in progress on this loop.
    func requestsInProgress(of tenant: HTTPTenant) -> Int { inProgress[tenant] }

    /// Connections whose requests wait for `tenant`'s turn.
    func waitingCount(of tenant: HTTPTenant) -> Int { queues[tenant]?.count ?? 0 }

    /// Whether a request of `tenant` may start while the loops hold back:
    /// the tenant is under its share. Requests woken and not started yet
    /// count as started.
    func mayStart(_ tenant: HTTPTenant) -> Bool {
        requestsInProgress(of: tenant) + woken[tenant, default: 0] < perTenantMax
    }

    /// Counts a request of `tenant` started; returns whether the last request
    /// this loop started was another tenant's (the loop then tells every loop
    /// that tenants contend).
    mutating func started(_ tenant: HTTPTenant) -> Bool {
        inProgress.add(1, to: tenant)
        defer { lastStarted = tenant }
        return lastStarted != nil && lastStarted != tenant
    }

    /// Counts a request of `tenant` answered (or dropped with its
    /// connection); returns whether connections wait for the tenant's turn
    /// (asked in the same call: the loop holds this in a class, and each
    /// call is an access checked at run time).
    @discardableResult
    mutating func finished(_ tenant: HTTPTenant) -> Bool {
        precondition(inProgress[tenant] > 0, "\(tenant) finished more requests than it started")
        inProgress.add(-1, to: tenant)
        return !queues.isEmpty && waitingCount(of: tenant) > 0
    }

    /// Queues connection `key` for `tenant`'s turn.
    mutating func wait(_ key: UInt64, for tenant: HTTPTenant) {
        queues[tenant, default: WaitQueue()].append(key)
    }

    /// Takes connection `key` out of `tenant`'s queue (it closed while waiting).
    mutating func stopWaiting(_ key: UInt64, for tenant: HTTPTenant) {
        guard var queue = queues[tenant] else { preconditionFailure("\(tenant) has no queue holding \(key)") }
        queue.remove(key)
        queues[tenant] = queue.isEmpty ? nil : queue
    }

    /// Takes the first connection waiting for `tenant`'s turn, if its
    /// request may start now; it counts as started until the loop has
    /// started it (`wokenStarted`).
    mutating func nextToWake(for tenant: HTTPTenant) -> UInt64? {
        guard mayStart(tenant), var queue = queues[tenant] else { return nil }
        let key = queue.removeFirst()
        queues[tenant] = queue.isEmpty ? nil : queue
        woken[tenant, default: 0] += 1
        return key
    }

    /// The request of a connection `nextToWake` gave was started (and
    /// counted by `started`), or the connection closed before.
    mutating func wokenStarted(_ tenant: HTTPTenant) {
        let left = woken[tenant, default: 0] - 1
        precondition(left >= 0, "\(tenant) started more woken requests than were woken")
        if left == 0 { woken[tenant] = nil } else { woken[tenant] = left }
    }

    /// Takes every waiting connection of every tenant (the loop stopped
    /// holding back, or tenants stopped contending).
    mutating func takeAllWaiting() -> [UInt64] {
        var keys: [UInt64] = []
        for queue in queues.values { keys.append(contentsOf: queue.remaining) }
        queues.removeAll()
        return keys
    }

    /// Whether any connection waits.
    var hasWaiting: Bool { !queues.isEmpty }

    /// Counts `idle` spent in `epoll_wait`, ending at `now`; at the end of a
    /// load window decides whether the loop is busy. Returns whether that
    /// changed (the loop tells `ServerShared`).
    mutating func noteIdle(_ idle: Duration, now: LoopInstant) -> Bool {
        idleInWindow += idle
        let span = now - windowStart
        guard span >= Self.loadWindow else { return false }
        let idleFraction = idleInWindow / span
        let wasBusy = loopIsBusy
        if idleFraction <= busyBelowIdleFraction {
            loopIsBusy = true
        } else if idleFraction > idleAboveIdleFraction {
            loopIsBusy = false
        }
        windowStart = now
        idleInWindow = .zero
        return loopIsBusy != wasBusy
    }

    /// A FIFO of connection keys: an array with a moving head.
    struct WaitQueue {
        private var keys: [UInt64] = []
        private var head = 0

        var count: Int { keys.count - head }
        var isEmpty: Bool { head == keys.count }
        var remaining: ArraySlice<UInt64> { keys[head...] }

        mutating func append(_ key: UInt64) { keys.append(key) }

        /// Removes `key` wherever it is: O(count), for a connection that
        /// closes while it waits.
        mutating func remove(_ key: UInt64) {
            guard let index = keys[head...].firstIndex(of: key) else {
                preconditionFailure("connection \(key) not in its tenant's wait queue")
            }
            keys.remove(at: index)
        }

        mutating func removeFirst() -> UInt64 {
            precondition(!isEmpty, "removeFirst of an empty wait queue")
            let key = keys[head]
            head += 1
            if head >= 64 && head * 2 >= keys.count {
                keys.removeFirst(head)
                head = 0
            }
            return key
        }
    }
}

/// Requests per tenant, the last tenant counted held outside the
/// dictionary: one app busy alone is counted without hashing (issue 25:
/// the tenant share costs nothing while one app is busy alone; three
/// dictionary look-ups a request before, ~0.7 % of a registration's
/// instructions). A tenant is in `others` only while `recent` is another
/// with requests counted, and never at zero; `recent` may be at zero.
struct TenantCounts {
    private var recent: HTTPTenant?
    private var recentCount = 0
    private var others: [HTTPTenant: Int] = [:]

    /// The count of `tenant`; zero when none is counted.
    subscript(tenant: HTTPTenant) -> Int {
        if recent == tenant { return recentCount }
        return others.isEmpty ? 0 : others[tenant, default: 0]
    }

    /// Tenants with a count above zero (tests).
    var tenantCount: Int { others.count + (recentCount > 0 ? 1 : 0) }

    /// Adds `delta` to `tenant`'s count, which must stay at zero or above.
    mutating func add(_ delta: Int, to tenant: HTTPTenant) {
        if recent == tenant {
            recentCount += delta
            precondition(recentCount >= 0, "\(tenant) counted below zero")
            return
        }
        if recentCount == 0 {
            // The slot is free: `tenant` takes it, with what `others` held for it.
            let held = others.isEmpty ? 0 : (others.removeValue(forKey: tenant) ?? 0)
            recent = tenant
            recentCount = held + delta
            precondition(recentCount >= 0, "\(tenant) counted below zero")
            return
        }
        let count = others[tenant, default: 0] + delta
        precondition(count >= 0, "\(tenant) counted below zero")
        others[tenant] = count == 0 ? nil : count
    }
}
