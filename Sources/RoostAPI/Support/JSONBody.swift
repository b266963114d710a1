import RoostHTTP
import RoostJSON

/// A request body parsed as a JSON object, with typed accessors that throw the
/// spec's 400 errors naming the field at fault.
package struct JSONBody: Sendable {
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

    /// Returns a member, treating JSON `null` as absent.
    package func member(_ name: String) -> JSONValue? {
        guard let found = value[name], !found.isNull else { return nil }
        return found
    }

    /// Returns whether the member is present (null counts as present).
    package func has(_ name: String) -> Bool { value[name] != nil }

    package func requiredString(_ name: String) throws(APIError) -> String {
        guard let found = member(name) else { throw APIError.missingField(name) }
        guard let text = found.stringValue else { throw APIError.invalidField(name, "\(name) must be a string") }
        return text
    }

    package func optionalString(_ name: String) throws(APIError) -> String? {
        guard let found = member(name) else { return nil }
        guard let text = found.stringValue else { throw APIError.invalidField(name, "\(name) must be a string") }
        return text
    }

    package func optionalBool(_ name: String) throws(APIError) -> Bool? {
        guard let found = member(name) else { return nil }
        guard let flag = found.boolValue else { throw APIError.invalidField(name, "\(name) must be a boolean") }
        return flag
    }

    package func optionalInt(_ name: String) throws(APIError) -> Int? {
        guard let found = member(name) else { return nil }
        guard let number = found.intValue else { throw APIError.invalidField(name, "\(name) must be an integer") }
        return number
    }

    package func optionalObject(_ name: String) throws(APIError) -> [(key: String, value: JSONValue)]? {
        guard let found = member(name) else { return nil }
        guard let members = found.objectMembers else {
            throw APIError.invalidField(name, "\(name) must be an object")
        }
        return members
    }

    package func optionalStringArray(_ name: String) throws(APIError) -> [String]? {
        guard let found = member(name) else { return nil }
        guard let items = found.arrayValue else { throw APIError.invalidField(name, "\(name) must be an array") }
        var strings: [String] = []
        strings.reserveCapacity(items.count)
        for item in items {
            guard let text = item.stringValue else {
                throw APIError.invalidField(name, "\(name) must be an array of strings")
            }
            strings.append(text)
        }
        return strings
    }
}
