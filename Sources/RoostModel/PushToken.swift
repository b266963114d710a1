/// A provider push token as raw bytes (ARCHITECTURE: tokens become bytes at the edge).
///
/// - APNs (`ios`): the hex text decoded, 32 to 200 bytes. Hex is case-insensitive,
///   so `AB` and `ab` are the same token; `text` renders lower-case.
/// - FCM (`android`): the token's ASCII bytes as sent, 32 to 400 bytes of `A-Za-z0-9_-:.`.
///
/// `description` never shows the token (HOUSE_STYLE rule 14).
///
/// A token of at most `inlineBytesMax` bytes (an APNs token as Apple issues
/// them: 32) is held inline, so parsing one allocates nothing (issue 25);
/// a longer one (FCM's text, ~150 bytes) in an array.
package struct PushToken: Hashable, Sendable, CustomStringConvertible {
    package let platform: Platform
    private let storage: Storage

    /// The most bytes held inline.
    static let inlineBytesMax = 32

    private enum Storage: Sendable {
        /// `count` (≤ `inlineBytesMax`) bytes at the start of `words`, the rest zero.
        case inline(words: (UInt64, UInt64, UInt64, UInt64), count: UInt8)
        /// More than `inlineBytesMax` bytes.
        case array([UInt8])

        init(_ bytes: UnsafeRawBufferPointer) {
            guard bytes.count <= PushToken.inlineBytesMax else {
                self = .array(Array(bytes))
                return
            }
            var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
            withUnsafeMutableBytes(of: &words) { $0.copyMemory(from: bytes) }
            self = .inline(words: words, count: UInt8(bytes.count))
        }

        init(_ bytes: [UInt8]) {
            if bytes.count > PushToken.inlineBytesMax {
                self = .array(bytes)
            } else {
                self = bytes.withUnsafeBytes { Storage($0) }
            }
        }
    }

    /// The token's bytes in a new array (an allocation: the request path
    /// reads them in place with `withBytes`).
    package var bytes: [UInt8] { withBytes { Array($0) } }

    /// The number of the token's bytes.
    package var byteCount: Int {
        switch storage {
        case .inline(_, let count): Int(count)
        case .array(let bytes): bytes.count
        }
    }

    /// Calls `body` with the token's bytes, in place.
    @inline(__always)
    package func withBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        switch storage {
        case .inline(var words, let count):
            return try withUnsafeBytes(of: &words) { try body(UnsafeRawBufferPointer(rebasing: $0[..<Int(count)])) }
        case .array(let bytes):
            return try bytes.withUnsafeBytes(body)
        }
    }

    package static func == (lhs: PushToken, rhs: PushToken) -> Bool {
        lhs.platform == rhs.platform
            && lhs.withBytes { left in rhs.withBytes { right in left.hasSameBytes(as: right) } }
    }

    /// Parses a token sent for `platform` (spec §2 token shapes).
    ///
    /// Throws `unsupportedTokenType` for an Expo token, `invalidTokenFormat` for
    /// anything that does not fit the platform's shape (including a token of the
    /// other platform: an FCM token is not hex).
    package init(parsing text: String, platform: Platform) throws(RegistryRejection) {
        var text = text
        let parsed = text.withUTF8 { utf8 in
            Result { () throws(RegistryRejection) -> PushToken in try PushToken(parsingUTF8: utf8, platform: platform) }
        }
        self = try parsed.get()
    }

    /// `init(parsing:platform:)` over the token's UTF-8 bytes as they came
    /// (a request body's span): no `String` is made.
    package init(parsingUTF8 utf8: UnsafeBufferPointer<UInt8>, platform: Platform) throws(RegistryRejection) {
        if Self.isExpoToken(utf8) { throw .unsupportedTokenType }
        switch platform {
        case .ios:
            guard utf8.count >= Limits.apnsTokenHexCharactersMin, utf8.count <= Limits.apnsTokenHexCharactersMax,
                utf8.count % 2 == 0
            else { throw .invalidTokenFormat }
            let decoded = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: utf8.count / 2) {
                decoded -> Storage? in
                guard Hex.decode(utf8, into: decoded) else { return nil }
                return Storage(UnsafeRawBufferPointer(decoded))
            }
            guard let decoded else { throw .invalidTokenFormat }
            self.storage = decoded
        case .android:
            guard utf8.count >= Limits.fcmTokenCharactersMin, utf8.count <= Limits.fcmTokenCharactersMax,
                utf8.allSatisfy(Self.isFCMByte)
            else { throw .invalidTokenFormat }
            self.storage = Storage(UnsafeRawBufferPointer(utf8))
        }
        self.platform = platform
    }

    /// Creates a token from its stored bytes (the codec's path), checking the same bounds.
    package init(validatingBytes bytes: [UInt8], platform: Platform) throws(RegistryRejection) {
        guard bytes.withUnsafeBytes({ Self.isValidStored($0, platform: platform) }) else { throw .invalidTokenFormat }
        self.platform = platform
        self.storage = Storage(bytes)
    }

    /// Returns whether `bytes` are a stored token of `platform`: the one rule
    /// for the codec and replay's fast path (APNs 32–100 bytes, FCM its text).
    @inline(__always)
    static func isValidStored(_ bytes: UnsafeRawBufferPointer, platform: Platform) -> Bool {
        switch platform {
        case .ios:
            return bytes.count >= Limits.apnsTokenHexCharactersMin / 2
                && bytes.count <= Limits.apnsTokenHexCharactersMax / 2
        case .android:
            return bytes.count >= Limits.fcmTokenCharactersMin && bytes.count <= Limits.fcmTokenCharactersMax
                && bytes.allSatisfy(Self.isFCMByte)
        }
    }

    /// Wraps bytes already checked (read back from the index).
    init(unchecked bytes: [UInt8], platform: Platform) {
        self.platform = platform
        self.storage = Storage(bytes)
    }

    /// Wraps bytes already checked, read in place (the store's records).
    init(unchecked bytes: UnsafeRawBufferPointer, platform: Platform) {
        self.platform = platform
        self.storage = Storage(bytes)
    }

    /// Calls `body` with the UTF-8 bytes of `text`, spelled into a temporary
    /// buffer (on the stack for a token's sizes) instead of a `String`.
    package func withText<Result>(_ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        switch platform {
        case .ios:
            return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: byteCount * 2) { text in
                withBytes { Hex.spell($0, into: text) }
                return body(UnsafeRawBufferPointer(text))
            }
        case .android:
            return withBytes(body)
        }
    }

    /// The token as the provider spells it: lower-case hex (APNs) or the FCM text.
    package var text: String {
        withText { String(decoding: $0, as: UTF8.self) }
    }

    package var description: String { "PushToken(\(platform), \(byteCount) bytes)" }

    /// The platform, the length and the bytes in one `combine(bytes:)`: the
    /// synthesized hash fed `[UInt8]` to the hasher a byte at a time (its
    /// 32 calls were 0.3 % of a registration's CPU in the shard's per-token
    /// limit). Consistent with `==` (platform and bytes).
    package func hash(into hasher: inout Hasher) {
        hasher.combine(platform)
        hasher.combine(byteCount)
        withBytes { hasher.combine(bytes: $0) }
    }

    private static func isExpoToken(_ utf8: UnsafeBufferPointer<UInt8>) -> Bool {
        utf8.starts(with: "ExponentPushToken[".utf8) || utf8.starts(with: "ExpoPushToken[".utf8)
    }

    static func isFCMByte(_ c: UInt8) -> Bool {
        isAlphanumeric(c) || c == UInt8(ascii: "_") || c == UInt8(ascii: "-") || c == UInt8(ascii: ":")
            || c == UInt8(ascii: ".")
    }
}
