/// A writer of compact JSON (no whitespace) into a byte buffer, for response bodies.
///
/// Structural calls insert commas and colons; misuse (a key outside an object, a value
/// without a key inside one, an unbalanced end, a second top-level value) is a programming
/// error and stops the process with `precondition`, in release builds too.
///
/// ```swift
/// var writer = JSONWriter()
/// writer.beginObject()
/// writer.member("id", 7)
/// writer.key("tags"); writer.beginArray(); writer.string("a"); writer.endArray()
/// writer.endObject()
/// // writer.bytes == Array(#"{"id":7,"tags":["a"]}"#.utf8)
/// ```
public struct JSONWriter: Sendable {
    /// The document written so far; complete once every container opened has been closed.
    public private(set) var bytes: [UInt8]

    /// One open container: whether it is an object, whether it holds anything yet
    /// (so a comma is due), and for an object whether a key is waiting for its value.
    private struct Open: Sendable {
        var isObject: Bool
        var isEmpty = true
        var awaitsValue = false
    }

    /// The open containers, innermost last, as three bit stacks: a writer
    /// allocates nothing for them (an array of `Open` was one allocation per
    /// answer, issue 25). At most `depthMax` deep: deeper is a programming
    /// error (what Roost writes is a few levels deep, and `JSONReader`
    /// refuses input deeper than its `maxDepth`).
    private struct OpenStack: Sendable {
        static let depthMax = 64
        private var objects: UInt64 = 0
        private var nonEmpty: UInt64 = 0
        private var awaiting: UInt64 = 0
        private var depth = 0

        var last: Open? {
            guard depth > 0 else { return nil }
            let mask: UInt64 = 1 << UInt64(depth - 1)
            return Open(isObject: objects & mask != 0, isEmpty: nonEmpty & mask == 0, awaitsValue: awaiting & mask != 0)
        }

        mutating func append(_ open: Open) {
            precondition(depth < Self.depthMax, "JSONWriter: more than \(Self.depthMax) containers open")
            let mask: UInt64 = 1 << UInt64(depth)
            objects = open.isObject ? objects | mask : objects & ~mask
            nonEmpty = open.isEmpty ? nonEmpty & ~mask : nonEmpty | mask
            awaiting = open.awaitsValue ? awaiting | mask : awaiting & ~mask
            depth += 1
        }

        mutating func removeLast() {
            precondition(depth > 0, "JSONWriter: no container to close")
            depth -= 1
        }

        /// The innermost container holds something now.
        mutating func markLastNotEmpty() {
            precondition(depth > 0, "JSONWriter: no open container")
            nonEmpty |= 1 << UInt64(depth - 1)
        }

        /// Whether the innermost object has a key waiting for its value.
        mutating func setLastAwaitsValue(_ awaits: Bool) {
            precondition(depth > 0, "JSONWriter: no open container")
            let mask: UInt64 = 1 << UInt64(depth - 1)
            awaiting = awaits ? awaiting | mask : awaiting & ~mask
        }
    }

    private var open = OpenStack()
    private var wroteTopLevelValue = false
    /// Creates an empty writer whose buffer has room for `reservingCapacity` bytes.
    public init(reservingCapacity: Int = 256) {
        precondition(reservingCapacity >= 0, "JSONWriter: negative capacity \(reservingCapacity)")
        bytes = []
        bytes.reserveCapacity(reservingCapacity)
    }

    /// Creates an empty writer over `buffer`'s storage (emptied; an emptied
    /// array a server kept from an earlier answer), with room for
    /// `reservingCapacity` bytes.
    public init(reusing buffer: consuming [UInt8], reservingCapacity: Int = 256) {
        precondition(reservingCapacity >= 0, "JSONWriter: negative capacity \(reservingCapacity)")
        bytes = buffer
        bytes.removeAll(keepingCapacity: true)
        bytes.reserveCapacity(reservingCapacity)
    }

    // MARK: Structure

    /// Opens an object as the next value.
    public mutating func beginObject() {
        beforeValue()
        open.append(Open(isObject: true))
        bytes.append(UInt8(ascii: "{"))
    }

