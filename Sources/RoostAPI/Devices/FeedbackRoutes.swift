import RoostHTTP
import RoostJSON
import RoostModel

/// Spec §4 `POST /v1/feedback` (secret, `devices:write`): a provider reports a
/// token dead.
struct FeedbackRoutes: Sendable {
    let catalog: Catalog

    var routes: [Route] { [Route(.post, "/v1/feedback", access: .secretKey(.devicesWrite), outcome: feedback)] }

    /// `{"provider":"apns"|"fcm","token":"…","reason":"Unregistered","timestamp":"…"}`
    /// → 200 `{"invalidated":true|false}`.
    ///
    /// `provider` picks the token's platform (apns: ios, fcm: android);
    /// `reason` defaults to the provider's own word (`Unregistered`,
    /// `UNREGISTERED`); `timestamp` (RFC 3339, optional) is when the provider
    /// saw the token invalid: APNs feedback not later than the device's latest
    /// registration is ignored. `invalidated` is true when the token's device is
    /// invalidated after the call (by this report or an earlier one), false for
    /// an unknown token or ignored feedback.
    func feedback(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let now = requestTime(context)
        // The body's bytes scanned in place when they are a plain body; else the general reader.
        let command =
            if let scanned = PlainBodyScan(context.request.body) {
                try Self.report(scanned, at: now)
            } else {
                try Self.report(JSONBody(context.request), at: now)
            }
        return scope.command(command) { outcome in
            guard case .feedback(let result) = outcome else { return DeviceRoutes.unexpectedOrRejected(outcome) }
            let invalidated: Bool
            switch result {
            case .invalidated, .alreadyInvalidated: invalidated = true
            case .stale, .unknownToken: invalidated = false
            }
            return DeviceRoutes.flag("invalidated", invalidated)
        }
    }

    /// The feedback command a body asks for (see `feedback`).
    static func report(_ body: some BodyMembers, at now: Timestamp) throws(APIError) -> Command {
        let platform: Platform
        switch try body.requiredString("provider") {
        case "apns": platform = .ios
        case "fcm": platform = .android
        default: throw APIError.invalidField("provider", "provider must be apns or fcm")
        }
        let text = try body.requiredString("token")
        let reasonText = try body.optionalString("reason") ?? (platform == .ios ? "Unregistered" : "UNREGISTERED")
        let token: PushToken
        let reason: InvalidationReason
        do throws(RegistryRejection) {
            token = try PushToken(parsing: text, platform: platform)
            reason = try InvalidationReason(reasonText)
        } catch {
            throw APIError(error)
        }
        let reportedAt = try body.optionalString("timestamp").map { (text) throws(APIError) -> Timestamp in
            guard let time = Timestamp(rfc3339: text) else {
                throw APIError.invalidField("timestamp", "timestamp must be RFC 3339, e.g. 2026-09-20T14:02:11.000Z")
            }
            return time
        }
        return .reportFeedback(token: token, reason: reason, reportedAt: reportedAt, at: now)
    }
}
