/// A strict RFC 8259 reader: it accepts exactly the documents RFC 8259 allows
/// (any top-level value, UTF-8 only, no BOM, no comments, no trailing commas)
/// that are also I-JSON objects (RFC 7493 §2.3: no name twice in one object)
/// within `JSONLimits`, and rejects everything else with a `JSONError` naming the offset.
///
/// The parser is iterative (an explicit stack of open containers), so nesting depth
/// costs heap, never call stack, and `maxDepth` is the only bound on it.
public enum JSONReader {
    /// Returns the value `bytes` hold, or throws where they break RFC 8259 or `limits`.
    /// O(n) in the input length.
    public static func parse(_ bytes: [UInt8], limits: JSONLimits = .default) throws(JSONError) -> JSONValue {
        guard bytes.count <= limits.maxInputBytes else {
            throw JSONError(kind: .tooLarge, offset: limits.maxInputBytes)
        }
        let result = bytes.withUnsafeBufferPointer { buffer in
            Result { () throws(JSONError) -> JSONValue in
                var parser = JSONParser(buffer, limits: limits)
                return try parser.parseDocument()
            }
        }
        return try result.get()
    }

    /// Returns the value the raw bytes hold, or throws where they break RFC 8259 or `limits`.
    /// O(n) in the input length.
    public static func parse(
        _ bytes: UnsafeRawBufferPointer, limits: JSONLimits = .default
    ) throws(JSONError) -> JSONValue {
        guard bytes.count <= limits.maxInputBytes else {
            throw JSONError(kind: .tooLarge, offset: limits.maxInputBytes)
        }
        var parser = JSONParser(bytes.assumingMemoryBound(to: UInt8.self), limits: limits)
        return try parser.parseDocument()
    }

    /// Returns the value `bytes` hold, or throws where they break RFC 8259 or `limits`.
    /// Contiguous collections are parsed in place; others are copied once. O(n).
    public static func parse(
        _ bytes: some Collection<UInt8>, limits: JSONLimits = .default
    ) throws(JSONError) -> JSONValue {
        guard bytes.count <= limits.maxInputBytes else {
            throw JSONError(kind: .tooLarge, offset: limits.maxInputBytes)
        }
        let inPlace = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(JSONError) -> JSONValue in
                var parser = JSONParser(buffer, limits: limits)
                return try parser.parseDocument()
            }
        }
        if let inPlace {
            return try inPlace.get()
        }
        return try parse(Array(bytes), limits: limits)
    }
}

// ASCII bytes the grammar names.
extension UInt8 {
    fileprivate static let quote = UInt8(ascii: "\"")
    fileprivate static let backslash = UInt8(ascii: "\\")
    fileprivate static let comma = UInt8(ascii: ",")
    fileprivate static let colon = UInt8(ascii: ":")
    fileprivate static let openBracket = UInt8(ascii: "[")
    fileprivate static let closeBracket = UInt8(ascii: "]")
    fileprivate static let openBrace = UInt8(ascii: "{")
    fileprivate static let closeBrace = UInt8(ascii: "}")
    fileprivate static let minus = UInt8(ascii: "-")
    fileprivate static let plus = UInt8(ascii: "+")
    fileprivate static let dot = UInt8(ascii: ".")
    fileprivate static let zero = UInt8(ascii: "0")
    fileprivate static let nine = UInt8(ascii: "9")
}

/// One open array or object: where its elements (and, for an object, keys) start on the shared stacks.
private struct OpenContainer {
    var isObject: Bool
    var valueStart: Int
    var keyStart: Int
}

/// The parser state over one contiguous input. Every read checks `index < end` first:
/// `UnsafeBufferPointer` does not bounds-check in release builds.
private struct JSONParser {
    let input: UnsafeBufferPointer<UInt8>
    let end: Int
    let limits: JSONLimits
    var index = 0
    /// Reused for strings with escapes, so that only the final `String` allocates.
    var scratch: [UInt8] = []

    init(_ input: UnsafeBufferPointer<UInt8>, limits: JSONLimits) {
        self.input = input
        self.end = input.count
        self.limits = limits
    }

    // MARK: Document and containers

