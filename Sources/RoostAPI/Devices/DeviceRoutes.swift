import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel

/// Spec §4 devices: register, read, patch, delete, list, export, import.
/// Listing, export and import live in their own files (`DeviceListing`,
/// `DeviceExport`, `DeviceImport`). Every route acts on the index its key
/// selects (app and mode); a device of another app or mode answers as if it
/// did not exist.
struct DeviceRoutes: Sendable {
    let catalog: Catalog
    let registry: Registry
    /// The point-in-time exports streaming now (`DeviceExport.concurrentMax`,
    /// `concurrentPerAppMax` of one app).
    let exports: ExportSlots

    var routes: [Route] {
        [
            Route(.post, "/v1/devices", access: .deviceRegistrar, outcome: register),
            Route(.get, "/v1/devices", access: .secretKey(.devicesRead), outcome: list),
            // Before `/v1/devices/{id}`: the router takes the first match.
            Route(.get, "/v1/devices/export", access: .secretKey(.devicesRead), outcome: export),
            Route(.get, "/v1/devices/inactive", access: .secretKey(.devicesRead), outcome: previewInactive),
            Route(
                .post, "/v1/devices/inactive/invalidate", access: .secretKey(.devicesWrite),
                outcome: invalidateInactive),
            Route(
                .post, "/v1/devices/import", access: .secretKey(.devicesWrite),
                bodyLimitBytes: DeviceImport.bodyBytesMax, outcome: importDevices),
            Route(
                .post, "/v1/devices/batch", access: .secretKey(.devicesWrite),
                bodyLimitBytes: DeviceRoutes.batchBodyBytesMax, outcome: registerBatch),
            Route(.get, "/v1/devices/{id}", access: .secretKey(.devicesRead), outcome: getDevice),
            Route(.get, "/v1/devices/{id}/history", access: .secretKey(.devicesRead), outcome: history),
            Route(.patch, "/v1/devices/{id}", access: .secretKey(.devicesWrite), outcome: patchDevice),
            Route(.delete, "/v1/devices/{id}", access: .secretKey(.devicesDelete), outcome: deleteDevice),
        ]
    }

    /// `POST /v1/devices`: a mobile key, or a secret key with `devices:write`.
    /// 201 for a new device, 200 for an existing one; never the token.
    func register(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        // The body's bytes scanned in place when they are a plain body; else the general reader.
        let request =
            if let scanned = PlainBodyScan(context.request.body) {
                try RegisterBody.parse(members: scanned)
            } else {
                try RegisterBody.parse(JSONBody(context.request).value)
            }
        let now = requestTime(context)
        return scope.command(.register(request, at: now)) { outcome, buffers in
            switch outcome {
            case .registered(let registered):
                DeviceJSON.response(
                    registered.created ? 201 : 200, registered.device, includeToken: false, reusing: &buffers)
            default: DeviceRoutes.unexpectedOrRejected(outcome)
            }
        }
    }

    /// `GET /v1/devices/{id}` (`devices:read`): the device with its token.
    func getDevice(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let id = try DeviceRoutes.deviceID(context.parameters[0])
        return scope.command(.getDevice(id)) { outcome, buffers in
            switch outcome {
            case .device(let device): DeviceJSON.response(200, device, includeToken: true, reusing: &buffers)
            default: DeviceRoutes.unexpectedOrRejected(outcome)
            }
        }
    }

    /// `GET /v1/devices/{id}/history` (`devices:read`): `{"events":[…]}`,
    /// newest first, at most `Limits.historyEventsPerDeviceMax` (spec §9);
    /// 404 `device_not_found` as `GET /v1/devices/{id}`.
    func history(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let id = try DeviceRoutes.deviceID(context.parameters[0])
        return scope.command(.deviceHistory(id)) { outcome in
            guard case .history(let events) = outcome else { return DeviceRoutes.unexpectedOrRejected(outcome) }
            var writer = JSONWriter(reservingCapacity: 32 + events.count * HistoryJSON.eventBytesEstimate)
            writer.beginObject()
            writer.key("events")
            HistoryJSON.write(events, into: &writer)
            writer.endObject()
            return jsonResponse(200, writer)
        }
    }

