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

    /// `DELETE /v1/people/{external_id}` (`people:write`): erases the person and
    /// their devices, `{"erased":true,"devices_removed":N}`. An unknown person
    /// answers 200 `{"erased":false,"devices_removed":0}` (like a device delete:
    /// a retried erasure is not an error, and the outcome is the same).
    func erasePerson(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let externalID = try PeopleRoutes.externalID(context.parameters[0])
        return scope.command(.erasePerson(externalID)) { outcome in
            guard case .removed(let erased, let removed) = outcome else {
                return DeviceRoutes.unexpectedOrRejected(outcome)
            }
            return DeviceRoutes.removal("erased", erased, devicesRemoved: removed)
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
