import RoostHTTP
import RoostJSON
import RoostModel

/// Spec §4 people: make a person known, read them with their devices, erase
/// them with their devices. The key's app and mode select the index.
struct PeopleRoutes: Sendable {
    let catalog: Catalog

    var routes: [Route] {
        [
            Route(.put, "/v1/people/{external_id}", access: .secretKey(.peopleWrite), outcome: putPerson),
            Route(.get, "/v1/people/{external_id}", access: .secretKey(.devicesRead), outcome: getPerson),
            Route(
                .get, "/v1/people/{external_id}/export", access: .secretKey(.devicesRead), outcome: exportPerson),
            Route(.delete, "/v1/people/{external_id}", access: .secretKey(.peopleWrite), outcome: erasePerson),
        ]
    }

    /// `PUT /v1/people/{external_id}` (`people:write`): 201 when the person is
    /// new, 200 when already known; `{"external_id","created_at"}`. No body needed.
    func putPerson(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let externalID = try PeopleRoutes.externalID(context.parameters[0])
        let now = requestTime(context)
        return scope.command(.putPerson(externalID, at: now)) { outcome in
            guard case .personPut(let person, let created) = outcome else {
                return DeviceRoutes.unexpectedOrRejected(outcome)
            }
            var writer = JSONWriter(reservingCapacity: 128)
            PeopleRoutes.writePerson(person, into: &writer, closing: true)
            return jsonResponse(created ? 201 : 200, writer)
        }
    }

    /// `GET /v1/people/{external_id}` (`devices:read`): the person and their
    /// devices (with tokens, in creation order); 404 `person_not_found`.
    func getPerson(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let externalID = try PeopleRoutes.externalID(context.parameters[0])
        return scope.command(.getPerson(externalID)) { outcome in
            guard case .person(let found) = outcome else { return DeviceRoutes.unexpectedOrRejected(outcome) }
            var writer = JSONWriter(reservingCapacity: 128 + found.devices.count * 720)
            PeopleRoutes.writePerson(found.person, into: &writer, closing: false)
            writer.key("devices")
            writer.beginArray()
            for device in found.devices { DeviceJSON.write(device, includeToken: true, into: &writer) }
            writer.endArray()
            writer.endObject()
            return jsonResponse(200, writer)
        }
    }

    /// `GET /v1/people/{external_id}/export` (`devices:read`): the data
    /// subject's copy (spec §10, GDPR Art. 15): `{"external_id","created_at",
    /// "devices":[…]}`, each device without its token but with
    /// `token_fingerprint` and `history` (newest first); 404 `person_not_found`.
    func exportPerson(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let externalID = try PeopleRoutes.externalID(context.parameters[0])
        return scope.command(.exportPerson(externalID)) { outcome in
            guard case .personExport(let export) = outcome else { return DeviceRoutes.unexpectedOrRejected(outcome) }
            var capacity = 128
            for entry in export.devices {
                capacity +=
                    DeviceJSON.estimatedBytes(entry.device) + entry.history.count * HistoryJSON.eventBytesEstimate
            }
            var writer = JSONWriter(reservingCapacity: capacity)
            PeopleRoutes.writePerson(export.person, into: &writer, closing: false)
            writer.key("devices")
            writer.beginArray()
            for entry in export.devices {
                DeviceJSON.write(entry.device, includeToken: false, into: &writer, closing: false)
                writer.member("token_fingerprint", entry.device.token.map { TokenFingerprint($0).rendered })
                writer.key("history")
                HistoryJSON.write(entry.history, into: &writer)
                writer.endObject()
            }
            writer.endArray()
            writer.endObject()
            return jsonResponse(200, writer)
        }
    }

    /// `DELETE /v1/people/{external_id}` (`people:write`): erases the person,
    /// their devices and those devices' histories,
    /// `{"erased":true,"devices_removed":N,"erased_at":…}` (`erased_at`: this
    /// request's time, spec §10). An unknown person answers 200
    /// `{"erased":false,"devices_removed":0,"erased_at":null}` (like a device
    /// delete: a retried erasure is not an error, and the outcome is the same;
    /// nothing was erased, so no time).
    func erasePerson(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let externalID = try PeopleRoutes.externalID(context.parameters[0])
        let now = requestTime(context)
        return scope.command(.erasePerson(externalID)) { outcome in
            guard case .removed(let erased, let removed) = outcome else {
                return DeviceRoutes.unexpectedOrRejected(outcome)
            }
            var writer = JSONWriter(reservingCapacity: 96)
            writer.beginObject()
            writer.member("erased", erased)
            writer.member("devices_removed", removed)
            writer.member("erased_at", erased ? now.rfc3339 : nil)
            writer.endObject()
            return jsonResponse(200, writer)
        }
    }

    /// Returns the external id of a path segment (1 to 256 characters, else
    /// 400 `invalid_field` `external_id`).
    static func externalID(_ segment: String) throws(APIError) -> ExternalID {
        do throws(RegistryRejection) {
            return try ExternalID(segment)
        } catch {
            throw APIError(error)
        }
    }

    /// Writes `{"external_id":…,"created_at":…`, closing the object when asked.
    static func writePerson(_ person: Person, into writer: inout JSONWriter, closing: Bool) {
        writer.beginObject()
        writer.member("external_id", person.externalID.rawValue)
        writer.member("created_at", person.createdAt.rfc3339)
        if closing { writer.endObject() }
    }
}
