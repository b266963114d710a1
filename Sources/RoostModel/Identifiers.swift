/// A person's identity chosen by the customer (`external_id`): 1 to 256 Unicode scalars,
/// compared as those scalars (`ExactText`): an NFC id and its NFD form are two people,
/// as the index (which hashes the bytes) has always held them.
package struct ExternalID: Hashable, Comparable, Sendable, CustomStringConvertible {
    package let rawValue: String

    /// Wraps a value already checked (read back from the index).
    init(unchecked rawValue: String) { self.rawValue = rawValue }

    /// Validates the length; 400 `invalid_field` (`external_id`) otherwise.
    package init(_ rawValue: String) throws(RegistryRejection) {
        let count = rawValue.unicodeScalars.count
        guard count >= 1 && count <= Limits.externalIDCharactersMax else {
            throw .invalidField("external_id")
        }
        self.rawValue = rawValue
    }

    package static func == (lhs: ExternalID, rhs: ExternalID) -> Bool { ExactText.equal(lhs.rawValue, rhs.rawValue) }
    package func hash(into hasher: inout Hasher) { ExactText.hash(rawValue, into: &hasher) }
    package static func < (lhs: ExternalID, rhs: ExternalID) -> Bool { ExactText.precedes(lhs.rawValue, rhs.rawValue) }
    package var description: String { rawValue }
}

/// A client-chosen installation key (`installation_id`): 1 to 200 Unicode scalars,
/// unique per (app, mode) (spec §5 rule 4), compared as its scalars (`ExactText`), as the
/// index compares its bytes.
package struct InstallationID: Hashable, Sendable, CustomStringConvertible {
    package let rawValue: String

    /// Wraps a value already checked (read back from the index).
    init(unchecked rawValue: String) { self.rawValue = rawValue }

    /// Validates the length; 400 `invalid_field` (`installation_id`) otherwise.
    package init(_ rawValue: String) throws(RegistryRejection) {
        let count = rawValue.unicodeScalars.count
        guard count >= 1 && count <= Limits.installationIDCharactersMax else {
            throw .invalidField("installation_id")
        }
        self.rawValue = rawValue
    }

    package static func == (lhs: InstallationID, rhs: InstallationID) -> Bool {
        ExactText.equal(lhs.rawValue, rhs.rawValue)
    }
    package func hash(into hasher: inout Hasher) { ExactText.hash(rawValue, into: &hasher) }
    package var description: String { rawValue }
}

