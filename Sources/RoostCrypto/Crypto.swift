import CCrypto

/// The libcrypto primitives Roost needs: SHA-256, HMAC-SHA-256, random bytes
/// and a comparison without early exit. Every secret is stored only as its
/// SHA-256 digest and compared with `constantTimeEqual`.
package enum Crypto {
    /// The length of a SHA-256 digest in bytes.
    package static let sha256DigestBytes = 32

    /// The SHA-256 implementation, fetched once: `SHA256()` and `EVP_sha256()`
    /// look the algorithm up under a lock on every call in OpenSSL 3.
    private static let sha256Algorithm = FetchedDigest(name: "SHA256")

    /// Returns the SHA-256 digest of `bytes`.
    package static func sha256(_ bytes: some Collection<UInt8>) -> [UInt8] {
        if let digest = bytes.withContiguousStorageIfAvailable({ sha256(UnsafeRawBufferPointer($0)) }) {
            return digest
        }
        return Array(bytes).withUnsafeBytes { sha256($0) }
    }

    /// Returns the SHA-256 digest of the UTF-8 bytes of `text`.
    package static func sha256(utf8 text: Substring) -> [UInt8] {
        var copy = text
        return copy.withUTF8 { sha256(UnsafeRawBufferPointer($0)) }
    }

    /// The SHA-256 digest of the UTF-8 bytes of `text` as four big-endian
    /// words, with no heap allocation: the digest and the hash's state on the
    /// stack (`roost_sha256` in CCrypto's shim; `EVP_Digest` makes and frees a
    /// context each call, and `EVP_DigestInit_ex` allocates the provider's
    /// state at every init).
    /// What authentication hashes every presented key with (issue 25).
    package static func sha256Words(utf8 text: Substring) -> (UInt64, UInt64, UInt64, UInt64) {
        var copy = text
        return copy.withUTF8 { sha256Words(UnsafeRawBufferPointer($0)) }
    }

    /// `sha256Words(utf8:)` of the bytes in `buffer`, with no heap allocation
    /// (token fingerprints hash a token's text from a stack buffer).
    package static func sha256Words(_ buffer: UnsafeRawBufferPointer) -> (UInt64, UInt64, UInt64, UInt64) {
        var digest: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        let status = withUnsafeMutableBytes(of: &digest) { out in
            roost_sha256(buffer.baseAddress, buffer.count, out.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        precondition(status != 0, "SHA-256 failed")
        return (digest.0.bigEndian, digest.1.bigEndian, digest.2.bigEndian, digest.3.bigEndian)
    }

    /// Returns the SHA-256 digest of the bytes in `buffer`.
    package static func sha256(_ buffer: UnsafeRawBufferPointer) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: sha256DigestBytes)
        var length: UInt32 = 0
        let status = digest.withUnsafeMutableBufferPointer { out in
            EVP_Digest(buffer.baseAddress, buffer.count, out.baseAddress, &length, sha256Algorithm.pointer, nil)
        }
        precondition(status == 1 && length == UInt32(sha256DigestBytes), "EVP_Digest(SHA-256) failed")
        return digest
    }

    /// Returns HMAC-SHA-256 of `message` under `key`.
    package static func hmacSHA256(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: sha256DigestBytes)
        var length: UInt32 = 0
        digest.withUnsafeMutableBufferPointer { out in
            key.withUnsafeBufferPointer { keyBuffer in
                message.withUnsafeBufferPointer { input in
                    _ = HMAC(
                        sha256Algorithm.pointer, keyBuffer.baseAddress, Int32(keyBuffer.count), input.baseAddress,
                        input.count,
                        out.baseAddress, &length)
                }
            }
        }
        precondition(length == UInt32(sha256DigestBytes), "HMAC-SHA-256 wrote \(length) bytes")
        return digest
    }

    /// Returns `count` bytes from the operating system's CSPRNG (via RAND_bytes).
    package static func randomBytes(_ count: Int) -> [UInt8] {
        precondition(count > 0 && count <= 1024, "randomBytes count \(count) out of range")
        var bytes = [UInt8](repeating: 0, count: count)
        let status = bytes.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32(count)) }
        precondition(status == 1, "RAND_bytes failed: the process cannot mint secrets safely")
        return bytes
    }

    /// Returns whether two byte strings are equal, taking time that depends only
    /// on their lengths (CRYPTO_memcmp), so that a secret does not leak by timing.
    package static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        if a.isEmpty { return true }
        return a.withUnsafeBytes { left in
            b.withUnsafeBytes { right in CRYPTO_memcmp(left.baseAddress, right.baseAddress, a.count) == 0 }
        }
    }
}

/// An `EVP_MD` fetched once and never freed: immutable and safe to share
/// between threads (OpenSSL 3 documents fetched algorithms as thread-safe).
private final class FetchedDigest: Sendable {
    nonisolated(unsafe) let pointer: OpaquePointer

    init(name: String) {
        guard let fetched = EVP_MD_fetch(nil, name, nil) else {
            preconditionFailure("libcrypto has no \(name)")
        }
        pointer = fetched
    }
}
