import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting

/// A blocking HTTP/1.1 client on one keep-alive connection, for set-up
/// requests (apps, keys, credentials) to any HOST:PORT: Content-Length
/// answers only (what those routes send).
final class BlockingHTTPClient {
    /// How long one answer may take.
    static let answerTimeoutMilliseconds = 60_000

    private let host: String
    private let port: UInt16
    private var socket: FileDescriptor?
    private var reader = HTTPResponseReader()

    init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    deinit { socket?.close() }

    /// Sends one request and returns the answer's status and body.
    func request(
        _ method: String, _ path: String, key: String?, body: String? = nil, contentType: String = "application/json"
    ) throws(LoadError) -> (status: Int, body: [UInt8]) {
        let descriptor = try connection()
        var text = "\(method) \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\n"
        if let key { text += "Authorization: Bearer \(key)\r\n" }
        if let body { text += "Content-Type: \(contentType)\r\nContent-Length: \(body.utf8.count)\r\n" }
        text += "\r\n" + (body ?? "")
        let bytes = Array(text.utf8)
        let sent = bytes.withUnsafeBytes { raw in
            Result { () throws(SystemCallError) in try descriptor.sendAll(raw) }
        }
        if case .failure(let error) = sent {
            close()
            throw LoadError("\(method) \(path): \(error)")
        }
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            switch reader.next() {
            case .response(let status, let closes):
                let answer = reader.withLastBody { Array($0) }
                if closes { close() }
                return (status, answer)
            case .malformed(let reason):
                close()
                throw LoadError("\(method) \(path): \(reason)")
            case .needMore:
                let count = buffer.withUnsafeMutableBytes {
                    Glibc.recv(descriptor.rawValue, $0.baseAddress, $0.count, 0)
                }
                guard count > 0 else {
                    close()
                    throw LoadError("\(method) \(path): connection closed or timed out (errno \(errno))")
                }
                buffer.withUnsafeBytes { reader.feed(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
            }
        }
    }

    private func connection() throws(LoadError) -> FileDescriptor {
        if let socket { return socket }
        do {
            let descriptor = try TCPSocket.connect(host: host, port: port)
            try TCPSocket.setReceiveTimeout(descriptor, milliseconds: Self.answerTimeoutMilliseconds)
            socket = descriptor
            reader = HTTPResponseReader()
            return descriptor
        } catch {
            throw LoadError("cannot connect to \(host):\(port): \(error)")
        }
    }

    private func close() {
        socket?.close()
        socket = nil
    }

    /// Sends a request that must answer `status`, and returns the parsed body.
    func expect(
        _ status: Int, _ method: String, _ path: String, key: String?, body: String? = nil
    ) throws(LoadError) -> JSONValue {
        let answer = try request(method, path, key: key, body: body)
        guard answer.status == status else {
            throw LoadError(
                "\(method) \(path) answered \(answer.status), expected \(status): "
                    + String(decoding: answer.body.prefix(300), as: UTF8.self))
        }
        do {
            return try JSONReader.parse(answer.body)
        } catch {
            throw LoadError("\(method) \(path): the answer is not JSON: \(error)")
        }
    }
}

/// What `--setup` made.
struct LoadSetupResult {
    var appID: Int
    var key: String
    var keyID: String
    var devicesPerPersonMax: Int
}

/// `--setup`: a new app sized for the shape, a live secret key holding every
/// capability the dialects use, the APNs credential Barua names, and (Barua
/// only: it registers only for known people) every person.
enum LoadSetup {
    /// The capabilities of the key `--setup` makes.
    static let capabilities = ["devices:write", "devices:read", "devices:delete", "people:write", "setup:write"]

