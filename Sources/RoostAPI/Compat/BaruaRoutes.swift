import RoostHTTP
import RoostJSON
import RoostModel

/// Barua's drop-in device routes (seeds/barua-register-devices.txt, spec §6):
/// `PUT` and `DELETE /api/integrations/v1/devices`.
///
/// Mapping: the bearer key is a live secret key with `devices:write` (a test
/// key or a key without it: 403); `app` is the bundle id of a stored APNs
/// credential for `environment` (409 `notification_app_not_found`); the person
/// must be known (409 `unknown_identity`); a person keeps at most 10 devices
/// whatever the app setting (the seed fixes it). Errors use the envelope of
/// spec §2; `field` names Barua's fields (`app`, not `bundle_id`).
struct BaruaRoutes: Sendable {
    /// Barua's fixed "a person keeps at most 10 devices".
    static let devicesPerPersonMax = 10
    static let path = "/api/integrations/v1/devices"
    /// Our field names as Barua spells them.
    static let fieldNames = ["bundle_id": "app"]

    let catalog: Catalog

    var routes: [Route] {
        [
            Route(.put, BaruaRoutes.path, access: .liveSecretKey(.devicesWrite), outcome: register),
            Route(.delete, BaruaRoutes.path, access: .liveSecretKey(.devicesWrite), outcome: forget),
        ]
    }

    /// `PUT`: registers (or refreshes) the token for the person. The answer is
    /// `{"registered":true,"registered_at":…,"bound_at":…}` and never the token.
    func register(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let (key, app) = try authorize(context)
        let body = try BaruaBody(JSONBody(context.request), requireAppAndEnvironment: true)
        guard let bundleID = body.bundleID, let environment = body.environment else {
            preconditionFailure("BaruaBody checked app and environment")
        }
        var registration = RegisterRequest(token: body.token, environment: environment)
        registration.bundleID = .set(bundleID)
        registration.externalID = .set(body.externalID)
        registration.requireKnownPerson = true
        registration.requireCredential = true
        registration.maxDevicesPerPersonOverride = BaruaRoutes.devicesPerPersonMax
        return Compat.command(app: app, mode: key.mode, .register(registration, at: requestTime(context))) { outcome in
            guard case .registered(let registered) = outcome else {
                return Compat.refusalOrUnexpected(outcome, fields: BaruaRoutes.fieldNames)
            }
            var writer = JSONWriter()
            writer.beginObject()
            writer.member("registered", true)
            writer.member("registered_at", registered.device.lastSeenAt)
            writer.member("bound_at", registered.device.boundAt)
            writer.endObject()
            return jsonResponse(200, writer)
        }
    }

    /// `DELETE` with the same body: removes the token's device only while it
    /// still belongs to `external_id`; `{"deleted":true|false}`, idempotent.
    func forget(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let (key, app) = try authorize(context)
        let body = try BaruaBody(JSONBody(context.request), requireAppAndEnvironment: false)
        return Compat.command(app: app, mode: key.mode, .deleteDeviceByToken(body.token, ownedBy: body.externalID)) {
            outcome in
            guard case .deleted(let deleted) = outcome else { return Compat.refusalOrUnexpected(outcome) }
            return DeviceRoutes.flag("deleted", deleted)
        }
    }

    /// The admitted key (Barua's key rule, `RouteAccess.liveSecretKey`: a live
    /// secret key with `devices:write`) and its app; 401 when the app is gone.
    private func authorize(_ context: RequestContext) throws(APIError) -> (KeyRecord, AppRecord) {
        let key = context.appKey()
        guard let app = catalog.app(key.appID) else { throw APIError.unauthorized }
        return (key, app)
    }
}

/// The body of both Barua calls:
/// `{"provider":"apns","app":"…","environment":"production|sandbox","token":"<hex>","external_id":"…"}`.
struct BaruaBody: Sendable {
    var token: PushToken
    var bundleID: BundleID?
    var environment: APNsEnvironment?
    var externalID: ExternalID

    /// Parses and checks the body. `provider` may be omitted (Barua registers
    /// Apple devices only) but anything other than `apns` is refused. `app` and
    /// `environment` are required to register; on `DELETE` they are checked
    /// when present (the token and person pick the device).
    init(_ body: JSONBody, requireAppAndEnvironment: Bool) throws(APIError) {
        if let provider = try body.optionalString("provider"), provider != "apns" {
            throw APIError.invalidField("provider", "provider must be \"apns\"")
        }
        let appName = requireAppAndEnvironment ? try body.requiredString("app") : try body.optionalString("app")
        if let appName {
            do {
                bundleID = try BundleID(appName)
            } catch {
                throw APIError.invalidField("app", "app must be a bundle id: 1 to 255 of A-Z a-z 0-9 . - _")
            }
        }
        let environmentName =
            requireAppAndEnvironment ? try body.requiredString("environment") : try body.optionalString("environment")
        if let environmentName {
            guard let environment = APNsEnvironment(name: environmentName) else {
                throw APIError(RegistryRejection.invalidEnvironment)
            }
            self.environment = environment
        }
        let tokenText = try body.requiredString("token")
        token = try checked { () throws(RegistryRejection) in try PushToken(parsing: tokenText, platform: .ios) }
        let externalText = try body.requiredString("external_id")
        externalID = try checked { () throws(RegistryRejection) in try ExternalID(externalText) }
    }
}
