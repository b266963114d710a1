import RoostTesting

/// Why a run stopped: an answer the workload did not expect (a count over
/// wrong answers would mean nothing), or the connection failed.
struct WorkloadError: Error, CustomStringConvertible {
    var description: String

    init(_ description: String) {
        self.description = description
    }
}

/// The requests of one run, as a client sends them: one keep-alive
/// connection, one request at a time, every answer's status checked.
/// Device `d` has an APNs token of its own and belongs to person
/// `user_(d / 5)`, so every person holds five devices, as in the issue's
/// load (tokens from 1M, people from 200k).
final class Workload {
    static let devicesPerPerson = 5
    /// Items per `POST /v1/devices/batch` request.
    static let batchItems = 100
    /// Device numbers of batch items start here, apart from single registrations.
    static let batchDeviceBase = 10_000_000
    /// The first device number of `register_known_tagged`'s devices (apart
    /// from the others, so that the operations after it read untagged devices).
    static let taggedDeviceBase = 20_000_000
    /// The longest any one answer may take (a whole export included, debug build, loaded machine).
    static let answerTimeout: Duration = .seconds(120)

    private let connection: LoopbackConnection
    private let port: UInt16
    private(set) var key = ""
    /// Device ids (`dev_…`) by device number, as registrations answered them.
    private var deviceIDs: [Int: String] = [:]

    init(port: UInt16) throws {
        self.port = port
        connection = try LoopbackConnection(port: port)
    }

    /// Creates the app (10 devices a person at most: no eviction) and a live
    /// secret key that may write and read devices and people.
    func setUp() throws {
        let app = try exchange(
            request("POST", "/v1/apps", key: InProcessServer.adminKey, body: #"{"name":"alloc-count"}"#), 201)
        guard let appID = Self.stringMember("id", in: app, quoted: false) else {
            throw WorkloadError("POST /v1/apps: no id in \(String(decoding: app, as: UTF8.self))")
        }
        let made = try exchange(
            request(
                "POST", "/v1/apps/\(appID)/keys", key: InProcessServer.adminKey,
                body: #"{"kind":"secret","mode":"live","capabilities":["devices:write","devices:read","#
                    + #""people:write"],"label":"alloc-count"}"#), 201)
        guard let key = Self.stringMember("key", in: made, quoted: true) else {
            throw WorkloadError("POST /v1/apps/\(appID)/keys: no key in the answer")
        }
        self.key = key
    }

    // MARK: requests

    /// `POST /v1/devices` for device `device`: the seven fields of the load
    /// generator's native body, and with `tagged` the tags `plan` and `score`.
    func registration(_ device: Int, tagged: Bool = false) -> [UInt8] {
        request("POST", "/v1/devices", key: key, body: Self.deviceBody(device, tagged: tagged))
    }

    func deviceRead(_ device: Int) throws -> [UInt8] {
        guard let id = deviceIDs[device] else { throw WorkloadError("device \(device) was never registered") }
        return request("GET", "/v1/devices/\(id)", key: key, body: nil)
    }

    func personRead(_ person: Int) -> [UInt8] {
        request("GET", "/v1/people/user_\(person)", key: key, body: nil)
    }

    /// `PATCH /v1/devices/{id}`: a tag and `opted_in` (alternating, so that every patch changes the device).
    func devicePatch(_ device: Int, round: Int) throws -> [UInt8] {
        guard let id = deviceIDs[device] else { throw WorkloadError("device \(device) was never registered") }
        let body = #"{"tags":{"plan":"pro","round":\#(round)},"opted_in":\#(round % 2 == 0)}"#
        return request("PATCH", "/v1/devices/\(id)", key: key, body: body)
    }

    /// `POST /v1/feedback`: APNs reports device `device`'s token unregistered.
    func feedback(_ device: Int) -> [UInt8] {
        request(
            "POST", "/v1/feedback", key: key,
            body: #"{"provider":"apns","token":""# + TestTokens.apns(device + 1) + #"","reason":"Unregistered"}"#)
    }

    /// `POST /v1/devices/batch` of `batchItems` new devices from `firstDevice` on.
    func batch(from firstDevice: Int) -> [UInt8] {
        let items = (firstDevice..<(firstDevice + Self.batchItems)).map { Self.deviceBody($0) }
        return request(
            "POST", "/v1/devices/batch", key: key, body: #"{"devices":["# + items.joined(separator: ",") + "]}")
    }

    func export() -> [UInt8] {
        request("GET", "/v1/devices/export", key: key, body: nil)
    }

    /// The native body of device `device`; with `tagged`, the tags `plan` and
    /// `score` too (the same every time).
    static func deviceBody(_ device: Int, tagged: Bool = false) -> String {
        #"{"platform":"ios","environment":"production","token":""# + TestTokens.apns(device + 1)
            + #"","external_id":"user_\#(device / devicesPerPerson)","app_version":"2.4.0","locale":"en-US","#
            + #""timezone":"Europe/Berlin""# + (tagged ? #","tags":{"plan":"pro","score":7}"# : "") + "}"
    }

    private func request(_ method: String, _ path: String, key: String, body: String?) -> [UInt8] {
        var text = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nAuthorization: Bearer \(key)\r\n"
        if let body {
            text += "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n" + body
        } else {
            text += "\r\n"
        }
        return Array(text.utf8)
    }

    // MARK: exchanges

    /// Sends `bytes`, reads the answer, and returns its body if its status is `status`.
    @discardableResult
    func exchange(_ bytes: [UInt8], _ status: Int) throws -> [UInt8] {
        try connection.send(bytes)
        let response = try connection.readResponse(timeout: Self.answerTimeout)
        guard response.status == status else {
            let request = String(decoding: bytes.prefix(120), as: UTF8.self)
            throw WorkloadError(
                "\(request.prefix { $0 != "\r" }) answered \(response.status), expected \(status): "
                    + String(decoding: response.body.prefix(300), as: UTF8.self))
        }
        return response.body
    }

    /// Registers `device` expecting `status` and remembers its id.
    func register(_ device: Int, request bytes: [UInt8], expecting status: Int) throws {
        let body = try exchange(bytes, status)
        guard let id = Self.stringMember("id", in: body, quoted: true) else {
            throw WorkloadError("POST /v1/devices: no id in \(String(decoding: body, as: UTF8.self))")
        }
        deviceIDs[device] = id
    }

    /// The first `"name":` member's value in `body`: a string's text, or the bare token of a number.
    static func stringMember(_ name: String, in body: [UInt8], quoted: Bool) -> String? {
        let needle = Array("\"\(name)\":\(quoted ? "\"" : "")".utf8)
        guard body.count > needle.count else { return nil }
        for start in 0...(body.count - needle.count) where body[start..<(start + needle.count)].elementsEqual(needle) {
            let valueStart = start + needle.count
            let terminators: Set<UInt8> = quoted ? [UInt8(ascii: "\"")] : [UInt8(ascii: ","), UInt8(ascii: "}")]
            guard let end = body[valueStart...].firstIndex(where: terminators.contains) else { return nil }
            return String(decoding: body[valueStart..<end], as: UTF8.self)
        }
        return nil
    }
}
