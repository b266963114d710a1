import RoostCrypto
import RoostModel
import RoostPlatform

/// The SHA-256 digests of the keys that authenticated on one engine loop
/// lately, found by the key as presented. A client sends the same key on
/// every request, and hashing it is ~4,500 instructions: 4 % of a
/// registration's user-space instructions (`Benchmarks/spine/instructions.py`).
///
/// - Only a key that matched the admin key or a live catalog key is kept
///   (`remember`), so unknown keys cannot churn it; the digest found is
///   still looked up in the catalog on every request, so a revoked key stops
///   at once.
/// - `slotCount` slots, each chosen by the key's `Hasher` value (seeded at
///   random per process, so a client cannot aim at a slot); a newer key takes
///   its slot's place.
/// - A presented key is compared with the kept one without early exit, as
///   digests are (`KeyDigest.constantTimeEquals`).
/// - Memory: at most `slotCount` keys of at most
///   `Authenticator.presentedKeyBytesMax` bytes, held in this process only
///   (never logged or written), as each request's own header is.
///
/// Confined to its loop's thread (asserted), like `LoopRequests`, which owns it.
package final class PresentedKeyDigests: @unchecked Sendable {
    // @unchecked: touched on the owning loop's thread only (asserted).

    /// Keys kept per loop: more than the keys one loop's clients use at once
    /// in the deployments we know (one or two per backend).
    package static let slotCount = 64

    private struct Slot {
        var presented: [UInt8]
        var digest: KeyDigest
    }

    private var slots: [Slot?] = Array(repeating: nil, count: PresentedKeyDigests.slotCount)
    /// The slot of the last key found kept: looked at first, so a loop whose
    /// clients send one key finds it without hashing the key (the slot's
    /// `Hasher` over ~40 bytes and its finalization: ~1,000 instructions, 1 %
    /// of a registration's).
    private var lastFound = 0
    private let executor: LoopExecutor?
    /// Look-ups answered from a slot, and look-ups that hashed (tests).
    package private(set) var hits = 0
    package private(set) var misses = 0

    /// `executor` is the loop whose thread may use it (nil: tests, any one thread).
    package init(executor: LoopExecutor?) {
        self.executor = executor
    }

    /// A digest found: `slot` is where `presented` is kept or would be,
    /// `kept` whether it was there.
    package struct Found {
        package var digest: KeyDigest
        package var kept: Bool
        fileprivate var slot: Int
    }

    /// The SHA-256 digest of `presented`: from its slot when that holds the
    /// same key, else computed (and not kept: `remember` keeps it once it
    /// authenticated).
    package func digest(of presented: Substring) -> Found {
        executor?.preconditionOnLoop("PresentedKeyDigests.digest")
        let (index, kept) = withContiguousUTF8(of: presented) { bytes -> (Int, KeyDigest?) in
            if let slot = slots[lastFound], Self.sameKey(slot.presented, bytes) { return (lastFound, slot.digest) }
            let index = Self.slot(of: bytes)
            guard let slot = slots[index], Self.sameKey(slot.presented, bytes) else { return (index, nil) }
            return (index, slot.digest)
        }
        if let kept {
            hits += 1
            lastFound = index
            return Found(digest: kept, kept: true, slot: index)
        }
        misses += 1
        return Found(digest: KeyDigest(words: Crypto.sha256Words(utf8: presented)), kept: false, slot: index)
    }

    /// Keeps the digest `found` for `presented`, a key that authenticated
    /// (nothing to do when it was kept already).
    package func remember(_ presented: Substring, _ found: Found) {
        executor?.preconditionOnLoop("PresentedKeyDigests.remember")
        guard !found.kept else { return }
        precondition(presented.utf8.count <= Authenticator.presentedKeyBytesMax, "a key longer than any we accept")
        slots[found.slot] = Slot(presented: Array(presented.utf8), digest: found.digest)
    }

    private static func slot(of bytes: UnsafeBufferPointer<UInt8>) -> Int {
        var hasher = Hasher()
        hasher.combine(bytes: UnsafeRawBufferPointer(bytes))
        return Int(UInt(bitPattern: hasher.finalize()) % UInt(slotCount))
    }

    /// Whether `kept` and `presented` are the same bytes, looking at every byte.
    private static func sameKey(_ kept: [UInt8], _ presented: UnsafeBufferPointer<UInt8>) -> Bool {
        guard kept.count == presented.count else { return false }
        return kept.withUnsafeBytes { left in
            let right = UnsafeRawBufferPointer(presented)
            var difference: UInt64 = 0
            var index = 0
            while index + 8 <= left.count {
                difference |=
                    left.loadUnaligned(fromByteOffset: index, as: UInt64.self)
                    ^ right.loadUnaligned(fromByteOffset: index, as: UInt64.self)
                index += 8
            }
            while index < left.count {
                difference |= UInt64(left[index] ^ right[index])
                index += 1
            }
            return difference == 0
        }
    }
}
