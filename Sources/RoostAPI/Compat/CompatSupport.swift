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
        app: AppRecord, mode: AppMode, _ command: consuming Command,
        render: @escaping @Sendable (Outcome) -> HTTPResponse
    ) -> RouteOutcome {
        .command(IndexKey(app: app.id, mode: mode), settings: app.settings, command, render: render)
    }

    /// `command(app:mode:_:render:)` rendered into the loop's kept arrays (`HTTPAnswerBuffers`).
    static func command(
        app: AppRecord, mode: AppMode, _ command: consuming Command,
        render: @escaping @Sendable (Outcome, inout HTTPAnswerBuffers) -> HTTPResponse
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

/// A dialect's query-string parameters (`a=1&b=2`): `QueryString.parse`'s
/// grammar (percent-decoded, `+` read as a space, a name given twice is 400
/// `invalid_field` naming it, as on every route), with the vendor's
/// leniencies: unknown names are ignored and `a=` or `a` reads as `""` (so an
/// empty `appToken` is a wrong one, 401, as the seed says of a wrong one).
struct QueryParameters {
    /// The most parameters read; more is 400 `invalid_field` `query`.
    static let parametersMax = 32

    private let values: [(name: String, value: String)]

    /// Parses `query`; throws what `QueryString.parse` throws.
    init(_ query: Substring?) throws(APIError) {
        values = try QueryString.parse(query, parametersMax: Self.parametersMax, emptyValuesAllowed: true)
    }

    /// Returns the value of `name`, or nil. Names are compared as Unicode
    /// scalars, as the parser compares them.
    subscript(_ name: String) -> String? {
        values.first { $0.name.utf8.elementsEqual(name.utf8) }?.value
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
