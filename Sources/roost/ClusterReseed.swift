import Glibc
import RoostAPI
import RoostCluster
import RoostPlatform
import RoostStorage
import RoostTelemetry

/// Re-seeding a node (spec §13.6): when etcd no longer holds its next
/// position (the group log was purged past it, or it joins a cluster whose
/// log no longer starts at 1), it fetches a live node's newest checkpointed
/// snapshot (`GET /v1/cluster/snapshot`, operator key), installs it as the
/// whole state of its closed directory, and opens again: the group log goes
/// on from the snapshot's start LSN.
enum ClusterReseed {
    /// A fetch's connect, and each read, waits at most this long.
    static let stepTimeout = Duration.seconds(10)
    /// The file the snapshot is written to before it is installed.
    static let partialName = "reseed.partial"

    /// A live node that can hand its snapshot over.
    struct Source {
        var node: String
        var url: String
        var checkpointLSN: LogSequenceNumber
    }

    /// The members etcd lists (other than `node`) whose snapshot reaches
    /// the group log's start (their checkpoint + 1 ≥ `groupLogStart`), most
    /// recent snapshot first.
    static func sources(
        endpoints: [EtcdEndpoint], cluster: ClusterName, node: NodeID, groupLogStart: LogSequenceNumber
    ) throws -> [Source] {
        let keys = ClusterKeys(cluster: cluster)
        let client = EtcdClient(endpoints: endpoints)
        defer { client.close() }
        let found = try client.range(.prefix(keys.membersPrefix))
        var sources: [Source] = []
        for (id, record) in keys.members(in: found.keyValues) {
            guard id != node.rawValue, record.checkpointLSN.rawValue + 1 >= groupLogStart.rawValue,
                record.checkpointLSN.rawValue > 0
            else { continue }
            sources.append(Source(node: id, url: record.url, checkpointLSN: record.checkpointLSN))
        }
        return sources.sorted { $0.checkpointLSN > $1.checkpointLSN }
    }

    /// Fetches `source`'s snapshot into `directory` and installs it; returns its start LSN.
    static func install(from source: Source, directory: String, adminKey: String) throws -> LogSequenceNumber {
        let address: HTTPClientAddress
        do {
            address = try EtcdEndpoint(parsing: source.url).address
        } catch {
            throw ClusterSetupError("member \(source.node) advertises \(source.url), not an http://HOST:PORT URL")
        }
        let connection = try HTTPClientConnection(to: address, deadline: .now + stepTimeout)
        defer { connection.close() }
        try connection.sendGet(
            path: "/v1/cluster/snapshot", hostHeader: address.description,
            headers: [("Authorization", "Bearer \(adminKey)")], deadline: .now + stepTimeout)
        let head = try connection.readHead(deadline: .now + stepTimeout)
        func header(_ name: String) -> String? { head.field(name) }
        guard head.status == 200 else {
            throw ClusterSetupError("\(source.url) answered \(head.status) to the snapshot")
        }
        guard let startText = header(SnapshotHeaders.startLSN), let start = UInt64(startText), start > 0,
            let bytesText = header(SnapshotHeaders.bytes), let bytes = UInt64(bytesText),
            let checksumText = header(SnapshotHeaders.checksum), let checksum = UInt32(checksumText)
        else { throw ClusterSetupError("\(source.url)'s snapshot answer lacks its description headers") }
        let partial = directory + "/" + partialName
        let descriptor = open(partial, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw ClusterSetupError("cannot create \(partial): errno \(errno)") }
        var received: UInt64 = 0
        do {
            defer { close(descriptor) }
            while let piece = try connection.readBodyPiece(deadline: .now + stepTimeout) {
                try DurableFile.writeAll(fd: descriptor, bytes: piece, subject: partial)
                received += UInt64(piece.count)
            }
            guard received == bytes else {
                throw ClusterSetupError("\(source.url) sent \(received) bytes of a \(bytes)-byte snapshot")
            }
            guard fdatasync(descriptor) == 0 else { throw ClusterSetupError("fdatasync \(partial): errno \(errno)") }
        } catch {
            unlink(partial)
            throw error
        }
        try SnapshotInstall.install(
            directory: directory, snapshotFile: partial,
            checkpoint: Checkpoint(
                sequence: 1, snapshotLSN: LogSequenceNumber(start), snapshotBytes: bytes, snapshotChecksum: checksum))
        return LogSequenceNumber(start)
    }
}
