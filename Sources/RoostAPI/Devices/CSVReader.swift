/// An RFC 4180 reader over a byte buffer, one record at a time.
///
/// Fields are separated by `,` and records by CRLF or LF; a field may be
/// quoted with `"`, inside which `""` is a quote and commas and line breaks
/// are data. A leading UTF-8 byte-order mark is skipped. A record that breaks
/// the grammar (a quote inside an unquoted field, text after a closing quote,
/// a quote left open at the end, invalid UTF-8) is reported as malformed and
/// reading resumes after its line, so one bad line costs only itself.
package struct CSVReader: Sendable {
    /// One record: the physical line it starts on (the first line is 1) and its fields.
    package struct Record: Sendable {
        package var line: Int
        /// nil when the record is malformed.
        package var fields: [String]?
    }

    private let bytes: [UInt8]
    private var position: Int
    private var line = 1

    package init(_ bytes: [UInt8]) {
        self.bytes = bytes
        let bom: [UInt8] = [0xEF, 0xBB, 0xBF]
        position = bytes.starts(with: bom) ? 3 : 0
    }

    /// Whether every byte has been read.
    package var isAtEnd: Bool { position >= bytes.count }

    /// Returns the next record, or nil at the end. Empty lines are skipped.
    /// O(bytes of the record).
    package mutating func next() -> Record? {
        // Only line breaks: a lone CR here is data, as it is inside a line.
        while position < bytes.count, isLineBreak(at: position) {
            consumeLineBreak()
        }
        guard position < bytes.count else { return nil }
        let start = line
        var fields: [String] = []
        var field: [UInt8] = []
        var malformed = false
        while true {
            if position < bytes.count && bytes[position] == quote {
                // A quoted field: up to the closing quote, then `,`, a line break or the end.
                position += 1
                var closed = false
                while position < bytes.count {
                    let byte = bytes[position]
                    position += 1
                    if byte == quote {
                        if position < bytes.count && bytes[position] == quote {
                            field.append(quote)
                            position += 1
                        } else {
                            closed = true
                            break
                        }
                    } else {
                        if byte == lf { line += 1 }
                        field.append(byte)
                    }
                }
                if !closed {
                    malformed = true
                    break
                }
                if position < bytes.count && bytes[position] != comma && !isLineBreak(at: position) {
                    malformed = true
                    skipLine()
                    break
                }
            } else {
                while position < bytes.count && bytes[position] != comma && !isLineBreak(at: position) {
                    if bytes[position] == quote { malformed = true }
                    field.append(bytes[position])
                    position += 1
                }
            }
            guard let text = String(validating: field, as: UTF8.self) else {
                malformed = true
                skipLine()
                break
            }
            fields.append(text)
            field.removeAll(keepingCapacity: true)
            if position < bytes.count && bytes[position] == comma {
                position += 1
                continue
            }
            if position < bytes.count { consumeLineBreak() }
            break
        }
        return Record(line: start, fields: malformed ? nil : fields)
    }

    private let comma = UInt8(ascii: ",")
    private let quote = UInt8(ascii: "\"")
    private let cr = UInt8(ascii: "\r")
    private let lf = UInt8(ascii: "\n")

    /// A line break is LF, or CR followed by LF; a lone CR is data.
    private func isLineBreak(at index: Int) -> Bool {
        bytes[index] == lf || (bytes[index] == cr && index + 1 < bytes.count && bytes[index + 1] == lf)
            || (bytes[index] == cr && index + 1 == bytes.count)
    }

    private mutating func consumeLineBreak() {
        if bytes[position] == cr { position += 1 }
        if position < bytes.count && bytes[position] == lf { position += 1 }
        line += 1
    }

    /// Skips to just after the next line break (resynchronising after a malformed record).
    private mutating func skipLine() {
        while position < bytes.count && bytes[position] != lf { position += 1 }
        if position < bytes.count {
            position += 1
            line += 1
        }
    }
}