    /// Returns the single top-level value, after which only whitespace may follow.
    /// Containers are kept on explicit stacks: `values` holds finished elements of every
    /// open container, `keys` the keys of open objects, in order.
    mutating func parseDocument() throws(JSONError) -> JSONValue {
        var open: [OpenContainer] = []
        var values: [JSONValue] = []
        var keys: [String] = []
        // Where each key on `keys` starts (its opening quote), for a duplicate's error.
        var keyOffsets: [Int] = []
        // Room for a typical request body, so that the stacks do not regrow while parsing it.
        open.reserveCapacity(8)
        values.reserveCapacity(32)
        keys.reserveCapacity(32)
        keyOffsets.reserveCapacity(32)

        nextValue: while true {
            skipWhitespace()
            guard index < end else { throw JSONError(kind: .unexpectedEnd, offset: index) }
            var finished: JSONValue
            let byte = input[index]
            switch byte {
            case .openBrace, .openBracket:
                let isObject = byte == .openBrace
                guard open.count < limits.maxDepth else { throw JSONError(kind: .depthExceeded, offset: index) }
                index += 1
                skipWhitespace()
                if index < end && input[index] == (isObject ? .closeBrace : .closeBracket) {
                    index += 1
                    finished = isObject ? .object([]) : .array([])
                } else {
                    open.append(OpenContainer(isObject: isObject, valueStart: values.count, keyStart: keys.count))
                    if isObject {
                        keyOffsets.append(index)
                        keys.append(try parseKey())
                    }
                    continue nextValue
                }
            case .quote:
                finished = .string(try parseString())
            case UInt8(ascii: "t"):
                try expectLiteral("true")
                finished = .bool(true)
            case UInt8(ascii: "f"):
                try expectLiteral("false")
                finished = .bool(false)
            case UInt8(ascii: "n"):
                try expectLiteral("null")
                finished = .null
            case .minus, .zero ... .nine:
                finished = .number(try parseNumber())
            default:
                throw unexpected(at: index)
            }

            // Attach the finished value to the innermost open container, closing
            // containers for as long as their closing byte follows.
            while let container = open.last {
                values.append(finished)
                skipWhitespace()
                guard index < end else { throw JSONError(kind: .unexpectedEnd, offset: index) }
                let separator = input[index]
                if separator == .comma {
                    index += 1
                    if container.isObject {
                        keyOffsets.append(index)
                        keys.append(try parseKey())
                    }
                    continue nextValue
                }
                guard separator == (container.isObject ? .closeBrace : .closeBracket) else {
                    throw unexpected(at: index)
                }
                index += 1
                open.removeLast()
                if container.isObject, let duplicate = Self.firstDuplicate(keys, from: container.keyStart) {
                    throw JSONError(kind: .duplicateKey, offset: keyOffsets[duplicate])
                }
                finished = Self.close(container, values: &values, keys: &keys, keyOffsets: &keyOffsets)
            }
            skipWhitespace()
            guard index == end else {
                var error = unexpected(at: index)
                if error.kind == .unexpectedByte {
                    error.kind = .trailingData
                }
                throw error
            }
            return finished
        }
    }

    /// Returns the finished container, moving its elements (and keys) off the shared stacks.
    /// O(number of elements).
    private static func close(
        _ container: OpenContainer, values: inout [JSONValue], keys: inout [String], keyOffsets: inout [Int]
    ) -> JSONValue {
        let count = values.count - container.valueStart
        guard container.isObject else {
            let elements = Array(values[container.valueStart...])
            values.removeSubrange(container.valueStart...)
            return .array(elements)
        }
        precondition(keyOffsets.count == keys.count, "JSONParser: \(keyOffsets.count) offsets for \(keys.count) keys")
        precondition(
            keys.count - container.keyStart == count,
            "JSONParser: \(keys.count - container.keyStart) keys for \(count) values")
        var members: [(key: String, value: JSONValue)] = []
        members.reserveCapacity(count)
        for offset in 0..<count {
            members.append((keys[container.keyStart + offset], values[container.valueStart + offset]))
        }
        values.removeSubrange(container.valueStart...)
        keys.removeSubrange(container.keyStart...)
        keyOffsets.removeSubrange(container.keyStart...)
        return .object(members)
    }

