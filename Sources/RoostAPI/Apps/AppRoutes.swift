import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel

/// Spec §3: apps and keys. The operator manages every app; a secret key with
/// `setup:write` manages its own app (settings and keys); a test-mode one
/// manages its own mode's keys only and cannot change the app (decision 0072).
package struct AppRoutes: Sendable {
    let catalog: Catalog
    let registry: Registry

    package var routes: [Route] {
        [
            Route(.post, "/v1/apps", access: .operatorKey, outcome: createApp),
            Route(.get, "/v1/apps", access: .operatorKey, listApps),
            Route(.get, "/v1/apps/{app}", access: .setup, outcome: getApp),
            Route(.patch, "/v1/apps/{app}", access: .liveSetup, outcome: updateApp),
            Route(.delete, "/v1/apps/{app}", access: .operatorKey, outcome: deleteApp),
            Route(.post, "/v1/apps/{app}/keys", access: .setup, outcome: createKey),
            Route(.get, "/v1/apps/{app}/keys", access: .setup, outcome: listKeys),
            Route(.delete, "/v1/apps/{app}/keys/{key_id}", access: .setup, outcome: revokeKey),
        ]
    }

    // MARK: - Handlers

    func createApp(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let body = try JSONBody(context.request)
        let name = try AppRoutes.appName(body.requiredString("name"))
        let patch = try body.optionalObject("settings").map { (object) throws(APIError) in try SettingsPatch(object) }
        let (record, ticket) = try catalog.createApp(
            name: name, maxDevicesPerPerson: patch?.maxDevicesPerPerson,
            requireKnownPerson: patch?.requireKnownPerson, inactiveAfterDays: patch?.inactiveAfterDays)
        return .afterCommit(ticket) {
            var writer = JSONWriter()
            AppRoutes.writeApp(record, counts: nil, into: &writer)
            return jsonResponse(201, writer)
        }
    }

    func listApps(_ context: RequestContext) throws(APIError) -> HTTPResponse {
        var writer = JSONWriter(reservingCapacity: 1024)
        writer.beginObject()
        writer.key("apps")
        writer.beginArray()
        for app in catalog.apps() { AppRoutes.writeApp(app, counts: nil, into: &writer) }
        writer.endArray()
        writer.endObject()
        return jsonResponse(200, writer)
    }

    func getApp(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let app = try AppRoutes.appID(context.parameters[0])
        try context.principal.requireSetup(of: app)
        guard let record = catalog.acknowledgedApp(app) else { throw APIError.appNotFound }
        // A test key sees its own mode only (spec §4; issue 24 M-4).
        let modes = context.principal.keyMode.map { [$0] } ?? AppMode.allCases
        return withCounts(record, modes: modes)
    }

    func updateApp(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let app = try AppRoutes.appID(context.parameters[0])
        try context.principal.requireSetup(of: app)
        let body = try JSONBody(context.request)
        let name = try body.optionalString("name").map { (name) throws(APIError) in try AppRoutes.appName(name) }
        let patch = try body.optionalObject("settings").map { (object) throws(APIError) in try SettingsPatch(object) }
        // The catalog owns the settings: the indexes adopt them at their next turn, nothing else is logged.
        let (record, ticket) = try catalog.updateApp(
            app, name: name, maxDevicesPerPerson: patch?.maxDevicesPerPerson,
            requireKnownPerson: patch?.requireKnownPerson, inactiveAfterDays: patch?.inactiveAfterDays)
        return .afterCommit(ticket) {
            var writer = JSONWriter()
            AppRoutes.writeApp(record, counts: nil, into: &writer)
            return jsonResponse(200, writer)
        }
    }

    func deleteApp(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let app = try AppRoutes.appID(context.parameters[0])
        // The catalog first (logged before the shard's removal record): from
        // here on the app's keys answer 401, so no new device can arrive while
        // its data is dropped. A crash between the two records leaves data of
        // a deleted app, which start-up drops (RoostService.reconcile).
        let ticket = try catalog.deleteApp(app)
        return .engine(
            AppRoutes.work([.removeApp(app)], after: ticket),
            answer: .rendering { outcome in
                guard case .appRemoved(let removed) = outcome else {
                    preconditionFailure("removeApp answered \(outcome)")
                }
                return DeviceRoutes.removal("deleted", true, devicesRemoved: removed)
            })
    }

    /// Returns `work` followed, when the catalog change of `ticket` still
    /// waits for the log, by the wait for its LSN: the answer goes out only
    /// once both are acknowledged (503 when either cannot be). The catalog's
    /// record precedes the engine's in the log, so it is normally done first.
    static func work(_ work: [ShardWork], after ticket: CommitTicket?) -> EngineWork {
        guard case .pending(let lsn)? = ticket else { return EngineWork(work) }
        return EngineWork(work + [.awaitLog(lsn)])
    }

    /// Answers the app with its counts (keys and devices) in `modes`, read
    /// from those modes' indexes.
    private func withCounts(_ record: AppRecord, modes: [AppMode]) -> RouteOutcome {
        let keyCount = catalog.keyCount(of: record.id, onlyMode: modes.count == 1 ? modes[0] : nil)
        return perMode(record, .stats, modes: modes) { outcomes in
            let stats = outcomes.map { outcome -> RegistryStats in
                guard case .stats(let stats) = outcome else { preconditionFailure("stats answered \(outcome)") }
                return stats
            }
            var writer = JSONWriter()
            AppRoutes.writeApp(record, counts: (keyCount, Array(zip(modes, stats))), into: &writer)
            return jsonResponse(200, writer)
        }
    }

    /// Runs `command` on the indexes of `modes` (both by default, live first)
    /// and renders one answer from their outcomes, in that order, on the request's loop once
    /// every mutation (and `ticket`'s catalog change, when given) is durable
    /// (503 otherwise).
    private func perMode(
        _ record: AppRecord, _ command: Command, modes: [AppMode] = AppMode.allCases, after ticket: CommitTicket? = nil,
        render: @escaping @Sendable ([Outcome]) -> HTTPResponse
    ) -> RouteOutcome {
        let perMode: [ShardWork] = modes.map { mode in
            .index(IndexKey(app: record.id, mode: mode), settings: record.settings, command)
        }
        return .engine(
            AppRoutes.work(perMode, after: ticket),
            answer: EngineAnswer { outcomes, reply in
                let answer = outcomes.map { render(Array($0.prefix(perMode.count))) }
                reply.sink.send(answer ?? APIError.logUnavailable.response)
            })
    }

    func createKey(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let app = try AppRoutes.appID(context.parameters[0])
        try context.principal.requireSetup(of: app)
        let body = try JSONBody(context.request)
        let kindName = try body.requiredString("kind")
        guard let kind = KeyKind(rawValue: kindName) else {
            throw APIError.invalidField("kind", "kind must be \"secret\" or \"mobile\"")
        }
        // A test key stays in test mode (spec §4: the modes live apart): it makes
        // test keys only, and an omitted mode is its own.
        let callerMode = context.principal.keyMode
        let modeName = try body.optionalString("mode") ?? (callerMode ?? .live).name
        guard let mode = AppMode(name: modeName) else {
            throw APIError.invalidField("mode", "mode must be \"live\" or \"test\"")
        }
        if callerMode == .test && mode == .live {
            throw APIError(status: 403, code: "forbidden", message: "a test key makes test keys only")
        }
        var capabilities = Set<Capability>()
        for name in try body.optionalStringArray("capabilities") ?? [] {
            guard let capability = Capability(rawValue: name) else {
                throw APIError.invalidField("capabilities", "unknown capability \"\(name.prefix(64))\"")
            }
            capabilities.insert(capability)
        }
        if kind == .mobile && !capabilities.isEmpty {
            throw APIError.invalidField("capabilities", "a mobile key has no capabilities")
        }
        let label = try body.optionalString("label") ?? ""
        guard label.utf8.count <= KeyRecord.labelBytesMax else {
            throw APIError.invalidField("label", "label is longer than \(KeyRecord.labelBytesMax) bytes")
        }
        let rate = try body.optionalInt("rate_limit_per_second")
        if let rate, !(1...KeyRecord.rateLimitPerSecondMax).contains(rate) {
            throw APIError.invalidField(
                "rate_limit_per_second", "rate_limit_per_second must be 1 to \(KeyRecord.rateLimitPerSecondMax)")
        }
        let (record, key, ticket) = try catalog.createKey(
            app: app, kind: kind, mode: mode, capabilities: capabilities, label: label, rateLimitPerSecond: rate)
        return .afterCommit(ticket) { AppRoutes.renderNewKey(record, key: key) }
    }

    /// The answer to a key's creation: the only time the key itself is shown.
    private static func renderNewKey(_ record: KeyRecord, key: String) -> HTTPResponse {
        var writer = JSONWriter()
        writer.beginObject()
        writeKeyMembers(record, key: key, into: &writer)
        writer.endObject()
        return jsonResponse(201, writer)
    }

    /// `GET /v1/apps/{app}/keys` (spec §11): the app's live keys, oldest
    /// first, without the key or its digest; `last_used_at` null for a key
    /// never used. A test key sees test keys only (as for revocation); revoked
    /// keys are not listed (decision 0053). At most `CatalogLimits.keysPerAppMax`.
    func listKeys(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let app = try AppRoutes.appID(context.parameters[0])
        try context.principal.requireSetup(of: app)
        guard catalog.acknowledgedApp(app) != nil else { throw APIError.appNotFound }
        let keys = catalog.keys(of: app, onlyMode: context.principal.keyMode == .test ? .test : nil)
        var writer = JSONWriter(reservingCapacity: 64 + keys.count * 256)
        writer.beginObject()
        writer.key("keys")
        writer.beginArray()
        for (record, lastUsed) in keys {
            writer.beginObject()
            AppRoutes.writeKeyMembers(record, into: &writer)
            writer.member("last_used_at", lastUsed.map { Timestamp(millisecondsSinceEpoch: $0).rfc3339 })
            writer.endObject()
        }
        writer.endArray()
        writer.endObject()
        return .response(jsonResponse(200, writer))
    }

    /// Writes a key's public members: `id`, `kind`, `mode`, `capabilities`,
    /// `label`, `rate_limit_per_second` (when set), `created_at`; the key
    /// itself after `id` only when given (its creation). Never the digest.
    private static func writeKeyMembers(_ record: KeyRecord, key: String? = nil, into writer: inout JSONWriter) {
        writer.member("id", record.id)
        if let key { writer.member("key", key) }
        writer.member("kind", record.kind.rawValue)
        writer.member("mode", record.mode.name)
        writer.key("capabilities")
        writer.beginArray()
        for capability in record.capabilities.sorted() { writer.string(capability.rawValue) }
        writer.endArray()
        writer.member("label", record.label)
        if let rate = record.rateLimitPerSecond { writer.member("rate_limit_per_second", rate) }
        writer.member("created_at", Timestamp(millisecondsSinceEpoch: record.createdAtMilliseconds).rfc3339)
    }

    func revokeKey(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let app = try AppRoutes.appID(context.parameters[0])
        try context.principal.requireSetup(of: app)
        guard catalog.app(app) != nil else { throw APIError.appNotFound }
        // A test key sees no live key: revoking one answers as for an unknown id.
        let ticket = try catalog.revokeKey(
            app: app, keyID: context.parameters[1], onlyMode: context.principal.keyMode == .test ? .test : nil)
        return .afterCommit(ticket) { DeviceRoutes.flag("revoked", true) }
    }

    // MARK: - Rendering

    /// Writes an app; with counts, the keys and each given mode's devices and
    /// people (the totals are over those modes).
    static func writeApp(
        _ app: AppRecord, counts: (keys: Int, stats: [(AppMode, RegistryStats)])?, into writer: inout JSONWriter
    ) {
        writer.beginObject()
        writer.member("id", Int(app.id.rawValue))
        writer.member("name", app.name)
        writer.member("created_at", Timestamp(millisecondsSinceEpoch: app.createdAtMilliseconds).rfc3339)
        writer.key("settings")
        writer.beginObject()
        writer.member("max_devices_per_person", app.settings.maxDevicesPerPerson)
        writer.member("require_known_person", app.settings.requireKnownPerson)
        if let days = app.settings.inactiveAfterDays {
            writer.member("inactive_after_days", days)
        } else {
            writer.key("inactive_after_days")
            writer.null()
        }
        writer.endObject()
        if let counts {
            writer.key("counts")
            writer.beginObject()
            writer.member("keys", counts.keys)
            writer.member("devices", counts.stats.reduce(0) { $0 + $1.1.devices })
            writer.member("people", counts.stats.reduce(0) { $0 + $1.1.people })
            for (mode, stats) in counts.stats {
                writer.key(mode.name)
                writer.beginObject()
                writer.member("devices", stats.devices)
                writer.member("people", stats.people)
                writer.endObject()
            }
            writer.endObject()
        }
        writer.endObject()
    }

    // MARK: - Validation

    /// Returns the app id of a path segment; anything but a positive integer is
    /// an app that does not exist.
    static func appID(_ segment: String) throws(APIError) -> AppID {
        guard segment.utf8.count <= 10, segment.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }),
            let value = UInt32(segment), value > 0
        else { throw APIError.appNotFound }
        return AppID(value)
    }

    static func appName(_ name: String) throws(APIError) -> String {
        guard !name.isEmpty, name.utf8.count <= AppRecord.nameBytesMax else {
            throw APIError.invalidField("name", "name must be 1 to \(AppRecord.nameBytesMax) bytes")
        }
        guard !name.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            throw APIError.invalidField("name", "name must not contain control characters")
        }
        return name
    }
}

