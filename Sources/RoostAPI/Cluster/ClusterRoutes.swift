import Glibc
import RoostEngine
import RoostHTTP
import RoostJSON
import RoostStorage
import RoostTelemetry
import Synchronization

/// The operator routes of cluster mode (spec §13.9): `GET /v1/cluster` and
/// `POST /v1/cluster/step-down`. Registered only with `--cluster`: without it
/// they are 404 `not_found` as any unknown path.
struct ClusterRoutes {
    let cluster: any ClusterControl

    var routes: [Route] {
        [
            Route(.get, "/v1/cluster", access: .operatorKey, show),
            Route(.post, "/v1/cluster/step-down", access: .operatorKey, stepDown),
            Route(.get, "/v1/cluster/snapshot", access: .operatorKey, outcome: snapshot),
        ]
    }

    /// The node's newest checkpointed snapshot, streamed from its file (spec
    /// §13.9): a node that re-seeds installs it (spec §13.6). The file is
    /// opened before the answer starts, so a later checkpoint that removes
    /// it does not cut the stream.
    func snapshot(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        guard let newest = cluster.newestSnapshot else {
            throw APIError(status: 404, code: "not_found", message: "this node has no checkpointed snapshot yet")
        }
        let descriptor = open(newest.path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw APIError.unavailable("the snapshot was replaced while it was opened; retry")
        }
        let checkpoint = newest.checkpoint
        let epoch = cluster.localStatus.epoch
        return .detached { sink in
            let stream = sink.startStream(
                status: 200,
                headers: [
                    ("Content-Type", "application/octet-stream"), ("Cache-Control", "no-store"),
                    ("Roost-Epoch", String(epoch)),
                    ("Roost-Position", Self.position(LogSequenceNumber(checkpoint.snapshotLSN.rawValue - 1))),
                    (SnapshotHeaders.startLSN, String(checkpoint.snapshotLSN.rawValue)),
                    (SnapshotHeaders.bytes, String(checkpoint.snapshotBytes)),
                    (SnapshotHeaders.checksum, String(checkpoint.snapshotChecksum)),
                ])
            SnapshotFileStream(descriptor: descriptor, bytes: checkpoint.snapshotBytes, stream: stream).next()
        }
    }

    func show(_ context: RequestContext) throws(APIError) -> HTTPResponse {
        jsonResponse(200, Self.render(cluster.status))
    }

    func stepDown(_ context: RequestContext) throws(APIError) -> HTTPResponse {
        switch cluster.stepDown() {
        case .steppedDown(let epoch):
            var writer = JSONWriter()
            writer.beginObject()
            writer.member("stepped_down", true)
            writer.member("epoch", Int(epoch))
            writer.endObject()
            return jsonResponse(200, writer)
        case .notLeader:
            throw APIError(status: 409, code: "not_leader", message: "this node does not lead the cluster")
        }
    }

    /// The `roost_cluster_*` families of `/metrics` (spec §13.9).
    static func renderMetrics(_ metrics: ClusterMetrics, into text: inout PrometheusText) {
        text.family("roost_cluster_role", .gauge, help: "This node's role: 1 for the role it has, 0 for the others.")
        for role in ["leader", "follower", "candidate", "seeding"] {
            text.sample("roost_cluster_role", [("role", role)], metrics.role.rawValue == role ? 1 : 0)
        }
        text.family("roost_cluster_epoch", .gauge, help: "The epoch of the leader this node last saw.")
        text.sample("roost_cluster_epoch", Int(metrics.epoch))
        text.family(
            "roost_cluster_lag_seconds", .histogram,
            help: "How far behind the group log this node's state was, sampled once a second.")
        text.histogram("roost_cluster_lag_seconds", [], metrics.lag)
        text.family(
            "roost_cluster_commit_seconds", .histogram,
            help: "From a batch's first send to etcd's commit (the leader).")
        text.histogram("roost_cluster_commit_seconds", [], metrics.commit)
        text.family(
            "roost_cluster_batch_bytes", .histogram,
            help: "Payload bytes of each group-log batch appended (leader) or received (follower).")
        text.histogram("roost_cluster_batch_bytes", [], metrics.batchBytes)
        text.family("roost_cluster_elections_total", .counter, help: "Elections this node won.")
        text.sample("roost_cluster_elections_total", metrics.elections)
        text.family("roost_cluster_etcd_errors_total", .counter, help: "etcd requests that failed.")
        text.sample("roost_cluster_etcd_errors_total", metrics.etcdErrors)
    }

    /// Positions are written as change-feed cursors; operator routes show raw LSNs (spec §13.1).
    static func position(_ lsn: LogSequenceNumber) -> String {
        ChangeCursor.encode(lsn.rawValue)
    }

