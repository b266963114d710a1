import RoostHTTP
import RoostJSON

/// A request body parsed as a JSON object, with typed accessors that throw the
/// spec's 400 errors naming the field at fault.
package struct JSONBody: BodyMembers, Sendable {
    /// Nesting allowed in request bodies: our deepest body (tags in a device)
    /// needs 3 levels.
    package static let limits = JSONLimits(maxDepth: 16, maxInputBytes: 64 * 1024 * 1024, maxStringBytes: 64 * 1024)

    package let value: JSONValue

    /// Parses the body; anything but a JSON object is 400 `invalid_json`, and
    /// an object naming a member twice, at any depth, 400 `malformed_json`
    /// (spec §12: a proxy that reads the first value must never see another
    /// request than we do).
    package init(_ request: HTTPRequest) throws(APIError) {
        value = try JSONBody.parse(request.body)
        guard value.objectMembers != nil else { throw APIError.invalidJSON("the body must be a JSON object") }
    }

    package subscript(member name: String) -> JSONValue? { value[name] }

    /// Returns the value of a JSON text under the body limits, or the 400 of
    /// spec §2 and §12 (`invalid_json`, `malformed_json` for a repeated name).
    package static func parse(_ bytes: [UInt8]) throws(APIError) -> JSONValue {
        do {
            return try JSONReader.parse(bytes, limits: JSONBody.limits)
        } catch {
            switch error.kind {
            case .duplicateKey:
                throw APIError(status: 400, code: "malformed_json", message: "request body: \(error.description)")
            case .unexpectedEnd, .unexpectedByte, .invalidUTF8, .invalidEscape, .invalidNumber,
                .controlCharacterInString, .trailingData, .depthExceeded, .tooLarge:
                throw APIError.invalidJSON(error.description)
            }
        }
    }
}