    static func run(_ shape: WorkloadShape, adminKey: String) throws(LoadError) -> LoadSetupResult {
        let client = BlockingHTTPClient(host: shape.host, port: shape.port)
        // Room for every device a person can hold under the shape (see WorkloadShape.person(of:side:)).
        let perPerson = min(1000, max(10, shape.devicesPerPersonMax))
        if shape.devicesPerPersonMax > 1000 {
            StandardStreams.error(
                "roost-bench load: warning: --tokens/--people lets a person hold \(shape.devicesPerPersonMax) devices, "
                    + "above the server's limit of 1000: evictions will make reads answer 404")
        }
        let app = try client.expect(
            201, "POST", "/v1/apps", key: adminKey,
            body: #"{"name":"roost-bench","settings":{"max_devices_per_person":\#(perPerson)}}"#)
        guard let appID = app["id"]?.intValue else { throw LoadError("POST /v1/apps: no id in the answer") }
        let capabilities = capabilities.map { "\"\($0)\"" }.joined(separator: ",")
        let made = try client.expect(
            201, "POST", "/v1/apps/\(appID)/keys", key: adminKey,
            body: #"{"kind":"secret","mode":"live","capabilities":[\#(capabilities)],"label":"roost-bench load"}"#)
        guard let key = made["key"]?.stringValue, let keyID = made["id"]?.stringValue else {
            throw LoadError("POST /v1/apps/\(appID)/keys: no key in the answer")
        }
        if shape.dialect == .barua {
            _ = try client.expect(
                200, "PUT", "/v1/credentials/apns/\(shape.bundleID)/production", key: key,
                body: #"{"team_id":"ROOSTBENCH","key_id":"BENCHKEY01"}"#)
        }
        return LoadSetupResult(appID: appID, key: key, keyID: keyID, devicesPerPersonMax: perPerson)
    }
}

/// A finite source for the untimed preparation: one request per person,
/// either `PUT /v1/people/user_N` (Barua needs known people) or a Connect
/// identity token mint (`POST /v1/identities/authenticated`), whose tokens it keeps.
struct PreparationSource: LoadSource {
    enum Kind {
        case people
        case identityTokens
    }

    let kind: Kind
    let people: Int
    private var nextPerson = 0
    private let hostLine: [UInt8]
    private let keyLine: [UInt8]
    /// Identity tokens by person (`.identityTokens`).
    private(set) var identityTokens: [String]
    private(set) var failures: [String] = []

    init(kind: Kind, shape: WorkloadShape) {
        self.kind = kind
        people = shape.people
        hostLine = Array("Host: \(shape.host):\(shape.port)\r\n".utf8)
        keyLine = Array("Authorization: Bearer \(shape.key)\r\n".utf8)
        identityTokens = kind == .identityTokens ? Array(repeating: "", count: shape.people) : []
    }

    var operationNames: [String] { [kind == .people ? "person" : "identity"] }
    var exhausted: Bool { nextPerson >= people }

    mutating func next(into request: inout [UInt8], random: inout SeededRandom) -> LoadTicket? {
        guard nextPerson < people else { return nil }
        let person = nextPerson
        nextPerson += 1
        request.removeAll(keepingCapacity: true)
        switch kind {
        case .people:
            request += "PUT /v1/people/user_".utf8
            RequestBytes.appendDecimal(person, to: &request)
            request += " HTTP/1.1\r\n".utf8
            request += hostLine
            request += keyLine
            request += "Content-Length: 0\r\n\r\n".utf8
            return LoadTicket(operation: 0, subject: Int32(person), expected: ExpectedStatuses(201, or: 200))
        case .identityTokens:
            var body: [UInt8] = Array(#"{"external_id":"user_"#.utf8)
            RequestBytes.appendDecimal(person, to: &body)
            body += #""}"#.utf8
            request += "POST /v1/identities/authenticated HTTP/1.1\r\n".utf8
            request += hostLine
            request += keyLine
            request += "Content-Type: application/json\r\nContent-Length: ".utf8
            RequestBytes.appendDecimal(body.count, to: &request)
            request += "\r\n\r\n".utf8
            request += body
            return LoadTicket(operation: 0, subject: Int32(person), expected: ExpectedStatuses(201))
        }
    }

    mutating func answered(_ ticket: LoadTicket, status: Int, body: UnsafeRawBufferPointer) -> Bool {
        guard ticket.expected.contains(status) else {
            if failures.count < 5 {
                failures.append(
                    "user_\(ticket.subject): \(status) \(String(decoding: body.prefix(200), as: UTF8.self))")
            }
            return false
        }
        if kind == .identityTokens {
            guard let token = RequestBytes.firstStringMember("identity_token", in: body) else {
                failures.append("user_\(ticket.subject): no identity_token in the answer")
                return false
            }
            identityTokens[Int(ticket.subject)] = String(decoding: token, as: UTF8.self)
        }
        return true
    }

    mutating func abandoned(_ ticket: LoadTicket) {
        failures.append("user_\(ticket.subject): no answer")
    }
}