    /// Objects up to this many members are checked for a repeated name pair by
    /// pair (at most 120 comparisons, no allocation); larger ones through a set.
    static let pairwiseDuplicateCheckMembersMax = 16

    /// Returns the position in `keys` of the first name (from `start` on) that
    /// an earlier one of the same object repeats, or nil. Names are compared
    /// as RFC 7493 §2.3 compares them, as sequences of Unicode scalars (here
    /// their UTF-8 bytes), never by Swift's `==`, whose canonical equivalence
    /// would take `"caf\u{E9}"` and `"cafe\u{301}"` (NFC and NFD) for one
    /// name: they are two members (docs/json.md "Names"), and `JSONValue[key]`
    /// tells them apart the same way. O(n) expected (Swift's hashing is seeded
    /// per process, so colliding names cannot be chosen in advance).
    private static func firstDuplicate(_ keys: [String], from start: Int) -> Int? {
        let count = keys.count - start
        guard count > 1 else { return nil }
        if count <= pairwiseDuplicateCheckMembersMax {
            for later in (start + 1)..<keys.count {
                for earlier in start..<later where JSONName.equal(keys[earlier], keys[later]) { return later }
            }
            return nil
        }
        var seen = Set<JSONName>(minimumCapacity: count)
        for position in start..<keys.count where !seen.insert(JSONName(keys[position])).inserted { return position }
        return nil
    }

    /// Returns the key of an object member and consumes the `:` after it.
    private mutating func parseKey() throws(JSONError) -> String {
        skipWhitespace()
        guard index < end else { throw JSONError(kind: .unexpectedEnd, offset: index) }
        guard input[index] == .quote else { throw unexpected(at: index) }
        let key = try parseString()
        skipWhitespace()
        guard index < end else { throw JSONError(kind: .unexpectedEnd, offset: index) }
        guard input[index] == .colon else { throw unexpected(at: index) }
        index += 1
        return key
    }

