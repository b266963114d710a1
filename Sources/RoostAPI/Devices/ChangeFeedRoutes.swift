import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel

/// Spec §9 `GET /v1/changes`: the key's app and mode's device changes in
/// commit order, each device once at its latest change, deletions as
/// tombstones, from a cursor (docs/api.md "Change feed", decision 0062).
struct ChangeFeedRoutes: Sendable {
    let catalog: Catalog
    let registry: Registry

    /// The longest `wait_ms` (spec §9).
    static let waitMillisecondsMax = 30_000

    static let expired = APIError(
        status: 410, code: "cursor_expired",
        message: "changes after this cursor are no longer retained; export again (GET /v1/devices/export) "
            + "and follow from its Roost-Cursor")
    static let foreign = APIError(
        status: 410, code: "cursor_expired",
        message: "the cursor is past every change this server's feed holds (another server's or an older "
            + "data directory's); export again and follow from its Roost-Cursor")

    var routes: [Route] {
        [Route(.get, "/v1/changes", access: .secretKey(.devicesRead), outcome: changes)]
    }

    /// `GET /v1/changes?after=CURSOR&limit=N&wait_ms=M` (`devices:read`):
    /// `{"changes":[…],"next_cursor":"…"}`. With nothing after the cursor
    /// and `wait_ms` > 0 the shard holds the request until a change of the
    /// index is recorded (then answered once it is durable) or the time is
    /// up (answered with an empty list); a timer task makes the shard turn
    /// at that time.
    func changes(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        var after: UInt64? = nil
        var limit = Limits.listLimitDefault
        var waitMilliseconds = 0
        for (name, value) in try QueryString.parse(context.request.head.query, parametersMax: 3) {
            switch name {
            case "after":
                guard let cursor = ChangeCursor.decode(value) else {
                    throw APIError.invalidField("after", "after is not a cursor this server returned")
                }
                after = cursor
            case "limit":
                // Spec §9's page: "≤ 1,000 (default 100)", the list routes' limit.
                guard let number = QueryString.smallDecimal(value), (1...Limits.listLimitMax).contains(number) else {
                    throw APIError.invalidField("limit", "limit must be an integer from 1 to \(Limits.listLimitMax)")
                }
                limit = number
            case "wait_ms":
                guard let number = QueryString.smallDecimal(value), (0...Self.waitMillisecondsMax).contains(number)
                else {
                    throw APIError.invalidField(
                        "wait_ms", "wait_ms must be an integer from 0 to \(Self.waitMillisecondsMax)")
                }
                waitMilliseconds = number
            default:
                throw APIError.invalidField(String(name.prefix(64)), "unknown query parameter")
            }
        }
        return scope.command(.changes(after: after, limit: limit, wait: .milliseconds(waitMilliseconds))) { outcome in
            guard case .changes(let result) = outcome else { return DeviceRoutes.unexpectedOrRejected(outcome) }
            switch result {
            case .failure(.expired): return Self.expired.response
            case .failure(.ahead): return Self.foreign.response
            case .success(let page): return Self.render(page)
            }
        }
    }

    /// The page as spec §9 writes it: devices with their tokens.
    static func render(_ page: ChangesPage) -> HTTPResponse {
        var writer = JSONWriter(reservingCapacity: 64 + page.changes.count * 760)
        writer.beginObject()
        writer.key("changes")
        writer.beginArray()
        for change in page.changes {
            writer.beginObject()
            writer.member("cursor", ChangeCursor.encode(change.position))
            switch change {
            case .upsert(_, let at, let device):
                writer.member("at", at.rfc3339)
                writer.member("op", "upsert")
                writer.key("device")
                DeviceJSON.write(device, includeToken: true, into: &writer)
            case .delete(_, let at, let id):
                writer.member("at", at.rfc3339)
                writer.member("op", "delete")
                writer.member("id", id.rendered)
            }
            writer.endObject()
        }
        writer.endArray()
        writer.member("next_cursor", ChangeCursor.encode(page.next))
        writer.endObject()
        return jsonResponse(200, writer)
    }
}

/// The text form of a change-feed position (an LSN): `c` and 16 lower-case
/// hex digits. Opaque to clients; the same position in every run of the
/// server over the same data directory.
enum ChangeCursor {
    private static let digits = Array("0123456789abcdef".utf8)

    static func encode(_ position: UInt64) -> String {
        var bytes: [UInt8] = [UInt8(ascii: "c")]
        for shift in stride(from: 60, through: 0, by: -4) {
            bytes.append(digits[Int((position >> UInt64(shift)) & 0xF)])
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The position of `encode`'s form; nil for anything else.
    static func decode<Text: StringProtocol>(_ text: Text) -> UInt64? {
        let utf8 = Array(text.utf8)
        guard utf8.count == 17, utf8[0] == UInt8(ascii: "c") else { return nil }
        var value: UInt64 = 0
        for byte in utf8[1...] {
            // Lower-case only: the form `encode` writes, so one position has one cursor.
            guard !(UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte), let digit = Hex.digitValue(byte) else {
                return nil
            }
            value = value << 4 | UInt64(digit)
        }
        return value
    }
}
