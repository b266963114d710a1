import RoostHTTP
import RoostJSON
import RoostModel

/// An error answered to a client in the envelope of spec §2:
/// `{"error":{"code":"snake_case","message":"…","field":"name"}}`.
/// Codes are stable API; every code is listed in docs/api.md.
package struct APIError: Error, Sendable, Equatable {
    package var status: Int
    package var code: String
    package var message: String
    package var field: String?
    /// Seconds for a `Retry-After` header (429 and 503 only).
    package var retryAfterSeconds: Int?
    /// Methods for an `Allow` header (405 only).
    package var allowedMethods: [String]?
    /// Which limit refused the request (429 only): metrics count them apart.
    package var rateLimit: RateLimitReason?
    /// The cluster's leader for a `Roost-Leader` header (503 `not_leader` only).
    package var leaderURL: String?

    package init(
        status: Int, code: String, message: String, field: String? = nil, retryAfterSeconds: Int? = nil,
        allowedMethods: [String]? = nil
    ) {
        precondition(status >= 400 && status <= 599, "APIError status \(status) is not an error")
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retryAfterSeconds = retryAfterSeconds
        self.allowedMethods = allowedMethods
    }

    // MARK: - The codes shared by every route

    package static let unauthorized = APIError(
        status: 401, code: "unauthorized", message: "missing or invalid API key")
    package static let forbidden = APIError(
        status: 403, code: "forbidden", message: "this key lacks the capability for this request")

    /// 403 for an app key without `capability`: the message names it, so
    /// that a client (the console) can say which one is missing.
    package static func lacking(_ capability: Capability) -> APIError {
        APIError(status: 403, code: "forbidden", message: "this key lacks the capability \(capability.rawValue)")
    }

    /// 403 for the operator key on a route of an app's devices or people.
    package static func operatorActsOnApps(_ capability: Capability) -> APIError {
        APIError(
            status: 403, code: "forbidden",
            message: "the operator key manages apps and keys; this takes an app's secret key with the capability "
                + capability.rawValue)
    }

    /// 403 for an app key on an operator route.
    package static let operatorOnly = APIError(
        status: 403, code: "forbidden", message: "only the operator key may do this")

    package static func notFound(_ what: String = "route") -> APIError {
        APIError(status: 404, code: "not_found", message: "no such \(what)")
    }

    package static func invalidJSON(_ detail: String) -> APIError {
        APIError(status: 400, code: "invalid_json", message: "request body is not valid JSON: \(detail)")
    }

    package static func missingField(_ field: String) -> APIError {
        APIError(status: 400, code: "missing_field", message: "\(field) is required", field: field)
    }

    package static func invalidField(_ field: String, _ message: String) -> APIError {
        APIError(status: 400, code: "invalid_field", message: message, field: field)
    }

    package static func methodNotAllowed(_ allowed: [String]) -> APIError {
        APIError(
            status: 405, code: "method_not_allowed",
            message: "method not allowed; allowed: \(allowed.joined(separator: ", "))", allowedMethods: allowed)
    }

    /// 429 `rate_limited` with `Retry-After` (whole seconds ≥ 1, spec §2).
    package static func rateLimited(_ reason: RateLimitReason, retryAfterSeconds: Int) -> APIError {
        var error = APIError(
            status: 429, code: "rate_limited", message: reason.message, retryAfterSeconds: max(1, retryAfterSeconds))
        error.rateLimit = reason
        return error
    }

    package static func unavailable(_ message: String, retryAfterSeconds: Int = 1) -> APIError {
        APIError(status: 503, code: "unavailable", message: message, retryAfterSeconds: max(1, retryAfterSeconds))
    }

    /// Returns the HTTP response carrying this error's envelope.
    package var response: HTTPResponse {
        var writer = JSONWriter(reservingCapacity: 128)
        writer.beginObject()
        writer.key("error")
        writer.beginObject()
        writer.member("code", code)
        writer.member("message", message)
        if let field { writer.member("field", field) }
        writer.endObject()
        writer.endObject()
        var headers: [(name: String, value: String)] = [("Content-Type", "application/json")]
        if let retryAfterSeconds { headers.append(("Retry-After", String(retryAfterSeconds))) }
        if let allowedMethods { headers.append(("Allow", allowedMethods.joined(separator: ", "))) }
        if let leaderURL { headers.append(("Roost-Leader", leaderURL)) }
        return HTTPResponse(status: status, headers: headers, body: writer.bytes)
    }

    /// Returns the error for a request the HTTP layer refused before routing.
    package static func from(_ failure: HTTPRequestFailure) -> APIError {
        switch failure {
        case .badRequest(let reason):
            APIError(status: 400, code: "bad_request", message: "malformed HTTP request: \(reason)")
        case .headersTooLarge(let limitBytes):
            APIError(
                status: 431, code: "headers_too_large",
                message: "request line and headers exceed \(limitBytes) bytes")
        case .bodyTooLarge(let limitBytes):
            APIError(
                status: 413, code: "payload_too_large", message: "request body exceeds \(limitBytes) bytes")
        case .unsupportedTransferCoding(let coding):
            APIError(
                status: 501, code: "not_implemented",
                message: "transfer coding '\(sanitizedForMessage(coding))' is not supported")
        case .unsupportedVersion(let version):
            APIError(
                status: 505, code: "http_version_not_supported",
                message: "HTTP version '\(sanitizedForMessage(version))' is not supported")
        case .expectationFailed(let expectation):
            APIError(
                status: 417, code: "expectation_failed",
                message: "expectation '\(sanitizedForMessage(expectation))' is not supported; only 100-continue is")
        }
    }

    /// Returns at most 64 printable ASCII characters of client-supplied text.
    private static func sanitizedForMessage(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.prefix(64).filter { $0.value >= 0x20 && $0.value < 0x7F }))
    }
}

