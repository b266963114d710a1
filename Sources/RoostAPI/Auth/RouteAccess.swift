import RoostHTTP
import RoostModel

/// Who may call a route, declared with the route (`Route.access`) as data:
/// `RoostService` enforces it before the handler runs
/// (`Authenticator.authorize`), and the isolation matrix test
/// (Tests/RoostAPITests/IsolationMatrixTests.swift) derives every cell's
/// expected status from the same declaration, so a new route is covered
/// without anyone remembering to add it.
///
/// Failures (spec §2): no or unknown credential → 401 `unauthorized`; a valid
/// key without what the route needs → 403 `forbidden`. A key of another app
/// sees that app's data as if it did not exist (404), which the handler
/// answers: the key selects the app, or `Principal.requireSetup(of:)`.
package enum RouteAccess: Sendable, Equatable {
    /// Anyone, no credential (`GET /healthz`).
    case open
    /// The operator (admin) key; an app key → 403.
    case operatorKey
    /// The operator, or a secret key holding `setup:write`; the handler then
    /// answers 404 for a key of another app than the path's.
    case setup
    /// As `setup`, but a test key → 403: what the route changes governs live
    /// devices (`PATCH /v1/apps/{app}`: the app's name and settings; decision 0072).
    case liveSetup
    /// A secret key holding the capability; the key selects the app and mode.
    case secretKey(Capability)
    /// A live secret key holding the capability (Barua: "Test keys can't
    /// register devices"); a test key → 403.
    case liveSecretKey(Capability)
    /// A mobile key, or a secret key holding `devices:write` (`POST /v1/devices`).
    case deviceRegistrar
    /// A mobile key only (guest identities); a secret key → 403.
    case mobileKey
    /// An identity token (`Authorization: Bearer rit3.…` or `rit2.…`) whose signing key is
    /// kept, whose minting key is live and whose app exists; anything else → 401.
    case identityToken
    /// Native Notify: the credential travels in the request (`appId` +
    /// `appToken` in the body or query) and the handler checks it in the
    /// vendor's order: a live mobile key of that app, or a live secret key of
    /// it holding `devices:write`; anything else → 401, as the vendor's API does.
    case nativeNotifyAppToken

    /// Every case, one capability each where a case takes one (for tests and docs).
    package static var allCases: [RouteAccess] {
        [.open, .operatorKey, .setup, .liveSetup, .deviceRegistrar, .mobileKey, .identityToken, .nativeNotifyAppToken]
            + Capability.allCases.map { .secretKey($0) } + Capability.allCases.map { .liveSecretKey($0) }
    }

    /// The declaration as text, e.g. `secret:devices:read` (docs, test names, labels).
    package var name: String {
        switch self {
        case .open: "open"
        case .operatorKey: "operator"
        case .setup: "setup"
        case .liveSetup: "live-setup"
        case .secretKey(let capability): "secret:" + capability.rawValue
        case .liveSecretKey(let capability): "live-secret:" + capability.rawValue
        case .deviceRegistrar: "mobile-or-secret:devices:write"
        case .mobileKey: "mobile"
        case .identityToken: "identity-token"
        case .nativeNotifyAppToken: "native-notify-app-token"
        }
    }
}

/// Who the service admitted for a route, handed to the handler in its
/// `RequestContext`: what its `RouteAccess` checked, nothing more.
enum Caller: Sendable {
    /// No credential was checked by the service: an open route, or one that
    /// checks its own (`RouteAccess.nativeNotifyAppToken`).
    case unchecked
    case operatorKey
    case appKey(KeyRecord)
    /// A verified identity token and its (live) app.
    case identity(IdentityClaims, AppRecord)
}

