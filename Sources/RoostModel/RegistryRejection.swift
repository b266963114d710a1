/// Why the registry refused a request. A rejection changes nothing (spec §5 rule 7).
///
/// Each case carries what the API error envelope needs: a stable `code`, the
/// HTTP status and, where one field is at fault, its JSON name.
package enum RegistryRejection: Error, Hashable, Sendable, CustomStringConvertible {
    /// A required field is absent. 400 `missing_field`.
    case missingField(String)
    /// `platform` is neither `ios` nor `android`. 400 `invalid_platform`.
    case invalidPlatform
    /// `environment` is unknown, or `sandbox` for android. 400 `invalid_environment`.
    case invalidEnvironment
    /// The token does not fit its platform's shape. 400 `invalid_token_format`.
    case invalidTokenFormat
    /// An Expo token (`ExponentPushToken[…]`). 400 `unsupported_token_type`.
    case unsupportedTokenType
    /// A field is out of its documented bounds or shape. 400 `invalid_field`.
    case invalidField(String)
    /// A tag key or value is malformed (empty key, key too long, non-finite number). 400 `invalid_tags`.
    case invalidTags
    /// Tags after the merge exceed 50 keys or 4,096 bytes. 400 `tags_too_large`.
    case tagsTooLarge
    /// Binding to an unknown person with `require_known_person`. 409 `unknown_identity`.
    case unknownIdentity
    /// No APNs credential for this bundle id and environment where one is required
    /// (the Barua route). 409 `notification_app_not_found`.
    case credentialNotFound
    /// A `device_id` of another mode or platform, or an `installation_id` held by a
    /// device other than the proven one or of another platform.
    /// 422 `device_identity_conflict`.
    case deviceIdentityConflict(field: String)
    /// An `installation_id` naming a device that holds an `installation_secret`,
    /// without that device's `device_id` + `installation_secret` proof (spec §12).
    /// 409 `installation_proof_required`.
    case installationProofRequired
    /// A registration whose `client_sequence` is not above the stored one of a
    /// device it names (spec §7). 409 `stale_registration`.
    case staleRegistration(stored: UInt64)
    /// An `If-Match` that the device's current version does not satisfy
    /// (spec §7). 412 `precondition_failed`; the message holds the version.
    case preconditionFailed(currentVersion: UInt32)
    /// 404 `device_not_found`.
    case deviceNotFound
    /// 404 `person_not_found`.
    case personNotFound
    /// The token was registered again more often than its shard's per-token
    /// rate (a client looping on registration); nothing changed.
    /// 429 `rate_limited` with `Retry-After: retryAfterSeconds` (≥ 1).
    case tokenRateLimited(retryAfterSeconds: Int)
    /// An NDJSON import line names something this index already holds: its
    /// `id` (`device_id_taken`), `token` (`token_taken`) or `installation_id`
    /// (`installation_id_taken`). 409.
    case alreadyTaken(field: String)
    /// An NDJSON import line would give its person more devices than
    /// `max_devices_per_person` (an import never evicts). 409 `person_device_limit`.
    case personDeviceLimit
    /// The first answer to an `Idempotency-Key` named a person who has been
    /// erased since (issue 24 M-5, decision 0079): what a replay answers
    /// instead, nothing applied. 410 `person_erased`.
    case personErased
    /// An identity token issued to a person before that person was erased
    /// (decision 0079). 401 `unauthorized`, worded as any other refused
    /// token: it says nothing of the person. Never remembered.
    case identityTokenRevoked

    /// The stable error code of the API envelope.
    package var code: String {
        switch self {
        case .missingField: "missing_field"
        case .invalidPlatform: "invalid_platform"
        case .invalidEnvironment: "invalid_environment"
        case .invalidTokenFormat: "invalid_token_format"
        case .unsupportedTokenType: "unsupported_token_type"
        case .invalidField: "invalid_field"
        case .invalidTags: "invalid_tags"
        case .tagsTooLarge: "tags_too_large"
        case .unknownIdentity: "unknown_identity"
        case .credentialNotFound: "notification_app_not_found"
        case .deviceIdentityConflict: "device_identity_conflict"
        case .installationProofRequired: "installation_proof_required"
        case .staleRegistration: "stale_registration"
        case .preconditionFailed: "precondition_failed"
        case .deviceNotFound: "device_not_found"
        case .personNotFound: "person_not_found"
        case .tokenRateLimited: "rate_limited"
        case .alreadyTaken(let field): field == "id" ? "device_id_taken" : field + "_taken"
        case .personDeviceLimit: "person_device_limit"
        case .personErased: "person_erased"
        case .identityTokenRevoked: "unauthorized"
        }
    }

    /// The HTTP status the API answers with.
    package var httpStatus: Int {
        switch self {
        case .missingField, .invalidPlatform, .invalidEnvironment, .invalidTokenFormat, .unsupportedTokenType,
            .invalidField, .invalidTags, .tagsTooLarge:
            400
        case .deviceNotFound, .personNotFound: 404
        case .unknownIdentity, .credentialNotFound, .installationProofRequired, .staleRegistration, .alreadyTaken,
            .personDeviceLimit:
            409
        case .preconditionFailed: 412
        case .personErased: 410
        case .identityTokenRevoked: 401
        case .deviceIdentityConflict: 422
        case .tokenRateLimited: 429
        }
    }

    /// The JSON name of the field at fault, where one is.
    package var field: String? {
        switch self {
        case .missingField(let name), .invalidField(let name): name
        case .deviceIdentityConflict(let name), .alreadyTaken(let name): name
        case .personDeviceLimit: "external_id"
        case .invalidPlatform: "platform"
        case .invalidEnvironment: "environment"
        case .invalidTokenFormat, .unsupportedTokenType: "token"
        case .invalidTags, .tagsTooLarge: "tags"
        case .unknownIdentity: "external_id"
        case .credentialNotFound: "bundle_id"
        case .installationProofRequired: "installation_id"
        case .staleRegistration: "client_sequence"
        case .deviceNotFound, .personNotFound, .preconditionFailed, .tokenRateLimited, .personErased,
            .identityTokenRevoked:
            nil
        }
    }

    /// A human sentence for the envelope's `message` (never holds a token or secret).
    package var message: String {
        switch self {
        case .missingField(let name): "\(name) is required"
        case .invalidPlatform: "platform must be ios or android"
        case .invalidEnvironment: "environment must be production or sandbox (android: production)"
        case .invalidTokenFormat: "the token does not fit its platform's shape"
        case .unsupportedTokenType: "Expo push tokens are not supported; send the APNs or FCM token"
        case .invalidField(let name): "\(name) is malformed or out of bounds"
        case .invalidTags: "a tag key must be 1 to 128 bytes and values strings, finite numbers or booleans"
        case .tagsTooLarge: "tags must fit 50 keys and 4096 bytes after the merge"
        case .unknownIdentity: "the person is not known"
        case .credentialNotFound: "no APNs credential for this bundle id and environment"
        case .deviceIdentityConflict(let name): "\(name) names a device of another mode, platform or installation"
        case .installationProofRequired:
            "this installation_id belongs to a device registered with an installation_secret; send its device_id "
                + "and installation_secret, or register a new installation_id"
        case .staleRegistration(let stored):
            "client_sequence must be greater than \(stored), the highest this device has accepted"
        case .preconditionFailed(let version): "If-Match does not match: the device is at version \(version)"
        case .deviceNotFound: "device not found"
        case .personNotFound: "person not found"
        case .tokenRateLimited: "this token is registered too often; retry after Retry-After seconds"
        case .alreadyTaken(let name): "\(name) is already held in this app and mode"
        case .personDeviceLimit: "the person already holds max_devices_per_person devices"
        case .personErased:
            "the first answer to this Idempotency-Key named a person who has since been erased; nothing was applied"
        case .identityTokenRevoked: "missing, invalid or expired identity token"
        }
    }

    package var description: String { "\(httpStatus) \(code)" + (field.map { " (\($0))" } ?? "") }
}
