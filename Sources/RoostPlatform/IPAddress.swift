import CSystemShims

/// An IPv4 or IPv6 address: 16 bytes in network order, an IPv4 address in
/// its IPv4-mapped IPv6 form (`::ffff:a.b.c.d`), so that one value holds
/// either family and a v4 client on a dual-stack socket is the same address
/// as on a v4 one.
package struct IPAddress: Hashable, Sendable, CustomStringConvertible {
    /// Bytes 0–7 (the IPv6 routing prefix, /64), big-endian.
    package let high: UInt64
    /// Bytes 8–15, big-endian.
    package let low: UInt64

    /// The longest text `init(parsing:)` reads (an IPv6 address with an
    /// embedded IPv4 one is 45 characters).
    package static let textBytesMax = 45

    package init(bytes: [UInt8]) {
        precondition(bytes.count == 16, "an IP address has 16 bytes, got \(bytes.count)")
        self.high = bytes[0..<8].reduce(0) { $0 << 8 | UInt64($1) }
        self.low = bytes[8..<16].reduce(0) { $0 << 8 | UInt64($1) }
    }

    /// The IPv4 address `a.b.c.d` as `UInt32(a) << 24 | … | d`.
    package init(ipv4: UInt32) {
        self.high = 0
        self.low = 0xFFFF << 32 | UInt64(ipv4)
    }

    /// Parses an IPv4 dotted quad or IPv6 text (no zone, no brackets, no
    /// port); nil for anything else.
    package init?(parsing text: Substring) {
        guard !text.isEmpty, text.utf8.count <= IPAddress.textBytesMax else { return nil }
        var bytes = [UInt8](repeating: 0, count: 16)
        let parsed = String(text).withCString { roost_parse_ip_address($0, &bytes) }
        guard parsed == 1 else { return nil }
        self.init(bytes: bytes)
    }

    /// Whether this is an IPv4 address (IPv4-mapped).
    package var isIPv4: Bool { high == 0 && low >> 32 == 0xFFFF }

    /// The 16 bytes in network order.
    package var bytes: [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: high >> (56 - 8 * $0)) }
            + (0..<8).map { UInt8(truncatingIfNeeded: low >> (56 - 8 * $0)) }
    }

    /// Dotted quad for IPv4, RFC 5952 text for IPv6.
    package var description: String {
        var text = [CChar](repeating: 0, count: 64)
        let written = roost_format_ip_address(bytes, &text, text.count)
        precondition(written == 0, "inet_ntop refused 16 address bytes")
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

extension TCPSocket {
    /// Returns the address of a connected socket's peer, or nil when the
    /// socket has none (the peer already went, or not an IP socket).
    package static func peerAddress(of socket: FileDescriptor) -> IPAddress? {
        var bytes = [UInt8](repeating: 0, count: 16)
        guard roost_peer_address(socket.rawValue, &bytes) == 0 else { return nil }
        return IPAddress(bytes: bytes)
    }
}