    /// `PATCH /v1/devices/{id}` (secret, `devices:write`): merges `tags`
    /// (`tags: null` clears them, as on registration) and sets `opted_in`.
    /// Leaves `last_seen_at` and registration metadata alone; other members
    /// are ignored. Answers the device without its token (a write capability
    /// does not grant reading tokens). With `If-Match` (spec §7), a device whose
    /// version does not satisfy it is 412 and unchanged; a malformed body is
    /// 400 and an unknown device 404 before the condition is looked at.
    func patchDevice(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        // The body's bytes scanned in place when they are a plain body; else the general reader.
        let (tags, optedIn) =
            if let scanned = PlainBodyScan(context.request.body) {
                try Self.patchFields(scanned)
            } else {
                try Self.patchFields(JSONBody(context.request))
            }
        let condition = try IfMatch.parse(context.request.head.headers)
        let id = try DeviceRoutes.deviceID(context.parameters[0])
        let now = requestTime(context)
        return scope.command(.patchDevice(id, tags: tags, optedIn: optedIn, ifMatch: condition, at: now)) {
            outcome, buffers in
            switch outcome {
            case .device(let device): DeviceJSON.response(200, device, includeToken: false, reusing: &buffers)
            default: DeviceRoutes.unexpectedOrRejected(outcome)
            }
        }
    }

    /// The changes a PATCH body asks for: `tags` (as on registration) and `opted_in`.
    static func patchFields(_ body: some BodyMembers) throws(APIError) -> (tags: TagsChange, optedIn: Bool?) {
        (try RegisterBody.tagsChange(body[member: "tags"]), try body.optionalBool("opted_in"))
    }

    /// `DELETE /v1/devices/{id}` (secret, `devices:delete`): `{"deleted":true}`,
    /// or `false` for an id that names no device of this app and mode (also
    /// under `If-Match`: RFC 9110 lets a request that appears already applied
    /// succeed). `If-Match` the device's version does not satisfy: 412.
    func deleteDevice(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let condition = try IfMatch.parse(context.request.head.headers)
        guard let id = DeviceID(rendered: context.parameters[0]) else {
            return .response(DeviceRoutes.flag("deleted", false))
        }
        return scope.command(.deleteDevice(id, ifMatch: condition)) { outcome in
            switch outcome {
            case .deleted(let deleted): DeviceRoutes.flag("deleted", deleted)
            default: DeviceRoutes.unexpectedOrRejected(outcome)
            }
        }
    }

    /// Renders a model rejection; any other outcome here is a broken
    /// invariant (a command answered with another command's outcome).
    static func unexpectedOrRejected(_ outcome: Outcome) -> HTTPResponse {
        guard case .rejected(let rejection) = outcome else { preconditionFailure("unexpected outcome \(outcome)") }
        return APIError(rejection).response
    }

    /// Returns the id of a path segment; a string this server did not mint is a
    /// device that does not exist (404 `device_not_found`).
    static func deviceID(_ segment: String) throws(APIError) -> DeviceID {
        guard let id = DeviceID(rendered: segment) else { throw APIError(RegistryRejection.deviceNotFound) }
        return id
    }

    /// Returns `{"NAME":true|false}`.
    static func flag(_ name: String, _ value: Bool) -> HTTPResponse {
        var writer = JSONWriter(reservingCapacity: 32)
        writer.beginObject()
        writer.member(name, value)
        writer.endObject()
        return jsonResponse(200, writer)
    }

    /// Returns `{"NAME":true|false,"devices_removed":N}` (erasures and removals).
    static func removal(_ name: String, _ value: Bool, devicesRemoved: Int) -> HTTPResponse {
        var writer = JSONWriter(reservingCapacity: 48)
        writer.beginObject()
        writer.member(name, value)
        writer.member("devices_removed", devicesRemoved)
        writer.endObject()
        return jsonResponse(200, writer)
    }
}

/// Every route of the native API (spec §4), for the service's router.
package struct NativeRoutes: Sendable {
    let catalog: Catalog
    let registry: Registry
    let exports: ExportSlots

    init(catalog: Catalog, registry: Registry, exports: ExportSlots) {
        self.catalog = catalog
        self.registry = registry
        self.exports = exports
    }

    package var routes: [Route] {
        DeviceRoutes(catalog: catalog, registry: registry, exports: exports).routes
            + PeopleRoutes(catalog: catalog).routes
            + ChangeFeedRoutes(catalog: catalog, registry: registry).routes
            + CredentialRoutes(catalog: catalog).routes + FeedbackRoutes(catalog: catalog).routes
            + StatsRoutes(catalog: catalog).routes
    }
}