extension Authenticator {
    /// Returns who may call a route declared with `access`, or throws its 401
    /// or 403 (or 429 for a key over its rate limit). `nowSeconds` is the
    /// request's wall-clock read (identity token expiry). O(1) expected.
    func authorize(
        _ access: RouteAccess, _ head: HTTPRequestHead, nowSeconds: Int64, digests: PresentedKeyDigests? = nil
    ) throws(APIError) -> Caller {
        switch access {
        case .open, .nativeNotifyAppToken:
            return .unchecked
        case .identityToken:
            let (claims, app) = try identity(head, nowSeconds: nowSeconds)
            return .identity(claims, app)
        case .operatorKey:
            try authenticate(head, digests: digests).requireOperator()
            return .operatorKey
        case .setup, .liveSetup:
            switch try authenticate(head, digests: digests) {
            case .operator: return .operatorKey
            case .appKey(let key):
                guard key.allows(.setupWrite) else { throw APIError.lacking(.setupWrite) }
                guard access != .liveSetup || key.mode == .live else { throw APIError.testKeyCannotChangeApp }
                return .appKey(key)
            }
        case .secretKey(let capability):
            return .appKey(try authenticate(head, digests: digests).requireAppKey(capability))
        case .liveSecretKey(let capability):
            let key = try authenticate(head, digests: digests).requireAppKey(capability)
            guard key.mode == .live else {
                throw APIError(
                    status: 403, code: "forbidden", message: "test keys can't register devices; use a live key")
            }
            return .appKey(key)
        case .deviceRegistrar:
            switch try authenticate(head, digests: digests) {
            case .operator: throw APIError.operatorActsOnApps(.devicesWrite)
            case .appKey(let key):
                guard key.kind == .mobile || key.allows(.devicesWrite) else { throw APIError.lacking(.devicesWrite) }
                return .appKey(key)
            }
        case .mobileKey:
            switch try authenticate(head, digests: digests) {
            case .operator: throw APIError.forbidden
            case .appKey(let key):
                guard key.kind == .mobile else {
                    throw APIError(
                        status: 403, code: "forbidden", message: "guest identities are minted with a mobile key")
                }
                return .appKey(key)
            }
        }
    }

    /// Returns the verified claims of `Authorization: Bearer <identity_token>`
    /// and its app: 401 for a missing, forged, altered or expired token, one
    /// signed by a removed signing key, one whose minting key was revoked or
    /// belongs elsewhere, or one of a deleted app (spec §6, §12); 429 over the
    /// client address's limit (identity tokens live on devices, as mobile keys
    /// do: `ClientAddressLimiter`).
    func identity(_ head: HTTPRequestHead, nowSeconds: Int64) throws(APIError) -> (IdentityClaims, AppRecord) {
        guard let token = IdentityToken.bearer(head.headers["Authorization"]),
            let claims = IdentityToken.verify(token, keys: identityKeys, nowSeconds: nowSeconds),
            let minting = catalog.liveKey(id: claims.mintingKeyID),
            minting.appID == claims.app, minting.mode == claims.mode,
            let app = catalog.app(claims.app)
        else {
            throw APIError(status: 401, code: "unauthorized", message: "missing, invalid or expired identity token")
        }
        RequestAttribution.note(claims.app, mode: claims.mode)
        try clientLimiter.admit(app: app.id, head)
        return (claims, app)
    }
}

extension RequestContext {
    /// The app key the route's access admitted. A handler calls it only on a
    /// route declared with an app-key access (a broken declaration crashes).
    func appKey() -> KeyRecord {
        guard case .appKey(let key) = caller else { appKeyNotAdmitted() }
        return key
    }

    /// The index the admitted app key acts on; 401 when its app is gone.
    func scope(_ catalog: Catalog) throws(APIError) -> IndexScope {
        // The key read in place (`appKey()` returns a copy of it).
        guard case .appKey(let key) = caller else { appKeyNotAdmitted() }
        return try IndexScope(key, catalog: catalog)
    }

    /// A handler read an app key on a route whose declared access admits none.
    private func appKeyNotAdmitted() -> Never {
        preconditionFailure("route \(request.head.path) reads an app key its access did not admit")
    }

    /// The operator or app key admitted by an `.operatorKey` or `.setup` route.
    var principal: Principal {
        switch caller {
        case .operatorKey: return .operator
        case .appKey(let key): return .appKey(key)
        case .unchecked, .identity:
            preconditionFailure("route \(request.head.path) reads a key its access did not admit")
        }
    }

    /// The identity token admitted by an `.identityToken` route.
    func identity() -> (IdentityClaims, AppRecord) {
        guard case .identity(let claims, let app) = caller else {
            preconditionFailure("route \(request.head.path) reads an identity its access did not admit")
        }
        return (claims, app)
    }
}