/// The `settings` object of an app create or patch.
struct SettingsPatch {
    var maxDevicesPerPerson: Int?
    var requireKnownPerson: Bool?
    /// nil: not in the patch; `.some(nil)`: `null`, the sweep is off (spec §8).
    var inactiveAfterDays: Int??

    init(_ members: [(key: String, value: JSONValue)]) throws(APIError) {
        for (key, value) in members {
            switch key {
            case "max_devices_per_person":
                guard let number = value.intValue, Limits.maxDevicesPerPersonRange.contains(number) else {
                    throw APIError.invalidField(
                        "settings.max_devices_per_person",
                        "max_devices_per_person must be an integer from 1 to \(AppSettings.maxDevicesPerPersonLimit)")
                }
                maxDevicesPerPerson = number
            case "require_known_person":
                guard let flag = value.boolValue else {
                    throw APIError.invalidField(
                        "settings.require_known_person", "require_known_person must be a boolean")
                }
                requireKnownPerson = flag
            case "inactive_after_days":
                if value.isNull {
                    inactiveAfterDays = .some(nil)
                    continue
                }
                guard let days = value.intValue, Limits.inactiveAfterDaysRange.contains(days) else {
                    throw APIError.invalidField(
                        "settings.inactive_after_days",
                        "inactive_after_days must be null or an integer from \(Limits.inactiveAfterDaysRange.lowerBound)"
                            + " to \(Limits.inactiveAfterDaysRange.upperBound)")
                }
                inactiveAfterDays = .some(days)
            default:
                throw APIError.invalidField("settings.\(key.prefix(64))", "unknown setting \"\(key.prefix(64))\"")
            }
        }
    }
}

extension APIError {
    /// A test key's `PATCH /v1/apps/{app}`: the app's name and settings govern
    /// live devices, so only live keys and the operator change them (decision 0072).
    static let testKeyCannotChangeApp = APIError(
        status: 403, code: "forbidden",
        message: "a test key cannot change the app: its name and settings govern live devices; use a live key")
}
