/// An app's identity: a positive integer assigned by the server.
public struct AppID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let rawValue: UInt32

    /// Creates an id; ids are positive.
    public init(_ rawValue: UInt32) {
        precondition(rawValue > 0, "AppID must be positive, got \(rawValue)")
        self.rawValue = rawValue
    }

    public static func < (lhs: AppID, rhs: AppID) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { String(rawValue) }
}
