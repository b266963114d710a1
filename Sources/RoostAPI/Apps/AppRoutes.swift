import RoostHTTP
import RoostJSON
import RoostModel

/// Spec §3: apps and keys. The operator manages every app; a secret key with
/// `setup:write` manages its own app (settings and keys).
package struct AppRoutes: Sendable {
    let catalog: Catalog
    let authenticator: Authenticator

    package var routes: [Route] {
        [
            Route(.post, "/v1/apps", createApp),
            Route(.get, "/v1/apps", listApps),
            Route(.get, "/v1/apps/{app}", getApp),
            Route(.patch, "/v1/apps/{app}", updateApp),
            Route(.delete, "/v1/apps/{app}", deleteApp),
            Route(.post, "/v1/apps/{app}/keys", createKey),
            Route(.delete, "/v1/apps/{app}/keys/{key_id}", revokeKey),
        ]
    }

    // MARK: - Handlers

    func createApp(_ context: RequestContext) throws(APIError) -> HTTPResponse {
        try authenticator.authenticate(context.request.head).requireOperator()
        let body = try JSONBody(context.request)
        let name = try AppRoutes.appName(body.requiredString("name"))
        var record = try catalog.createApp(name: name)
        if let settings = try body.optionalObject("settings") {
            let patch = try SettingsPatch(settings)
            record = try catalog.updateApp(
                record.id, name: nil, maxDevicesPerPerson: patch.maxDevicesPerPerson,
                requireKnownPerson: patch.requireKnownPerson)
        }
        return jsonResponse(201, appJSON(record, withCounts: false))
    }

    func listApps(_ context: RequestContext) throws(APIError) -> HTTPResponse {
        try authenticator.authenticate(context.request.head).requireOperator()
        var writer = JSONWriter(reservingCapacity: 1024)
        writer.beginObject()
        writer.key("apps")
        writer.beginArray()
        for app in catalog.apps() { writeApp(app, withCounts: false, into: &writer) }
        writer.endArray()
        writer.endObject()
        return jsonResponse(200, writer)
    }

    func getApp(_ context: RequestContext) throws(APIError) -> HTTPResponse {
        let app = try AppRoutes.appID(context.parameters[0])
        try authenticator.authenticate(context.request.head).requireSetup(of: app)
        guard let record = catalog.app(app) else { throw APIError.appNotFound }
        return jsonResponse(200, appJSON(record, withCounts: true))
    }

    func updateApp(_ context: RequestContext) throws(APIError) -> HTTPResponse {
        let app = try AppRoutes.appID(context.parameters[0])
        try authenticator.authenticate(context.request.head).requireSetup(of: app)
        let body = try JSONBody(context.request)
        let name = try body.optionalString("name").map { (name) throws(APIError) in try AppRoutes.appName(name) }
        let patch = try body.optionalObject("settings").map { (object) throws(APIError) in try SettingsPatch(object) }
        let record = try catalog.updateApp(
            app, name: name, maxDevicesPerPerson: patch?.maxDevicesPerPerson,
            requireKnownPerson: patch?.requireKnownPerson)
        return jsonResponse(200, appJSON(record, withCounts: true))
    }

    func deleteApp(_ context: RequestContext) throws(APIError) -> HTTPResponse {
        let app = try AppRoutes.appID(context.parameters[0])
        try authenticator.authenticate(context.request.head).requireOperator()
        try catalog.deleteApp(app)
        var writer = JSONWriter()
        writer.beginObject()
        writer.member("deleted", true)
        // No device store exists yet in this build: an app holds no devices.
        writer.member("devices_removed", 0)
        writer.endObject()
        return jsonResponse(200, writer)
    }

    func createKey(_ context: RequestContext) throws(APIError) -> HTTPResponse {
        let app = try AppRoutes.appID(context.parameters[0])
        try authenticator.authenticate(context.request.head).requireSetup(of: app)
        let body = try JSONBody(context.request)
        let kindName = try body.requiredString("kind")
        guard let kind = KeyKind(rawValue: kindName) else {
            throw APIError.invalidField("kind", "kind must be \"secret\" or \"mobile\"")
        }
        let modeName = try body.optionalString("mode") ?? KeyMode.live.rawValue
        guard let mode = KeyMode(rawValue: modeName) else {
            throw APIError.invalidField("mode", "mode must be \"live\" or \"test\"")
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
        let (record, key) = try catalog.createKey(
            app: app, kind: kind, mode: mode, capabilities: capabilities, label: label, rateLimitPerSecond: rate)
        var writer = JSONWriter()
        writer.beginObject()
        writer.member("id", record.id)
        writer.member("key", key)
        writer.member("kind", record.kind.rawValue)
        writer.member("mode", record.mode.rawValue)
        writer.key("capabilities")
        writer.beginArray()
        for capability in record.capabilities.sorted() { writer.string(capability.rawValue) }
        writer.endArray()
        writer.member("label", record.label)
        if let rate = record.rateLimitPerSecond { writer.member("rate_limit_per_second", rate) }
        writer.member("created_at", formatTimestamp(milliseconds: record.createdAtMilliseconds))
        writer.endObject()
        return jsonResponse(201, writer)
    }

    func revokeKey(_ context: RequestContext) throws(APIError) -> HTTPResponse {
        let app = try AppRoutes.appID(context.parameters[0])
        try authenticator.authenticate(context.request.head).requireSetup(of: app)
        guard catalog.app(app) != nil else { throw APIError.appNotFound }
        try catalog.revokeKey(app: app, keyID: context.parameters[1])
        var writer = JSONWriter()
        writer.beginObject()
        writer.member("revoked", true)
        writer.endObject()
        return jsonResponse(200, writer)
    }

    // MARK: - Rendering

    private func appJSON(_ app: AppRecord, withCounts: Bool) -> JSONWriter {
        var writer = JSONWriter()
        writeApp(app, withCounts: withCounts, into: &writer)
        return writer
    }

    private func writeApp(_ app: AppRecord, withCounts: Bool, into writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("id", Int(app.id.rawValue))
        writer.member("name", app.name)
        writer.member("created_at", formatTimestamp(milliseconds: app.createdAtMilliseconds))
        writer.key("settings")
        writer.beginObject()
        writer.member("max_devices_per_person", app.settings.maxDevicesPerPerson)
        writer.member("require_known_person", app.settings.requireKnownPerson)
        writer.endObject()
        if withCounts {
            writer.key("counts")
            writer.beginObject()
            writer.member("keys", catalog.keyCount(of: app.id))
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

    init(_ members: [(key: String, value: JSONValue)]) throws(APIError) {
        for (key, value) in members {
            switch key {
            case "max_devices_per_person":
                guard let number = value.intValue, (1...AppSettings.maxDevicesPerPersonLimit).contains(number) else {
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
            default:
                throw APIError.invalidField("settings.\(key.prefix(64))", "unknown setting \"\(key.prefix(64))\"")
            }
        }
    }
}
