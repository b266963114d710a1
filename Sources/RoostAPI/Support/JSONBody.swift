import RoostHTTP
import RoostJSON

/// A request body parsed as a JSON object, with typed accessors that throw the
/// spec's 400 errors naming the field at fault.
package struct JSONBody: Sendable {
    /// Nesting allowed in request bodies: our deepest body (tags in a device)
    /// needs 3 levels.
    package static let limits = JSONLimits(maxDepth: 16, maxInputBytes: 64 * 1024 * 1024, maxStringBytes: 64 * 1024)

    package let value: JSONValue

    /// Parses the body; anything but a JSON object is 400 `invalid_json`.
    package init(_ request: HTTPRequest) throws(APIError) {
        do {
            value = try JSONReader.parse(request.body, limits: JSONBody.limits)
        } catch {
            throw APIError.invalidJSON(error.description)
        }
        guard value.objectMembers != nil else { throw APIError.invalidJSON("the body must be a JSON object") }
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
