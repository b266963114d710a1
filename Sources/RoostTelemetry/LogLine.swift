/// How much a log line matters. Warnings and errors are rate-limited per
/// event (`Logger.errorLinesBurstMax`); information lines are not.
package enum LogLevel: String, Sendable, Comparable {
    case info
    case warning
    case error

    private var rank: Int {
        switch self {
        case .info: 0
        case .warning: 1
        case .error: 2
        }
    }

    package static func < (left: LogLevel, right: LogLevel) -> Bool { left.rank < right.rank }
}

/// One structured log line being built: a JSON object on one line,
/// `{"ts":"2026-09-20T14:02:11.000Z","level":"info","event":"wal.recovery",…}`,
/// with dotted keys (`duration.ms`, `wal.segment`). Strings are escaped as
/// RFC 8259 says (quotes, backslashes and every control character), so no
/// value can end the line or the object early.
package struct LogLine: Sendable {
    package private(set) var bytes: [UInt8]

    /// Starts a line with its time (milliseconds since the Unix epoch, UTC), level and event name.
    package init(level: LogLevel, event: String, wallMilliseconds: Int64) {
        bytes = []
        bytes.reserveCapacity(256)
        bytes.append(contentsOf: #"{"ts":""#.utf8)
        LogLine.appendTimestamp(wallMilliseconds, to: &bytes)
        bytes.append(contentsOf: #"","level":""#.utf8)
        bytes.append(contentsOf: level.rawValue.utf8)
        bytes.append(contentsOf: #"","event":"#.utf8)
        LogLine.appendString(event, to: &bytes)
    }

    /// Adds a string field.
    package mutating func field(_ key: String, _ value: String) {
        appendKey(key)
        LogLine.appendString(value, to: &bytes)
    }

    /// Adds an integer field.
    package mutating func field(_ key: String, _ value: Int) {
        appendKey(key)
        bytes.append(contentsOf: String(value).utf8)
    }

    /// Adds an unsigned integer field.
    package mutating func field(_ key: String, _ value: UInt64) {
        appendKey(key)
        bytes.append(contentsOf: String(value).utf8)
    }

    /// Adds a boolean field.
    package mutating func field(_ key: String, _ value: Bool) {
        appendKey(key)
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
    }

    /// Adds a duration in milliseconds with microsecond precision (`12.345`).
    package mutating func field(_ key: String, milliseconds duration: Duration) {
        let (seconds, attoseconds) = duration.components
        let microseconds = seconds * 1_000_000 + attoseconds / 1_000_000_000_000
        appendKey(key)
        if microseconds < 0 { bytes.append(UInt8(ascii: "-")) }
        let magnitude = microseconds.magnitude
        bytes.append(contentsOf: String(magnitude / 1000).utf8)
        let fraction = magnitude % 1000
        bytes.append(UInt8(ascii: "."))
        if fraction < 100 { bytes.append(UInt8(ascii: "0")) }
        if fraction < 10 { bytes.append(UInt8(ascii: "0")) }
        bytes.append(contentsOf: String(fraction).utf8)
    }

    /// Returns the finished line, newline included.
    package func finished() -> [UInt8] {
        var line = bytes
        line.append(contentsOf: "}\n".utf8)
        return line
    }

    private mutating func appendKey(_ key: String) {
        bytes.append(UInt8(ascii: ","))
        LogLine.appendString(key, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
    }

    /// Appends `text` as a JSON string.
    static func appendString(_ text: String, to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): bytes.append(contentsOf: #"\\"#.utf8)
            case UInt8(ascii: "\n"): bytes.append(contentsOf: #"\n"#.utf8)
            case UInt8(ascii: "\r"): bytes.append(contentsOf: #"\r"#.utf8)
            case UInt8(ascii: "\t"): bytes.append(contentsOf: #"\t"#.utf8)
            case 0..<0x20, 0x7F:
                let hex = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: #"\u00"#.utf8)
                bytes.append(hex[Int(byte >> 4)])
                bytes.append(hex[Int(byte & 15)])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// Appends milliseconds since the Unix epoch as RFC 3339 UTC with
    /// milliseconds (`2026-09-20T14:02:11.000Z`); proleptic Gregorian, from
    /// the day count by Howard Hinnant's `civil_from_days`.
    static func appendTimestamp(_ wallMilliseconds: Int64, to bytes: inout [UInt8]) {
        let milliseconds = wallMilliseconds >= 0 ? wallMilliseconds : 0
        let days = milliseconds / 86_400_000
        let inDay = milliseconds % 86_400_000
        let shifted = days + 719_468
        let era = shifted / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func digits(_ value: Int64, _ width: Int) {
            let text = String(value)
            for _ in text.utf8.count..<max(width, text.utf8.count) { bytes.append(UInt8(ascii: "0")) }
            bytes.append(contentsOf: text.utf8)
        }
        digits(year, 4)
        bytes.append(UInt8(ascii: "-"))
        digits(month, 2)
        bytes.append(UInt8(ascii: "-"))
        digits(day, 2)
        bytes.append(UInt8(ascii: "T"))
        digits(inDay / 3_600_000, 2)
        bytes.append(UInt8(ascii: ":"))
        digits(inDay / 60_000 % 60, 2)
        bytes.append(UInt8(ascii: ":"))
        digits(inDay / 1000 % 60, 2)
        bytes.append(UInt8(ascii: "."))
        digits(inDay % 1000, 3)
        bytes.append(UInt8(ascii: "Z"))
    }
}
