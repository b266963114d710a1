import Glibc
import RoostAPI
import RoostCluster
import RoostHTTP
import RoostModel
import RoostPlatform
import RoostStorage

/// The parsed flags of `roost serve`, with the defaults of spec §1.
struct ServeOptions {
    /// The most shards a server runs; more than a few per core only adds hops.
    static let shardsMax = 256

    /// The address to listen on, without brackets: `localhost`, an IPv4
    /// dotted quad or an IPv6 address.
    var host = "127.0.0.1"
    var port: UInt16 = 8080
    var dataDirectory = "./roost-data"
    var fsync = FsyncPolicy.always
    var shards: Int
    var limits = HTTPServerLimits()
    /// Log growth that triggers a snapshot (`--snapshot-log-bytes`).
    var snapshotLogBytes = 256 * 1024 * 1024
    var eventLoops: Int
    /// Proxies whose `X-Forwarded-For` names the client (`--trusted-proxy`, repeatable).
    var trustedProxies: [IPAddress] = []
    /// One `http.request` log line per answered request (`--access-log`).
    var accessLog = false
    /// Devices whose latest change each index's change feed keeps (`--changes-retained`, spec §9).
    var changesRetained = ChangeFeed.retainedDefault
    /// Cluster mode (spec §13.8, `--cluster` and the flags that go with it); nil on one node.
    var cluster: ClusterOptions?

    var httpConfiguration: HTTPServerConfiguration {
        // The listener takes a numeric address; `localhost` is the IPv4 loopback one.
        HTTPServerConfiguration(
            host: host == "localhost" ? "127.0.0.1" : host, port: port, eventLoopCount: eventLoops, limits: limits)
    }

    /// Returns `HOST:PORT` as an operator writes it: an IPv6 host in brackets.
    func address(port: UInt16) -> String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    struct ParseError: Error, CustomStringConvertible {
        var description: String
    }

    /// What a `roost serve` command line asks for.
    enum Parsed {
        case serve(ServeOptions)
        /// `--help` or `-h`: print the usage to stdout, exit 0.
        case help
    }

