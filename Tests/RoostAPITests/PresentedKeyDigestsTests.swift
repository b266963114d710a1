import RoostCrypto
import RoostModel
import Testing

@testable import RoostAPI

/// A loop's kept digests of presented keys: the same digest as hashing,
/// kept only once remembered, found again only for the very same bytes.
@Suite("Presented key digests")
struct PresentedKeyDigestsTests {
    static func sha256(_ key: Substring) -> KeyDigest { KeyDigest(words: Crypto.sha256Words(utf8: key)) }

    @Test("a key not remembered is hashed each time; once remembered it is found, with the same digest")
    func keptOnlyOnceRemembered() {
        let digests = PresentedKeyDigests(executor: nil)
        let key: Substring = "rk_live_0123456789abcdefghijklmnopqrstuvwxyzABCDEF"
        let first = digests.digest(of: key)
        #expect(first.digest == Self.sha256(key) && !first.kept)
        #expect(!digests.digest(of: key).kept, "not kept before remember")
        digests.remember(key, first)
        let again = digests.digest(of: key)
        #expect(again.digest == Self.sha256(key) && again.kept)
        #expect(digests.hits == 1 && digests.misses == 2)
    }

    @Test("keys of the same length that differ in one byte, anywhere, are never taken for a kept one")
    func oneByteApart() {
        let digests = PresentedKeyDigests(executor: nil)
        let key = "rk_live_0123456789abcdefghijklmnopqrstuvwxyzABCDEF"
        digests.remember(key[...], digests.digest(of: key[...]))
        let bytes = Array(key.utf8)
        for index in bytes.indices {
            var other = bytes
            other[index] = other[index] == UInt8(ascii: "x") ? UInt8(ascii: "y") : UInt8(ascii: "x")
            let text = Substring(String(decoding: other, as: UTF8.self))
            let found = digests.digest(of: text)
            #expect(!found.kept && found.digest == Self.sha256(text), "byte \(index)")
        }
        #expect(digests.digest(of: key.dropLast()).digest == Self.sha256(key.dropLast()))
    }

    @Test(
        "the slot last found is looked at first: right after a hit, keys one byte apart are still hashed as their own")
    func lastFoundFirst() {
        let digests = PresentedKeyDigests(executor: nil)
        let key = "rk_live_0123456789abcdefghijklmnopqrstuvwxyzABCDEF"
        digests.remember(key[...], digests.digest(of: key[...]))
        // A second key kept in another slot: slots come from a hash seeded per
        // process, so a fixed second key shares the first one's slot once in
        // `slotCount` runs and takes its place (the test then failed, by chance).
        var other = ""
        for number in 0..<(4 * PresentedKeyDigests.slotCount) where other.isEmpty {
            let candidate = "rk_live_another_key_of_the_same_app_0123456789_\(1000 + number)"
            digests.remember(candidate[...], digests.digest(of: candidate[...]))
            if digests.digest(of: key[...]).kept {
                other = candidate
            } else {
                digests.remember(key[...], digests.digest(of: key[...]))
            }
        }
        #expect(!other.isEmpty && digests.digest(of: other[...]).kept)
        let bytes = Array(key.utf8)
        for index in bytes.indices {
            #expect(digests.digest(of: key[...]).kept, "the key itself, before byte \(index)")
            var changed = bytes
            changed[index] ^= 0x01
            let text = Substring(String(decoding: changed, as: UTF8.self))
            let found = digests.digest(of: text)
            #expect(!found.kept && found.digest == Self.sha256(text), "byte \(index)")
        }
        for round in 0..<8 {
            let text = (round % 2 == 0 ? key : other)[...]
            let found = digests.digest(of: text)
            #expect(found.digest == Self.sha256(text), "round \(round)")
        }
    }

    @Test("many keys: each found with its own digest; a newer key may take an older one's slot")
    func manyKeys() {
        let digests = PresentedKeyDigests(executor: nil)
        let keys = (0..<(4 * PresentedKeyDigests.slotCount)).map { Substring("rk_live_key_\($0)_padding") }
        for key in keys { digests.remember(key, digests.digest(of: key)) }
        var kept = 0
        for key in keys {
            let found = digests.digest(of: key)
            #expect(found.digest == Self.sha256(key))
            if found.kept { kept += 1 }
        }
        #expect(kept >= 1 && kept <= PresentedKeyDigests.slotCount)
    }
}
