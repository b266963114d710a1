import RoostCrypto
import RoostFuzzChecks
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

@Suite("Identity token fuzz inputs")
struct IdentityTokenFuzzCheckReplayTests {
    static let root = FuzzInputs.repositoryRoot(testFile: "\(#filePath)")

    @Test("every seed of Fuzz/IdentityTokenFuzz/seeds and every committed input keeps the properties")
    func replayCommittedInputs() {
        let seeds = FuzzInputs.files(in: "Fuzz/IdentityTokenFuzz/seeds", root: Self.root)
        let corpus = FuzzInputs.files(in: "Tests/RoostAPITests/FuzzCorpus/identity", root: Self.root)
        #expect(!seeds.isEmpty, "no seeds under \(Self.root)/Fuzz/IdentityTokenFuzz/seeds")
        for (name, bytes) in seeds + corpus {
            let problem = IdentityTokenFuzzCheck.violation(in: bytes)
            #expect(problem == nil, "\(name): \(problem ?? "")")
        }
    }

    @Test("a signed token whose app or expiry is not written as sign writes it does not verify (found by fuzzing)")
    func nonCanonicalNumbersDoNotVerify() {
        let key = IdentityTokenFuzzCheck.key
        let now = IdentityTokenFuzzCheck.nowSeconds
        let claims = IdentityClaims(
            app: AppID(5), mode: .live, mintingKeyID: "key_0011223344556677",
            principal: .guest(String(repeating: "ab", count: 16)),
            expiresAtSeconds: now + 60)
        let token = IdentityToken.sign(claims, with: key)
        #expect(IdentityToken.verify(token[...], keys: IdentityTokenFuzzCheck.keys, nowSeconds: now) == claims)
        let parts = token.split(separator: ".").map(String.init)
        for (index, edit) in [(2, "05"), (2, "+5"), (7, "0" + parts[7]), (7, "+" + parts[7])] {
            var edited = parts
            edited[index] = edit
            let body = edited[0..<8].joined(separator: ".")
            let signature = Base64URL.encode(Crypto.hmacSHA256(key: key.secret, message: Array(body.utf8)))
            let resigned = body + "." + signature
            #expect(
                IdentityToken.verify(resigned[...], keys: IdentityTokenFuzzCheck.keys, nowSeconds: now) == nil,
                "field \(index) written \(edit)")
        }
    }
}
