/// A point in time: milliseconds since 1970-01-01T00:00:00Z (UTC, no leap seconds).
///
/// The domain is 1970-01-01T00:00:00.000Z ... 9999-12-31T23:59:59.999Z, the
/// range RFC 3339 with four-digit years can spell. Formatting and parsing are
/// written by hand (no Foundation) with the civil-date algorithms of Howard
/// Hinnant ("chrono-Compatible Low-Level Date Algorithms").
package struct Timestamp: Hashable, Comparable, Sendable, CustomStringConvertible {
    package static let millisecondsMin: Int64 = 0
    package static let millisecondsMax: Int64 = 253_402_300_799_999
    static let millisecondsPerDay: Int64 = 86_400_000

    package let millisecondsSinceEpoch: Int64

    /// Creates a timestamp; the value must lie in the domain (a clock bug otherwise).
    package init(millisecondsSinceEpoch milliseconds: Int64) {
        precondition(
            milliseconds >= Self.millisecondsMin && milliseconds <= Self.millisecondsMax,
            "Timestamp out of range: \(milliseconds) ms")
        self.millisecondsSinceEpoch = milliseconds
    }

    /// Returns a timestamp when `milliseconds` lies in the domain, else nil (for decoders).
    package init?(validatingMilliseconds milliseconds: Int64) {
        guard milliseconds >= Self.millisecondsMin && milliseconds <= Self.millisecondsMax else { return nil }
        self.millisecondsSinceEpoch = milliseconds
    }

    package static func < (lhs: Timestamp, rhs: Timestamp) -> Bool {
        lhs.millisecondsSinceEpoch < rhs.millisecondsSinceEpoch
    }

    /// Returns this time plus `milliseconds`, clamped to the domain.
    package func adding(milliseconds: Int64) -> Timestamp {
        let sum = millisecondsSinceEpoch.addingReportingOverflow(milliseconds)
        let value = sum.overflow ? (milliseconds > 0 ? Self.millisecondsMax : Self.millisecondsMin) : sum.partialValue
        return Timestamp(millisecondsSinceEpoch: min(max(value, Self.millisecondsMin), Self.millisecondsMax))
    }

    /// Bytes of the RFC 3339 form (`rfc3339`): always 24.
    package static let rfc3339Bytes = 24

    /// The spec's form, always UTC with milliseconds: `2026-09-20T14:02:11.000Z`.
    /// One allocation (the string's own storage); `withRFC3339` writes none.
    package var rfc3339: String {
        String(unsafeUninitializedCapacity: Self.rfc3339Bytes) { buffer in
            formatRFC3339(into: buffer)
            return Self.rfc3339Bytes
        }
    }

    /// Calls `body` with the RFC 3339 form's `rfc3339Bytes` ASCII bytes, formatted
    /// in a buffer on the stack: no `String` and no heap allocation (renderers
    /// write it straight into their output).
    package func withRFC3339(_ body: (UnsafeBufferPointer<UInt8>) -> Void) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Self.rfc3339Bytes) { buffer in
            formatRFC3339(into: buffer)
            body(UnsafeBufferPointer(buffer))
        }
    }

    /// Writes the RFC 3339 form into the first `rfc3339Bytes` bytes of `buffer`.
    /// Straight-line stores of two digits at a time in 32-bit arithmetic (the
    /// domain's day count and time of day fit): a person read formats three
    /// or four of these per device (issue 25's profile: 1.6 % of a person
    /// read with a digit loop in 64 bits).
    package func formatRFC3339(into buffer: UnsafeMutableBufferPointer<UInt8>) {
        precondition(buffer.count >= Self.rfc3339Bytes, "RFC 3339 buffer of \(buffer.count) bytes")
        precondition(millisecondsSinceEpoch >= Self.millisecondsMin, "timestamp \(millisecondsSinceEpoch) before 1970")
        let days = millisecondsSinceEpoch / Self.millisecondsPerDay
        let millisecondsOfDay = UInt32(truncatingIfNeeded: millisecondsSinceEpoch % Self.millisecondsPerDay)
        let (year, month, day) = Self.civil(fromDays: days)
        let secondsOfDay = millisecondsOfDay / 1000
        let milliseconds = millisecondsOfDay % 1000
        guard let base = buffer.baseAddress else { preconditionFailure("RFC 3339 buffer without storage") }
        @inline(__always) func twoDigits(_ value: UInt32, at offset: Int) {
            base[offset] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: value / 10)
            base[offset + 1] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: value % 10)
        }
        twoDigits(year / 100, at: 0)
        twoDigits(year % 100, at: 2)
        base[4] = UInt8(ascii: "-")
        twoDigits(month, at: 5)
        base[7] = UInt8(ascii: "-")
        twoDigits(day, at: 8)
        base[10] = UInt8(ascii: "T")
        twoDigits(secondsOfDay / 3600, at: 11)
        base[13] = UInt8(ascii: ":")
        twoDigits(secondsOfDay / 60 % 60, at: 14)
        base[16] = UInt8(ascii: ":")
        twoDigits(secondsOfDay % 60, at: 17)
        base[19] = UInt8(ascii: ".")
        base[20] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: milliseconds / 100)
        twoDigits(milliseconds % 100, at: 21)
        base[23] = UInt8(ascii: "Z")
        assert(Self.rfc3339Bytes == 24, "RFC 3339 form of \(Self.rfc3339Bytes) bytes")
    }

    package var description: String { rfc3339 }

    /// Parses RFC 3339 (`YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`; `t` and `z` in
    /// either case). Fractions beyond milliseconds are truncated; leap second 60,
    /// impossible dates and results outside the domain return nil.
    package init?(rfc3339 text: some StringProtocol) {
        let utf8 = Array(text.utf8)
        guard let milliseconds = Self.parse(utf8) else { return nil }
        self.init(validatingMilliseconds: milliseconds)
    }

    private static func parse(_ b: [UInt8]) -> Int64? {
        var index = 0
        func number(_ width: Int) -> Int64? {
            guard index + width <= b.count else { return nil }
            var value: Int64 = 0
            for offset in 0..<width {
                let c = b[index + offset]
                guard c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int64(c - UInt8(ascii: "0"))
            }
            index += width
            return value
        }
        func expect(_ choices: UInt8...) -> Bool {
            guard index < b.count, choices.contains(b[index]) else { return false }
            index += 1
            return true
        }
        guard let year = number(4), expect(UInt8(ascii: "-")), let month = number(2), expect(UInt8(ascii: "-")),
            let day = number(2), expect(UInt8(ascii: "T"), UInt8(ascii: "t")),
            let hour = number(2), expect(UInt8(ascii: ":")), let minute = number(2), expect(UInt8(ascii: ":")),
            let second = number(2)
        else { return nil }
        guard (1...12).contains(month), day >= 1, day <= daysInMonth(year: year, month: month),
            hour <= 23, minute <= 59, second <= 59
        else { return nil }
        var milliseconds: Int64 = 0
        if index < b.count && b[index] == UInt8(ascii: ".") {
            index += 1
            var digitCount = 0
            while index < b.count, b[index] >= UInt8(ascii: "0"), b[index] <= UInt8(ascii: "9") {
                if digitCount < 3 { milliseconds = milliseconds * 10 + Int64(b[index] - UInt8(ascii: "0")) }
                digitCount += 1
                index += 1
            }
            guard digitCount >= 1 && digitCount <= 9 else { return nil }
            for _ in digitCount..<max(digitCount, 3) { milliseconds *= 10 }
        }
        var offsetMinutes: Int64 = 0
        if expect(UInt8(ascii: "Z"), UInt8(ascii: "z")) {
            offsetMinutes = 0
        } else if index < b.count && (b[index] == UInt8(ascii: "+") || b[index] == UInt8(ascii: "-")) {
            let sign: Int64 = b[index] == UInt8(ascii: "+") ? 1 : -1
            index += 1
            guard let offsetHours = number(2), expect(UInt8(ascii: ":")), let offsetMinute = number(2),
                offsetHours <= 23, offsetMinute <= 59
            else { return nil }
            offsetMinutes = sign * (offsetHours * 60 + offsetMinute)
        } else {
            return nil
        }
        guard index == b.count else { return nil }
        let days = days(fromCivilYear: year, month: month, day: day)
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offsetMinutes * 60
        return seconds * 1000 + milliseconds
    }

    private static func isLeap(_ year: Int64) -> Bool {
        (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
    }

    private static func daysInMonth(year: Int64, month: Int64) -> Int64 {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Returns days since 1970-01-01 of a proleptic Gregorian date.
    static func days(fromCivilYear year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// Returns the proleptic Gregorian date of a day count since 1970-01-01,
    /// for the domain's days (0 through 9999-12-31): the same algorithm as
    /// for any day count, in 32-bit arithmetic, since no era before 1970
    /// occurs (a person read converts three or four dates a device).
    static func civil(fromDays dayCount: Int64) -> (year: UInt32, month: UInt32, day: UInt32) {
        precondition(
            dayCount >= 0 && dayCount <= millisecondsMax / millisecondsPerDay,
            "day \(dayCount) outside the timestamp domain")
        let z = UInt32(truncatingIfNeeded: dayCount) + 719_468
        let era = z / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
