import RoostHTTP
import RoostStorage

/// The parsed flags of `roost serve`, with the defaults of spec §1.
struct ServeOptions {
    /// The most shards a server runs; more than a few per core only adds hops.
    static let shardsMax = 256

    var host = "127.0.0.1"
    var port: UInt16 = 8080
    var dataDirectory = "./roost-data"
    var fsync = FsyncPolicy.always
    var shards: Int
    var limits = HTTPServerLimits()
    /// Log growth that triggers a snapshot (`--snapshot-log-bytes`).
    var snapshotLogBytes = 256 * 1024 * 1024
    var eventLoops: Int
    /// One `http.request` log line per answered request (`--access-log`).
    var accessLog = false

    var httpConfiguration: HTTPServerConfiguration {
        // The listener takes an IPv4 address; `localhost` is the loopback one.
        HTTPServerConfiguration(
            host: host == "localhost" ? "127.0.0.1" : host, port: port, eventLoopCount: eventLoops, limits: limits)
    }

    struct ParseError: Error, CustomStringConvertible {
        var description: String
    }

    static func parse(_ arguments: [String], coreCount: Int) throws -> ServeOptions {
        var options = ServeOptions(shards: max(1, coreCount), eventLoops: max(1, coreCount))
        var index = 0
        func value(_ flag: String) throws -> String {
            index += 1
            guard index < arguments.count else { throw ParseError(description: "\(flag) needs a value") }
            return arguments[index]
        }
        func positive(_ flag: String, max: Int) throws -> Int {
            let text = try value(flag)
            guard let number = Int(text), number >= 1, number <= max else {
                throw ParseError(description: "\(flag) must be an integer from 1 to \(max), got '\(text)'")
            }
            return number
        }
        while index < arguments.count {
            let flag = arguments[index]
            switch flag {
            case "--listen":
                let text = try value(flag)
                guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]),
                    !text[..<colon].isEmpty
                else { throw ParseError(description: "--listen must be HOST:PORT, got '\(text)'") }
                options.host = String(text[..<colon])
                options.port = port
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
            case "--idle-timeout-ms":
                options.limits.keepAliveIdleTimeout = .milliseconds(try positive(flag, max: 3_600_000))
            default:
                throw ParseError(description: "unknown flag '\(flag)'")
            }
            index += 1
        }
        return options
    }
}
