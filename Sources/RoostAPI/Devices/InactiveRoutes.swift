import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel

extension DeviceRoutes {
    /// `GET /v1/devices/inactive?older_than_days=N&limit=K` (`devices:read`):
    /// how many active devices of the key's app and mode were last seen more
    /// than N days ago, and the K oldest of them (oldest `last_seen_at` first,
    /// with tokens, as a list page). Changes nothing.
    ///
    /// Read in steps of `Limits.inactiveScanDevicesPerTurnMax` devices, one
    /// shard turn each (`InactiveScan`), so a large index never stalls its
    /// shard; the answer is therefore not a point-in-time view (a device
    /// registered between two steps may be counted or not). Already
    /// invalidated devices are not counted (decision 0052).
    func previewInactive(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let query = try InactiveQuery.parse(context.request.head.query)
        let cutoff = InactivityStep.cutoff(olderThanDays: query.olderThanDays, now: requestTime(context))
        let scan = InactiveScan(scope: scope, keep: query.limit)
        let first = InactivityStep(lastSeenBefore: cutoff)
        return .engine([scan.preview(first)], answer: scan.previewAnswer(first, found: .empty))
    }

    /// `POST /v1/devices/inactive/invalidate` (`devices:write`)
    /// `{"older_than_days":N}`: invalidates now, with reason `Inactive`, every
    /// active device of the key's app and mode last seen more than N days
    /// ago; answers `{"invalidated":N}` once every change is durable.
    ///
    /// The same bounded steps as the sweep, each its own shard turn and log
    /// append; the answer comes after the last. A log failure midway answers
    /// 503 and leaves the steps already acknowledged applied: the rule is
    /// idempotent, so a retry invalidates the rest (decision 0052).
    func invalidateInactive(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let body = try JSONBody(context.request)
        guard let days = try body.optionalInt("older_than_days") else {
            throw APIError.missingField("older_than_days")
        }
        guard Limits.inactiveAfterDaysRange.contains(days) else { throw InactiveQuery.daysOutOfRange }
        let now = requestTime(context)
        let scan = InactiveScan(scope: scope, keep: 1)
        let first = InactivityStep(lastSeenBefore: InactivityStep.cutoff(olderThanDays: days, now: now))
        return .engine([scan.invalidate(first, at: now)], answer: scan.invalidateAnswer(first, at: now, total: 0))
    }
}

/// The query of `GET /v1/devices/inactive`.
struct InactiveQuery: Equatable {
    var olderThanDays: Int
    var limit: Int

    static let daysOutOfRange = APIError.invalidField(
        "older_than_days",
        "older_than_days must be an integer from \(Limits.inactiveAfterDaysRange.lowerBound) to "
            + "\(Limits.inactiveAfterDaysRange.upperBound)")

    /// Parses `older_than_days` (required, 1 to 3,650) and `limit` (1 to
    /// 1,000, default 100); anything else, or a value out of range, is 400
    /// `invalid_field` naming the parameter (`missing_field` without N).
    static func parse(_ text: Substring?) throws(APIError) -> InactiveQuery {
        var days: Int?
        var limit = Limits.inactivePreviewLimitDefault
        for (name, value) in try QueryString.parse(text, parametersMax: 2) {
            switch name {
            case "older_than_days":
                guard let number = QueryString.smallDecimal(value), Limits.inactiveAfterDaysRange.contains(number)
                else {
                    throw daysOutOfRange
                }
                days = number
            case "limit":
                guard let number = QueryString.smallDecimal(value),
                    (1...Limits.inactivePreviewLimitMax).contains(number)
                else {
                    throw APIError.invalidField(
                        "limit", "limit must be an integer from 1 to \(Limits.inactivePreviewLimitMax)")
                }
                limit = number
            default:
                throw APIError.invalidField(String(name.prefix(64)), "unknown query parameter")
            }
        }
        guard let days else { throw APIError.missingField("older_than_days") }
        return InactiveQuery(olderThanDays: days, limit: limit)
    }
}

/// The oldest matches found so far and how many matched: merged step by step.
struct InactiveFound: Sendable {
    var count: Int
    var oldest: [Device]

    static let empty = InactiveFound(count: 0, oldest: [])

    /// Returns this merged with a step's slice, keeping the `keep` oldest
    /// (oldest `last_seen_at` first, ties by creation). O(keep log keep).
    func merged(_ slice: InactivePreviewSlice, keep: Int) -> InactiveFound {
        let all = (oldest + slice.oldest).sorted {
            ($0.lastSeenAt, $0.id.sequence) < ($1.lastSeenAt, $1.id.sequence)
        }
        return InactiveFound(count: count + slice.matched, oldest: Array(all.prefix(keep)))
    }
}

/// One preview or invalidation of an index in progress: a step per shard
/// turn, the next asked for from the previous one's answer on the request's
/// loop, so other requests of the shard run between steps.
struct InactiveScan: Sendable {
    let scope: IndexScope
    /// The preview's `limit`.
    let keep: Int

    func preview(_ step: InactivityStep) -> ShardWork {
        .index(scope.indexKey, settings: scope.settings, .previewInactive(step, keep: keep))
    }

    func invalidate(_ step: InactivityStep, at now: Timestamp) -> ShardWork {
        .index(scope.indexKey, settings: scope.settings, .invalidateInactive(step, at: now))
    }

    /// Merges a preview step's slice and asks for the next, or answers.
    func previewAnswer(_ step: InactivityStep, found: InactiveFound) -> EngineAnswer {
        EngineAnswer { outcomes, reply in
            guard let outcomes else { return reply.sink.send(APIError.logUnavailable.response) }
            guard case .inactivePreview(let slice) = outcomes[0] else {
                preconditionFailure("a preview step answered \(outcomes[0])")
            }
            let merged = found.merged(slice, keep: keep)
            guard let next = slice.next else { return reply.sink.send(InactiveScan.render(merged)) }
            let continued = step.continued(after: next)
            reply.submit([preview(continued)], answer: previewAnswer(continued, found: merged))
        }
    }

    /// Adds an invalidation step's count and asks for the next, or answers.
    func invalidateAnswer(_ step: InactivityStep, at now: Timestamp, total: Int) -> EngineAnswer {
        EngineAnswer { outcomes, reply in
            guard let outcomes else { return reply.sink.send(APIError.logUnavailable.response) }
            guard case .inactiveInvalidated(let slice) = outcomes[0] else {
                preconditionFailure("an invalidation step answered \(outcomes[0])")
            }
            let sum = total + slice.invalidated
            guard let next = slice.next else {
                var writer = JSONWriter(reservingCapacity: 32)
                writer.beginObject()
                writer.member("invalidated", sum)
                writer.endObject()
                return reply.sink.send(jsonResponse(200, writer))
            }
            let continued = step.continued(after: next)
            reply.submit([invalidate(continued, at: now)], answer: invalidateAnswer(continued, at: now, total: sum))
        }
    }

    /// `{"count":N,"devices":[device with token…]}`.
    static func render(_ found: InactiveFound) -> HTTPResponse {
        var estimate = 64
        for device in found.oldest { estimate += DeviceJSON.estimatedBytes(device) }
        var writer = JSONWriter(reservingCapacity: estimate)
        writer.beginObject()
        writer.member("count", found.count)
        writer.key("devices")
        writer.beginArray()
        for device in found.oldest { DeviceJSON.write(device, includeToken: true, into: &writer) }
        writer.endArray()
        writer.endObject()
        return jsonResponse(200, writer)
    }
}