    /// Closes the innermost open container, which must be an object with no key awaiting a value.
    public mutating func endObject() {
        guard let top = open.last else { preconditionFailure("JSONWriter.endObject() with nothing open") }
        precondition(top.isObject, "JSONWriter.endObject() while an array is open")
        precondition(!top.awaitsValue, "JSONWriter.endObject() after key(_:) without a value")
        open.removeLast()
        bytes.append(UInt8(ascii: "}"))
    }

    /// Opens an array as the next value.
    public mutating func beginArray() {
        beforeValue()
        open.append(Open(isObject: false))
        bytes.append(UInt8(ascii: "["))
    }

    /// Closes the innermost open container, which must be an array.
    public mutating func endArray() {
        guard let top = open.last else { preconditionFailure("JSONWriter.endArray() with nothing open") }
        precondition(!top.isObject, "JSONWriter.endArray() while an object is open")
        open.removeLast()
        bytes.append(UInt8(ascii: "]"))
    }

    /// Writes a value a caller renders itself, as bytes, into at most
    /// `maxBytes` of the buffer (`render` returns how many it wrote): a
    /// complete JSON value, or with `leavesObjectOpen` an object whose
    /// members so far are written and whose `}` is not, so that `key(_:)`
    /// and `endObject()` go on with it. The caller vouches for the bytes.
    /// The buffer gets room for `maxBytes` more and keeps the bytes written:
    /// `render` writes into uninitialized capacity (an `OutputSpan`), so no
    /// byte is written twice (a zero fill of the bound first was 1.1 % of a
    /// person read's CPU).
    public mutating func rawValue(
        maxBytes: Int, leavesObjectOpen: Bool = false, _ render: (UnsafeMutableBufferPointer<UInt8>) -> Int
    ) {
        precondition(maxBytes >= 0, "JSONWriter.rawValue: negative size \(maxBytes)")
        beforeValue()
        bytes.append(addingCapacity: maxBytes) { span in
            span.withUnsafeMutableBufferPointer { buffer, initialized in
                precondition(initialized == 0 && buffer.count >= maxBytes, "JSONWriter.rawValue: no room")
                let written = render(UnsafeMutableBufferPointer(rebasing: buffer[0..<maxBytes]))
                precondition(
                    (0...maxBytes).contains(written), "JSONWriter.rawValue wrote \(written) of \(maxBytes) bytes")
                initialized = written
            }
        }
        if leavesObjectOpen { open.append(Open(isObject: true, isEmpty: false)) }
    }

    /// Writes the key of the next member; the innermost open container must be an object
    /// whose previous key already has its value.
    public mutating func key(_ name: String) {
        guard let top = open.last else { preconditionFailure("JSONWriter.key(\"\(name)\") outside an object") }
        precondition(top.isObject, "JSONWriter.key(\"\(name)\") inside an array")
        precondition(!top.awaitsValue, "JSONWriter.key(\"\(name)\") right after another key")
        if !top.isEmpty {
            bytes.append(UInt8(ascii: ","))
        }
        open.markLastNotEmpty()
        open.setLastAwaitsValue(true)
        appendQuoted(name)
        bytes.append(UInt8(ascii: ":"))
    }

    /// Checks that a value may come here and writes the comma before it when one is due.
    private mutating func beforeValue() {
        guard let top = open.last else {
            precondition(!wroteTopLevelValue, "JSONWriter: a second top-level value")
            wroteTopLevelValue = true
            return
        }
        if top.isObject {
            precondition(top.awaitsValue, "JSONWriter: a value inside an object without key(_:)")
            open.setLastAwaitsValue(false)
        } else {
            if !top.isEmpty {
                bytes.append(UInt8(ascii: ","))
            }
            open.markLastNotEmpty()
        }
    }

    // MARK: Scalars

    /// Writes a string value. `"` and `\` are escaped, control characters below 0x20 use
    /// the short escapes (`\n`, `\t`, …) or `\u00XX`; everything else is copied as UTF-8.
    public mutating func string(_ value: String) {
        beforeValue()
        appendQuoted(value)
    }

