import RoostCrypto
import RoostHTTP
import RoostModel

/// Who is calling: the operator, or one app's key.
package enum Principal: Sendable {
    case `operator`
    case appKey(KeyRecord)
}

/// Resolves `Authorization: Bearer <key>` to a principal. Keys are compared
/// as SHA-256 digests without early exit; a key never appears in a log or an
/// error message.
package struct Authenticator: Sendable {
    /// The longest key considered; anything longer is not a key of ours.
    package static let presentedKeyBytesMax = 512

    private let adminDigest: KeyDigest
    let catalog: Catalog
    /// The signing keys of identity tokens (`RouteAccess.identityToken`).
    let identityKeys: IdentityKeyStore
    /// Counts the requests a mobile key or an identity token authorizes per client address.
    package let clientLimiter: ClientAddressLimiter

    package init(
        adminKey: String, catalog: Catalog, identityKeys: IdentityKeyStore, clientLimiter: ClientAddressLimiter
    ) {
        precondition(!adminKey.isEmpty, "the admin key must not be empty")
        self.adminDigest = KeyDigest(words: Crypto.sha256Words(utf8: adminKey[...]))
        self.catalog = catalog
        self.identityKeys = identityKeys
        self.clientLimiter = clientLimiter
    }

    /// Returns the principal of a request, or throws 401 (missing or unknown
    /// key) or 429 (a key over its rate limit, or a mobile key's client
    /// address over `ClientAddressLimiter.rate`). `digests`: the calling
    /// loop's kept digests of keys that authenticated (nil: hash the key).
    package func authenticate(
        _ head: HTTPRequestHead, digests: PresentedKeyDigests? = nil
    ) throws(APIError) -> Principal {
        guard let presented = Authenticator.bearerToken(head.headers["Authorization"]) else {
            throw APIError.unauthorized
        }
        let found = digests?.digest(of: presented)
        let digest = found?.digest ?? KeyDigest(words: Crypto.sha256Words(utf8: presented))
        let principal: Principal
        if digest.constantTimeEquals(adminDigest) {
            principal = .operator
        } else {
            guard let key = try catalog.key(digest: digest) else { throw APIError.unauthorized }
            principal = .appKey(key)
        }
        // Authenticated: the loop keeps the digest (an unknown key never gets here).
        if let digests, let found { digests.remember(presented, found) }
        if case .appKey(let key) = principal, key.kind == .mobile { try clientLimiter.admit(app: key.appID, head) }
        return principal
    }

    /// Returns the credentials of a `Bearer` authorization value, or nil.
    package static func bearerToken(_ value: String?) -> Substring? {
        guard let value else { return nil }
        let scheme: StaticString = "bearer "
        let schemeBytes = scheme.utf8CodeUnitCount
        guard value.utf8.count > schemeBytes, value.utf8.count <= presentedKeyBytesMax + schemeBytes else { return nil }
        // The header's own bytes (a `zip` over `String.UTF8View`s cost ~1,000
        // instructions a request).
        let schemeMatches =
            value.utf8.withContiguousStorageIfAvailable { bytes -> Bool in
                // A plain loop: `allSatisfy` with a closure allocates per call in a debug build.
                for index in 0..<schemeBytes where bytes[index] | 0x20 != scheme.utf8Start[index] { return false }
                return true
            }
            ?? zip(value.utf8, UnsafeBufferPointer(start: scheme.utf8Start, count: schemeBytes)).allSatisfy {
                $0 | 0x20 == $1
            }
        guard schemeMatches else { return nil }
        var start = value.utf8.index(value.utf8.startIndex, offsetBy: schemeBytes)
        while start < value.utf8.endIndex && value.utf8[start] == UInt8(ascii: " ") {
            start = value.utf8.index(after: start)
        }
        let token = value[start...]
        return token.isEmpty ? nil : token
    }
}

extension Principal {
    /// Returns the key when it is an app key holding `capability` (403 otherwise;
    /// the operator acts on apps, not on their devices).
    package func requireAppKey(_ capability: Capability) throws(APIError) -> KeyRecord {
        switch self {
        case .operator: throw APIError.operatorActsOnApps(capability)
        case .appKey(let key):
            guard key.allows(capability) else { throw APIError.lacking(capability) }
            return key
        }
    }

    /// Passes for the operator, or for a secret key of `app` holding
    /// `setup:write`. Another app's key gets 404, as if the app did not exist.
    package func requireSetup(of app: AppID) throws(APIError) {
        switch self {
        case .operator: return
        case .appKey(let key):
            guard key.allows(.setupWrite) else { throw APIError.lacking(.setupWrite) }
            guard key.appID == app else { throw APIError.appNotFound }
        }
    }

    /// The mode of an app key; nil for the operator (who acts in both).
    package var keyMode: AppMode? {
        switch self {
        case .operator: nil
        case .appKey(let key): key.mode
        }
    }

    /// Passes only for the operator.
    package func requireOperator() throws(APIError) {
        switch self {
        case .operator: return
        case .appKey: throw APIError.operatorOnly
        }
    }
}