    private mutating func skipWhitespace() {
        while index < end {
            switch input[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    /// Returns the error for a byte that cannot appear here: `.invalidUTF8` when the byte
    /// does not start a well-formed UTF-8 sequence (so bad encoding is reported as such
    /// anywhere in the input), `.unexpectedByte` otherwise.
    private func unexpected(at offset: Int) -> JSONError {
        let byte = input[offset]
        if byte >= 0x80 && Self.utf8SequenceLength(input, at: offset, end: end) == nil {
            return JSONError(kind: .invalidUTF8, offset: offset)
        }
        return JSONError(kind: .unexpectedByte, offset: offset, byte: byte)
    }

    // MARK: Scalars

    private mutating func expectLiteral(_ literal: StaticString) throws(JSONError) {
        let text = UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount)
        for expected in text {
            guard index < end else { throw JSONError(kind: .unexpectedEnd, offset: index) }
            guard input[index] == expected else { throw unexpected(at: index) }
            index += 1
        }
    }

    /// Returns the literal text of a number matching
    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`; the number ends at the first byte
    /// outside that grammar, which the caller then judges.
    private mutating func parseNumber() throws(JSONError) -> String {
        let start = index
        if input[index] == .minus {
            index += 1
        }
        guard index < end, isDigit(input[index]) else { throw JSONError(kind: .invalidNumber, offset: index) }
        if input[index] == .zero {
            index += 1
            // A leading zero is a number error, not trailing data: "01" is a malformed number.
            if index < end && isDigit(input[index]) { throw JSONError(kind: .invalidNumber, offset: index) }
        } else {
            skipDigits()
        }
        if index < end && input[index] == .dot {
            index += 1
            guard index < end, isDigit(input[index]) else { throw JSONError(kind: .invalidNumber, offset: index) }
            skipDigits()
        }
        if index < end && (input[index] | 0x20) == UInt8(ascii: "e") {
            index += 1
            if index < end && (input[index] == .plus || input[index] == .minus) {
                index += 1
            }
            guard index < end, isDigit(input[index]) else { throw JSONError(kind: .invalidNumber, offset: index) }
            skipDigits()
        }
        guard index - start <= limits.maxStringBytes else { throw JSONError(kind: .tooLarge, offset: start) }
        return String(decoding: UnsafeBufferPointer(rebasing: input[start..<index]), as: UTF8.self)
    }

    private func isDigit(_ byte: UInt8) -> Bool {
        byte >= .zero && byte <= .nine
    }

    private mutating func skipDigits() {
        while index < end && isDigit(input[index]) {
            index += 1
        }
    }

    // MARK: Strings

    /// Returns the string whose opening quote is at `index`, and consumes the closing quote.
    /// Strings without escapes (the common case) become a `String` straight from the
    /// validated input slice; O(length).
    private mutating func parseString() throws(JSONError) -> String {
        let openingQuote = index
        index += 1
        let start = index
        while true {
            skipPlainASCII()
            guard index < end else { break }
            let byte = input[index]
            if byte == .quote {
                guard index - start <= limits.maxStringBytes else {
                    throw JSONError(kind: .tooLarge, offset: openingQuote)
                }
                let text = String(decoding: UnsafeBufferPointer(rebasing: input[start..<index]), as: UTF8.self)
                index += 1
                return text
            } else if byte == .backslash {
                return try parseEscapedString(openingQuote: openingQuote, start: start)
            } else if byte < 0x20 {
                throw JSONError(kind: .controlCharacterInString, offset: index, byte: byte)
            } else if byte < 0x80 {
                index += 1
            } else {
                try skipUTF8Sequence()
            }
        }
        throw JSONError(kind: .unexpectedEnd, offset: index)
    }

    /// Advances `index` over whole 8-byte words of string content that need no attention:
    /// ASCII from 0x20 up, other than `"` and `\`. Stops at (or up to 7 bytes before) the first
    /// byte that does, which the byte-wise loop then handles.
    private mutating func skipPlainASCII() {
        guard let base = input.baseAddress else { return }
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highBits: UInt64 = 0x8080_8080_8080_8080
        while index + 8 <= end {
            let word = UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self)
            // Classic SWAR tests: a byte's high bit ends up set where it is zero after the XOR
            // (so equal to the quote or backslash), or below 0x20; plus any non-ASCII byte.
            let quotes = word ^ (ones &* UInt64(UInt8.quote))
            let backslashes = word ^ (ones &* UInt64(UInt8.backslash))
            let attention =
                ((quotes &- ones) & ~quotes) | ((backslashes &- ones) & ~backslashes)
                | ((word &- ones &* 0x20) & ~word) | word
            if attention & highBits != 0 {
                return
            }
            index += 8
        }
    }

    /// Continues `parseString` from the first backslash at `index`, decoding into `scratch`.
    private mutating func parseEscapedString(openingQuote: Int, start: Int) throws(JSONError) -> String {
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: UnsafeBufferPointer(rebasing: input[start..<index]))
        while index < end {
            let byte = input[index]
            if byte == .quote {
                index += 1
                guard scratch.count <= limits.maxStringBytes else {
                    throw JSONError(kind: .tooLarge, offset: openingQuote)
                }
                return String(decoding: scratch, as: UTF8.self)
            } else if byte == .backslash {
                try decodeEscape()
            } else if byte < 0x20 {
                throw JSONError(kind: .controlCharacterInString, offset: index, byte: byte)
            } else if byte < 0x80 {
                scratch.append(byte)
                index += 1
            } else {
                let sequenceStart = index
                try skipUTF8Sequence()
                scratch.append(contentsOf: UnsafeBufferPointer(rebasing: input[sequenceStart..<index]))
            }
            // Checked as we go so that a huge escaped string stops early.
            if scratch.count > limits.maxStringBytes {
                throw JSONError(kind: .tooLarge, offset: openingQuote)
            }
        }
        throw JSONError(kind: .unexpectedEnd, offset: index)
    }