    /// Writes `text` as a string value without building a `String`: printable
    /// ASCII that needs no escape (no quote, no backslash), such as a timestamp
    /// formatted on the stack. The caller guarantees it; debug builds check.
    public mutating func asciiString(_ text: UnsafeBufferPointer<UInt8>) {
        assert(
            text.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") },
            "JSONWriter.asciiString: the text needs escaping")
        beforeValue()
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: text)
        bytes.append(UInt8(ascii: "\""))
    }

    /// Writes an integer value.
    public mutating func int(_ value: Int) {
        beforeValue()
        if value < 0 {
            bytes.append(UInt8(ascii: "-"))
        }
        appendDecimal(UInt64(value.magnitude))
    }

    /// Writes an unsigned integer value; JSON readers that use doubles lose precision above 2^53.
    public mutating func uint64(_ value: UInt64) {
        beforeValue()
        appendDecimal(value)
    }

    /// Writes a double in its shortest round-tripping form. JSON has no NaN or infinity, so
    /// a non-finite value is a programming error.
    public mutating func double(_ value: Double) {
        precondition(value.isFinite, "JSONWriter.double(\(value)): JSON has no NaN or infinity")
        beforeValue()
        // Swift's description is the shortest round-trip form and always matches the JSON
        // number grammar for finite values ("1.0", "1e-05", "-0.0", "5e-324").
        bytes.append(contentsOf: value.description.utf8)
    }

    /// Writes `true` or `false`.
    public mutating func bool(_ value: Bool) {
        beforeValue()
        appendASCII(value ? "true" : "false")
    }

    /// Writes `null`.
    public mutating func null() {
        beforeValue()
        appendASCII("null")
    }

    /// Writes any value, such as one from `JSONReader.parse`, back out. A `.number` must hold
    /// a literal in the JSON grammar. O(size of the value); recursion depth is the value's depth.
    public mutating func value(_ value: JSONValue) {
        switch value {
        case .null:
            null()
        case .bool(let flag):
            bool(flag)
        case .number(let literal):
            precondition(Self.isNumberLiteral(literal), "JSONWriter.value: \"\(literal)\" is not a JSON number")
            beforeValue()
            bytes.append(contentsOf: literal.utf8)
        case .string(let text):
            string(text)
        case .array(let elements):
            beginArray()
            for element in elements {
                self.value(element)
            }
            endArray()
        case .object(let members):
            beginObject()
            for member in members {
                key(member.key)
                self.value(member.value)
            }
            endObject()
        }
    }

    /// Writes a pre-encoded JSON value (such as a cached fragment) verbatim. The caller
    /// guarantees it is one valid JSON value; debug builds check.
    public mutating func rawUTF8(_ fragment: some Collection<UInt8>) {
        assert(
            (try? JSONReader.parse(fragment, limits: JSONLimits(maxDepth: 1024, maxInputBytes: .max))) != nil,
            "JSONWriter.rawUTF8: the fragment is not one valid JSON value")
        beforeValue()
        bytes.append(contentsOf: fragment)
    }

    // MARK: Members

    /// Writes a member whose value is a string.
    public mutating func member(_ name: String, _ value: String) {
        key(name)
        string(value)
    }

    /// Writes a member whose value is a string, or `null` when `value` is nil.
    public mutating func member(_ name: String, _ value: String?) {
        key(name)
        if let value {
            string(value)
        } else {
            null()
        }
    }

    /// Writes a member whose value is an integer.
    public mutating func member(_ name: String, _ value: Int) {
        key(name)
        int(value)
    }

    /// Writes a member whose value is `true` or `false`.
    public mutating func member(_ name: String, _ value: Bool) {
        key(name)
        bool(value)
    }

    /// Writes a member whose value is `null`.
    public mutating func memberNull(_ name: String) {
        key(name)
        null()
    }

    // MARK: Encoding

    /// Appends `text` as a quoted, escaped JSON string; runs that need no escape are copied whole.
    private mutating func appendQuoted(_ text: String) {
        bytes.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { utf8 in
            var runStart = 0
            for index in 0..<utf8.count {
                let byte = utf8[index]
                guard Self.needsEscape(byte) else { continue }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<index]))
                appendEscape(byte)
                runStart = index + 1
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<utf8.count]))
        }
        bytes.append(UInt8(ascii: "\""))
    }

    private mutating func appendEscape(_ byte: UInt8) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Self.escapeBytesMax) { buffer in
            let count = Self.escape(byte, into: buffer.baseAddress!)
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[..<count]))
        }
    }

    /// The most bytes `escape` writes (`\u00XX`).
    public static let escapeBytesMax = 6

    /// Whether `byte` of a string's UTF-8 needs an escape in JSON: `"`, `\`
    /// and control characters below 0x20 (everything else is copied as is).
    @inline(__always)
    public static func needsEscape(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
    }

    /// Writes the escape of `byte` (one `needsEscape` accepts) at `out`: the
    /// short escapes (`\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`) or `\u00XX`;
    /// returns how many bytes it wrote (2 or 6). Every string writer of the
    /// project escapes through it.
    public static func escape(_ byte: UInt8, into out: UnsafeMutablePointer<UInt8>) -> Int {
        let short: UInt8
        switch byte {
        case UInt8(ascii: "\""): short = UInt8(ascii: "\"")
        case UInt8(ascii: "\\"): short = UInt8(ascii: "\\")
        case 0x08: short = UInt8(ascii: "b")
        case 0x0C: short = UInt8(ascii: "f")
        case 0x0A: short = UInt8(ascii: "n")
        case 0x0D: short = UInt8(ascii: "r")
        case 0x09: short = UInt8(ascii: "t")
        default:
            let hexDigits: StaticString = "0123456789abcdef"
            out[0] = UInt8(ascii: "\\")
            out[1] = UInt8(ascii: "u")
            out[2] = UInt8(ascii: "0")
            out[3] = UInt8(ascii: "0")
            out[4] = hexDigits.utf8Start[Int(byte >> 4)]
            out[5] = hexDigits.utf8Start[Int(byte & 0x0F)]
            return 6
        }
        out[0] = UInt8(ascii: "\\")
        out[1] = short
        return 2
    }

    /// Appends a literal without allocating.
    private mutating func appendASCII(_ literal: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
    }

    /// Appends the decimal digits of `value` without building a `String`.
    private mutating func appendDecimal(_ value: UInt64) {
        // UInt64.max has 20 digits.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var remaining = value
            var first = 20
            repeat {
                first -= 1
                digits[first] = UInt8(ascii: "0") + UInt8(remaining % 10)
                remaining /= 10
            } while remaining != 0
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: digits[first..<20]))
        }
    }

    /// Returns whether `literal` matches `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`. O(length).
    static func isNumberLiteral(_ literal: String) -> Bool {
        var literal = literal
        return literal.withUTF8 { utf8 in
            var index = 0
            func isDigit(_ offset: Int) -> Bool {
                offset < utf8.count && utf8[offset] >= UInt8(ascii: "0") && utf8[offset] <= UInt8(ascii: "9")
            }
            func skipDigits() -> Bool {
                guard isDigit(index) else { return false }
                while isDigit(index) {
                    index += 1
                }
                return true
            }
            if index < utf8.count && utf8[index] == UInt8(ascii: "-") {
                index += 1
            }
            if index < utf8.count && utf8[index] == UInt8(ascii: "0") {
                index += 1
            } else if !skipDigits() {
                return false
            }
            if index < utf8.count && utf8[index] == UInt8(ascii: ".") {
                index += 1
                guard skipDigits() else { return false }
            }
            if index < utf8.count && (utf8[index] == UInt8(ascii: "e") || utf8[index] == UInt8(ascii: "E")) {
                index += 1
                if index < utf8.count && (utf8[index] == UInt8(ascii: "+") || utf8[index] == UInt8(ascii: "-")) {
                    index += 1
                }
                guard skipDigits() else { return false }
            }
            return index == utf8.count
        }
    }
}
