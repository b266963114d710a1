import RoostCrypto
import RoostModel

/// Whose device a Connect-style request acts on: a guest minted by the server,
/// or a user (an `external_id`) vouched for by the app's backend.
package enum IdentityPrincipal: Sendable, Equatable {
    /// 32 lower-case hex digits (128 random bits).
    case guest(String)
    case user(ExternalID)

    /// The prefix of a guest's principal and of the `external_id` its devices
    /// are bound to. The authenticated route refuses user ids with it.
    static let guestPrefix = ExternalID.guestPrefix

    /// `guest:<hex>` or `user:<external_id>`, as the identity routes answer.
    package var rendered: String {
        switch self {
        case .guest(let id): IdentityPrincipal.guestPrefix + id
        case .user(let externalID): "user:" + externalID.rawValue
        }
    }

    /// The person the principal's devices are bound to: the user's own
    /// `external_id`, or `guest:<hex>` for a guest.
    var externalID: ExternalID {
        switch self {
        case .user(let externalID):
            return externalID
        case .guest(let id):
            do throws(RegistryRejection) {
                return try ExternalID(IdentityPrincipal.guestPrefix + id)
            } catch {
                preconditionFailure("a guest external id of \(id.utf8.count + 6) bytes was refused")
            }
        }
    }

    /// Returns whether an `external_id` is a guest's (so that a person emptied by
    /// a guest's last device leaving can be forgotten).
    static func isGuest(_ externalID: ExternalID) -> Bool {
        externalID.isGuest
    }
}

/// What a valid identity token says.
package struct IdentityClaims: Sendable, Equatable {
    package var app: AppID
    package var mode: AppMode
    /// The id (`key_…`) of the API key that minted the token: revoking that key
    /// revokes the token (spec §12), so whoever verifies a token must also find
    /// this key live, of `app` and `mode` (`Authenticator.identity`).
    package var mintingKeyID: String
    package var principal: IdentityPrincipal
    /// Unix seconds after which the token no longer verifies.
    package var expiresAtSeconds: Int64
    /// When the token was issued, in Unix milliseconds; nil for a `rit2`
    /// token (issued before the field existed). A token issued to a person
    /// before their erasure is refused (decision 0079).
    package var issuedAtMilliseconds: Int64?

    package init(
        app: AppID, mode: AppMode, mintingKeyID: String, principal: IdentityPrincipal, expiresAtSeconds: Int64,
        issuedAtMilliseconds: Int64? = nil
    ) {
        self.app = app
        self.mode = mode
        self.mintingKeyID = mintingKeyID
        self.principal = principal
        self.expiresAtSeconds = expiresAtSeconds
        self.issuedAtMilliseconds = issuedAtMilliseconds
    }

    /// When the token was issued, as the model compares it with an erasure.
    package var issuedAt: Timestamp? { issuedAtMilliseconds.map { Timestamp(millisecondsSinceEpoch: $0) } }
}

