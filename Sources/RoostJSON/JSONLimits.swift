/// The bounds a `JSONReader` enforces on untrusted input, so that a hostile body
/// costs at most a known amount of memory and time.
public struct JSONLimits: Sendable {
    /// The deepest nesting of arrays and objects accepted; a top-level scalar has depth 0,
    /// `[]` has depth 1. Deeper input fails with `JSONError.Kind.depthExceeded`.
    public var maxDepth: Int
    /// The largest input accepted, in bytes; larger input fails with `.tooLarge` before any parsing.
    public var maxInputBytes: Int
    /// The largest single string (decoded UTF-8 bytes) or number literal accepted; longer ones fail with `.tooLarge`.
    public var maxStringBytes: Int

    /// The limits for request bodies: depth 32, 64 MiB of input, 1 MiB per string.
    public static let `default` = JSONLimits(
        maxDepth: 32, maxInputBytes: 64 * 1024 * 1024, maxStringBytes: 1024 * 1024)

    /// Creates limits; every limit must be positive.
    public init(maxDepth: Int = 32, maxInputBytes: Int = 64 * 1024 * 1024, maxStringBytes: Int = 1024 * 1024) {
        precondition(maxDepth > 0, "JSONLimits.maxDepth must be positive, got \(maxDepth)")
        precondition(maxInputBytes > 0, "JSONLimits.maxInputBytes must be positive, got \(maxInputBytes)")
        precondition(maxStringBytes > 0, "JSONLimits.maxStringBytes must be positive, got \(maxStringBytes)")
        self.maxDepth = maxDepth
        self.maxInputBytes = maxInputBytes
        self.maxStringBytes = maxStringBytes
    }
}
