import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel

/// What the drop-in routes share: a dialect decodes its request into a value
/// `Command` on one (app, mode) index and renders the `Outcome` in its own
/// words, on the request's loop, once the command's mutations are durable. A
/// dialect only translates wire formats; the rules are the model's, as for
/// the native routes (spec §5: one engine).
enum Compat {
    /// Returns an outcome that runs `command` on the index of (`app`, `mode`)
    /// and renders its outcome with `render`. When the log cannot take the
    /// mutations the answer is 503 with `Retry-After`, and nothing was
    /// applied (spec §2).
    static func command(
        app: AppRecord, mode: AppMode, _ command: Command, render: @escaping @Sendable (Outcome) -> HTTPResponse
    ) -> RouteOutcome {
        .command(IndexKey(app: app.id, mode: mode), settings: app.settings, command, render: render)
    }

    /// The answer to a refusal from the model, with the dialect's field names.
    static func refusal(_ rejection: RegistryRejection, fields: [String: String] = [:]) -> HTTPResponse {
        var error = APIError(rejection)
        if let field = error.field, let renamed = fields[field] { error.field = renamed }
        return error.response
    }

    /// Renders a refusal in the dialect's field names; any other outcome is
    /// a broken invariant (a command answered with another command's outcome).
    static func refusalOrUnexpected(_ outcome: Outcome, fields: [String: String] = [:]) -> HTTPResponse {
        guard case .rejected(let rejection) = outcome else { preconditionFailure("unexpected outcome \(outcome)") }
        return refusal(rejection, fields: fields)
    }
}

extension Catalog {
    /// Returns the live key whose text is `presented`, after its rate limit
    /// (429 with `Retry-After`); nil when no key matches. Compared as a SHA-256
    /// digest, as `Authenticator` does; the key never appears in an error.
    func liveKey(presented: String) throws(APIError) -> KeyRecord? {
        try key(presented: presented[...])
    }
}

/// Query-string parameters (`a=1&b=2`), percent-decoded, `+` read as a space.
struct QueryParameters {
    /// The most parameters read; the rest are ignored.
    static let parametersMax = 32

    private var values: [(name: String, value: String)] = []

    init(_ query: Substring?) {
        guard let query else { return }
        for pair in query.split(separator: "&", omittingEmptySubsequences: true).prefix(Self.parametersMax) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = QueryParameters.decode(parts[0]) else { continue }
            let value = parts.count > 1 ? QueryParameters.decode(parts[1]) : ""
            if let value { values.append((name, value)) }
        }
    }

    /// Returns the first value of `name`, or nil.
    subscript(_ name: String) -> String? {
        values.first { $0.name == name }?.value
    }

    private static func decode(_ text: Substring) -> String? {
        QueryString.decode(text.utf8)
    }
}

extension JSONWriter {
    /// Writes a member whose value is a timestamp in the spec's RFC 3339 form, or null.
    mutating func member(_ name: String, _ timestamp: Timestamp?) {
        if let timestamp { member(name, timestamp.rfc3339) } else { memberNull(name) }
    }
}

/// Runs a model check and turns its rejection into the API's error envelope.
func checked<Value>(_ body: () throws(RegistryRejection) -> Value) throws(APIError) -> Value {
    do throws(RegistryRejection) {
        return try body()
    } catch {
        throw APIError(error)
    }
}
