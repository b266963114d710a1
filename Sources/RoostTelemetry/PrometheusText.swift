/// The kind of a metric family (Prometheus text exposition format 0.0.4).
package enum MetricType: String, Sendable {
    case counter
    case gauge
    case histogram
}

/// Builds a scrape in the Prometheus text exposition format, version 0.0.4
/// (`Content-Type: text/plain; version=0.0.4; charset=utf-8`): per family a
/// `# HELP` and a `# TYPE` line, then its samples, one a line. Label values
/// are escaped (`\\`, `\"`, `\n`), so user data can never end a line or a
/// label early. Each family is declared once and its samples follow it
/// (preconditions: a second declaration or a stray sample is a bug of the
/// caller, not of the scraped data).
package struct PrometheusText: Sendable {
    /// The media type of the exposition.
    package static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    /// The text so far.
    package private(set) var bytes: [UInt8] = []
    private var declared: Set<String> = []
    private var current: (name: String, type: MetricType)?

    package init(reservingCapacity capacity: Int = 16 * 1024) {
        bytes.reserveCapacity(capacity)
    }

    /// Starts the family `name` (`[a-zA-Z_:][a-zA-Z0-9_:]*`) with its help text.
    package mutating func family(_ name: String, _ type: MetricType, help: String) {
        precondition(Self.isMetricName(name), "invalid metric name '\(name)'")
        precondition(declared.insert(name).inserted, "metric family \(name) declared twice")
        current = (name, type)
        append("# HELP ")
        append(name)
        append(" ")
        for byte in help.utf8 {
            switch byte {
            case UInt8(ascii: "\\"): append("\\\\")
            case UInt8(ascii: "\n"): append("\\n")
            default: bytes.append(byte)
            }
        }
        append("\n# TYPE ")
        append(name)
        append(" ")
        append(type.rawValue)
        append("\n")
    }

    /// One sample without labels of the current counter or gauge family.
    package mutating func sample(_ name: String, _ value: UInt64) { sample(name, [], value) }

    /// One sample without labels of the current gauge family, from a signed integer.
    package mutating func sample(_ name: String, _ value: Int) { sample(name, [], value) }

    /// One sample of the current counter or gauge family.
    package mutating func sample(_ name: String, _ labels: [(String, String)], _ value: UInt64) {
        sampleStart(name, labels, suffix: "")
        append(String(value))
        append("\n")
    }

    /// One sample of the current gauge family, from a signed integer.
    package mutating func sample(_ name: String, _ labels: [(String, String)], _ value: Int) {
        sampleStart(name, labels, suffix: "")
        append(String(value))
        append("\n")
    }

    /// One sample of the current family from a floating-point value
    /// (`+Inf`, `-Inf` and `NaN` as the format spells them).
    package mutating func sample(_ name: String, _ labels: [(String, String)], _ value: Double) {
        sampleStart(name, labels, suffix: "")
        append(Self.format(value))
        append("\n")
    }

    /// One sample of the current family from an integer in units of
    /// 10^`exponent` (nanoseconds as seconds: exponent -9), written exactly.
    package mutating func sample(
        _ name: String, _ labels: [(String, String)] = [], units: UInt64, decimalExponent exponent: Int
    ) {
        sampleStart(name, labels, suffix: "")
        append(Self.decimal(units, exponent: exponent))
        append("\n")
    }

    /// The `_bucket` (cumulative, `le` last), `_sum` and `_count` samples of
    /// one histogram of the current histogram family.
    package mutating func histogram(_ name: String, _ labels: [(String, String)] = [], _ histogram: Histogram) {
        precondition(current?.name == name && current?.type == .histogram, "histogram \(name) outside its family")
        let buckets = histogram.buckets
        var cumulative: UInt64 = 0
        for (index, count) in histogram.counts.enumerated() {
            cumulative &+= count
            let bound =
                index < buckets.upperBounds.count
                ? Self.decimal(buckets.upperBounds[index], exponent: buckets.decimalExponent) : "+Inf"
            sampleStart(name, labels + [("le", bound)], suffix: "_bucket")
            append(String(cumulative))
            append("\n")
        }
        sampleStart(name, labels, suffix: "_sum")
        append(Self.decimal(histogram.sum, exponent: buckets.decimalExponent))
        append("\n")
        sampleStart(name, labels, suffix: "_count")
        append(String(cumulative))
        append("\n")
    }

    // MARK: - Formatting

    /// Returns `units × 10^exponent` in decimal, without trailing zeros
    /// (1_500_000 at -9 → "0.0015"). Exact: no floating point.
    package static func decimal(_ units: UInt64, exponent: Int) -> String {
        precondition((-18...0).contains(exponent), "decimal exponent \(exponent) outside -18...0")
        guard exponent < 0 else { return String(units) }
        var scale: UInt64 = 1
        for _ in 0..<(-exponent) { scale *= 10 }
        let whole = units / scale
        var fraction = units % scale
        guard fraction != 0 else { return String(whole) }
        var digits = -exponent
        while fraction % 10 == 0 {
            fraction /= 10
            digits -= 1
        }
        let text = String(fraction)
        return String(whole) + "." + String(repeating: "0", count: digits - text.utf8.count) + text
    }

    /// Returns a floating-point value as the format reads it.
    package static func format(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value < 0 ? "-Inf" : "+Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }

    /// Whether `name` is a valid metric name.
    package static func isMetricName(_ name: String) -> Bool {
        guard let first = name.utf8.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else {
            return false
        }
        return name.utf8.allSatisfy { isNameByte($0) || $0 == UInt8(ascii: ":") }
    }

    /// Whether `name` is a valid label name (`[a-zA-Z_][a-zA-Z0-9_]*`, not `__`-prefixed).
    package static func isLabelName(_ name: String) -> Bool {
        guard let first = name.utf8.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else {
            return false
        }
        return !name.hasPrefix("__") && name.utf8.allSatisfy(isNameByte)
    }

    private static func isNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"):
            true
        default:
            false
        }
    }

    // MARK: - Internals

    private mutating func sampleStart(_ name: String, _ labels: [(String, String)], suffix: String) {
        precondition(
            current?.name == name, "sample of \(name) outside its family (current: \(current?.name ?? "none"))")
        append(name)
        append(suffix)
        guard !labels.isEmpty else {
            append(" ")
            return
        }
        append("{")
        for (index, (label, value)) in labels.enumerated() {
            precondition(Self.isLabelName(label), "invalid label name '\(label)' on \(name)")
            if index > 0 { append(",") }
            append(label)
            append("=\"")
            for byte in value.utf8 {
                switch byte {
                case UInt8(ascii: "\\"): append("\\\\")
                case UInt8(ascii: "\""): append("\\\"")
                case UInt8(ascii: "\n"): append("\\n")
                default: bytes.append(byte)
                }
            }
            append("\"")
        }
        append("} ")
    }

    private mutating func append(_ text: String) {
        bytes.append(contentsOf: text.utf8)
    }
}
