import RoostPlatform
import RoostTelemetry

/// Why the server itself refused a connection or a request, or gave up on a
/// peer (docs/metrics-and-logs.md, `roost_http_refusals_total{reason}`).
public enum HTTPRefusalReason: String, CaseIterable, Sendable {
    /// Accepted and closed at once: `connectionsMax` connections were open,
    /// none idle enough to evict, and the probe reserve full.
    case connectionsMax = "connections_max"
    /// An idle connection closed at `connectionsMax` to let a newcomer in
    /// (one that never spoke first, else the one idle longest).
    case evictedAtCap = "evicted_at_cap"
    /// A connection sent nothing within `firstByteTimeout`.
    case firstByteTimeout = "first_byte_timeout"
    /// accept(2) ran out of descriptors or memory: the loop paused accepting.
    case acceptPaused = "accept_paused"
    /// The head did not arrive within `headerReadTimeout`.
    case headerTimeout = "header_timeout"
    /// The body did not arrive within `bodyReadTimeout`.
    case bodyTimeout = "body_timeout"
    /// The peer read nothing for `writeStallTimeout`.
    case writeStall = "write_stall"
    /// 400: malformed framing or syntax.
    case badRequest = "bad_request"
    /// 431: request line and headers over `headBytesMax` or `headerFieldsMax`.
    case headersTooLarge = "headers_too_large"
    /// 413: a body over the route's limit.
    case bodyTooLarge = "body_too_large"
    /// 501: a transfer coding other than chunked.
    case unsupportedTransferCoding = "unsupported_transfer_coding"
    /// 505: an HTTP version other than 1.0 or 1.1.
    case unsupportedVersion = "unsupported_version"
    /// 417: an `Expect` other than `100-continue`.
    case expectationFailed = "expectation_failed"

    /// The reason of a request the parser refused.
    package init(_ failure: HTTPRequestFailure) {
        switch failure {
        case .badRequest: self = .badRequest
        case .headersTooLarge: self = .headersTooLarge
        case .bodyTooLarge: self = .bodyTooLarge
        case .unsupportedTransferCoding: self = .unsupportedTransferCoding
        case .unsupportedVersion: self = .unsupportedVersion
        case .expectationFailed: self = .expectationFailed
        }
    }

    /// Returns why a connection that `hasTimedOut` did so, or nil for a
    /// close that is no refusal (an idle keep-alive connection, or a closing
    /// one whose linger ended). A state whose own deadline has not passed
    /// timed out because its output stalled.
    package static func afterTimeout(
        _ state: HTTPConnectionState, limits: HTTPServerLimits, now: LoopInstant
    ) -> HTTPRefusalReason? {
        switch state {
        case .lingering: return nil
        case .awaitingFirstByte(let since):
            let deadline = min(limits.firstByteTimeout, limits.keepAliveIdleTimeout)
            return now - since > deadline ? .firstByteTimeout : .writeStall
        case .awaitingRequest(let since): return now - since > limits.keepAliveIdleTimeout ? nil : .writeStall
        case .readingHead(_, let since): return now - since > limits.headerReadTimeout ? .headerTimeout : .writeStall
        case .readingBody(_, let since): return now - since > limits.bodyReadTimeout ? .bodyTimeout : .writeStall
        case .awaitingAnswers, .finishingLastRequest, .draining, .closing: return .writeStall
        }
    }
}

/// What the server has done since it started, summed over its loops at the
/// time of the call (a scrape).
public struct HTTPServerStatistics: Sendable, Equatable {
    /// Connections open now.
    public var openConnections: Int
    /// Connections accepted and served (not counting those refused at `connectionsMax`).
    public var acceptedConnections: UInt64
    /// Keep-alive connections closed after `keepAliveIdleTimeout`.
    public var idleClosedConnections: UInt64
    /// Times a request was read and left waiting because its tenant had its share
    /// of requests in progress on a busy loop while tenants contended
    /// (`TenantShare`).
    public var tenantWaits: UInt64
    /// Refusals by reason; every reason is present.
    public var refusals: [HTTPRefusalReason: UInt64]
    /// Connections open now whose answers wait for the peer to read: the
    /// socket takes no more, and no request of theirs is in progress or
    /// waiting for its turn. A client that never reads stays here until
    /// `writeStallTimeout` (a stream's producer waits once its window is full).
    public var writeBlockedConnections: Int
}

/// One loop's counters: written by that loop only (relaxed adds on cells no
/// other thread writes), summed by `HTTPServer.statistics`.
struct LoopCounters: Sendable {
    static let accepted = 0
    static let idleClosed = 1
    static let tenantWaits = 2
    static let firstRefusal = 3
    static let count = firstRefusal + HTTPRefusalReason.allCases.count

    let cells = CounterCells(count: LoopCounters.count)

    static func slot(_ reason: HTTPRefusalReason) -> Int {
        // A short scan of a static array: refusals are rare next to requests.
        guard let index = HTTPRefusalReason.allCases.firstIndex(of: reason) else {
            preconditionFailure("refusal reason \(reason) missing from allCases")
        }
        return firstRefusal + index
    }
}