    static func render(_ status: ClusterNodeStatus) -> JSONWriter {
        var writer = JSONWriter(reservingCapacity: 512 + status.members.count * 160)
        writer.beginObject()
        writer.member("cluster", status.cluster)
        writer.member("node", status.node)
        writer.member("role", status.role.rawValue)
        writer.member("epoch", Int(status.epoch))
        writer.key("leader")
        if let leader = status.leader {
            writer.beginObject()
            writer.member("node", leader.node)
            writer.member("url", leader.url)
            writer.endObject()
        } else {
            writer.null()
        }
        writer.member("position", position(status.appliedLSN))
        writer.member("committed_position", position(status.committedLSN))
        writer.member("lag_ms", Int(clamping: status.lagMilliseconds))
        writer.member("applied_lsn", Int(clamping: status.appliedLSN.rawValue))
        writer.member("committed_lsn", Int(clamping: status.committedLSN.rawValue))
        writer.key("members")
        writer.beginArray()
        for member in status.members {
            writer.beginObject()
            writer.member("node", member.node)
            writer.member("url", member.url)
            writer.member("role", member.role)
            writer.member("position", position(member.appliedLSN))
            writer.member("checkpoint_position", position(member.checkpointLSN))
            writer.member("seen_ms_ago", Int(clamping: member.seenMillisecondsAgo))
            writer.endObject()
        }
        writer.endArray()
        writer.key("log")
        writer.beginObject()
        writer.member("first_position", position(status.groupLog.firstLSN))
        writer.member("last_position", position(status.groupLog.lastLSN))
        writer.member("bytes", status.groupLog.bytes)
        writer.endObject()
        writer.key("etcd")
        writer.beginObject()
        writer.key("endpoints")
        writer.beginArray()
        for endpoint in status.etcd.endpoints { writer.string(endpoint) }
        writer.endArray()
        writer.member("healthy", status.etcd.healthy)
        writer.member("db_bytes", Int(clamping: status.etcd.databaseBytes))
        writer.endObject()
        writer.endObject()
        return writer
    }
}

/// The read gate of a cluster node (spec §13.3): a node that does not lead
/// answers a read only while it applied everything the group log held at
/// most `--read-lag-ms` ago, or the request's `Roost-Max-Staleness-Ms`.
enum ClusterReadGate {
    /// The largest `Roost-Max-Staleness-Ms` (spec §13.3).
    static let maxStalenessMillisecondsMax: Int64 = 3_600_000
    static let maxStalenessHeader = "Roost-Max-Staleness-Ms"

    /// Paths a lagging node still answers: liveness, readiness, metrics,
    /// its own cluster status and the console's files.
    static func isExempt(_ path: Substring) -> Bool {
        path == "/healthz" || path == "/readyz" || path == "/metrics" || path.hasPrefix("/v1/cluster")
            || path == "/console" || path.hasPrefix("/console/")
    }

    /// Throws 503 `stale_replica` when this node's copy is older than the
    /// request accepts; 400 when `Roost-Max-Staleness-Ms` is not 0...3,600,000.
    static func check(_ head: HTTPRequestHead, cluster: any ClusterControl) throws(APIError) {
        let status = cluster.localStatus
        guard !status.takesWrites else { return }
        var allowed = cluster.readLagMillisecondsMax
        if let text = head.headers[maxStalenessHeader] {
            guard let value = Int64(text), value >= 0, value <= maxStalenessMillisecondsMax else {
                throw APIError(
                    status: 400, code: "invalid_field",
                    message: "Roost-Max-Staleness-Ms must be an integer from 0 to \(maxStalenessMillisecondsMax)",
                    field: "Roost-Max-Staleness-Ms")
            }
            allowed = value
        }
        guard status.lagMilliseconds <= allowed else {
            throw APIError(
                status: 503, code: "stale_replica",
                message: "this node's copy is more than \(allowed) ms behind the group log; retry or read elsewhere",
                retryAfterSeconds: 1)
        }
    }
}

/// The headers a cluster node puts on every answer (spec §13.2, §13.3):
/// `Roost-Node` and `Roost-Epoch`; `Roost-Position`, for an app's key or
/// identity token the position of its app and mode (spec §13.1: the count
/// of their own records, as the shards published it — on the leader at or
/// after the answer's last record, on a follower what it applied), for the
/// operator key the node's raw LSN (committed on the leader, applied
/// elsewhere); and on a node that does not lead, `Roost-Lag-Ms`.
enum ClusterHeaders {
    /// The most fields `stamp` adds: node, epoch, position, lag.
    static let fieldsMax = 4

