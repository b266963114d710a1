import RoostAPI

/// `CSVReader`'s properties checked on arbitrary bytes: shared by the libFuzzer
/// target (Fuzz/CSVReaderFuzz) and the test that replays committed inputs
/// (docs/testing.md).
package enum CSVReaderFuzzCheck {
    /// Returns a description of the first broken property for `input`, or nil.
    /// Checks: reading ends (at most one record per byte) and at the end;
    /// record lines increase strictly and never pass the number of line-break
    /// bytes; an input without quotes reads as its lines split at commas (a
    /// model written here); the well-formed records, written back quoted and
    /// again quoted only where needed, read back as the same fields. O(n).
    package static func violation(in input: [UInt8]) -> String? {
        let (records, readProblem) = read(input)
        if let readProblem { return readProblem }
        let breaks = input.count(where: { $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r") })
        var previous = 0
        for record in records {
            guard record.line > previous, record.line <= breaks + 1 else {
                return "record line \(record.line) after line \(previous), with \(breaks) line-break bytes"
            }
            previous = record.line
        }
        if !input.contains(UInt8(ascii: "\"")) {
            let expected = quoteFreeModel(input)
            let got = records.map { Line(number: $0.line, fields: $0.fields) }
            if got != expected { return "read \(got), the quote-free model says \(expected)" }
        }
        let wellFormed = records.compactMap { $0.fields }
        for minimal in [false, true] {
            let written = write(wellFormed, quotingOnlyWhereNeeded: minimal)
            let (again, problem) = read(written)
            if let problem { return "written back (minimal quoting \(minimal)): \(problem)" }
            let fields = again.map { $0.fields }
            if fields != wellFormed.map({ Optional($0) }) {
                return "written back (minimal quoting \(minimal)) as \(describe(written)), read as \(fields), "
                    + "not \(wellFormed)"
            }
        }
        return nil
    }

    /// One record as the model states it.
    private struct Line: Equatable, CustomStringConvertible {
        var number: Int
        var fields: [String]?
        var description: String { "\(number): \(fields.map { "\($0)" } ?? "malformed")" }
    }

    /// Reads every record, and says what went wrong when the reader does not
    /// advance or stops before the end.
    private static func read(_ bytes: [UInt8]) -> (records: [CSVReader.Record], problem: String?) {
        var reader = CSVReader(bytes)
        var records: [CSVReader.Record] = []
        while let record = reader.next() {
            records.append(record)
            if records.count > bytes.count { return (records, "\(records.count) records from \(bytes.count) bytes") }
        }
        return (records, reader.isAtEnd ? nil : "next() returned nil before the end")
    }

    /// The records of an input without `"`, by the documented grammar: a line
    /// break is LF, CR LF, or a CR that ends the input (a lone CR elsewhere is
    /// data); empty lines are skipped; fields are split at commas; a line with
    /// a field that is not UTF-8 is malformed. A leading byte-order mark is skipped.
    private static func quoteFreeModel(_ input: [UInt8]) -> [Line] {
        var bytes = input[...]
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes = bytes.dropFirst(3) }
        var lines: [Line] = []
        var number = 1
        var current: [UInt8] = []
        var index = bytes.startIndex
        func finish() {
            if !current.isEmpty {
                let split = current.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false)
                let fields = split.map { String(validating: $0, as: UTF8.self) }
                lines.append(Line(number: number, fields: fields.contains(nil) ? nil : fields.compactMap { $0 }))
            }
            current.removeAll()
            number += 1
        }
        while index < bytes.endIndex {
            let byte = bytes[index]
            let next = index + 1 < bytes.endIndex ? bytes[index + 1] : nil
            if byte == UInt8(ascii: "\n") {
                finish()
            } else if byte == UInt8(ascii: "\r") && (next == UInt8(ascii: "\n") || next == nil) {
                finish()
                if next != nil { index += 1 }
            } else {
                current.append(byte)
            }
            index += 1
        }
        if !current.isEmpty { finish() }
        return lines
    }

    /// Writes records as RFC 4180 text with CRLF line breaks: every field
    /// quoted, or only those that need it (a comma, quote, CR or LF, an empty
    /// only field, or a byte-order mark starting the input).
    private static func write(_ records: [[String]], quotingOnlyWhereNeeded minimal: Bool) -> [UInt8] {
        var out: [UInt8] = []
        for record in records {
            for (index, field) in record.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                let bytes = Array(field.utf8)
                let special = bytes.contains {
                    $0 == UInt8(ascii: ",") || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\r")
                        || $0 == UInt8(ascii: "\n")
                }
                let needsQuotes =
                    !minimal || special || (bytes.isEmpty && record.count == 1)
                    || (out.isEmpty && bytes.starts(with: [0xEF, 0xBB, 0xBF]))
                guard needsQuotes else {
                    out += bytes
                    continue
                }
                out.append(UInt8(ascii: "\""))
                for byte in bytes {
                    out.append(byte)
                    if byte == UInt8(ascii: "\"") { out.append(byte) }
                }
                out.append(UInt8(ascii: "\""))
            }
            out += [UInt8(ascii: "\r"), UInt8(ascii: "\n")]
        }
        return out
    }

    private static func describe(_ bytes: [UInt8]) -> String {
        String(decoding: bytes.prefix(200), as: UTF8.self).debugDescription
    }
}
