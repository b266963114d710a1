import RoostHTTP
import RoostJSON
import RoostModel

/// Connect-style principals (seeds/connect-register-device.txt, spec §6): the
/// app mints identity tokens, and the device routes act only for the token's
/// principal, so the body can never name a user.
///
/// Mapping: a user principal `user:<external_id>` binds devices to that
/// `external_id` (the same person the native and Barua routes see); a guest
/// `guest:<hex>` binds them to the person `guest:<hex>`, which the server
/// forgets once the guest's last device leaves (moves to a user or is deleted).
/// Connect's `deviceId` is our `installation_id`; the answer is the device JSON
/// of spec §4, without its token.
struct ConnectRoutes: Sendable {
    let keys: IdentityKeyStore

    var routes: [Route] {
        [
            Route(.post, "/v1/identities/guest", access: .mobileKey, mintGuest),
            Route(.post, "/v1/identities/authenticated", access: .secretKey(.peopleWrite), mintUser),
            Route(.put, "/v1/me/devices", access: .identityToken, outcome: registerDevice),
            Route(.delete, "/v1/me/devices/{installation_id}", access: .identityToken, outcome: deleteDevice),
            Route(.get, "/v1/identity-keys", access: .operatorKey, listKeys),
            Route(.post, "/v1/identity-keys", access: .operatorKey, outcome: rotateKey),
            Route(.delete, "/v1/identity-keys/{key_id}", access: .operatorKey, outcome: removeKey),
        ]
    }

    // MARK: - Identities

    /// `POST /v1/identities/guest` (mobile key) → 201 with a new guest principal.
    func mintGuest(_ context: RequestContext) throws(APIError) -> HTTPResponse {
        let key = context.appKey()
        let lifetime = try ConnectRoutes.lifetime(context.request)
        return try mint(.guest(IdentityToken.newGuestID()), key: key, lifetime: lifetime, now: context.nowMilliseconds)
    }

    /// `POST /v1/identities/authenticated` (secret key, `people:write`)
    /// `{"external_id":"user_42"}` → 201 with `user:user_42`.
    func mintUser(_ context: RequestContext) throws(APIError) -> HTTPResponse {
        let key = context.appKey()
        let body = try JSONBody(context.request)
        let text = try body.requiredString("external_id")
        let externalID = try checked { () throws(RegistryRejection) in try ExternalID(text) }
        guard !IdentityPrincipal.isGuest(externalID) else {
            throw APIError.invalidField("external_id", "external_id must not start with \"guest:\"")
        }
        let lifetime = try ConnectRoutes.lifetime(context.request)
        return try mint(.user(externalID), key: key, lifetime: lifetime, now: context.nowMilliseconds)
    }

    /// Signs a token naming the minting `key`, so that revoking the key
    /// revokes the token (spec §12).
    private func mint(
        _ principal: IdentityPrincipal, key: KeyRecord, lifetime: Int64, now: Int64
    ) throws(APIError) -> HTTPResponse {
        guard IdentityToken.isMintingKeyID(key.id[...]) else {
            // Every key id this server made is `key_` + 16 hex; one that is not
            // cannot be named in a token, so its tokens could not be revoked.
            throw APIError(
                status: 403, code: "forbidden", message: "this key cannot mint identity tokens; make a new key")
        }
        let expiresAt = now / 1000 + lifetime
        let claims = IdentityClaims(
            app: key.appID, mode: key.mode, mintingKeyID: key.id, principal: principal, expiresAtSeconds: expiresAt,
            issuedAtMilliseconds: now)
        let token = IdentityToken.sign(claims, with: keys.currentKey())
        var writer = JSONWriter(reservingCapacity: 512)
        writer.beginObject()
        writer.member("principal", principal.rendered)
        writer.member("identity_token", token)
        writer.member("expires_at", Timestamp(millisecondsSinceEpoch: expiresAt * 1000))
        writer.endObject()
        return jsonResponse(201, writer)
    }

    /// The optional `ttl_seconds` of a mint request (an empty body is allowed).
    private static func lifetime(_ request: HTTPRequest) throws(APIError) -> Int64 {
        guard !request.body.isEmpty else { return IdentityToken.lifetimeSecondsDefault }
        guard let seconds = try JSONBody(request).optionalInt("ttl_seconds") else {
            return IdentityToken.lifetimeSecondsDefault
        }
        let range = IdentityToken.lifetimeSecondsRange
        guard range.contains(Int64(seconds)) else {
            throw APIError.invalidField(
                "ttl_seconds", "ttl_seconds must be \(range.lowerBound) to \(range.upperBound)")
        }
        return Int64(seconds)
    }

    // MARK: - Devices of the principal