/// Which limit answered 429 `rate_limited` (docs/limits.md, "Rates").
package enum RateLimitReason: String, Sendable, Equatable, CaseIterable {
    /// The API key's own `rate_limit_per_second`.
    case key
    /// One push token registered again too often (the shard's per-token limit).
    case token
    /// Too many requests from one client address on the routes a mobile key
    /// or an identity token authorizes.
    case clientAddress = "client_address"
    /// More point-in-time exports streaming at once than `DeviceExport.concurrentMax`.
    case exports

    /// The envelope's message.
    var message: String {
        switch self {
        case .key: "rate limit exceeded for this key"
        case .token: RegistryRejection.tokenRateLimited(retryAfterSeconds: 1).message
        case .clientAddress: "too many requests from this address for this app"
        case .exports: "too many exports are streaming at once; try again when one is done"
        }
    }
}

/// Returns a 2xx JSON response with the given body.
package func jsonResponse(_ status: Int, _ writer: JSONWriter) -> HTTPResponse {
    var spareHeaders: [(name: String, value: String)] = []
    return jsonResponse(status, writer, reusing: &spareHeaders)
}

/// `jsonResponse(_:_:)` with its header fields in `spareHeaders` (an emptied
/// array a loop kept, taken from it).
package func jsonResponse(
    _ status: Int, _ writer: JSONWriter, reusing spareHeaders: inout [(name: String, value: String)]
) -> HTTPResponse {
    HTTPResponse(
        status: status, headers: answerHeaders(("Content-Type", "application/json"), reusing: &spareHeaders),
        body: writer.bytes)
}

/// An answer's header fields, in an array with room for the fields
/// `RequestObserver.finish` adds to every answer: an array built from a
/// literal has its literal's size and grew (a second allocation) on every
/// answer (issue 25).
package func answerHeaders(
    _ first: (name: String, value: String), _ second: (name: String, value: String)? = nil
) -> [(name: String, value: String)] {
    var spare: [(name: String, value: String)] = []
    return answerHeaders(first, second, reusing: &spare)
}

/// `answerHeaders(_:_:)` in `spare` (an emptied array a loop kept, taken
/// from it) when it has the room, else in a new array.
package func answerHeaders(
    _ first: (name: String, value: String), _ second: (name: String, value: String)? = nil,
    reusing spare: inout [(name: String, value: String)]
) -> [(name: String, value: String)] {
    precondition(spare.isEmpty, "answer headers over \(spare.count) fields")
    var headers: [(name: String, value: String)] = []
    swap(&headers, &spare)
    headers.reserveCapacity(2 + RequestObserver.fieldsAddedMax)
    headers.append(first)
    if let second { headers.append(second) }
    return headers
}

extension APIError {
    /// The envelope of a rule the model refused: its code, status and field.
    package init(_ rejection: RegistryRejection) {
        switch rejection {
        case .tokenRateLimited(let seconds):
            self = .rateLimited(.token, retryAfterSeconds: seconds)
        default:
            self.init(
                status: rejection.httpStatus, code: rejection.code, message: rejection.message, field: rejection.field)
        }
    }

    /// The answer when the log could not take a write (spec §2: 503 with
    /// Retry-After).
    package static let logUnavailable = APIError.unavailable(
        "the log cannot take this write now; retry later (with the same Idempotency-Key, a retry learns whether it "
            + "was applied)")

    /// A write sent to a cluster follower (spec §13.4): 503 `not_leader`
    /// with `Retry-After: 1`; nothing applied.
    package static let notLeader = notLeader(leaderURL: nil, known: true)

    /// A write sent to a node that does not lead (spec §13.4): 503
    /// `not_leader` with `Roost-Leader: <url>` when a leader is known, else
    /// 503 `no_leader`; `Retry-After: 1` either way. Nothing applied.
    package static func notLeader(leaderURL: String?, known: Bool = false) -> APIError {
        guard let leaderURL else {
            return known
                ? APIError(
                    status: 503, code: "not_leader", message: "this node is a follower: send writes to the leader",
                    retryAfterSeconds: 1)
                : APIError(
                    status: 503, code: "no_leader", message: "no node leads the cluster now; retry later",
                    retryAfterSeconds: 1)
        }
        var error = APIError(
            status: 503, code: "not_leader", message: "this node is a follower: send writes to the leader",
            retryAfterSeconds: 1)
        error.leaderURL = leaderURL
        return error
    }
}
