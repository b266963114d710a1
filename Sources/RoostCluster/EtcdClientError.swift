/// Why the etcd client could not give an answer: what the cluster is told
/// (`failure`, one of etcd's outcomes) and what happened (`reason`, for the
/// log and the metrics), with the endpoint it happened on.
package struct EtcdClientError: Error, Equatable, Sendable, CustomStringConvertible {
    /// What happened, in more detail than `EtcdFailure`.
    package enum Reason: Equatable, Sendable {
        /// The HTTP exchange failed: connect, send, receive, framing, timeout.
        case http(HTTPClientError)
        /// etcd answered with an error: its HTTP status, gRPC code (when the
        /// body named one) and message.
        case etcd(status: Int, code: Int?, message: String)
        /// A keep-alive answered 200 without a TTL: etcd 3.4's way of saying
        /// the lease is gone (expired or revoked).
        case leaseLost
        /// A 2xx answer whose JSON is not what the route returns (a missing
        /// or mistyped field, bad base64): a bug here or in etcd.
        case malformedAnswer(String)
        /// Every endpoint was tried and none could be reached.
        case noEndpointReachable
        /// The watch was cancelled by a server-side cancel (not a compaction).
        case watchCancelled(String)
    }

    /// What the state machine is told.
    package var failure: EtcdFailure
    package var reason: Reason
    /// The endpoint the failure happened on (`http://host:port`), when one was chosen.
    package var endpoint: String?

    package init(_ failure: EtcdFailure, _ reason: Reason, endpoint: String? = nil) {
        self.failure = failure
        self.reason = reason
        self.endpoint = endpoint
    }

    /// A malformed-answer error (`.unavailable`: nothing is known of the outcome).
    static func malformed(_ what: String) -> EtcdClientError {
        EtcdClientError(.unavailable, .malformedAnswer(what))
    }

    package var description: String {
        let what: String
        switch reason {
        case .http(let error): what = error.description
        case .etcd(let status, let code, let message):
            what = "etcd answered \(status)" + (code.map { " (gRPC code \($0))" } ?? "") + ": \(message)"
        case .leaseLost: what = "keep-alive answered without a TTL: the lease is gone"
        case .malformedAnswer(let detail): what = "malformed etcd answer: \(detail)"
        case .noEndpointReachable: what = "no etcd endpoint reachable"
        case .watchCancelled(let detail): what = "watch cancelled by etcd: \(detail)"
        }
        return "\(failure): \(what)" + (endpoint.map { " (\($0))" } ?? "")
    }
}
