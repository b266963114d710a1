import RoostEngine
import RoostHTTP
import Synchronization

/// `GET /readyz` (spec §11, no auth): whether this process should get traffic.
///
/// Ready once recovery is done (the server serves nothing before it, so any
/// answer at all comes after recovery) and the log accepts writes. Not ready
/// once the log has failed (a `pwrite`, `fdatasync` or segment roll failed,
/// e.g. EIO or ENOSPC: the process keeps serving reads, answers every write
/// 503 and never recovers without a restart, docs/storage.md "Failure"), or
/// once shutdown began (SIGTERM/SIGINT: in-flight requests finish, nothing new
/// should be sent). Not ready either while the HTTP server is saturated: at
/// its connection cap with nothing it may evict (every place held by a
/// request in progress or owed, or by a partial head younger than
/// `HTTPServerLimits.partialHeadEvictableAfter`), so that a new client's API
/// call would be refused (decision 0073). `/healthz` stays `{"status":"ok"}`
/// in every case: the process is alive, it just should not get traffic.
package final class Readiness: Sendable {
    /// What `/readyz` reports; the raw value is the `status` it answers.
    package enum State: String, Sendable, Equatable {
        case ready
        /// The write-ahead log refuses writes until a restart.
        case logFailed = "log_failed"
        /// SIGTERM or SIGINT arrived; the server drains.
        case shuttingDown = "shutting_down"
        /// The HTTP server is at its connection cap with nothing to evict: a
        /// new client's API call would be refused (`HTTPServer.isSaturated`).
        case atCapacity = "at_capacity"
        /// Cluster mode: this node does not take writes (for `/readyz` without `reads=1`).
        case notLeader = "not_leader"
        /// Cluster mode: this node's copy is older than `--read-lag-ms`.
        case staleReplica = "stale_replica"
    }

    private let registry: Registry
    /// In cluster mode (spec §13.4): `/readyz` is 200 on the leader once it
    /// takes writes; `/readyz?reads=1` on any node within its read lag.
    private let cluster: (any ClusterControl)?
    private let shuttingDown = Atomic<Bool>(false)
    /// The server whose saturation `/readyz` reports; nil before start-up attaches it.
    private let server = Mutex<HTTPServer?>(nil)

    package init(registry: Registry, cluster: (any ClusterControl)? = nil) {
        self.registry = registry
        self.cluster = cluster
    }

    /// The current state; shutting down wins over a failed log, a failed log
    /// over a saturated server. One short lock (the attached server).
    package var state: State {
        if shuttingDown.load(ordering: .acquiring) { return .shuttingDown }
        if !registry.acceptsWrites { return .logFailed }
        if server.withLock({ $0?.isSaturated ?? false }) { return .atCapacity }
        return .ready
    }

    /// Makes `/readyz` report `server`'s saturation (start-up, once it serves).
    package func attach(server: HTTPServer) {
        self.server.withLock { $0 = server }
    }

    /// Makes every later `/readyz` answer 503 `shutting_down`.
    package func beginShutdown() {
        shuttingDown.store(true, ordering: .releasing)
    }

    /// The `GET /readyz` route: 200 `{"status":"ready"}`, else 503 with the reason.
    package var route: Route {
        Route(.get, "/readyz", access: .open) { [self] (context) throws(APIError) -> HTTPResponse in
            var state = self.state
            if state == .ready, let cluster {
                let status = cluster.localStatus
                let readsOnly = context.request.head.query.map { $0.split(separator: "&").contains("reads=1") } ?? false
                if readsOnly {
                    if !status.takesWrites && status.lagMilliseconds > cluster.readLagMillisecondsMax {
                        state = .staleReplica
                    }
                } else if !status.takesWrites {
                    state = .notLeader
                }
            }
            return HTTPResponse(
                status: state == .ready ? 200 : 503,
                headers: [("Content-Type", "application/json"), ("Cache-Control", "no-store")],
                body: Array(#"{"status":"\#(state.rawValue)"}"#.utf8))
        }
    }
}