/// An app bundle id (iOS) or package name (android): 1 to 255 bytes of `A-Za-z0-9._-`.
package struct BundleID: Hashable, Comparable, Sendable, CustomStringConvertible {
    package let rawValue: String

    /// Wraps a value already checked (read back from the index).
    init(unchecked rawValue: String) { self.rawValue = rawValue }

    /// Validates the shape; 400 `invalid_field` (`bundle_id`) otherwise.
    package init(_ rawValue: String) throws(RegistryRejection) {
        guard Self.isValid(utf8: rawValue.utf8) else { throw .invalidField("bundle_id") }
        self.rawValue = rawValue
    }

    /// Returns whether `utf8` is a bundle id's shape (also the codec's check).
    @inline(__always)
    static func isValid(utf8: some Collection<UInt8>) -> Bool {
        utf8.count >= 1 && utf8.count <= Limits.bundleIDBytesMax
            && utf8.allSatisfy({
                isAlphanumeric($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_")
            })
    }

    package static func < (lhs: BundleID, rhs: BundleID) -> Bool { lhs.rawValue < rhs.rawValue }
    package var description: String { rawValue }
}

/// The SHA-256 digest of an installation secret (spec §5 rule 5). The model never
/// sees the secret: the API hashes it. Compared in constant time; never printed.
package struct SecretDigest: Hashable, Sendable, CustomStringConvertible {
    package var word0: UInt64
    package var word1: UInt64
    package var word2: UInt64
    package var word3: UInt64

    /// Creates a digest from exactly 32 bytes; nil for any other length.
    package init?(bytes: some Collection<UInt8>) {
        guard bytes.count == 32 else { return nil }
        self = Array(bytes).withUnsafeBytes { SecretDigest(littleEndianBytes: $0) }
    }

    /// Bytes of a digest.
    static let byteCount = 32

    /// A digest from exactly 32 borrowed bytes (four little-endian words).
    init(littleEndianBytes bytes: UnsafeRawBufferPointer) {
        precondition(bytes.count == Self.byteCount, "digest of \(bytes.count) bytes")
        word0 = LittleEndianReader.u64(at: 0, of: bytes)
        word1 = LittleEndianReader.u64(at: 8, of: bytes)
        word2 = LittleEndianReader.u64(at: 16, of: bytes)
        word3 = LittleEndianReader.u64(at: 24, of: bytes)
    }

    /// Writes the 32 bytes `init(littleEndianBytes:)` reads at `base`.
    func writeLittleEndian(to base: UnsafeMutableRawPointer) {
        base.storeBytes(of: word0.littleEndian, toByteOffset: 0, as: UInt64.self)
        base.storeBytes(of: word1.littleEndian, toByteOffset: 8, as: UInt64.self)
        base.storeBytes(of: word2.littleEndian, toByteOffset: 16, as: UInt64.self)
        base.storeBytes(of: word3.littleEndian, toByteOffset: 24, as: UInt64.self)
    }

    /// The 32 digest bytes, in order.
    package var bytes: [UInt8] {
        var writer = LittleEndianWriter(capacity: 32)
        for word in [word0, word1, word2, word3] { writer.u64(word) }
        return writer.bytes
    }

    /// Returns whether both digests are equal, in time independent of where they differ.
    package func constantTimeEquals(_ other: SecretDigest) -> Bool {
        ((word0 ^ other.word0) | (word1 ^ other.word1) | (word2 ^ other.word2) | (word3 ^ other.word3)) == 0
    }

    package var description: String { "SecretDigest(redacted)" }
}

/// Why a device can no longer be sent to: a provider's word (`Unregistered`,
/// `UNREGISTERED`, …) or one of Roost's own (`Reassigned`, `Superseded`).
package struct InvalidationReason: Hashable, Sendable, CustomStringConvertible {
    package let rawValue: String

    /// The device lost its token to another installation (spec §5 rule 4).
    package static let reassigned = InvalidationReason(unchecked: "Reassigned")
    /// The proven device lost to the device that already held the new token (spec §5 rule 5).
    package static let superseded = InvalidationReason(unchecked: "Superseded")
    /// A device evicted for failing too often (Native Notify's dead flag), set by `recordStrike`'s caller.
    package static let dead = InvalidationReason(unchecked: "Dead")
    /// Not seen for longer than the app's `inactive_after_days`, or an operator's
    /// `older_than_days` (spec §8). Cleared by a registration like any reason.
    package static let inactive = InvalidationReason(unchecked: "Inactive")

    /// Validates 1 to 64 bytes of printable ASCII; 400 `invalid_field` (`reason`) otherwise.
    package init(_ rawValue: String) throws(RegistryRejection) {
        guard Self.isValid(utf8: rawValue.utf8) else { throw .invalidField("reason") }
        self.rawValue = rawValue
    }

    /// Returns whether `utf8` is 1 to 64 bytes of printable ASCII (also the codec's check).
    @inline(__always)
    static func isValid(utf8: some Collection<UInt8>) -> Bool {
        utf8.count >= 1 && utf8.count <= Limits.invalidationReasonBytesMax
            && utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F })
    }

    /// Wraps a value already checked (read back from the index).
    init(unchecked rawValue: String) { self.rawValue = rawValue }

    package var description: String { rawValue }
}

/// Returns whether an ASCII byte is a letter or a digit.
@inline(__always)
func isAlphanumeric(_ byte: UInt8) -> Bool {
    (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
        || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
}
