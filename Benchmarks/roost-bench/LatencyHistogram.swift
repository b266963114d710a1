import RoostTesting

/// A log-linear histogram of non-negative integer values (nanoseconds here),
/// in the manner of HdrHistogram: values below 256 are counted exactly; each
/// power-of-two range above is split into 128 equal buckets, so a bucket is at
/// most 1/128 of the values it holds wide. A percentile is reported as the
/// highest value of its bucket (never above the recorded maximum), which is
/// within 0.79 % of the true value. Values above `valueMax` count in the last
/// bucket (and `max` still holds them exactly).
///
/// Recording is O(1) (one count-leading-zeros); a percentile walks the
/// buckets, O(`bucketCount`) (~4,500).
struct LatencyHistogram {
    /// Values below this are their own bucket.
    static let linearCount = 256
    /// Buckets per power of two above `linearCount`.
    static let bucketsPerOctave = 128
    /// log2(`bucketsPerOctave`).
    static let octaveBits = 7
    /// The largest value with a bucket of its own (~18 minutes in nanoseconds).
    static let valueMax: UInt64 = (1 << 40) - 1
    /// 256 linear buckets, then 128 for each of the octaves 2^8 … 2^39.
    static let bucketCount = linearCount + (40 - 8) * bucketsPerOctave

    private(set) var counts: [UInt64]
    private(set) var count: UInt64 = 0
    private(set) var min: UInt64 = .max
    private(set) var max: UInt64 = 0
    private(set) var sum: Double = 0

    init() {
        counts = Array(repeating: 0, count: Self.bucketCount)
    }

    /// Returns the bucket that holds `value`.
    static func bucket(of value: UInt64) -> Int {
        let clamped = Swift.min(value, valueMax)
        if clamped < UInt64(linearCount) { return Int(clamped) }
        let highestBit = 63 - clamped.leadingZeroBitCount  // 8 … 39
        let shift = highestBit - octaveBits  // 1 … 32: value >> shift is in 128..<256
        let subBucket = Int(clamped >> UInt64(shift)) - bucketsPerOctave
        let index = linearCount + (shift - 1) * bucketsPerOctave + subBucket
        precondition(index >= linearCount && index < bucketCount, "bucket \(index) of value \(value) out of range")
        return index
    }

    /// Returns the lowest and the highest value that fall in `bucket`.
    static func range(of bucket: Int) -> (lowest: UInt64, highest: UInt64) {
        precondition(bucket >= 0 && bucket < bucketCount, "bucket \(bucket) out of range 0..<\(bucketCount)")
        if bucket < linearCount { return (UInt64(bucket), UInt64(bucket)) }
        let shift = (bucket - linearCount) / bucketsPerOctave + 1
        let subBucket = (bucket - linearCount) % bucketsPerOctave + bucketsPerOctave
        let lowest = UInt64(subBucket) << UInt64(shift)
        return (lowest, lowest + (1 << UInt64(shift)) - 1)
    }

    /// Counts one value.
    mutating func record(_ value: UInt64) {
        counts[Self.bucket(of: value)] += 1
        count += 1
        sum += Double(value)
        if value < min { min = value }
        if value > max { max = value }
    }

    /// Forgets every value (keeps the buckets' storage). O(buckets).
    mutating func reset() {
        for index in 0..<Self.bucketCount { counts[index] = 0 }
        count = 0
        min = .max
        max = 0
        sum = 0
    }

    /// Adds every count of `other` (histograms of several loops or runs).
    mutating func merge(_ other: LatencyHistogram) {
        for index in 0..<Self.bucketCount { counts[index] += other.counts[index] }
        count += other.count
        sum += other.sum
        min = Swift.min(min, other.min)
        max = Swift.max(max, other.max)
    }

    /// Returns the value below or at which `percent` % of the recorded values
    /// lie (the value of rank ⌈percent/100 × count⌉, as in a sorted array),
    /// to within 1/128 above; 0 when nothing was recorded. O(buckets).
    func percentile(_ percent: Double) -> UInt64 {
        precondition(percent >= 0 && percent <= 100, "percentile \(percent) outside 0…100")
        guard count > 0 else { return 0 }
        let rank = Swift.max(1, UInt64((percent / 100 * Double(count)).rounded(.up)))
        var seen: UInt64 = 0
        for index in 0..<Self.bucketCount {
            seen += counts[index]
            if seen >= Swift.min(rank, count) {
                return Swift.min(Self.range(of: index).highest, max)
            }
        }
        preconditionFailure("counts sum to \(seen), below count \(count)")
    }

