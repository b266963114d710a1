import RoostEngine
import RoostHTTP
import RoostModel
import RoostPlatform
import RoostStorage
import RoostTelemetry
import Synchronization

/// How long each phase of start-up took and what recovery read (`/metrics`).
package struct RecoveryFigures: Sendable, Equatable {
    /// Reading and verifying the files, loading the snapshot, replaying the
    /// log, rebuilding and reconciling the catalog, and all of start-up.
    package var files: Duration
    package var snapshot: Duration
    package var log: Duration
    package var catalog: Duration
    package var total: Duration
    package var snapshotRecords: Int
    package var logRecords: Int

    package init(
        files: Duration, snapshot: Duration, log: Duration, catalog: Duration, total: Duration, snapshotRecords: Int,
        logRecords: Int
    ) {
        self.files = files
        self.snapshot = snapshot
        self.log = log
        self.catalog = catalog
        self.total = total
        self.snapshotRecords = snapshotRecords
        self.logRecords = logRecords
    }
}

/// `GET /metrics` (spec §11, operator key only): the Prometheus text
/// exposition, version 0.0.4. Counters are read without stopping anyone
/// (per-loop cells summed, the log's statistics under its lock); device and
/// people gauges come from each shard in one turn (`Shard.census`), awaited
/// from a task off the loop, so a scrape never runs on an event loop.
package final class MetricsExporter: Sendable {
    /// (app, mode) pairs given series of their own, lowest app ids first;
    /// the rest are summed under `app="other"` (bounds a scrape of a server
    /// with many apps: the catalog allows 100,000).
    package static let indexSeriesMax = 10_000

    let observer: RequestObserver
    private let registry: Registry
    private let catalog: Catalog
    private let engine: DurableEngine?
    private let logger: Logger
    private let clock: any APIClock
    private let startWallMilliseconds: Int64
    private let server = Mutex<HTTPServer?>(nil)
    private let recovery = Mutex<RecoveryFigures?>(nil)
    private let inactivity: InactivitySweeper?
    /// In cluster mode, the node whose `roost_cluster_*` figures the scrape adds.
    private let cluster: (any ClusterControl)?

    init(
        observer: RequestObserver, registry: Registry, catalog: Catalog, engine: DurableEngine?, logger: Logger,
        clock: any APIClock, inactivity: InactivitySweeper? = nil, cluster: (any ClusterControl)? = nil
    ) {
        self.inactivity = inactivity
        self.cluster = cluster
        self.observer = observer
        self.registry = registry
        self.catalog = catalog
        self.engine = engine
        self.logger = logger
        self.clock = clock
        startWallMilliseconds = clock.wallMilliseconds()
    }

    /// Makes the scrape include the server's connections and refusals (set once it exists).
    package func attach(server: HTTPServer) {
        self.server.withLock { $0 = server }
    }

    /// Makes the scrape include how long start-up took.
    package func setRecovery(_ figures: RecoveryFigures) {
        recovery.withLock { $0 = figures }
    }

    /// Returns the exposition. O(routes × statuses + apps + loops).
    package func render() async -> [UInt8] {
        var text = PrometheusText()
        renderRequests(&text)
        renderServer(&text)
        renderRateLimits(&text)
        renderLog(&text)
        renderSnapshots(&text)
        renderRecovery(&text)
        renderInactivity(&text)
        if let cluster { ClusterRoutes.renderMetrics(cluster.metrics, into: &text) }
        var censuses: [IndexCensus] = []
        for shard in registry.shardSet.shards { censuses += await shard.census() }
        renderIndexes(&text, censuses)
        text.family("roost_log_lines_dropped_total", .counter, help: "Log lines dropped because stderr was too slow.")
        text.sample("roost_log_lines_dropped_total", logger.droppedLineCount)
        text.family(
            "roost_log_lines_suppressed_total", .counter,
            help: "Warning and error lines held back by the log rate limit.")
        text.sample("roost_log_lines_suppressed_total", logger.suppressedLineCount)
        text.family("process_start_time_seconds", .gauge, help: "When the service started, in Unix seconds.")
        text.sample(
            "process_start_time_seconds", units: UInt64(max(0, startWallMilliseconds)), decimalExponent: -3)
        return text.bytes
    }

    private func renderRequests(_ text: inout PrometheusText) {
        let metrics = observer.metrics
        let totals = metrics.totals()
        text.family("roost_http_requests_total", .counter, help: "Requests answered, by route pattern and status.")
        for (slot, label) in metrics.labels.enumerated() {
            for (status, count) in totals.requests[slot] {
                text.sample(
                    "roost_http_requests_total", [("method", label.method), ("route", label.route), ("code", status)],
                    count)
            }
        }
        text.family(
            "roost_http_request_duration_seconds", .histogram,
            help: "Time from a request reaching the service to its answer (a streamed one: its head).")
        // Every route, even before its first request: a series that appears
        // late hides the increase that made it appear from rate().
        for (slot, label) in metrics.labels.enumerated() {
            text.histogram(
                "roost_http_request_duration_seconds", [("method", label.method), ("route", label.route)],
                totals.latency[slot])
        }
    }

    private func renderServer(_ text: inout PrometheusText) {
        guard let statistics = server.withLock({ $0 })?.statistics else { return }
        text.family("roost_http_connections_open", .gauge, help: "Connections open now.")
        text.sample("roost_http_connections_open", statistics.openConnections)
        text.family(
            "roost_http_connections_write_blocked", .gauge,
            help: "Connections whose answers wait for the client to read.")
        text.sample("roost_http_connections_write_blocked", statistics.writeBlockedConnections)
        text.family("roost_http_connections_accepted_total", .counter, help: "Connections accepted and served.")
        text.sample("roost_http_connections_accepted_total", statistics.acceptedConnections)
        text.family(
            "roost_http_idle_closes_total", .counter, help: "Keep-alive connections closed after the idle timeout.")
        text.sample("roost_http_idle_closes_total", statistics.idleClosedConnections)
        text.family(
            "roost_http_tenant_waits_total", .counter,
            help: "Requests left waiting because their app had its share of requests in progress on a busy loop.")
        text.sample("roost_http_tenant_waits_total", statistics.tenantWaits)
        text.family(
            "roost_http_refusals_total", .counter,
            help: "Connections and requests the HTTP layer refused or gave up on, by reason.")
        for reason in HTTPRefusalReason.allCases {
            text.sample("roost_http_refusals_total", [("reason", reason.rawValue)], statistics.refusals[reason] ?? 0)
        }
    }

    private func renderRateLimits(_ text: inout PrometheusText) {
        let hits = catalog.rateLimitHitsByApp
        text.family(
            "roost_rate_limit_hits_total", .counter, help: "Requests refused with 429 by a key's rate limit, by app.")
        var total: UInt64 = 0
        for (app, count) in hits.sorted(by: { $0.key < $1.key }) {
            text.sample("roost_rate_limit_hits_total", [("app", String(app.rawValue))], count)
            total &+= count
        }
        text.family("roost_rate_limited_requests_total", .counter, help: "Requests refused by any rate limit.")
        text.sample("roost_rate_limited_requests_total", total)
    }

    private func renderLog(_ text: inout PrometheusText) {
        guard let wal = engine?.log.wal else { return }
        let statistics = wal.ioStatistics
        let counts = wal.groupCommitCounts
        text.family("roost_wal_appends_total", .counter, help: "Appends to the write-ahead log (one per shard turn).")
        text.sample("roost_wal_appends_total", statistics.appends)
        text.family("roost_wal_records_total", .counter, help: "Records appended to the write-ahead log.")
        text.sample("roost_wal_records_total", counts.records)
        text.family("roost_wal_bytes_written_total", .counter, help: "Bytes written to log segments, framing included.")
        text.sample("roost_wal_bytes_written_total", statistics.bytesWritten)
        text.family("roost_wal_fsync_duration_seconds", .histogram, help: "Duration of each group-commit fdatasync.")
        text.histogram("roost_wal_fsync_duration_seconds", [], statistics.syncLatency)
        text.family(
            "roost_wal_records_per_fsync", .histogram, help: "Records made durable by each group-commit fdatasync.")
        text.histogram("roost_wal_records_per_fsync", [], statistics.recordsPerSync)
        text.family(
            "roost_wal_plans_total", .counter,
            help: "Log I/O plans performed (a group's write, a sync, a roll, a log-end mark), by thread.")
        text.sample("roost_wal_plans_total", [("thread", "log")], statistics.plans - statistics.writesOnAppender)
        text.sample("roost_wal_plans_total", [("thread", "loop")], statistics.writesOnAppender)
        text.family("roost_wal_failed", .gauge, help: "1 once a log write or fdatasync failed (writes answer 503).")
        text.sample("roost_wal_failed", wal.hasFailed ? 1 : 0)
    }

    private func renderSnapshots(_ text: inout PrometheusText) {
        guard let figures = engine?.snapshotFigures else { return }
        text.family("roost_snapshots_total", .counter, help: "Snapshots written by this process, by result.")
        text.sample("roost_snapshots_total", [("result", "completed")], figures.completed)
        text.sample("roost_snapshots_total", [("result", "failed")], figures.failed)
        if let duration = figures.lastDuration, let bytes = figures.lastBytes, let records = figures.lastRecords {
            text.family("roost_snapshot_duration_seconds", .gauge, help: "How long the last snapshot took.")
            text.sample("roost_snapshot_duration_seconds", units: Self.nanoseconds(duration), decimalExponent: -9)
            text.family("roost_snapshot_size_bytes", .gauge, help: "The last snapshot's file size.")
            text.sample("roost_snapshot_size_bytes", bytes)
            text.family("roost_snapshot_records", .gauge, help: "Records in the last snapshot.")
            text.sample("roost_snapshot_records", records)
        }
        if let completed = figures.lastCompletedWallMilliseconds {
            text.family(
                "roost_snapshot_last_completed_timestamp_seconds", .gauge,
                help: "When the newest snapshot on disk was finished, in Unix seconds.")
            text.sample(
                "roost_snapshot_last_completed_timestamp_seconds", units: UInt64(max(0, completed)), decimalExponent: -3
            )
            text.family("roost_snapshot_age_seconds", .gauge, help: "Seconds since the newest snapshot was finished.")
            let age = max(0, clock.wallMilliseconds() - completed)
            text.sample("roost_snapshot_age_seconds", units: UInt64(age), decimalExponent: -3)
        }
    }

    private func renderInactivity(_ text: inout PrometheusText) {
        guard let totals = inactivity?.sweepTotals else { return }
        text.family(
            "roost_inactivity_sweeps_total", .counter,
            help: "Inactivity sweeps run (spec 8), by result: incomplete when the log refused a step.")
        text.sample("roost_inactivity_sweeps_total", [("result", "complete")], totals.sweeps - totals.incomplete)
        text.sample("roost_inactivity_sweeps_total", [("result", "incomplete")], totals.incomplete)
        text.family(
            "roost_inactivity_sweep_steps_total", .counter, help: "Shard turns the inactivity sweeps took.")
        text.sample("roost_inactivity_sweep_steps_total", totals.steps)
        text.family(
            "roost_inactivity_invalidated_total", .counter,
            help: "Devices the inactivity sweeps invalidated with reason Inactive.")
        text.sample("roost_inactivity_invalidated_total", totals.invalidated)
        if let duration = totals.lastDuration {
            text.family(
                "roost_inactivity_last_sweep_duration_seconds", .gauge, help: "How long the last inactivity sweep took."
            )
            text.sample(
                "roost_inactivity_last_sweep_duration_seconds", units: Self.nanoseconds(duration), decimalExponent: -9)
        }
    }

    private func renderRecovery(_ text: inout PrometheusText) {
        guard let figures = recovery.withLock({ $0 }) else { return }
        text.family("roost_recovery_duration_seconds", .gauge, help: "How long each phase of start-up took.")
        for (phase, duration) in [
            ("files", figures.files), ("snapshot", figures.snapshot), ("log", figures.log),
            ("catalog", figures.catalog), ("total", figures.total),
        ] {
            text.sample(
                "roost_recovery_duration_seconds", [("phase", phase)], units: Self.nanoseconds(duration),
                decimalExponent: -9)
        }
        text.family("roost_recovery_records", .gauge, help: "Records recovery read, by source.")
        text.sample("roost_recovery_records", [("source", "snapshot")], figures.snapshotRecords)
        text.sample("roost_recovery_records", [("source", "log")], figures.logRecords)
    }

    private func renderIndexes(_ text: inout PrometheusText, _ censuses: [IndexCensus]) {
        let sorted = censuses.sorted { ($0.key.app, $0.key.mode.rawValue) < ($1.key.app, $1.key.mode.rawValue) }
        text.family("roost_apps", .gauge, help: "Apps in the catalog.")
        text.sample("roost_apps", catalog.apps().count)
        for (family, help, value) in [
            ("roost_devices", "Devices, by app and mode.", \IndexCensus.devices),
            ("roost_people", "People, by app and mode.", \IndexCensus.people),
        ] {
            text.family(family, .gauge, help: help)
            var other: [AppMode: Int] = [:]
            for (position, census) in sorted.enumerated() {
                guard position < Self.indexSeriesMax else {
                    other[census.key.mode, default: 0] += census[keyPath: value]
                    continue
                }
                text.sample(
                    family, [("app", String(census.key.app.rawValue)), ("mode", census.key.mode.description)],
                    census[keyPath: value])
            }
            for mode in AppMode.allCases {
                guard let count = other[mode] else { continue }
                text.sample(family, [("app", "other"), ("mode", mode.description)], count)
            }
        }
    }

    private static func nanoseconds(_ duration: Duration) -> UInt64 { UInt64(max(0, duration.wholeNanoseconds)) }
}

/// The `/metrics` route.
struct MetricsRoutes: Sendable {
    /// The route's declared label, known before the route exists (the
    /// request counters are made before the router).
    static let label = RequestMetrics.RouteLabel(method: "GET", route: "/metrics")

    let exporter: MetricsExporter

    var routes: [Route] { [Route(.get, Self.label.route, access: .operatorKey, outcome: scrape)] }

    /// 200 with the exposition, for the operator key only (401 without a
    /// key, 403 for an app's key). Rendered on a task: the device gauges
    /// await every shard.
    func scrape(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let exporter = exporter
        return .detached { sink in
            Task {
                let body = await exporter.render()
                sink.send(
                    HTTPResponse(status: 200, headers: [("Content-Type", PrometheusText.contentType)], body: body))
            }
        }
    }
}
