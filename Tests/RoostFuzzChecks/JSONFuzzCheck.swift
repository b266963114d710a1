import RoostJSON

/// The reader's and writer's properties checked on arbitrary bytes: shared by
/// the libFuzzer target (Fuzz/JSONFuzz) and the test that replays committed
/// inputs (docs/testing.md).
package enum JSONFuzzCheck {
    /// Small limits, so that arbitrary inputs reach every limit check.
    package static let limits = JSONLimits(maxDepth: 12, maxInputBytes: 8192, maxStringBytes: 96)

    /// Returns a description of the first broken property for `input`, or nil.
    /// Checks: the three `parse` overloads agree; an error's offset lies in the
    /// input; an accepted input is well-formed UTF-8 and never shorter than what
    /// `JSONWriter` writes for it; the written form parses back to an equal value
    /// and is written again byte for byte the same (a fixed point); `intValue`
    /// agrees with the standard library's `Int(_:)` on every number literal.
    /// O(n) apart from the accessors.
    package static func violation(in input: [UInt8]) -> String? {
        let result = parse(input)
        if let problem = overloadsDisagree(input, result) { return problem }
        let value: JSONValue
        switch result {
        case .failure(let error):
            guard error.offset >= 0, error.offset <= input.count else {
                return "error offset \(error.offset) outside 0...\(input.count): \(error)"
            }
            return nil
        case .success(let parsed):
            value = parsed
        }
        if String(validating: input, as: UTF8.self) == nil { return "accepted bytes that are not UTF-8" }
        var writer = JSONWriter()
        writer.value(value)
        let written = writer.bytes
        if written.count > input.count {
            return "wrote \(written.count) bytes for an input of \(input.count): \(describe(written))"
        }
        let reread: JSONValue
        switch parse(written) {
        case .failure(let error): return "the written form \(describe(written)) does not parse: \(error)"
        case .success(let again): reread = again
        }
        if reread != value { return "the written form \(describe(written)) reads back as another value" }
        var second = JSONWriter()
        second.value(reread)
        if second.bytes != written {
            return "written twice differently: \(describe(written)) then \(describe(second.bytes))"
        }
        return numberProblem(in: value)
    }

    private static func parse(_ bytes: [UInt8]) -> Result<JSONValue, JSONError> {
        Result { () throws(JSONError) in try JSONReader.parse(bytes, limits: limits) }
    }

    /// The raw-buffer and the non-contiguous-collection overloads must give the array's answer.
    private static func overloadsDisagree(_ input: [UInt8], _ result: Result<JSONValue, JSONError>) -> String? {
        let raw = input.withUnsafeBytes { buffer in
            Result { () throws(JSONError) in try JSONReader.parse(buffer, limits: limits) }
        }
        let copied = Result { () throws(JSONError) in try JSONReader.parse(input.lazy.map { $0 }, limits: limits) }
        for (name, other) in [("raw buffer", raw), ("collection", copied)] {
            switch (result, other) {
            case (.success(let a), .success(let b)) where a == b: continue
            case (.failure(let a), .failure(let b)) where a == b: continue
            default: return "the \(name) overload gives \(other), the array overload \(result)"
            }
        }
        return nil
    }

    /// Every number literal: `intValue` is `Int(literal)` for integer literals
    /// (no fraction, no exponent) and nil otherwise.
    private static func numberProblem(in value: JSONValue) -> String? {
        switch value {
        case .null, .bool, .string:
            return nil
        case .number(let literal):
            let isInteger = !literal.utf8.contains { $0 == UInt8(ascii: ".") || $0 | 0x20 == UInt8(ascii: "e") }
            let expectedInt = isInteger ? Int(literal) : nil
            if value.intValue != expectedInt {
                return
                    "intValue of \(literal) is \(String(describing: value.intValue)), not \(String(describing: expectedInt))"
            }
            return nil
        case .array(let elements):
            for element in elements {
                if let problem = numberProblem(in: element) { return problem }
            }
            return nil
        case .object(let members):
            for member in members {
                if let problem = numberProblem(in: member.value) { return problem }
            }
            return nil
        }
    }

    private static func describe(_ bytes: [UInt8]) -> String {
        String(decoding: bytes.prefix(200), as: UTF8.self)
    }
}