    /// The arithmetic mean of the recorded values (exact), 0 when empty.
    var mean: Double { count == 0 ? 0 : sum / Double(count) }
}

/// `roost-bench selftest-histogram`: checks `LatencyHistogram` against sorted
/// arrays (seeded random values from several shapes, printed seed) and the
/// bucket arithmetic at every power-of-two edge. Exits 1 on a mismatch.
enum LatencyHistogramSelfTest {
    /// Returns the failures found (empty: all good), printing a summary.
    static func run(seed: UInt64) -> [String] {
        var failures: [String] = []
        // Bucket edges: every value maps to a bucket whose range holds it.
        var edges: [UInt64] = Array(0..<600)
        for bit in 8..<40 {
            let power = UInt64(1) << UInt64(bit)
            edges += [power - 1, power, power + 1, power + power / 3]
        }
        for value in edges {
            let bucket = LatencyHistogram.bucket(of: value)
            let range = LatencyHistogram.range(of: bucket)
            if value < range.lowest || value > range.highest {
                failures.append("value \(value) in bucket \(bucket) with range \(range)")
            }
            if range.highest - range.lowest > Swift.max(range.lowest / 128, 0) {
                failures.append("bucket \(bucket) range \(range) wider than 1/128 of its values")
            }
        }
        var random = SeededRandom(seed: seed)
        let shapes: [(String, (inout SeededRandom) -> UInt64)] = [
            ("uniform 0-10ms", { UInt64($0.next() % 10_000_000) }),
            ("log-uniform 1ns-10s", { UInt64(pow2($0.nextUnit() * 33.2)) }),
            (
                "bimodal 50us / 5ms tail",
                { $0.next() % 100 < 98 ? 40_000 + $0.next() % 20_000 : 5_000_000 + $0.next() % 1_000_000 }
            ),
            ("small exact 0-300", { $0.next() % 300 }),
        ]
        for (name, draw) in shapes {
            for size in [1, 7, 1000, 200_000] {
                var histogram = LatencyHistogram()
                var values: [UInt64] = []
                values.reserveCapacity(size)
                for _ in 0..<size {
                    let value = draw(&random)
                    values.append(value)
                    histogram.record(value)
                }
                values.sort()
                for percent in [0.0, 1, 50, 90, 99, 99.9, 99.99, 100] {
                    let rank = Swift.max(1, Int((percent / 100 * Double(size)).rounded(.up)))
                    let exact = values[Swift.min(rank, size) - 1]
                    let estimate = histogram.percentile(percent)
                    let error = Double(estimate) - Double(exact)
                    if error < 0 || error > Double(exact) / 100 {
                        failures.append("\(name), \(size) values, p\(percent): histogram \(estimate), sorted \(exact)")
                    }
                }
                if histogram.max != values[size - 1] || histogram.min != values[0] {
                    failures.append("\(name), \(size) values: min/max \(histogram.min)/\(histogram.max)")
                }
            }
        }
        print(
            "selftest-histogram (seed \(seed)): \(edges.count) bucket edges, 4 shapes × 4 sizes × 8 percentiles: "
                + (failures.isEmpty ? "ok" : "\(failures.count) failures"))
        for failure in failures.prefix(20) { print("  \(failure)") }
        return failures
    }

    /// 2^exponent for a non-negative exponent, without Foundation.
    private static func pow2(_ exponent: Double) -> Double {
        var result = Double(UInt64(1) << UInt64(exponent))
        let fraction = exponent - exponent.rounded(.down)
        // 2^f = e^(f ln 2), a short series is plenty for test values.
        let x = fraction * 0.693_147_180_559_945_3
        result *= 1 + x + x * x / 2 + x * x * x / 6 + x * x * x * x / 24
        return result
    }
}

extension SeededRandom {
    /// Returns a uniform value in [0, 1).
    mutating func nextUnit() -> Double { Double(next() >> 11) / Double(UInt64(1) << 53) }
}
