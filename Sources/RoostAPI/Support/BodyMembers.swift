import RoostJSON

/// The members of a request body's top-level object, by name: the JSON tree
/// (`JSONBody`, `JSONValue`) or the request's bytes scanned in place
/// (`PlainBodyScan`). The typed accessors below throw the spec's 400 errors
/// naming the field at fault, the same for either source. Names are compared
/// as bytes (RFC 7493), as `JSONValue`'s subscript compares them.
package protocol BodyMembers {
    /// The value of the member named `name`, nil when absent.
    subscript(member name: String) -> JSONValue? { get }
}

extension BodyMembers {
    /// Returns a member, treating JSON `null` as absent.
    package func member(_ name: String) -> JSONValue? {
        guard let found = self[member: name], !found.isNull else { return nil }
        return found
    }

    /// Returns whether the member is present (null counts as present).
    package func has(_ name: String) -> Bool { self[member: name] != nil }

    package func requiredString(_ name: String) throws(APIError) -> String {
        guard let text = try optionalString(name) else { throw APIError.missingField(name) }
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
