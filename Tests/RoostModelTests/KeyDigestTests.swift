import RoostCrypto
import Testing

@testable import RoostModel

/// The key digest authentication computes for every presented key: the
/// allocation-free form (`Crypto.sha256Words`) is the same SHA-256 as the
/// byte form, and `KeyDigest` reads both alike.
@Suite("Key digests")
struct KeyDigestTests {
    @Test("sha256Words is SHA-256 (the FIPS 180-2 vector, empty, long, non-ASCII), as KeyDigest reads the bytes")
    func wordsAreSHA256() throws {
        let abc = KeyDigest(words: Crypto.sha256Words(utf8: "abc"))
        #expect(abc.words.0 == 0xba78_16bf_8f01_cfea && abc.words.3 == 0xb410_ff61_f200_15ad)
        for text in ["", "abc", "sk_live_" + String(repeating: "x", count: 48), String(repeating: "é", count: 300)] {
            let fromBytes = try #require(KeyDigest(bytes: Crypto.sha256(Array(text.utf8))))
            let fromWords = KeyDigest(words: Crypto.sha256Words(utf8: text[...]))
            #expect(fromWords == fromBytes && fromWords.constantTimeEquals(fromBytes))
            #expect(fromWords.bytes == Crypto.sha256(Array(text.utf8)))
        }
        #expect(!abc.constantTimeEquals(KeyDigest(words: Crypto.sha256Words(utf8: "abd"))))
    }

    @Test("each thread's reused digest context gives the same digests, many threads at once")
    func threads() async {
        let expected = KeyDigest(words: Crypto.sha256Words(utf8: "a key"))
        await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<16 {
                group.addTask {
                    (0..<200).allSatisfy { _ in KeyDigest(words: Crypto.sha256Words(utf8: "a key")) == expected }
                }
            }
            for await same in group { #expect(same) }
        }
    }
}
