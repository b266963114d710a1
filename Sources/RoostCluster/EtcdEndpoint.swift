import RoostPlatform

/// Why an `--etcd` URL was refused.
package enum EtcdEndpointError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The list is empty, or holds an empty entry.
    case empty
    /// More URLs than `EtcdEndpoint.listCountMax`.
    case tooMany(Int)
    /// Not `http://HOST:PORT` with a numeric host (or `localhost`) and a port 1–65535.
    case malformed(String)

    package var description: String {
        switch self {
        case .empty: "--etcd needs at least one URL, without empty entries"
        case .tooMany(let count): "--etcd names \(count) URLs; at most \(EtcdEndpoint.listCountMax)"
        case .malformed(let url):
            "--etcd URL \(url) is not http://HOST:PORT (an IPv4 address, [IPv6] or localhost; plain HTTP only)"
        }
    }
}

/// One etcd member's client URL, `http://HOST:PORT` (plain HTTP in this
/// version, spec §13.8). The host is an IP address (`localhost` is read as
/// 127.0.0.1): the client resolves no names.
package struct EtcdEndpoint: Hashable, Sendable, CustomStringConvertible {
    /// The most URLs `--etcd` takes (etcd clusters have 3, 5 or 7 members).
    package static let listCountMax = 16

    package let address: HTTPClientAddress

    package init(address: HTTPClientAddress) {
        self.address = address
    }

    /// Parses `http://HOST:PORT`, with an optional trailing `/`.
    package init(parsing url: String) throws(EtcdEndpointError) {
        guard url.hasPrefix("http://") else { throw .malformed(url) }
        var rest = Substring(url.dropFirst("http://".count))
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        let host: Substring
        let portText: Substring
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]"), rest[rest.index(after: close)...].hasPrefix(":") else {
                throw .malformed(url)
            }
            host = rest[rest.index(after: rest.startIndex)..<close]
            portText = rest[rest.index(close, offsetBy: 2)...]
            guard host.contains(":") else { throw .malformed(url) }
        } else {
            guard let colon = rest.lastIndex(of: ":") else { throw .malformed(url) }
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
            guard !host.contains(":") else { throw .malformed(url) }
        }
        guard !portText.isEmpty, portText.count <= 5, portText.allSatisfy({ $0.isASCII && $0.isNumber }),
            let port = UInt16(portText), port > 0
        else { throw .malformed(url) }
        let numericHost = host == "localhost" ? "127.0.0.1" : String(host)
        guard IPAddress(parsing: Substring(numericHost)) != nil else { throw .malformed(url) }
        address = HTTPClientAddress(host: numericHost, port: port)
    }

    /// Parses `--etcd URL[,URL…]`: at least one, at most `listCountMax`, no repeats.
    package static func parseList(_ text: String) throws(EtcdEndpointError) -> [EtcdEndpoint] {
        let parts = text.split(separator: ",", omittingEmptySubsequences: false)
        guard !text.isEmpty, parts.allSatisfy({ !$0.isEmpty }) else { throw .empty }
        guard parts.count <= listCountMax else { throw .tooMany(parts.count) }
        var endpoints: [EtcdEndpoint] = []
        for part in parts {
            let endpoint = try EtcdEndpoint(parsing: String(part))
            guard !endpoints.contains(endpoint) else { throw .malformed(String(part)) }
            endpoints.append(endpoint)
        }
        return endpoints
    }

    /// `http://host:port`.
    package var description: String { "http://\(address)" }
}
