import RoostHTTP
import RoostJSON
import RoostModel

extension DeviceRoutes {
    /// The largest body of `POST /v1/devices/batch`: 1,000 register bodies of
    /// up to 4 KiB each (a device's tags are at most 4,096 bytes, its other
    /// members a few hundred). Above it: 413 `payload_too_large`.
    static let batchBodyBytesMax = 4 * 1024 * 1024

    /// `POST /v1/devices/batch` (secret key, `devices:write`, spec §7):
    /// `{"devices":[<register body>, …]}` with 1 to `DeviceBatch.itemsMax`
    /// items → 200 `{"results":[…]}`, one result per item in order: the
    /// status and device a single `POST /v1/devices` would answer (201 new,
    /// 200 existing), or the status and error object it would answer.
    ///
    /// An item the API refuses (not an object, a bad member) never reaches
    /// the model; the others go to the index's shard as one command, applied
    /// in order in one turn and logged in that turn's one append, so the
    /// whole batch costs one fsync and is answered once every applied item is
    /// durable (a read-only batch, every item refused, is answered at once).
    func registerBatch(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let items = try DeviceRoutes.batchItems(JSONBody(context.request))
        var requests: [RegisterRequest] = []
        requests.reserveCapacity(items.count)
        // Per item: the API's refusal, or nil for the next model outcome.
        var refusals: [APIError?] = []
        refusals.reserveCapacity(items.count)
        for item in items {
            do throws(APIError) {
                guard item.objectMembers != nil else {
                    throw APIError.invalidField("devices", "each item of devices must be a register body object")
                }
                requests.append(try RegisterBody.parse(item))
                refusals.append(nil)
            } catch {
                refusals.append(error)
            }
        }
        guard !requests.isEmpty else { return .response(DeviceRoutes.batchResponse(refusals, outcomes: [])) }
        let (itemRefusals, applied) = (refusals, requests.count)
        return scope.command(.registerBatch(requests, at: requestTime(context))) { outcome in
            guard case .batch(let outcomes) = outcome, outcomes.count == applied else {
                preconditionFailure("a batch of \(applied) answered \(outcome)")
            }
            return DeviceRoutes.batchResponse(itemRefusals, outcomes: outcomes)
        }
    }

    /// Returns the items of a batch body: 400 `missing_field` without
    /// `devices`, 400 `invalid_field` for anything but an array of 1 or more
    /// items, 400 `batch_too_large` above `DeviceBatch.itemsMax`.
    static func batchItems(_ body: JSONBody) throws(APIError) -> [JSONValue] {
        guard let value = body.value["devices"], value != .null else { throw APIError.missingField("devices") }
        guard case .array(let items) = value else {
            throw APIError.invalidField("devices", "devices must be an array of register bodies")
        }
        guard !items.isEmpty else {
            throw APIError.invalidField("devices", "devices must hold 1 to \(DeviceBatch.itemsMax) register bodies")
        }
        guard items.count <= DeviceBatch.itemsMax else {
            throw APIError(
                status: 400, code: "batch_too_large",
                message: "a batch holds at most \(DeviceBatch.itemsMax) devices, this one \(items.count)",
                field: "devices")
        }
        return items
    }

    /// Returns the 200 answer of a batch: for each item, its refusal or the
    /// next model outcome (in order).
    static func batchResponse(_ refusals: [APIError?], outcomes: [Outcome]) -> HTTPResponse {
        var writer = JSONWriter(reservingCapacity: 64 + 800 * refusals.count)
        var next = outcomes.makeIterator()
        var used = 0
        writer.beginObject()
        writer.key("results")
        writer.beginArray()
        for refusal in refusals {
            writer.beginObject()
            if let refusal {
                writeItemError(refusal, into: &writer)
            } else {
                used += 1
                switch next.next() {
                case .registered(let registered)?:
                    writer.member("status", registered.created ? 201 : 200)
                    writer.key("device")
                    DeviceJSON.write(registered.device, includeToken: false, into: &writer)
                case .rejected(let rejection)?:
                    writeItemError(APIError(rejection), into: &writer)
                case let other:
                    preconditionFailure("a batch item answered \(String(describing: other))")
                }
            }
            writer.endObject()
        }
        writer.endArray()
        writer.endObject()
        precondition(used == outcomes.count, "a batch answered \(outcomes.count) outcomes for \(used) items")
        return jsonResponse(200, writer)
    }

    /// Writes `"status":N,"error":{…}` as the envelope of a single request would hold it.
    private static func writeItemError(_ error: APIError, into writer: inout JSONWriter) {
        writer.member("status", error.status)
        writer.key("error")
        writer.beginObject()
        writer.member("code", error.code)
        writer.member("message", error.message)
        if let field = error.field { writer.member("field", field) }
        writer.endObject()
    }
}
