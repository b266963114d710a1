import Glibc
import RoostCluster
import RoostClusterNode
import RoostPlatform
import RoostTelemetry

/// The cluster flags of `roost serve` (spec §13.8).
struct ClusterOptions {
    var name: ClusterName
    var node: NodeID
    var endpoints: [EtcdEndpoint]
    /// `--advertise`: nil means `http://` + the address listened on.
    var advertise: String?
    var leaseTTLSeconds: Int64 = 2
    var readLagMilliseconds: Int64 = 2_000
    var etcdTimeoutMilliseconds: Int64 = 1_000
    var logRetainBytes = ClusterNodeConfiguration.logRetainBytesDefault
}

/// What a data directory records of its cluster (spec §13.8): the cluster's
/// name and the node's id, written at the first start in cluster mode, so
/// that another id or another cluster later is refused.
enum ClusterMembershipFile {
    static let name = "cluster-node"
    static let bytesMax = 256

    /// Writes the file at the first start; throws a one-line refusal when
    /// the directory belongs to another cluster or node.
    static func claim(directory: String, cluster: ClusterName, node: NodeID) throws -> Bool {
        let path = directory + "/" + name
        let wanted = "cluster \(cluster.rawValue)\nnode \(node.rawValue)\n"
        if let bytes = try DurableFile.readIfExists(path: path, limitBytes: bytesMax) {
            let found = String(decoding: bytes, as: UTF8.self)
            guard found == wanted else {
                let lines = found.split(separator: "\n")
                let foundCluster = lines.first { $0.hasPrefix("cluster ") }?.dropFirst(8) ?? "?"
                let foundNode = lines.first { $0.hasPrefix("node ") }?.dropFirst(5) ?? "?"
                if foundCluster != cluster.rawValue[...] {
                    throw ClusterSetupError(
                        "\(directory) belongs to cluster '\(foundCluster)', not '\(cluster)' (\(path))")
                }
                throw ClusterSetupError(
                    "\(directory) is node '\(foundNode)' of cluster '\(cluster)'; it cannot start as '\(node)' (\(path))"
                )
            }
            return false
        }
        try DurableFile.replace(path: path, with: Array(wanted.utf8))
        return true
    }
}

struct ClusterSetupError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The cluster's record in etcd (`ClusterKeys.clusterRecord`), written once by `roost cluster init`.
enum ClusterRecord {
    static let value = Array("roost-cluster 1".utf8)
    /// How often a node that cannot reach etcd at start says so.
    static let unreachableLogIntervalSeconds = 5
    /// A node that must re-seed asks the members this many times, a second
    /// apart, for a snapshot that reaches the group log's start.
    static let reseedAttemptsMax = 60

    /// `roost cluster init`: writes the record unless it exists.
    static func initialise(endpoints: [EtcdEndpoint], cluster: ClusterName) -> Int32 {
        let keys = ClusterKeys(cluster: cluster)
        let client = EtcdClient(endpoints: endpoints)
        defer { client.close() }
        let request = EtcdRequest.transaction(
            compares: [EtcdCompare(key: keys.clusterRecord, .equal, .version(0))],
            success: [.put(key: keys.clusterRecord, value: value, lease: nil)], failure: [])
        switch client.perform(request) {
        case .transaction(true, let revision, _):
            StandardStreams.out("cluster \(cluster) initialised in etcd at revision \(revision.rawValue)")
            return 0
        case .transaction(false, _, _):
            StandardStreams.error(
                "roost: cluster \(cluster) already exists in etcd (\(String(decoding: keys.clusterRecord, as: UTF8.self)))"
            )
            return 2
        default:
            StandardStreams.error(
                "roost: cannot reach etcd at \(endpoints.map(\.description).joined(separator: ",")): "
                    + "\(client.lastError.map { "\($0)" } ?? "no answer")")
            return 2
        }
    }

    /// At `roost serve --cluster`: waits (retrying, logging every few
    /// seconds) until etcd answers; throws when the cluster was not initialised.
    static func requireInitialised(endpoints: [EtcdEndpoint], cluster: ClusterName, logger: Logger) throws {
        let keys = ClusterKeys(cluster: cluster)
        let client = EtcdClient(endpoints: endpoints)
        defer { client.close() }
        var lastLogged: ContinuousClock.Instant?
        while true {
            do {
                let found = try client.range(.key(keys.clusterRecord), limit: 1)
                guard found.keyValues.first?.value == value else {
                    throw ClusterSetupError(
                        "cluster '\(cluster)' was not initialised in etcd: run roost cluster init --etcd "
                            + "\(endpoints.map(\.description).joined(separator: ",")) --cluster \(cluster)")
                }
                return
            } catch let error as EtcdClientError {
                let now = ContinuousClock.now
                if lastLogged.map({ now - $0 >= .seconds(unreachableLogIntervalSeconds) }) ?? true {
                    lastLogged = now
                    logger.warning("cluster.etcd_unreachable") { line in
                        line.field("etcd", endpoints.map(\.description).joined(separator: ","))
                        line.field("error", "\(error)")
                        line.field("message", "cannot reach etcd; retrying")
                    }
                    logger.flush()
                }
                var pause = timespec(tv_sec: 0, tv_nsec: 200_000_000)
                nanosleep(&pause, nil)
            }
        }
    }
}

/// `roost cluster init --etcd URL[,URL…] --cluster NAME`.
func clusterCommand(_ arguments: [String]) -> Never {
    if asksForHelp(arguments) { printUsage(Usage.cluster) }
    guard arguments.first == "init" else { fail("unknown cluster command\n\(Usage.cluster)") }
    var endpoints: [EtcdEndpoint]?
    var cluster: ClusterName?
    var index = 1
    while index < arguments.count {
        let flag = arguments[index]
        guard index + 1 < arguments.count else { fail("\(flag) needs a value\n\(Usage.cluster)") }
        let value = arguments[index + 1]
        switch flag {
        case "--etcd":
            do {
                endpoints = try EtcdEndpoint.parseList(value)
            } catch {
                fail("\(error)")
            }
        case "--cluster":
            guard let name = ClusterName(value) else {
                fail("--cluster must be 1 to \(ClusterName.lengthMax) characters of a-z, 0-9 and -, got '\(value)'")
            }
            cluster = name
        default:
            fail("unknown flag '\(flag)'\n\(Usage.cluster)")
        }
        index += 2
    }
    guard let endpoints, let cluster else { fail("cluster init needs --etcd and --cluster\n\(Usage.cluster)") }
    exit(ClusterRecord.initialise(endpoints: endpoints, cluster: cluster))
}
