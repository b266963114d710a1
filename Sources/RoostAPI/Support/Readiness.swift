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
    }

    private let registry: Registry
    private let shuttingDown = Atomic<Bool>(false)
    /// The server whose saturation `/readyz` reports; nil before start-up attaches it.
    private let server = Mutex<HTTPServer?>(nil)

    package init(registry: Registry) {
        self.registry = registry
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
        Route(.get, "/readyz", access: .open) { [self] (_) throws(APIError) -> HTTPResponse in
            let state = self.state
            return HTTPResponse(
                status: state == .ready ? 200 : 503,
                headers: [("Content-Type", "application/json"), ("Cache-Control", "no-store")],
                body: Array(#"{"status":"\#(state.rawValue)"}"#.utf8))
        }
    }
}
