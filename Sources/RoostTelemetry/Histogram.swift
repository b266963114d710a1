/// The bucket boundaries of a histogram, in the integer unit observations
/// are made in (nanoseconds, records), and the power of ten that turns that
/// unit into the exported one (seconds): integers keep the bounds and sums
/// exact in the exposition.
package struct HistogramBuckets: Sendable, Equatable {
    /// Inclusive upper bounds (Prometheus `le`), strictly ascending; a last
    /// bucket without bound (`+Inf`) follows them.
    package let upperBounds: [UInt64]
    /// One unit is 10^`decimalExponent` of the exported unit: -9 for
    /// nanoseconds shown as seconds, 0 for counts.
    package let decimalExponent: Int

    package init(upperBounds: [UInt64], decimalExponent: Int) {
        precondition((-18...0).contains(decimalExponent), "decimal exponent \(decimalExponent) outside -18...0")
        precondition(!upperBounds.isEmpty, "a histogram needs at least one bound")
        for index in upperBounds.indices.dropFirst() {
            precondition(
                upperBounds[index - 1] < upperBounds[index],
                "histogram bounds not ascending at \(index): \(upperBounds[index - 1]), \(upperBounds[index])")
        }
        self.upperBounds = upperBounds
        self.decimalExponent = decimalExponent
    }

    /// Buckets with the `+Inf` one.
    package var bucketCount: Int { upperBounds.count + 1 }

    /// Returns the bucket `value` falls in: the first bound at or above it,
    /// else the `+Inf` bucket. O(bounds), at most 20 compares.
    @inline(__always)
    package func bucket(for value: UInt64) -> Int {
        for (index, bound) in upperBounds.enumerated() where value <= bound { return index }
        return upperBounds.count
    }

    /// Request and fdatasync latencies: 100 µs to 10 s, in nanoseconds.
    package static let latencyNanoseconds = HistogramBuckets(
        upperBounds: [
            100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 25_000_000, 50_000_000,
            100_000_000, 250_000_000, 500_000_000, 1_000_000_000, 2_500_000_000, 5_000_000_000, 10_000_000_000,
        ], decimalExponent: -9)

    /// Records one fdatasync covered: powers of four from 1 to 16,384.
    package static let recordsPerSync = HistogramBuckets(
        upperBounds: [1, 4, 16, 64, 256, 1_024, 4_096, 16_384], decimalExponent: 0)
}

/// A histogram as a value: a count per bucket (not cumulative), the sum and
/// the number of observations. Kept under its owner's lock or confined to
/// one thread; the exposition makes the counts cumulative.
package struct Histogram: Sendable, Equatable {
    package let buckets: HistogramBuckets
    /// One count per bucket, the `+Inf` one last; each observation adds to exactly one.
    package private(set) var counts: [UInt64]
    /// The sum of every observation, in the observation unit.
    package private(set) var sum: UInt64 = 0

    package init(_ buckets: HistogramBuckets) {
        self.buckets = buckets
        counts = [UInt64](repeating: 0, count: buckets.bucketCount)
    }

    /// A histogram from counts and a sum read elsewhere (per-loop cells).
    package init(_ buckets: HistogramBuckets, counts: [UInt64], sum: UInt64) {
        precondition(counts.count == buckets.bucketCount, "\(counts.count) counts for \(buckets.bucketCount) buckets")
        self.buckets = buckets
        self.counts = counts
        self.sum = sum
    }

    /// The number of observations.
    package var count: UInt64 { counts.reduce(0, &+) }

    /// Counts one observation of `value`. O(bounds).
    package mutating func observe(_ value: UInt64) {
        counts[buckets.bucket(for: value)] &+= 1
        sum &+= value
    }
}
