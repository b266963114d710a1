/// Typed reads of a parsed value; each returns nil when the value is of another kind.
extension JSONValue {
    /// Returns the value of the member named `key`, or nil when this is not an object or
    /// has no such member. Names are compared as Unicode scalars (RFC 7493), not by
    /// canonical equivalence: `"cafe\u{301}"` does not find `"caf\u{E9}"`. `JSONReader`
    /// never gives an object naming a member twice; for one built in code the last wins.
    /// O(number of members).
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        for member in members.reversed() where JSONName.equal(member.key, key) {
            return member.value
        }
        return nil
    }

    /// The text of a string value.
    public var stringValue: String? {
        guard case .string(let text) = self else { return nil }
        return text
    }

    /// The value of `true` or `false`.
    public var boolValue: Bool? {
        guard case .bool(let flag) = self else { return nil }
        return flag
    }

    /// The value of an integer literal (no fraction, no exponent) that fits `Int`; nil otherwise,
    /// so `1.0`, `1e3` and `9223372036854775808` are nil.
    public var intValue: Int? {
        guard case .number(var literal) = self else { return nil }
        return literal.withUTF8 { Self.parseInt($0) }
    }

    /// The nearest `Double` to a number literal; nil when it is not a number or overflows
    /// to infinity (such as `1e400`).
    public var doubleValue: Double? {
        guard case .number(let literal) = self else { return nil }
        guard let value = Double(literal), value.isFinite else { return nil }
        return value
    }

    /// Whether this is `null`.
    public var isNull: Bool {
        guard case .null = self else { return false }
        return true
    }

    /// The elements of an array value.
    public var arrayValue: [JSONValue]? {
        guard case .array(let elements) = self else { return nil }
        return elements
    }

    /// The members of an object value in document order, duplicates included.
    public var objectMembers: [(key: String, value: JSONValue)]? {
        guard case .object(let members) = self else { return nil }
        return members
    }

    /// Returns the `Int` that `-?[0-9]+` spells, or nil for any other text or on overflow.
    private static func parseInt(_ digits: UnsafeBufferPointer<UInt8>) -> Int? {
        var index = 0
        let negative = !digits.isEmpty && digits[0] == UInt8(ascii: "-")
        if negative {
            index = 1
        }
        guard index < digits.count else { return nil }
        // Accumulate negatively so that Int.min, whose magnitude exceeds Int.max, fits.
        var value = 0
        while index < digits.count {
            let byte = digits[index]
            guard byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") else { return nil }
            let (shifted, overflowMultiply) = value.multipliedReportingOverflow(by: 10)
            let (next, overflowSubtract) = shifted.subtractingReportingOverflow(Int(byte - UInt8(ascii: "0")))
            guard !overflowMultiply && !overflowSubtract else { return nil }
            value = next
            index += 1
        }
        if negative {
            return value
        }
        return value == Int.min ? nil : -value
    }
}