    /// Adds the headers an answer does not carry already (the snapshot's own
    /// `Roost-Position` and `Roost-Epoch` name the file, and stay).
    static func stamp(
        _ headers: inout [(name: String, value: String)], _ cluster: any ClusterControl, index: IndexKey?
    ) {
        let status = cluster.localStatus
        let countBefore = headers.count
        defer { precondition(headers.count - countBefore <= fieldsMax, "cluster headers past fieldsMax") }
        func add(_ name: String, _ value: @autoclosure () -> String) {
            if !headers.contains(where: { $0.name == name }) { headers.append((name, value())) }
        }
        add("Roost-Node", status.node)
        add("Roost-Epoch", String(status.epoch))
        add(
            "Roost-Position",
            index.map { ChangeCursor.encode(cluster.positions.position(of: $0)) }
                ?? ClusterRoutes.position(status.takesWrites ? status.committedLSN : status.appliedLSN))
        if !status.takesWrites { add("Roost-Lag-Ms", String(min(status.lagMilliseconds, Int64(Int32.max)))) }
    }
}

/// `Roost-Min-Position: <cursor>` on a read (spec §13.3): the node answers
/// once it applied that position — of the key's app and mode, or for the
/// operator key a raw LSN — waiting up to `timeout`, else 503
/// `position_not_reached`.
enum ClusterPositionWait {
    static let header = "Roost-Min-Position"
    /// The longest a read waits for its position (spec §13.3: 1 s).
    static let timeout = Duration.seconds(1)
    static let notReached = APIError(
        status: 503, code: "position_not_reached",
        message: "this node has not applied the position of Roost-Min-Position within 1 s; retry or read elsewhere",
        retryAfterSeconds: 1)

    enum Requested {
        case position(UInt64)
        case refused(APIError)
    }

    /// A read's `Roost-Min-Position`: nil when it has none or is a write.
    static func requested(_ head: HTTPRequestHead) -> Requested? {
        guard !head.method.changesState, let text = head.headers[header] else { return nil }
        guard let position = ChangeCursor.decode(Substring(text)) else {
            return .refused(
                APIError(
                    status: 400, code: "invalid_field",
                    message: "Roost-Min-Position is not a position (c + 16 hex digits)",
                    field: header))
        }
        return .position(position)
    }

    /// Whether this node applied `position` of `index` (nil: a raw LSN).
    static func reached(_ position: UInt64, of index: IndexKey?, cluster: any ClusterControl) -> Bool {
        if let index { return cluster.positions.position(of: index) >= position }
        return cluster.localStatus.appliedLSN.rawValue >= position
    }

    /// Waits until `reached`, at most `timeout`; returns whether it was. An
    /// index's position moves only when the node applies a batch, so the
    /// wait is on the applied LSN moving past where it stands.
    static func wait(
        until position: UInt64, of index: IndexKey?, cluster: any ClusterControl
    ) async -> Bool {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while !reached(position, of: index, cluster: cluster) {
            let remaining = ContinuousClock.now.duration(to: deadline)
            guard remaining > .zero else { return false }
            let next =
                index == nil
                ? LogSequenceNumber(position) : cluster.localStatus.appliedLSN.advanced(by: 1)
            guard await cluster.waitUntilApplied(next, timeout: remaining) else {
                return reached(position, of: index, cluster: cluster)
            }
        }
        return true
    }
}

/// The headers of `GET /v1/cluster/snapshot` that describe the file, so that
/// the node installing it writes the checkpoint recovery checks it against.
package enum SnapshotHeaders {
    package static let startLSN = "Roost-Snapshot-LSN"
    package static let bytes = "Roost-Snapshot-Bytes"
    package static let checksum = "Roost-Snapshot-Checksum"
}

/// Streams a snapshot file, one chunk per writable signal; the reads run
/// off the event loop (a detached task), the writes follow the stream's
/// backpressure. Closes the file when done or aborted.
final class SnapshotFileStream: Sendable {
    /// The bytes read and written at once.
    static let chunkBytes = 256 * 1024

    private let descriptor: Int32
    private let bytes: UInt64
    private let stream: any HTTPBodyStream
    private let offset = Mutex<UInt64>(0)

    init(descriptor: Int32, bytes: UInt64, stream: any HTTPBodyStream) {
        self.descriptor = descriptor
        self.bytes = bytes
        self.stream = stream
    }

    /// Reads and writes the next chunk (or finishes).
    func next() {
        Task.detached { [self] in
            let start = offset.withLock { $0 }
            guard start < bytes else {
                close(descriptor)
                return stream.finish()
            }
            let count = Int(min(UInt64(Self.chunkBytes), bytes - start))
            var chunk = [UInt8](repeating: 0, count: count)
            let read = chunk.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, count, off_t(start)) }
            guard read == count else {
                close(descriptor)
                return stream.abort()  // the file is shorter than its checkpoint says: the client sees a cut body
            }
            offset.withLock { $0 = start + UInt64(count) }
            stream.write(chunk) { [self] signal in
                switch signal {
                case .writable: next()
                case .aborted: close(descriptor)
                }
            }
        }
    }
}