    /// Decodes the escape at `index` (a backslash) into `scratch`. A `\u` high surrogate must be
    /// followed by a `\u` low surrogate; a lone surrogate of either kind is `.invalidEscape`,
    /// because it has no UTF-8 form and a `String` cannot hold it.
    private mutating func decodeEscape() throws(JSONError) {
        let escapeStart = index
        index += 1
        guard index < end else { throw JSONError(kind: .unexpectedEnd, offset: index) }
        let letter = input[index]
        index += 1
        switch letter {
        case .quote, .backslash, UInt8(ascii: "/"): scratch.append(letter)
        case UInt8(ascii: "b"): scratch.append(0x08)
        case UInt8(ascii: "f"): scratch.append(0x0C)
        case UInt8(ascii: "n"): scratch.append(0x0A)
        case UInt8(ascii: "r"): scratch.append(0x0D)
        case UInt8(ascii: "t"): scratch.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = try parseHex4()
            if scalar >= 0xDC00 && scalar <= 0xDFFF {
                throw JSONError(kind: .invalidEscape, offset: escapeStart)
            }
            if scalar >= 0xD800 && scalar <= 0xDBFF {
                guard index + 1 < end, input[index] == .backslash, input[index + 1] == UInt8(ascii: "u") else {
                    throw JSONError(kind: .invalidEscape, offset: escapeStart)
                }
                index += 2
                let low = try parseHex4()
                guard low >= 0xDC00 && low <= 0xDFFF else {
                    throw JSONError(kind: .invalidEscape, offset: escapeStart)
                }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            }
            appendUTF8(scalar)
        default:
            throw JSONError(kind: .invalidEscape, offset: escapeStart)
        }
    }

    /// Returns the value of the four hex digits at `index`.
    private mutating func parseHex4() throws(JSONError) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard index < end else { throw JSONError(kind: .unexpectedEnd, offset: index) }
            let byte = input[index]
            let digit: UInt8
            switch byte {
            case .zero ... .nine: digit = byte - .zero
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw JSONError(kind: .invalidEscape, offset: index)
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    /// Appends the UTF-8 form of a scalar value (never a surrogate) to `scratch`.
    private mutating func appendUTF8(_ scalar: UInt32) {
        precondition(scalar < 0xD800 || (scalar > 0xDFFF && scalar <= 0x10FFFF), "JSONParser: bad scalar \(scalar)")
        switch scalar {
        case 0..<0x80:
            scratch.append(UInt8(scalar))
        case 0x80..<0x800:
            scratch.append(UInt8(0xC0 | scalar >> 6))
            scratch.append(UInt8(0x80 | scalar & 0x3F))
        case 0x800..<0x10000:
            scratch.append(UInt8(0xE0 | scalar >> 12))
            scratch.append(UInt8(0x80 | scalar >> 6 & 0x3F))
            scratch.append(UInt8(0x80 | scalar & 0x3F))
        default:
            scratch.append(UInt8(0xF0 | scalar >> 18))
            scratch.append(UInt8(0x80 | scalar >> 12 & 0x3F))
            scratch.append(UInt8(0x80 | scalar >> 6 & 0x3F))
            scratch.append(UInt8(0x80 | scalar & 0x3F))
        }
    }

    // MARK: UTF-8

    /// Consumes one well-formed multi-byte UTF-8 sequence starting at `index`.
    private mutating func skipUTF8Sequence() throws(JSONError) {
        guard let length = Self.utf8SequenceLength(input, at: index, end: end) else {
            throw JSONError(kind: .invalidUTF8, offset: index)
        }
        index += length
    }

    /// Returns the length of the well-formed UTF-8 sequence at `offset` (Unicode 15, table 3-7),
    /// or nil for an overlong form, an encoded surrogate, a value above U+10FFFF, a stray
    /// continuation byte or a sequence cut short.
    static func utf8SequenceLength(_ input: UnsafeBufferPointer<UInt8>, at offset: Int, end: Int) -> Int? {
        let lead = input[offset]
        let length: Int
        var secondLow: UInt8 = 0x80
        var secondHigh: UInt8 = 0xBF
        switch lead {
        case 0x00...0x7F: return 1
        case 0xC2...0xDF: length = 2
        case 0xE0:
            length = 3
            secondLow = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED:
            length = 3
            secondHigh = 0x9F
        case 0xF0:
            length = 4
            secondLow = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4:
            length = 4
            secondHigh = 0x8F
        default: return nil  // 0x80...0xC1 and 0xF5...0xFF never start a sequence.
        }
        guard offset + length <= end else { return nil }
        let second = input[offset + 1]
        guard second >= secondLow && second <= secondHigh else { return nil }
        var next = offset + 2
        while next < offset + length {
            guard input[next] & 0xC0 == 0x80 else { return nil }
            next += 1
        }
        return length
    }
}
