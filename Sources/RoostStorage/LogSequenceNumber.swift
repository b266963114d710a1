/// The position of one record in the write-ahead log. LSNs start at 1 and
/// increase by one per record with no gaps, across segment boundaries.
package struct LogSequenceNumber: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible,
    ExpressibleByIntegerLiteral
{
    package var rawValue: UInt64

    package init(rawValue: UInt64) {
        self.rawValue = rawValue
    }

    package init(_ rawValue: UInt64) {
        self.rawValue = rawValue
    }

    package init(integerLiteral value: UInt64) {
        self.rawValue = value
    }

    /// The LSN of the first record ever written.
    package static let first = LogSequenceNumber(1)

    /// Returns the LSN `count` records later.
    package func advanced(by count: UInt64) -> LogSequenceNumber {
        LogSequenceNumber(rawValue + count)
    }

    package static func < (lhs: LogSequenceNumber, rhs: LogSequenceNumber) -> Bool {
        lhs.rawValue < rhs.rawValue
    }

    package var description: String { String(rawValue) }
}