    /// Returns the host and port of `--listen`: `HOST:PORT` with an IPv4
    /// address or `localhost`, or `[IPv6]:PORT`.
    static func parseListen(_ text: String) throws -> (host: String, port: UInt16) {
        let bad = ParseError(description: "--listen must be HOST:PORT or [IPv6]:PORT, got '\(text)'")
        let host: Substring
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw bad
            }
            host = text[text.index(after: text.startIndex)..<close]
            portText = text[text.index(close, offsetBy: 2)...]
            guard isNumericAddress(host, family: AF_INET6) else {
                throw ParseError(description: "--listen: '\(host)' is not an IPv6 address")
            }
        } else {
            guard let colon = text.lastIndex(of: ":") else { throw bad }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
            if host.contains(":") {
                throw ParseError(
                    description: "--listen: an IPv6 address goes in brackets, e.g. [::1]:8080, got '\(text)'")
            }
            guard host == "localhost" || isNumericAddress(host, family: AF_INET) else {
                throw ParseError(
                    description: "--listen: '\(host)' is not an IPv4 address, [IPv6] address or localhost")
            }
        }
        guard let port = UInt16(portText) else { throw bad }
        return (String(host), port)
    }

    /// Returns whether `host` is a numeric address of `family` (inet_pton).
    static func isNumericAddress(_ host: Substring, family: Int32) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 16)
        return inet_pton(family, String(host), &buffer) == 1
    }

    static func parse(_ arguments: [String], coreCount: Int) throws -> Parsed {
        var options = ServeOptions(shards: max(1, coreCount), eventLoops: max(1, coreCount))
        var index = 0
        func value(_ flag: String) throws -> String {
            index += 1
            guard index < arguments.count else { throw ParseError(description: "\(flag) needs a value") }
            return arguments[index]
        }
        /// A cluster name or node id: 1 to `lengthMax` characters of `a-z0-9-` (spec §13.8).
        func identifier<Identifier>(_ flag: String, lengthMax: Int, _ make: (String) -> Identifier?) throws
            -> Identifier
        {
            let text = try value(flag)
            guard let made = make(text) else {
                throw ParseError(
                    description: "\(flag) must be 1 to \(lengthMax) characters of a-z, 0-9 and -, got '\(text)'")
            }
            return made
        }
        func positive(_ flag: String, max: Int) throws -> Int {
            let text = try value(flag)
            guard let number = Int(text), number >= 1, number <= max else {
                throw ParseError(description: "\(flag) must be an integer from 1 to \(max), got '\(text)'")
            }
            return number
        }
        var clusterName: ClusterName?
        var nodeID: NodeID?
        var endpoints: [EtcdEndpoint]?
        var advertise: String?
        var leaseTTL: Int64?
        var readLag: Int64?
        var etcdTimeout: Int64?
        var logRetain: Int?
        while index < arguments.count {
            let flag = arguments[index]
            switch flag {
            case "--help", "-h":
                return .help
            case "--cluster":
                clusterName = try identifier(flag, lengthMax: ClusterName.lengthMax, ClusterName.init)
            case "--node-id":
                nodeID = try identifier(flag, lengthMax: NodeID.lengthMax, NodeID.init)
            case "--etcd":
                do {
                    endpoints = try EtcdEndpoint.parseList(try value(flag))
                } catch let error as EtcdEndpointError {
                    throw ParseError(description: error.description)
                }
            case "--advertise":
                let text = try value(flag)
                guard text.hasPrefix("http://") || text.hasPrefix("https://"),
                    text.utf8.count <= LeaderRecord.urlBytesMax,
                    !text.utf8.contains(0x20)
                else {
                    throw ParseError(description: "--advertise must be an http:// or https:// URL, got '\(text)'")
                }
                advertise = text
            case "--lease-ttl-s":
                leaseTTL = Int64(try positive(flag, max: 3_600))
            case "--read-lag-ms":
                readLag = Int64(try positive(flag, max: 3_600_000))
            case "--etcd-timeout-ms":
                etcdTimeout = Int64(try positive(flag, max: 3_600_000))
            case "--log-retain-bytes":
                logRetain = try positive(flag, max: Int(Int64.max / 2))
            case "--listen":
                (options.host, options.port) = try parseListen(try value(flag))
            case "--data":
                options.dataDirectory = try value(flag)
            case "--fsync":
                let text = try value(flag)
                guard let policy = FsyncPolicy(rawValue: text) else {
                    throw ParseError(description: "--fsync must be always, everysec or never, got '\(text)'")
                }
                options.fsync = policy
            case "--shards":
                options.shards = try positive(flag, max: shardsMax)
            case "--event-loops":
                options.eventLoops = try positive(flag, max: 256)
            case "--snapshot-log-bytes":
                options.snapshotLogBytes = try positive(flag, max: Int(Int32.max) * 16)
            case "--max-connections":
                options.limits.connectionsMax = try positive(flag, max: 1_000_000)
            case "--header-timeout-ms":
                options.limits.headerReadTimeout = .milliseconds(try positive(flag, max: 3_600_000))
            case "--body-timeout-ms":
                options.limits.bodyReadTimeout = .milliseconds(try positive(flag, max: 3_600_000))
            case "--access-log":
                options.accessLog = true
            case "--changes-retained":
                options.changesRetained = try positive(flag, max: ChangeFeed.retainedLimit)
            case "--idle-timeout-ms":
                options.limits.keepAliveIdleTimeout = .milliseconds(try positive(flag, max: 3_600_000))
            case "--trusted-proxy":
                let text = try value(flag)
                guard let address = IPAddress(parsing: text[...]) else {
                    throw ParseError(description: "--trusted-proxy must be an IPv4 or IPv6 address, got '\(text)'")
                }
                guard options.trustedProxies.count < ClientAddressLimiter.trustedProxiesMax else {
                    throw ParseError(description: "at most \(ClientAddressLimiter.trustedProxiesMax) --trusted-proxy")
                }
                options.trustedProxies.append(address)
            case "--first-byte-timeout-ms":
                options.limits.firstByteTimeout = .milliseconds(try positive(flag, max: 3_600_000))
            case "--partial-head-evict-after-ms":
                options.limits.partialHeadEvictableAfter = .milliseconds(try positive(flag, max: 3_600_000))
            default:
                throw ParseError(description: "unknown flag '\(flag)'")
            }
            index += 1
        }
        if let clusterName {
            guard let nodeID, let endpoints else {
                throw ParseError(description: "--cluster needs --node-id and --etcd")
            }
            var cluster = ClusterOptions(name: clusterName, node: nodeID, endpoints: endpoints, advertise: advertise)
            if let leaseTTL { cluster.leaseTTLSeconds = leaseTTL }
            if let readLag { cluster.readLagMilliseconds = readLag }
            if let etcdTimeout { cluster.etcdTimeoutMilliseconds = etcdTimeout }
            if let logRetain { cluster.logRetainBytes = logRetain }
            options.cluster = cluster
        } else if nodeID != nil || endpoints != nil || advertise != nil || leaseTTL != nil || readLag != nil
            || etcdTimeout != nil || logRetain != nil
        {
            throw ParseError(
                description: "--node-id, --etcd, --advertise, --lease-ttl-s, --read-lag-ms, --log-retain-bytes and "
                    + "--etcd-timeout-ms need --cluster")
        }
        return .serve(options)
    }
}
