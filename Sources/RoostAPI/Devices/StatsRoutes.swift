import RoostHTTP
import RoostJSON
import RoostModel

/// Spec §4 `GET /v1/stats` (`devices:read`): counts of the key's app and mode.
struct StatsRoutes: Sendable {
    let catalog: Catalog

    var routes: [Route] { [Route(.get, "/v1/stats", access: .secretKey(.devicesRead), outcome: stats)] }

    /// `{"devices":N,"active":N,"invalidated":N,"people":N,"by_platform":{"android":N,"ios":N}}`. O(1).
    func stats(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        return scope.command(.stats) { outcome in
            guard case .stats(let stats) = outcome else { return DeviceRoutes.unexpectedOrRejected(outcome) }
            var writer = JSONWriter(reservingCapacity: 128)
            writer.beginObject()
            writer.member("devices", stats.devices)
            writer.member("active", stats.active)
            writer.member("invalidated", stats.invalidated)
            writer.member("people", stats.people)
            writer.key("by_platform")
            writer.beginObject()
            for platform in Platform.allCases.sorted(by: { $0.name < $1.name }) {
                writer.member(platform.name, stats.byPlatform[platform] ?? 0)
            }
            writer.endObject()
            writer.endObject()
            return jsonResponse(200, writer)
        }
    }
}