    /// `PUT /v1/me/devices` (Bearer identity token): registers the installation
    /// for the token's principal; 201 for a new device, else 200.
    func registerDevice(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let (claims, app) = context.identity()
        let body = try JSONBody(context.request)
        let owner = claims.principal.externalID
        let registration = try ConnectRoutes.registration(body)
        let command = Command.registerForPrincipal(
            registration, owner: owner, at: requestTime(context), tokenIssuedAt: claims.issuedAt)
        return Compat.command(app: app, mode: claims.mode, command) { outcome, buffers in
            guard case .registered(let registered) = outcome else { return Compat.refusalOrUnexpected(outcome) }
            return DeviceJSON.response(
                registered.created ? 201 : 200, registered.device, includeToken: false, reusing: &buffers)
        }
    }

    /// `DELETE /v1/me/devices/{installation_id}` → `{"deleted":bool}`: removes
    /// the installation's device only when it belongs to the token's principal
    /// (a guest left without devices is forgotten).
    func deleteDevice(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let (claims, app) = context.identity()
        let text = context.parameters[0]
        let installation = try checked { () throws(RegistryRejection) in try InstallationID(text) }
        let owner = claims.principal.externalID
        let command = Command.deletePrincipalDevice(installation, owner: owner, tokenIssuedAt: claims.issuedAt)
        return Compat.command(app: app, mode: claims.mode, command) { outcome in
            guard case .deleted(let deleted) = outcome else { return Compat.refusalOrUnexpected(outcome) }
            return DeviceRoutes.flag("deleted", deleted)
        }
    }

    /// The registration fields of `PUT /v1/me/devices`: `installation_id`,
    /// `platform` and `token` are required; `environment`, `bundle_id`,
    /// `app_version`, `timezone`, `locale`, `push_permission` optional. Naming a
    /// person (`external_id`) is refused: only the identity token does that.
    static func registration(_ body: JSONBody) throws(APIError) -> RegisterRequest {
        if body.has("external_id") {
            throw APIError.invalidField("external_id", "the identity token names the person; the body cannot")
        }
        let installationText = try body.requiredString("installation_id")
        let installation = try checked { () throws(RegistryRejection) in try InstallationID(installationText) }
        let platformName = try body.requiredString("platform")
        guard let platform = Platform(name: platformName) else { throw APIError(RegistryRejection.invalidPlatform) }
        let tokenText = try body.requiredString("token")
        let token = try checked { () throws(RegistryRejection) in try PushToken(parsing: tokenText, platform: platform)
        }
        // Omitted: a new device gets production, an existing one keeps its own (spec §12).
        var environment: APNsEnvironment?
        if let name = try body.optionalString("environment") {
            guard let parsed = APNsEnvironment(name: name) else { throw APIError(RegistryRejection.invalidEnvironment) }
            environment = parsed
        }
        var request = RegisterRequest(token: token, environment: environment)
        request.installationID = installation
        if let bundle = try body.optionalString("bundle_id") {
            request.bundleID = .set(try checked { () throws(RegistryRejection) in try BundleID(bundle) })
        }
        request.appVersion = try textChange(body, "app_version")
        request.timezone = try textChange(body, "timezone")
        request.locale = try textChange(body, "locale")
        if body.has("push_permission") {
            request.pushPermission = try body.optionalBool("push_permission").map { .set($0) } ?? .clear
        }
        return request
    }

    /// Omitted keeps, `null` clears, a string sets (the model checks its bounds).
    private static func textChange(_ body: JSONBody, _ name: String) throws(APIError) -> FieldChange<String> {
        guard body.has(name) else { return .keep }
        return try body.optionalString(name).map { .set($0) } ?? .clear
    }

    // MARK: - Signing keys (operator)

    /// `GET /v1/identity-keys` → the key ids (never the secrets) and the current one.
    func listKeys(_ context: RequestContext) throws(APIError) -> HTTPResponse {
        let (currentID, list) = keys.list()
        var writer = JSONWriter()
        writer.beginObject()
        writer.member("current", currentID)
        writer.key("keys")
        writer.beginArray()
        for key in list {
            ConnectRoutes.writeKey(
                id: key.id, createdAt: key.createdAtMilliseconds, current: key.id == currentID, into: &writer)
        }
        writer.endArray()
        writer.endObject()
        return jsonResponse(200, writer)
    }

    /// `POST /v1/identity-keys` → 201: a new current signing key; tokens signed
    /// by older keys keep verifying until those keys are removed.
    func rotateKey(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let (key, ticket) = try keys.rotate(now: context.nowMilliseconds)
        return .afterCommit(ticket) {
            var writer = JSONWriter()
            ConnectRoutes.writeKey(id: key.id, createdAt: key.createdAtMilliseconds, current: true, into: &writer)
            return jsonResponse(201, writer)
        }
    }

    /// `DELETE /v1/identity-keys/{key_id}` → `{"deleted":true}`: the tokens it
    /// signed answer 401 from now on. The current key cannot be removed (409).
    func removeKey(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let ticket = try keys.remove(id: context.parameters[0])
        return .afterCommit(ticket) { DeviceRoutes.flag("deleted", true) }
    }

    private static func writeKey(id: String, createdAt: Int64, current: Bool, into writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("id", id)
        writer.member("created_at", Timestamp(millisecondsSinceEpoch: createdAt))
        writer.member("current", current)
        writer.endObject()
    }
}
