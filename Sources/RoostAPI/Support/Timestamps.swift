/// Returns an RFC 3339 UTC timestamp with milliseconds, e.g.
/// `2026-09-20T14:02:11.000Z`, without Foundation.
package func formatTimestamp(milliseconds: Int64) -> String {
    precondition(milliseconds >= 0, "timestamps before 1970 are not produced: \(milliseconds)")
    let seconds = milliseconds / 1000
    let millis = Int(milliseconds % 1000)
    let days = seconds / 86_400
    let secondOfDay = Int(seconds % 86_400)
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let shifted = days + 719_468
    let era = shifted / 146_097
    let dayOfEra = shifted - era * 146_097
    let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
    let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
    let monthIndex = (5 * dayOfYear + 2) / 153
    let day = Int(dayOfYear - (153 * monthIndex + 2) / 5 + 1)
    let month = Int(monthIndex < 10 ? monthIndex + 3 : monthIndex - 9)
    let year = Int(yearOfEra + era * 400 + (month <= 2 ? 1 : 0))
    var out: [UInt8] = []
    out.reserveCapacity(24)
    func digits(_ value: Int, _ width: Int) {
        var divisor = 1
        for _ in 1..<width { divisor *= 10 }
        var remaining = value
        while divisor > 0 {
            out.append(UInt8(48 + remaining / divisor))
            remaining %= divisor
            divisor /= 10
        }
    }
    digits(year, 4)
    out.append(UInt8(ascii: "-"))
    digits(month, 2)
    out.append(UInt8(ascii: "-"))
    digits(day, 2)
    out.append(UInt8(ascii: "T"))
    digits(secondOfDay / 3600, 2)
    out.append(UInt8(ascii: ":"))
    digits(secondOfDay % 3600 / 60, 2)
    out.append(UInt8(ascii: ":"))
    digits(secondOfDay % 60, 2)
    out.append(UInt8(ascii: "."))
    digits(millis, 3)
    out.append(UInt8(ascii: "Z"))
    return String(decoding: out, as: UTF8.self)
}
