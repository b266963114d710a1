import RoostJSON
import RoostTesting

/// Part of `roost-bench selftest-load`: drives `MixedWorkload` against a small
/// reference registry (the rules of spec §4–6 the workload relies on: one
/// device per token, per installation, moves, deletes) in every dialect, and
/// checks that every answer is one the workload expects, that a person never
/// holds more devices than `WorkloadShape.devicesPerPersonMax` (so the
/// server's eviction never interferes), and that a wrong status is caught.
enum WorkloadSelfTest {
    /// A device of the reference registry.
    private struct Device {
        var token: String
        var installation: String?
        var person: String
    }

    /// The reference: devices by id, indexes by token and installation.
    private struct Reference {
        var devices: [String: Device] = [:]
        var byToken: [String: String] = [:]
        var byInstallation: [String: String] = [:]
        var nextID = 0
        /// Set to answer 201 for a known device once (the negative check).
        var lieOnce = false

        mutating func register(token: String, installation: String?, person: String) -> (Int, String) {
            var id = installation.flatMap { byInstallation[$0] } ?? byToken[token]
            var status = 200
            if id == nil {
                id = "dev_\(nextID)"
                nextID += 1
                status = 201
            }
            let deviceID = id!
            if let old = devices[deviceID], old.token != token { byToken[old.token] = nil }
            if let holder = byToken[token], holder != deviceID { remove(holder) }
            devices[deviceID] = Device(token: token, installation: installation, person: person)
            byToken[token] = deviceID
            if let installation { byInstallation[installation] = deviceID }
            if lieOnce && status == 200 {
                lieOnce = false
                status = 201
            }
            return (status, deviceID)
        }

        mutating func remove(_ id: String) {
            guard let device = devices.removeValue(forKey: id) else { return }
            byToken[device.token] = nil
            if let installation = device.installation { byInstallation[installation] = nil }
        }

        func devicesPerPersonMax() -> Int {
            var counts: [String: Int] = [:]
            for device in devices.values { counts[device.person, default: 0] += 1 }
            return counts.values.max() ?? 0
        }
    }

    /// Requests per dialect and start (each answered by the reference).
    static let steps = 4_000

    static func run() -> [String] {
        var failures: [String] = []
        for dialect in Dialect.allCases {
            for fresh in [true, false] {
                failures += drive(dialect: dialect, freshApp: fresh, lie: false)
            }
        }
        // The check can fail: a 201 for a known device must be counted unexpected.
        let caught = drive(dialect: .native, freshApp: true, lie: true)
        if caught.count != 1 || !caught[0].contains("unexpected") {
            failures.append("a lying server was not caught exactly once: \(caught)")
        }
        return failures
    }

    private static func drive(dialect: Dialect, freshApp: Bool, lie: Bool) -> [String] {
        var shape = WorkloadShape()
        shape.dialect = dialect
        shape.mix = .standard
        shape.tokens = 2_000
        shape.people = 300
        shape.androidPercent = dialect.hasAndroid ? 40 : 0
        shape.tags = dialect.hasTags ? 2 : 0
        shape.port = 8080
        shape.key = "key"
        shape.appID = 1
        shape.freshApp = freshApp
        shape.identityTokens = (0..<shape.people).map { "identity_user_\($0)" }
        var reference = Reference()
        if !freshApp {
            // Devices from an earlier run the workload does not know about.
            for index in stride(from: 0, to: shape.tokens, by: 7) {
                var bytes: [UInt8] = []
                if shape.isAndroid(index) { bytes += "fcm_".utf8 }
                RequestBytes.appendTokenHex(index: index, generation: 0, to: &bytes)
                _ = reference.register(
                    token: String(decoding: bytes, as: UTF8.self),
                    installation: shape.namesInstallations ? "inst_\(index)" : nil, person: "user_\(index % 300)")
            }
        }
        var workload = MixedWorkload(shape: shape, thread: 0)
        var random = SeededRandom(seed: 7)
        var request: [UInt8] = []
        var failures: [String] = []
        let name = "\(dialect.rawValue)\(freshApp ? " fresh" : " unknown")"
        for step in 0..<steps {
            if lie && step == steps / 2 { reference.lieOnce = true }
            guard let ticket = workload.next(into: &request, random: &random) else {
                failures.append("\(name): no request at step \(step) with nothing in flight")
                break
            }
            let (status, body) = answer(request, dialect: dialect, reference: &reference)
            let expected = Array(body.utf8).withUnsafeBytes { workload.answered(ticket, status: status, body: $0) }
            if !expected {
                failures.append(
                    "\(name): step \(step): \(LoadOperation(rawValue: ticket.operation)!.name) answered \(status), "
                        + "unexpected for the workload")
                if failures.count > 5 { break }
            }
        }
        let perPerson = reference.devicesPerPersonMax()
        if dialect != .barua && perPerson > shape.devicesPerPersonMax {
            failures.append("\(name): a person holds \(perPerson) devices, above \(shape.devicesPerPersonMax)")
        }
        if workload.registeredCount == 0 { failures.append("\(name): no device ever registered") }
        return failures
    }

