import RoostHTTP
import RoostJSON
import RoostModel

/// Native Notify's drop-in routes (seeds/nativenotify-device-registration.md,
/// spec §6): register, deregister and health under `/api/universal/`.
///
/// Mapping: `appId` is our app id; `appToken` is a live key of that app, a
/// mobile key or a secret key with `devices:write` (anything else, a test key
/// or another app's key answers 401, as a wrong `appToken` does). Devices live
/// in the app's live mode. `deviceId` is our `installation_id`, `subscriberId`
/// our `external_id` ("indie device" = bound to a person, "mass device" = not),
/// `createdAt`/`lastSeenAt` our `created_at`/`last_seen_at`. The registration
/// itself is `AppIndex.register`: the same rules as `POST /v1/devices`.
struct NativeNotifyRoutes: Sendable {
    static let prefix = "/api/universal"

    let catalog: Catalog
    let clientLimiter: ClientAddressLimiter

    var routes: [Route] {
        [
            Route(
                .post, NativeNotifyRoutes.prefix + "/device/register", access: .nativeNotifyAppToken, outcome: register),
            Route(
                .post, NativeNotifyRoutes.prefix + "/device/deregister", access: .nativeNotifyAppToken,
                outcome: deregister),
            Route(.get, NativeNotifyRoutes.prefix + "/health", access: .nativeNotifyAppToken, outcome: health),
        ]
    }

    /// Register: an idempotent upsert keyed on `deviceId`; always 201 with the
    /// device and, per token, `ok` / `refreshed` / `reassigned`.
    func register(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let body = try JSONBody(context.request)
        let app = try authorize(body.value["appId"], body.value["appToken"], context)
        let registration = try NativeNotifyRegistration(body)
        let tokenName = registration.tokenName
        let command = Command.register(registration.registerRequest, at: requestTime(context))
        return Compat.command(app: app, mode: .live, command) { outcome in
            guard case .registered(let registered) = outcome else {
                guard case .rejected(let rejection) = outcome else {
                    preconditionFailure("unexpected outcome \(outcome)")
                }
                return NativeNotifyRoutes.refusal(rejection, tokenName: tokenName)
            }
            let status: String =
                switch registered.tokenChange {
                case .unchanged: "ok"
                case .refreshed: "refreshed"
                case .reassigned: "reassigned"
                }
            var writer = JSONWriter(reservingCapacity: 512)
            writer.beginObject()
            writer.member("ok", true)
            writer.key("device")
            NativeNotifyRoutes.writeDevice(registered.device, app: app.id, into: &writer)
            writer.key("tokens")
            writer.beginObject()
            writer.member(tokenName, status)
            writer.endObject()
            writer.endObject()
            return jsonResponse(201, writer)
        }
    }

    /// Deregister: a hard delete of the `deviceId`'s device; 200 also for an
    /// unknown id (`"removed": false`), so a retried logout never fails.
    func deregister(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let body = try JSONBody(context.request)
        let app = try authorize(body.value["appId"], body.value["appToken"], context)
        let installation = try NativeNotifyRegistration.deviceID(body.value["deviceId"])
        return Compat.command(app: app, mode: .live, .deregisterInstallation(installation)) { outcome in
            guard case .deregistered(let removed, let tokensRemoved) = outcome else {
                return Compat.refusalOrUnexpected(outcome, fields: ["installation_id": "deviceId"])
            }
            var writer = JSONWriter()
            writer.beginObject()
            writer.member("ok", true)
            writer.member("deviceId", installation.rawValue)
            writer.member("removed", removed)
            writer.member("tokensRemoved", tokensRemoved)
            writer.endObject()
            return jsonResponse(200, writer)
        }
    }

    /// Health: `GET …/health?appId=…&appToken=…` → the app's live counts:
    /// `{"ok":true,"appId":N,"counts":{"devices","active","invalidated","subscribers","ios","android"}}`.
    func health(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let query = try QueryParameters(context.request.head.query)
        let app = try authorize(
            query["appId"].map(JSONValue.string), query["appToken"].map(JSONValue.string), context)
        return Compat.command(app: app, mode: .live, .stats) { outcome in
            guard case .stats(let stats) = outcome else { return Compat.refusalOrUnexpected(outcome) }
            var writer = JSONWriter()
            writer.beginObject()
            writer.member("ok", true)
            writer.member("appId", Int(app.id.rawValue))
            writer.key("counts")
            writer.beginObject()
            writer.member("devices", stats.devices)
            writer.member("active", stats.active)
            writer.member("invalidated", stats.invalidated)
            writer.member("subscribers", stats.people)
            writer.member("ios", stats.byPlatform[.ios] ?? 0)
            writer.member("android", stats.byPlatform[.android] ?? 0)
            writer.endObject()
            writer.endObject()
            return jsonResponse(200, writer)
        }
    }

    /// Resolves `appId` and `appToken`: 400 without `appId`, 404 for an app we do
    /// not know, 401 unless `appToken` is a live key of that app that may
    /// register devices, 429 over the key's rate limit or, for a mobile
    /// key, over the client address's (`ClientAddressLimiter`).
    private func authorize(
        _ appIDValue: JSONValue?, _ appTokenValue: JSONValue?, _ context: RequestContext
    ) throws(APIError) -> AppRecord {
        let credentials = try NativeNotifyCredentials(appID: appIDValue, appToken: appTokenValue)
        guard let app = catalog.app(credentials.appID) else { throw NativeNotifyError.appNotFound }
        guard let presented = credentials.appToken, let key = try catalog.liveKey(presented: presented),
            key.appID == app.id, key.mode == .live, key.kind == .mobile || key.allows(.devicesWrite)
        else { throw NativeNotifyError.unauthorized }
        if key.kind == .mobile { try clientLimiter.admit(app: app.id, context.request.head) }
        // Whose remembered answers an Idempotency-Key names (spec §7).
        IdempotencyKeyNote.note(key.id)
        return app
    }

    /// A model refusal in Native Notify's words and field names.
    static func refusal(_ rejection: RegistryRejection, tokenName: String) -> HTTPResponse {
        let error: APIError
        switch rejection {
        case .invalidField("external_id"): error = NativeNotifyError.invalidSubscriberID("is malformed")
        case .invalidField("installation_id"): error = NativeNotifyError.invalidDeviceID("is malformed")
        case .invalidTokenFormat: error = NativeNotifyError.invalidTokenFormat("tokens.\(tokenName)")
        case .unsupportedTokenType: error = NativeNotifyError.unsupportedTokenType("tokens.\(tokenName)")
        default:
            var renamed = APIError(rejection)
            let names = [
                "external_id": "subscriberId", "installation_id": "deviceId", "app_version": "appVersion",
                "device_id": "deviceId",
            ]
            if let field = renamed.field, let name = names[field] { renamed.field = name }
            error = renamed
        }
        return error.response
    }

    /// Writes Native Notify's device: `appId`, `deviceId`, `platform`,
    /// `subscriberId`, `appVersion`, `timezone` (null when unset), `createdAt`,
    /// `lastSeenAt`. Never the token.
    static func writeDevice(_ device: Device, app: AppID, into writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("appId", Int(app.rawValue))
        writer.member("deviceId", device.installationID?.rawValue)
        writer.member("platform", device.platform.name)
        writer.member("subscriberId", device.externalID?.rawValue)
        writer.member("appVersion", device.appVersion)
        writer.member("timezone", device.timezone)
        writer.member("createdAt", device.createdAt)
        writer.member("lastSeenAt", device.lastSeenAt)
        writer.endObject()
    }
}
