import RoostAPI
import RoostCrypto
import RoostEngine
import RoostModel

/// `IdentityToken` and `Base64URL` properties checked on arbitrary bytes:
/// shared by the libFuzzer target (Fuzz/IdentityTokenFuzz) and the test that
/// replays committed inputs (docs/testing.md). The first byte picks what the
/// rest is (mode = byte % 3):
///
/// - 0, a token as a client sent it: it never verifies (no forged signature),
///   and `Base64URL` round-trips the bytes and any text it accepts;
/// - 1, the signed part of a token: the check signs it with the fixed key, so
///   that every field parser is reached; a token that verifies must be the one
///   `sign` writes for its claims (one text per claim set);
/// - 2, claims (app, mode, minting key, kind, subject, expiry, issue time) and an edit: `sign` then
///   `verify` gives the claims back before the expiry and nil from it on, and
///   the token with one byte changed or cut short never verifies.
package enum IdentityTokenFuzzCheck {
    /// The instant every token is verified at.
    package static let nowSeconds: Int64 = 1_700_000_000

    /// The one signing key: fixed, so that every run is reproducible.
    package static let key = IdentitySigningKey(
        id: "ik_00112233aabbccdd",
        secret: (0..<IdentitySigningKey.secretBytes).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) },
        createdAtMilliseconds: 0)

    package static let keys: IdentityKeyStore = {
        var contents = CatalogContents()
        contents.identityKeys.apply(.identityKey(key, current: true))
        return IdentityKeyStore(state: CatalogStore(contents, log: nil))
    }()

    /// Returns a description of the first broken property for `input`, or nil. O(n).
    package static func violation(in input: [UInt8]) -> String? {
        guard let selector = input.first else { return nil }
        let rest = Array(input.dropFirst())
        switch selector % 3 {
        case 0: return rawTokenProblem(rest)
        case 1: return signedBodyProblem(rest)
        default: return claimsProblem(rest)
        }
    }

    private static func rawTokenProblem(_ bytes: [UInt8]) -> String? {
        let token = String(decoding: bytes, as: UTF8.self)
        if let claims = IdentityToken.verify(token[...], keys: keys, nowSeconds: nowSeconds),
            Array(IdentityToken.sign(claims, with: key).utf8) != Array(token.utf8)
        {
            return "an unsigned token verified: \(token.debugDescription) as \(claims)"
        }
        let encoded = Base64URL.encode(bytes)
        guard let decoded = Base64URL.decode(encoded[...]), decoded == bytes else {
            return "Base64URL does not round-trip \(bytes.count) bytes (encoded \(encoded))"
        }
        if let again = Base64URL.decode(token[...]), Base64URL.encode(again) != token {
            return "Base64URL accepts \(token.debugDescription) but encodes its bytes as \(Base64URL.encode(again))"
        }
        return nil
    }

    private static func signedBodyProblem(_ bytes: [UInt8]) -> String? {
        let body = String(decoding: bytes, as: UTF8.self)
        let signature = Crypto.hmacSHA256(key: key.secret, message: Array(body.utf8))
        let token = body + "." + Base64URL.encode(signature)
        guard let claims = IdentityToken.verify(token[...], keys: keys, nowSeconds: nowSeconds) else { return nil }
        let canonical = IdentityToken.sign(claims, with: key)
        if Array(canonical.utf8) != Array(token.utf8) {
            return "\(token.debugDescription) verified as \(claims), which signs as \(canonical.debugDescription)"
        }
        return nil
    }

    private static func claimsProblem(_ bytes: [UInt8]) -> String? {
        guard bytes.count >= 16 else { return nil }
        let app = UInt32(bytes[0]) | UInt32(bytes[1]) << 8 | UInt32(bytes[2]) << 16 | UInt32(bytes[3]) << 24
        guard app > 0 else { return nil }
        let mode: AppMode = bytes[4] & 1 == 0 ? .live : .test
        // Expiry: around now (a byte of offset), or anywhere in Int64.
        var expiry = Int64(bitPattern: (0..<8).reduce(UInt64(0)) { $0 | UInt64(bytes[5 + $1]) << (8 * $1) })
        if bytes[4] & 2 == 0 { expiry = nowSeconds + Int64(Int8(bitPattern: bytes[5])) }
        let editAt = Int(bytes[13]) | Int(bytes[14]) << 8
        let editTo = bytes[15]
        let subjectBytes = Array(bytes[16...])
        let principal: IdentityPrincipal
        if bytes[4] & 4 == 0 {
            principal = .guest(Hex.encode(Array((subjectBytes + Array(repeating: 0, count: 16)).prefix(16))))
        } else {
            guard let externalID = try? ExternalID(String(decoding: subjectBytes, as: UTF8.self)) else { return nil }
            principal = .user(externalID)
        }
        // The minting key id from the expiry's bytes: any `key_` + 16 hex digits.
        let mintingKeyID = "key_" + Hex.encode(Array(bytes[5..<13]))
        // Issued at: none (a `rit2` token) or a time from the edit's bytes (`rit3`, decision 0079).
        let issuedAt: Int64? = bytes[4] & 8 == 0 ? nil : Int64(editAt) * 1000 + Int64(editTo)
        let claims = IdentityClaims(
            app: AppID(app), mode: mode, mintingKeyID: mintingKeyID, principal: principal, expiresAtSeconds: expiry,
            issuedAtMilliseconds: issuedAt)
        let token = IdentityToken.sign(claims, with: key)
        let verified = IdentityToken.verify(token[...], keys: keys, nowSeconds: nowSeconds)
        if nowSeconds < expiry {
            guard let verified, verified == claims,
                Array(verified.principal.rendered.utf8) == Array(claims.principal.rendered.utf8)
            else {
                return "\(claims) signed as \(token.debugDescription) verifies as \(String(describing: verified))"
            }
        } else if let verified {
            return "an expired token verified: \(token.debugDescription) as \(verified)"
        }
        var edited = Array(token.utf8)
        let position = editAt % (edited.count + 1)
        if position == edited.count || editTo == edited[position] {
            edited.removeLast(edited.count - min(position, edited.count - 1))
        } else {
            edited[position] = editTo
        }
        let editedToken = String(decoding: edited, as: UTF8.self)
        if let forged = IdentityToken.verify(editedToken[...], keys: keys, nowSeconds: nowSeconds) {
            return "\(token.debugDescription) edited to \(editedToken.debugDescription) still verifies as \(forged)"
        }
        return nil
    }
}