    /// Answers one request as the reference registry would.
    private static func answer(_ request: [UInt8], dialect: Dialect, reference: inout Reference) -> (Int, String) {
        let text = String(decoding: request, as: UTF8.self)
        let lines = text.split(separator: "\r\n", omittingEmptySubsequences: false)
        let requestLine = lines[0].split(separator: " ")
        let method = String(requestLine[0])
        let path = String(requestLine[1])
        let bearer = lines.first { $0.hasPrefix("Authorization: Bearer ") }.map { String($0.dropFirst(22)) }
        var bodyStart = request.count
        for index in 0..<(request.count - 3)
        where request[index] == 13 && request[index + 1] == 10 && request[index + 2] == 13 && request[index + 3] == 10 {
            bodyStart = index + 4
            break
        }
        let body = String(decoding: request[bodyStart...], as: UTF8.self)
        let json = body.isEmpty ? nil : try? JSONReader.parse(Array(body.utf8))
        if !body.isEmpty && json == nil { return (400, #"{"error":{"code":"malformed_json"}}"#) }
        switch (method, path) {
        case ("POST", "/v1/devices"):
            let (status, id) = reference.register(
                token: json?["token"]?.stringValue ?? "", installation: json?["installation_id"]?.stringValue,
                person: json?["external_id"]?.stringValue ?? "")
            return (status, #"{"id":"\#(id)"}"#)
        case ("POST", "/v1/feedback"): return (200, #"{"invalidated":true}"#)
        case ("PUT", "/api/integrations/v1/devices"):
            _ = reference.register(
                token: json?["token"]?.stringValue ?? "", installation: nil,
                person: json?["external_id"]?.stringValue ?? "")
            return (200, #"{"registered":true}"#)
        case ("DELETE", "/api/integrations/v1/devices"):
            if let id = reference.byToken[json?["token"]?.stringValue ?? ""],
                reference.devices[id]?.person == json?["external_id"]?.stringValue
            {
                reference.remove(id)
            }
            return (200, #"{"deleted":true}"#)
        case ("POST", "/api/universal/device/register"):
            let tokens = json?["tokens"]
            _ = reference.register(
                token: tokens?["apnsToken"]?.stringValue ?? tokens?["fcmToken"]?.stringValue ?? "",
                installation: json?["deviceId"]?.stringValue, person: json?["subscriberId"]?.stringValue ?? "")
            return (201, #"{"ok":true}"#)
        case ("POST", "/api/universal/device/deregister"):
            if let id = reference.byInstallation[json?["deviceId"]?.stringValue ?? ""] { reference.remove(id) }
            return (200, #"{"ok":true}"#)
        case ("PUT", "/v1/me/devices"):
            let person = bearer.map { String($0.dropFirst("identity_".count)) } ?? ""
            let (status, id) = reference.register(
                token: json?["token"]?.stringValue ?? "", installation: json?["installation_id"]?.stringValue,
                person: person)
            return (status, #"{"id":"\#(id)"}"#)
        default:
            break
        }
        if method == "GET" && path.hasPrefix("/api/universal/health?appId=1&appToken=key") {
            return (200, #"{"ok":true}"#)
        }
        if method == "GET" && path.hasPrefix("/v1/people/user_") { return (200, #"{"devices":[]}"#) }
        if path.hasPrefix("/v1/me/devices/") && method == "DELETE" {
            let installation = String(path.dropFirst("/v1/me/devices/".count))
            if let id = reference.byInstallation[installation] { reference.remove(id) }
            return (200, #"{"deleted":true}"#)
        }
        if path.hasPrefix("/v1/devices/") {
            let id = String(path.dropFirst("/v1/devices/".count))
            switch method {
            case "DELETE":
                let existed = reference.devices[id] != nil
                reference.remove(id)
                return (200, #"{"deleted":\#(existed)}"#)
            case "GET":
                return reference.devices[id] == nil
                    ? (404, #"{"error":{"code":"device_not_found"}}"#) : (200, #"{"id":"\#(id)"}"#)
            default: break
            }
        }
        return (404, #"{"error":{"code":"not_found"}}"#)
    }
}
