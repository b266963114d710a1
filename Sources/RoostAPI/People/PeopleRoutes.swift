import RoostCrypto
import RoostHTTP
import RoostJSON
import RoostModel

/// Spec §4 people: make a person known, read them with their devices, erase
/// them with their devices. The key's app and mode select the index.
struct PeopleRoutes: Sendable {
    let catalog: Catalog
    /// This run's cursor epoch: a `GET /v1/people` cursor of another run
    /// (before a restart) answers 410 `cursor_expired` (`PeopleCursor`).
    let cursorEpoch = PeopleCursor.newEpoch()

    var routes: [Route] {
        [
            Route(.get, "/v1/people", access: .secretKey(.devicesRead), outcome: listPeople),
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
        return scope.command(.getPerson(externalID)) { outcome, buffers in
            guard case .person(let found) = outcome else { return DeviceRoutes.unexpectedOrRejected(outcome) }
            var body: [UInt8] = []
            swap(&body, &buffers.body)
            var writer = JSONWriter(reusing: body, reservingCapacity: 128 + found.stored.count * 720)
            PeopleRoutes.writePerson(found.person, into: &writer, closing: false)
            writer.key("devices")
            writer.beginArray()
            found.stored.forEach { fields in DeviceJSON.write(fields, includeToken: true, into: &writer) }
            writer.endArray()
            writer.endObject()
            return jsonResponse(200, writer, reusing: &buffers.headers)
        }
    }

    /// `GET /v1/people/{external_id}/export` (`devices:read`): the data
    /// subject's copy (spec §10, GDPR Art. 15): `{"external_id","created_at",
    /// "devices":[…]}`, each device without its token but with
    /// `token_fingerprint` and `history` (newest first); 404 `person_not_found`.
    /// Streamed (decision 0081): one shard turn copies the person, their
    /// devices and histories (`PersonExport`, a frozen value), and the loop
    /// renders `PersonExportStream.windowDevices` devices at a time as the
    /// connection takes them; the bytes are those of the whole rendering.
    func exportPerson(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let externalID = try PeopleRoutes.externalID(context.parameters[0])
        return .engine(
            [.index(scope.indexKey, settings: scope.settings, .exportPerson(externalID))],
            answer: EngineAnswer { outcomes, reply in
                guard let outcomes else {
                    reply.sink.send(APIError.logUnavailable.response)
                    return
                }
                guard case .personExport(let export) = outcomes[0] else {
                    reply.sink.send(DeviceRoutes.unexpectedOrRejected(outcomes[0]))
                    return
                }
                let stream = reply.sink.startStream(status: 200, headers: PersonExportStream.headers)
                PersonExportStream(export: export).send(from: 0, to: stream)
            })
    }

    /// `DELETE /v1/people/{external_id}` (`people:write`): erases the person,
    /// their devices and those devices' histories,
    /// `{"erased":true,"devices_removed":N,"erased_at":…}` (`erased_at`: this
    /// request's time, spec §10, carried by the outcome so that a replay says
    /// the same). An unknown person answers 200
    /// `{"erased":false,"devices_removed":0,"erased_at":null}` (like a device
    /// delete: a retried erasure is not an error, and the outcome is the same;
    /// nothing was erased, so no time).
    func erasePerson(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let externalID = try PeopleRoutes.externalID(context.parameters[0])
        return scope.command(.erasePerson(externalID, at: requestTime(context))) { outcome in
            guard case .personErased(let erased, let removed, let erasedAt) = outcome else {
                return DeviceRoutes.unexpectedOrRejected(outcome)
            }
            var writer = JSONWriter(reservingCapacity: 96)
            writer.beginObject()
            writer.member("erased", erased)
            writer.member("devices_removed", removed)
            writer.member("erased_at", erasedAt?.rfc3339)
            writer.endObject()
            return jsonResponse(200, writer)
        }
    }

    /// `GET /v1/people?limit=N&cursor=…` (`devices:read`, spec §11): a page of
    /// the key's app and mode's people, `{"people":[{"external_id",
    /// "created_at","devices":N}],"next_cursor":"…"|null}`; `limit` 1 to
    /// `Limits.listLimitMax` (default `Limits.listLimitDefault`), null cursor
    /// at the end. The order is stable while the server runs (decision 0053).
    func listPeople(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        var limit = Limits.listLimitDefault
        var fromSlot: UInt32 = 0
        for (name, value) in try QueryString.parse(context.request.head.query, parametersMax: 2) {
            switch name {
            case "limit":
                guard let number = QueryString.smallDecimal(value), (1...Limits.listLimitMax).contains(number)
                else {
                    throw APIError.invalidField("limit", "limit must be an integer from 1 to \(Limits.listLimitMax)")
                }
                limit = number
            case "cursor":
                guard let cursor = PeopleCursor(encoded: value) else {
                    throw APIError.invalidField("cursor", "cursor is not one this server returned")
                }
                guard cursor.epoch == cursorEpoch else { throw PeopleCursor.expired }
                fromSlot = cursor.slot
            default:
                throw APIError.invalidField(String(name.prefix(64)), "unknown query parameter")
            }
        }
        let epoch = cursorEpoch
        return scope.command(.listPeople(fromSlot: fromSlot, limit: limit)) { outcome in
            guard case .peoplePage(let page) = outcome else { return DeviceRoutes.unexpectedOrRejected(outcome) }
            var writer = JSONWriter(reservingCapacity: 64 + page.people.count * 96)
            writer.beginObject()
            writer.key("people")
            writer.beginArray()
            for summary in page.people {
                PeopleRoutes.writePerson(summary.person, into: &writer, closing: false)
                writer.member("devices", summary.devices)
                writer.endObject()
            }
            writer.endArray()
            writer.member("next_cursor", page.nextSlot.map { PeopleCursor(epoch: epoch, slot: $0).encoded })
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
        DeviceJSON.writeTimestamp("created_at", person.createdAt, into: &writer)
        if closing { writer.endObject() }
    }
}

/// A position in `GET /v1/people`: the slot to go on from, and the run it
/// belongs to. Slots are positions in one run's memory: a restart packs them
/// anew, so a cursor of an earlier run answers 410 `cursor_expired` (start
/// again without one) instead of skipping or repeating people silently.
struct PeopleCursor: Equatable, Sendable {
    var epoch: UInt32
    var slot: UInt32

    private static let mask: UInt32 = 0x6A09_E667

    static let expired = APIError(
        status: 410, code: "cursor_expired",
        message: "the cursor is from before the server restarted; list again without a cursor")

    /// A random epoch for this run.
    static func newEpoch() -> UInt32 {
        Crypto.randomBytes(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
    }

    /// `p` + 16 hex digits (epoch, then the masked slot).
    var encoded: String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = [UInt8(ascii: "p")]
        for word in [epoch, slot ^ Self.mask] {
            for shift in stride(from: 28, through: 0, by: -4) { out.append(digits[Int((word >> UInt32(shift)) & 0xF)]) }
        }
        return String(decoding: out, as: UTF8.self)
    }

    init(epoch: UInt32, slot: UInt32) {
        self.epoch = epoch
        self.slot = slot
    }

    /// Parses `encoded`'s form; nil for anything else.
    init?(encoded text: String) {
        let utf8 = Array(text.utf8)
        guard utf8.count == 17, utf8[0] == UInt8(ascii: "p") else { return nil }
        var value: UInt64 = 0
        for c in utf8[1...] {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = value << 4 | UInt64(c - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): value = value << 4 | UInt64(c - UInt8(ascii: "a") + 10)
            default: return nil
            }
        }
        epoch = UInt32(truncatingIfNeeded: value >> 32)
        slot = UInt32(truncatingIfNeeded: value) ^ Self.mask
    }
}