/// Identity tokens:
/// `rit3.<signing key id>.<app>.<mode>.<minting key id>.<kind>.<subject>.<expiry>.<issued at>.<signature>`
///
/// - `signing key id`: the server's signing key (`ik_` + 16 hex), so keys can rotate;
/// - `app`: the app id in decimal; `mode`: `live` or `test` (the minting key's);
/// - `minting key id`: the API key that minted it (`key_` + 16 hex): revoking
///   that key revokes the token without touching the signing key;
/// - `kind`: `guest` or `user`; `subject`: base64url (no padding) of the guest
///   id or the user's `external_id`;
/// - `expiry`: Unix seconds;
/// - `issued at`: Unix milliseconds: a token issued to a person before their
///   erasure is refused (decision 0079);
/// - `signature`: base64url of HMAC-SHA-256 under the signing key's secret over
///   every byte before the last `.`.
///
/// A token verifies when it has this shape, its signing key is still kept,
/// the signature matches (constant-time compare) and the expiry is in the
/// future. `rit2` tokens (the same without `issued at`) still verify until
/// they expire, with no issue time: the model treats them as issued before
/// any erasure (decision 0079). `rit1` tokens (no minting key) are refused:
/// nothing could revoke them (docs/decisions/0012-identity-tokens-name-their-minting-key.md).
/// `verify` checks only what the token itself proves; the minting key and the
/// app must still be live in the catalog, which `Authenticator.identity` checks.
package enum IdentityToken {
    static let version = "rit3"
    /// The previous layout, without `issued at`: still verified.
    static let previousVersion = "rit2"
    /// The longest token considered (a 256-character `external_id` of 4-byte
    /// scalars is 1,366 base64url characters).
    static let bytesMax = 2048
    /// The longest minting key id a token may carry (ours are 20 bytes).
    static let mintingKeyIDBytesMax = 64
    /// Lifetimes a caller may ask for with `ttl_seconds`, and the default.
    static let lifetimeSecondsDefault: Int64 = 86_400
    static let lifetimeSecondsRange: ClosedRange<Int64> = 60...2_592_000

    /// Checks once that no token outlives the erasure marks that refuse it.
    static let lifetimesFitErasureMarks: Void = {
        precondition(
            lifetimeSecondsRange.upperBound * 1000 <= ErasureLimits.markRetentionMilliseconds,
            "identity tokens outlive erasure marks")
    }()

    /// Returns a signed token for `claims` under `key`.
    package static func sign(_ claims: IdentityClaims, with key: IdentitySigningKey) -> String {
        precondition(
            isMintingKeyID(claims.mintingKeyID[...]), "minting key id of \(claims.mintingKeyID.utf8.count) bytes")
        _ = lifetimesFitErasureMarks
        let (kind, subject): (String, String) =
            switch claims.principal {
            case .guest(let id): ("guest", id)
            case .user(let externalID): ("user", externalID.rawValue)
            }
        var fields = [
            claims.issuedAtMilliseconds == nil ? previousVersion : version, key.id, String(claims.app.rawValue),
            claims.mode.name, claims.mintingKeyID, kind, Base64URL.encode(Array(subject.utf8)),
            String(claims.expiresAtSeconds),
        ]
        if let issuedAt = claims.issuedAtMilliseconds { fields.append(String(issuedAt)) }
        let signed = fields.joined(separator: ".")
        return signed + "." + Base64URL.encode(Crypto.hmacSHA256(key: key.secret, message: Array(signed.utf8)))
    }

    /// Returns the claims of a token that verifies at `nowSeconds`, or nil
    /// (forged, altered, unknown or removed signing key, expired, malformed,
    /// or of the retired `rit1` format). Does not consult the catalog: the
    /// caller checks that the minting key and the app are still live.
    package static func verify(_ token: Substring, keys: IdentityKeyStore, nowSeconds: Int64) -> IdentityClaims? {
        guard token.utf8.count <= bytesMax, let lastDot = token.lastIndex(of: ".") else { return nil }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        let fieldCount = parts[0] == version ? 10 : 9
        guard parts[0] == version || parts[0] == previousVersion, parts.count == fieldCount,
            let key = keys.key(id: parts[1]),
            let signature = Base64URL.decode(parts[fieldCount - 1]), signature.count == Crypto.sha256DigestBytes
        else { return nil }
        let expected = Crypto.hmacSHA256(key: key.secret, message: Array(token[..<lastDot].utf8))
        guard Crypto.constantTimeEqual(signature, expected) else { return nil }
        // Signed by us: the fields below were written by `sign`; still checked.
        // Numbers only as `sign` writes them (no `+`, no leading zeros): one text per claim set.
        guard let appNumber = UInt32(parts[2]), appNumber > 0, String(appNumber) == parts[2],
            let mode = AppMode(name: parts[3]), isMintingKeyID(parts[4]),
            let subjectBytes = Base64URL.decode(parts[6]),
            let subject = String(validating: subjectBytes, as: UTF8.self),
            let expiresAt = Int64(parts[7]), String(expiresAt) == parts[7]
        else { return nil }
        var issuedAt: Int64? = nil
        if fieldCount == 10 {
            guard let value = Int64(parts[8]), value >= 0, String(value) == parts[8] else { return nil }
            issuedAt = value
        }
        let principal: IdentityPrincipal
        switch parts[5] {
        case "guest":
            guard subject.utf8.count == 32, subject.utf8.allSatisfy({ Hex.digitValue($0) != nil }) else { return nil }
            principal = .guest(subject)
        case "user":
            guard let externalID = try? ExternalID(subject) else { return nil }
            principal = .user(externalID)
        default:
            return nil
        }
        guard nowSeconds < expiresAt else { return nil }
        return IdentityClaims(
            app: AppID(appNumber), mode: mode, mintingKeyID: String(parts[4]), principal: principal,
            expiresAtSeconds: expiresAt, issuedAtMilliseconds: issuedAt)
    }

    /// Returns whether `text` can be a minting key id in a token: 1 to
    /// `mintingKeyIDBytesMax` bytes of `A-Za-z0-9_` (no `.`, the separator).
    static func isMintingKeyID(_ text: Substring) -> Bool {
        !text.utf8.isEmpty && text.utf8.count <= mintingKeyIDBytesMax
            && text.utf8.allSatisfy { byte in
                byte == UInt8(ascii: "_") || (byte >= 48 && byte <= 57) || ((byte | 0x20) >= 97 && (byte | 0x20) <= 122)
            }
    }

    /// The credentials of a `Bearer` value up to `bytesMax`, or nil.
    static func bearer(_ value: String?) -> Substring? {
        guard let value, value.utf8.count > 7, value.utf8.count <= bytesMax + 7 else { return nil }
        let scheme = value.prefix(7)
        guard scheme.lowercased() == "bearer " else { return nil }
        let token = value.dropFirst(7).drop { $0 == " " }
        return token.isEmpty ? nil : token
    }

    /// Returns a new guest id: 128 random bits as 32 hex digits.
    static func newGuestID() -> String {
        Hex.encode(Crypto.randomBytes(16))
    }
}

/// Base64 with the URL-safe alphabet and no padding (RFC 4648 §5).
package enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    package static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index < bytes.count {
            let remaining = bytes.count - index
            let b0 = UInt32(bytes[index])
            let b1 = remaining > 1 ? UInt32(bytes[index + 1]) : 0
            let b2 = remaining > 2 ? UInt32(bytes[index + 2]) : 0
            let group = b0 << 16 | b1 << 8 | b2
            out.append(alphabet[Int(group >> 18 & 63)])
            out.append(alphabet[Int(group >> 12 & 63)])
            if remaining > 1 { out.append(alphabet[Int(group >> 6 & 63)]) }
            if remaining > 2 { out.append(alphabet[Int(group & 63)]) }
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Returns the bytes, or nil for a character outside the alphabet, padding,
    /// an impossible length or non-zero trailing bits (one text per value).
    package static func decode(_ text: Substring) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 4 != 1 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for character in utf8 {
            guard let value = sextet(character) else { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
                accumulator &= (1 << UInt32(bits)) - 1
            }
        }
        guard accumulator == 0 else { return nil }
        return out
    }

    private static func sextet(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): character - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): character - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): character - UInt8(ascii: "0") + 52
        case UInt8(ascii: "-"): 62
        case UInt8(ascii: "_"): 63
        default: nil
        }
    }
}
