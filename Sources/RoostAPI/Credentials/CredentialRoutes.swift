import RoostHTTP
import RoostJSON
import RoostModel

/// Spec §4 credentials (`setup:write`): APNs credential metadata per bundle id
/// and environment, kept in the index of the key's app and mode (a test key's
/// credentials are the test mode's, as its devices are).
struct CredentialRoutes: Sendable {
    let catalog: Catalog

    var routes: [Route] {
        [
            Route(
                .put, "/v1/credentials/apns/{bundle_id}/{environment}", access: .secretKey(.setupWrite),
                outcome: putCredential),
            Route(
                .delete, "/v1/credentials/apns/{bundle_id}/{environment}", access: .secretKey(.setupWrite),
                outcome: deleteCredential),
        ]
    }

    /// `PUT …` `{"team_id":"…","key_id":"…"}` → 200
    /// `{"bundle_id","environment","team_id","key_id"}`. Replaces what was stored.
    func putCredential(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let key = try CredentialRoutes.credentialKey(context.parameters)
        let body = try JSONBody(context.request)
        let teamID = try body.requiredString("team_id")
        let keyID = try body.requiredString("key_id")
        let credential: APNsCredential
        do throws(RegistryRejection) {
            credential = try APNsCredential(key: key, teamID: teamID, keyID: keyID)
        } catch {
            throw APIError(error)
        }
        return scope.command(.putCredential(credential)) { outcome in
            guard case .credential(let credential) = outcome else { return DeviceRoutes.unexpectedOrRejected(outcome) }
            var writer = JSONWriter(reservingCapacity: 128)
            writer.beginObject()
            writer.member("bundle_id", credential.key.bundleID.rawValue)
            writer.member("environment", credential.key.environment.name)
            writer.member("team_id", credential.teamID)
            writer.member("key_id", credential.keyID)
            writer.endObject()
            return jsonResponse(200, writer)
        }
    }

    /// `DELETE …` → 200 `{"deleted":true|false,"devices_removed":N}`: removes the
    /// credential and the ios devices registered for that bundle id and
    /// environment (also when no credential was stored: `deleted` is then false).
    func deleteCredential(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let key = try CredentialRoutes.credentialKey(context.parameters)
        return scope.command(.deleteCredential(key)) { outcome in
            guard case .removed(let deleted, let devicesRemoved) = outcome else {
                return DeviceRoutes.unexpectedOrRejected(outcome)
            }
            return DeviceRoutes.removal("deleted", deleted, devicesRemoved: devicesRemoved)
        }
    }

    /// The bundle id (400 `invalid_field` `bundle_id`) and environment (400
    /// `invalid_environment`) of the path.
    static func credentialKey(_ parameters: [String]) throws(APIError) -> CredentialKey {
        let bundleID: BundleID
        do throws(RegistryRejection) {
            bundleID = try BundleID(parameters[0])
        } catch {
            throw APIError(error)
        }
        guard let environment = APNsEnvironment(name: parameters[1]) else {
            throw APIError(RegistryRejection.invalidEnvironment)
        }
        return CredentialKey(bundleID: bundleID, environment: environment)
    }
}
