import RoostTesting

/// What every thread's workload shares: the dialect, the mix, the key space
/// and the credentials. A value, handed to each load thread.
struct WorkloadShape: Sendable {
    var dialect: Dialect = .native
    var mix: OperationMix = .standard
    /// Device indexes 0..<tokens; device i has token generation g: `RequestBytes.appendTokenHex`.
    var tokens = 1_000_000
    /// People `user_0` … `user_(people-1)`.
    var people = 200_000
    /// Share of devices (by index) that are Android/FCM, 0 to 100.
    var androidPercent = 0
    /// Tags per registration.
    var tags = 0
    var host = "127.0.0.1"
    var port: UInt16 = 0
    /// The app's secret key (Native Notify: its `appToken`).
    var key = ""
    /// The app id (Native Notify's `appId`).
    var appID: Int? = nil
    /// The bundle id of the APNs credential (Barua's `app`).
    var bundleID = "com.example.roostbench"
    /// The app is new (`--setup`): every device starts absent, so a
    /// registration must answer exactly 201 when new and 200 when known.
    /// Otherwise a device is unknown until its first answer (200 or 201).
    var freshApp = false
    /// Accept any 2xx for every operation (`--any-2xx`): for a peer that
    /// answers a fixed body (nginx), which has no state to check.
    var acceptAnySuccess = false
    /// Connect: the identity token of each person, by index.
    var identityTokens: [String] = []
    var threads = 1
    /// Registrations per `POST /v1/devices/batch` request (`--batch`); 1:
    /// each registration is its own `POST /v1/devices` (native dialect only).
    var batch = 1

    /// The most registrations per batch request (spec §7: 1,000).
    static let batchMax = 1_000

    /// The most tags a registration carries (`--tags`).
    static let tagsMax = 16

    /// Whether registrations name an installation (`installation_id`,
    /// Native Notify's `deviceId`): always outside the native dialect, and
    /// in it when the mix rotates tokens (a rotation is a new token for the
    /// same installation). Without rotations the native body is the spine
    /// benchmark's, byte for byte.
    var namesInstallations: Bool { dialect != .native || mix.weight(.rotate) > 0 }

    /// The person index of device `index` on side `side` (0 or 1). A move
    /// toggles the side, so a person only ever holds devices whose index is
    /// its own or the one before it, modulo `people`: at most
    /// `devicesPerPersonMax`, which no eviction rule then touches.
    func person(of index: Int, side: UInt8) -> Int {
        side == 0 ? index % people : (index + 1) % people
    }

    /// The most devices one person can hold under this shape (see `person(of:side:)`).
    var devicesPerPersonMax: Int { 2 * ((tokens + people - 1) / people) }

    /// Whether device `index` is an Android (FCM) device.
    func isAndroid(_ index: Int) -> Bool {
        androidPercent > 0 && Int(((UInt64(index) &* 0x9E37_79B9_7F4A_7C15) >> 32) % 100) < androidPercent
    }
}

/// The workload of one load thread: the devices whose index is `thread`
/// modulo `threads`, their state as the answers taught it, and the requests
/// for the mix. At most one request per device is in flight, so the state is
/// exact and each answer's status can be checked against what the operation
/// must answer (docs/benchmarking.md, "Expected statuses").
struct MixedWorkload: LoadSource {
    enum State: UInt8 {
        /// Not known: the app was not made by `--setup` and no answer came yet,
        /// or a request on it got no (or an unexpected) answer.
        case unknown = 0
        case absent = 1
        case registered = 2
    }

    /// The most bytes of a device id kept (ids are `dev_` + 26 characters).
    static let idBytesMax = 40
    /// Random draws for a free device before giving up for this turn.
    static let drawsMax = 8

    let shape: WorkloadShape
    let thread: Int
    /// Devices of this thread: local j is global index thread + threads × j.
    let count: Int

    private var states: [State]
    private var busy: [Bool]
    private var sides: [UInt8]
    private var generations: [UInt32]
    private var idLengths: [UInt8]
    private var ids: [UInt8]
    /// Registered devices (local indexes), for uniform draws, and each one's place in it (-1: none).
    private var registered: [Int32] = []
    private var registeredPosition: [Int32]

    private var body: [UInt8] = []
    private var path: [UInt8] = []
    private let hostLine: [UInt8]
    private let keyLine: [UInt8]

    /// The registrations of each batch request in flight, by slot (the
    /// ticket's subject is `-1 - slot`), and the free slots.
    private var batches: [[BatchItem]] = []
    private var freeBatchSlots: [Int] = []

    /// One registration of a batch request: its device and what it sets.
    private struct BatchItem {
        var device: Int32
        var side: UInt8
        var generation: UInt32
        var expected: ExpectedStatuses
    }

    /// The operation index of a batch request (after `LoadOperation`'s).
    static let batchOperation = LoadOperation.allCases.count

    var operationNames: [String] { LoadOperation.allCases.map(\.name) + ["register-batch"] }
    var exhausted: Bool { false }

    init(shape: WorkloadShape, thread: Int) {
        precondition(
            shape.threads >= 1 && thread >= 0 && thread < shape.threads, "thread \(thread) of \(shape.threads)")
        precondition(shape.tokens >= 1 && shape.tokens < Int(UInt32.max), "tokens \(shape.tokens) outside 1..<2^32")
        precondition(shape.people >= 1, "people \(shape.people) must be at least 1")
        self.shape = shape
        self.thread = thread
        count = (shape.tokens - thread + shape.threads - 1) / shape.threads
        let initial: State = shape.freshApp ? .absent : .unknown
        states = Array(repeating: initial, count: count)
        busy = Array(repeating: false, count: count)
        sides = Array(repeating: 0, count: count)
        generations = Array(repeating: 0, count: count)
        let keepsIDs = shape.dialect == .native || shape.dialect == .connect
        idLengths = Array(repeating: 0, count: keepsIDs ? count : 0)
        ids = Array(repeating: 0, count: keepsIDs ? count * Self.idBytesMax : 0)
        registeredPosition = Array(repeating: -1, count: count)
        hostLine = Array("Host: \(shape.host):\(shape.port)\r\n".utf8)
        keyLine = Array("Authorization: Bearer \(shape.key)\r\n".utf8)
        body.reserveCapacity(512)
    }

    /// The global device index of local `device`.
    func index(of device: Int) -> Int { thread + shape.threads * device }

    /// How many of this thread's devices are known to be registered.
    var registeredCount: Int { registered.count }

    mutating func next(into request: inout [UInt8], random: inout SeededRandom) -> LoadTicket? {
        var operation = shape.mix.pick(random.next())
        var device = -1
        if operation.needsRegisteredDevice {
            device = drawRegistered(&random)
            if device < 0 { operation = .register }
        }
        if operation == .register && shape.batch > 1 {
            return nextBatch(into: &request, random: &random)
        }
        if operation == .register {
            device = drawAny(&random)
            guard device >= 0 else { return nil }
        }
        var ticket = LoadTicket(
            operation: operation.rawValue, subject: Int32(device), expected: expected(operation, device),
            side: sides[device], generation: generations[device])
        switch operation {
        case .register, .refresh: break
        case .rotate: ticket.generation = generations[device] &+ 1
        case .move: ticket.side = sides[device] ^ 1
        case .delete, .feedback, .read: break
        }
        busy[device] = true
        write(operation, device: device, ticket: ticket, into: &request)
        return ticket
    }

    /// A batch of up to `shape.batch` registrations of free devices (new or
    /// known), each expected to answer as `POST /v1/devices` would.
    private mutating func nextBatch(into request: inout [UInt8], random: inout SeededRandom) -> LoadTicket? {
        var items: [BatchItem] = []
        items.reserveCapacity(shape.batch)
        body.removeAll(keepingCapacity: true)
        body += #"{"devices":["#.utf8
        for _ in 0..<shape.batch {
            let device = drawAny(&random)
            guard device >= 0 else { break }
            busy[device] = true
            let item = BatchItem(
                device: Int32(device), side: sides[device], generation: generations[device],
                expected: expected(.register, device))
            if !items.isEmpty { body.append(UInt8(ascii: ",")) }
            appendNativeBody(index(of: device), side: item.side, generation: item.generation)
            items.append(item)
        }
        guard !items.isEmpty else { return nil }
        body += "]}".utf8
        head("POST", Self.batchPath, auth: keyLine, into: &request)
        let slot: Int
        if let free = freeBatchSlots.popLast() {
            slot = free
            batches[slot] = items
        } else {
            slot = batches.count
            batches.append(items)
        }
        return LoadTicket(
            operation: Self.batchOperation, subject: Int32(-1 - slot),
            expected: shape.acceptAnySuccess ? .anySuccess : ExpectedStatuses(200))
    }

    /// Takes a batch answer: each item's status against its expectation, in
    /// order (`{"status":N` of each result; a device's id follows its status).
    private mutating func answeredBatch(_ ticket: LoadTicket, status: Int, body: UnsafeRawBufferPointer) -> Bool {
        let slot = Int(-1 - ticket.subject)
        let items = batches[slot]
        batches[slot] = []
        freeBatchSlots.append(slot)
        guard ticket.expected.contains(status) else {
            for item in items { abandonDevice(Int(item.device)) }
            return false
        }
        var cursor = 0
        var allExpected = true
        for item in items {
            let device = Int(item.device)
            busy[device] = false
            guard let (itemStatus, after) = RequestBytes.nextStatus(in: body, from: cursor) else {
                setState(.unknown, device)
                allExpected = false
                continue
            }
            cursor = after
            guard item.expected.contains(itemStatus) else {
                setState(.unknown, device)
                allExpected = false
                continue
            }
            sides[device] = item.side
            generations[device] = item.generation
            let rest = UnsafeRawBufferPointer(rebasing: body[cursor...])
            guard let id = RequestBytes.firstStringMember(needle: RequestBytes.idNeedle, in: rest),
                id.count <= Self.idBytesMax
            else {
                setState(.unknown, device)
                continue
            }
            idLengths[device] = UInt8(id.count)
            for (offset, byte) in id.enumerated() { ids[device * Self.idBytesMax + offset] = byte }
            setState(.registered, device)
        }
        return allExpected
    }

    private mutating func abandonDevice(_ device: Int) {
        precondition(busy[device], "device \(device) abandoned with nothing in flight")
        busy[device] = false
        setState(.unknown, device)
    }

    mutating func answered(_ ticket: LoadTicket, status: Int, body: UnsafeRawBufferPointer) -> Bool {
        if ticket.subject < 0 { return answeredBatch(ticket, status: status, body: body) }
        let device = Int(ticket.subject)
        precondition(busy[device], "an answer for device \(device), which has nothing in flight")
        busy[device] = false
        guard ticket.expected.contains(status), let operation = LoadOperation(rawValue: ticket.operation) else {
            setState(.unknown, device)
            return false
        }
        switch operation {
        case .register, .refresh, .rotate, .move:
            sides[device] = ticket.side
            generations[device] = ticket.generation
            if !idLengths.isEmpty {
                // A device is counted registered only with its id (delete and read need it).
                guard let id = RequestBytes.firstStringMember(needle: RequestBytes.idNeedle, in: body),
                    id.count <= Self.idBytesMax
                else {
                    setState(.unknown, device)
                    return true
                }
                idLengths[device] = UInt8(id.count)
                for (offset, byte) in id.enumerated() { ids[device * Self.idBytesMax + offset] = byte }
            }
            setState(.registered, device)
        case .delete: setState(.absent, device)
        case .feedback, .read: break
        }
        return true
    }

    mutating func abandoned(_ ticket: LoadTicket) {
        if ticket.subject < 0 {
            let slot = Int(-1 - ticket.subject)
            for item in batches[slot] { abandonDevice(Int(item.device)) }
            batches[slot] = []
            freeBatchSlots.append(slot)
            return
        }
        abandonDevice(Int(ticket.subject))
    }

    /// Writes the request `operation` would send for local `device` as it
    /// stands, changing nothing (self-tests).
    mutating func preview(_ operation: LoadOperation, device: Int, into request: inout [UInt8]) {
        let ticket = LoadTicket(
            operation: operation.rawValue, subject: Int32(device), expected: expected(operation, device),
            side: operation == .move ? sides[device] ^ 1 : sides[device],
            generation: operation == .rotate ? generations[device] &+ 1 : generations[device])
        write(operation, device: device, ticket: ticket, into: &request)
    }

    /// The statuses `operation` on local `device` must answer now (self-tests).
    func expectedNow(_ operation: LoadOperation, device: Int) -> ExpectedStatuses { expected(operation, device) }

    // MARK: Choice and expectation

    private func drawAny(_ random: inout SeededRandom) -> Int {
        for _ in 0..<Self.drawsMax {
            let device = Int(random.next() % UInt64(count))
            if !busy[device] { return device }
        }
        return -1
    }

    private func drawRegistered(_ random: inout SeededRandom) -> Int {
        guard !registered.isEmpty else { return -1 }
        for _ in 0..<Self.drawsMax {
            let device = Int(registered[Int(random.next() % UInt64(registered.count))])
            if !busy[device] { return device }
        }
        return -1
    }

    /// The statuses a correct server answers `operation` on `device` with,
    /// given what the generator knows (docs/benchmarking.md).
    private func expected(_ operation: LoadOperation, _ device: Int) -> ExpectedStatuses {
        if shape.acceptAnySuccess { return .anySuccess }
        switch operation {
        case .register, .refresh, .rotate, .move:
            switch shape.dialect {
            case .barua: return ExpectedStatuses(200)
            case .nativenotify: return ExpectedStatuses(201)
            case .native, .connect:
                switch states[device] {
                case .unknown: return ExpectedStatuses(200, or: 201)
                case .absent: return ExpectedStatuses(201)
                case .registered: return ExpectedStatuses(200)
                }
            }
        case .delete, .feedback, .read: return ExpectedStatuses(200)
        }
    }

    private mutating func setState(_ state: State, _ device: Int) {
        let wasRegistered = states[device] == .registered
        states[device] = state
        if state == .registered && !wasRegistered {
            registeredPosition[device] = Int32(registered.count)
            registered.append(Int32(device))
        } else if state != .registered && wasRegistered {
            let position = Int(registeredPosition[device])
            precondition(position >= 0 && Int(registered[position]) == device, "registered list lost device \(device)")
            let last = registered.removeLast()
            if Int(last) != device {
                registered[position] = last
                registeredPosition[Int(last)] = Int32(position)
            }
            registeredPosition[device] = -1
        }
    }

    // MARK: Requests

    private mutating func write(
        _ operation: LoadOperation, device: Int, ticket: LoadTicket, into request: inout [UInt8]
    ) {
        let index = index(of: device)
        body.removeAll(keepingCapacity: true)
        path.removeAll(keepingCapacity: true)
        switch (shape.dialect, operation) {
        case (.native, .register), (.native, .refresh), (.native, .rotate), (.native, .move):
            appendNativeBody(index, side: ticket.side, generation: ticket.generation)
            head("POST", Self.devicesPath, auth: keyLine, into: &request)
        case (.native, .delete), (.connect, .read), (.native, .read):
            path += Self.devicesPath
            path.append(UInt8(ascii: "/"))
            let start = device * Self.idBytesMax
            path += ids[start..<(start + Int(idLengths[device]))]
            head(operation == .delete ? "DELETE" : "GET", path, auth: keyLine, into: &request)
        case (_, .feedback):
            let android = shape.isAndroid(index)
            body += #"{"provider":""#.utf8
            body += (android ? "fcm" : "apns").utf8
            body += #"","token":""#.utf8
            appendToken(index, generation: generations[device])
            body += #""}"#.utf8
            head("POST", Self.feedbackPath, auth: keyLine, into: &request)
        case (.barua, .register), (.barua, .refresh), (.barua, .rotate), (.barua, .move):
            appendBaruaBody(index, side: ticket.side, generation: ticket.generation)
            head("PUT", Self.baruaPath, auth: keyLine, into: &request)
        case (.barua, .delete):
            appendBaruaBody(index, side: sides[device], generation: generations[device])
            head("DELETE", Self.baruaPath, auth: keyLine, into: &request)
        case (.barua, .read):
            path += "/v1/people/user_".utf8
            RequestBytes.appendDecimal(shape.person(of: index, side: sides[device]), to: &path)
            head("GET", path, auth: keyLine, into: &request)
        case (.nativenotify, .register), (.nativenotify, .refresh), (.nativenotify, .rotate),
            (.nativenotify, .move):
            appendNativeNotifyBody(index, side: ticket.side, generation: ticket.generation, register: true)
            head("POST", Self.nativeNotifyRegisterPath, auth: nil, into: &request)
        case (.nativenotify, .delete):
            appendNativeNotifyBody(index, side: 0, generation: 0, register: false)
            head("POST", Self.nativeNotifyDeregisterPath, auth: nil, into: &request)
        case (.nativenotify, .read):
            path += "/api/universal/health?appId=".utf8
            RequestBytes.appendDecimal(shape.appID ?? 0, to: &path)
            path += "&appToken=".utf8
            RequestBytes.appendQueryValue(shape.key, to: &path)
            head("GET", path, auth: nil, into: &request)
        case (.connect, .register), (.connect, .refresh), (.connect, .rotate), (.connect, .move):
            appendConnectBody(index, generation: ticket.generation)
            head(
                "PUT", Self.connectPath, auth: identityLine(shape.person(of: index, side: ticket.side)), into: &request)
        case (.connect, .delete):
            path += Self.connectPath
            path += "/inst_".utf8
            RequestBytes.appendDecimal(index, to: &path)
            head("DELETE", path, auth: identityLine(shape.person(of: index, side: sides[device])), into: &request)
        }
    }

    private static let devicesPath = Array("/v1/devices".utf8)
    private static let batchPath = Array("/v1/devices/batch".utf8)
    private static let feedbackPath = Array("/v1/feedback".utf8)
    private static let baruaPath = Array("/api/integrations/v1/devices".utf8)
    private static let nativeNotifyRegisterPath = Array("/api/universal/device/register".utf8)
    private static let nativeNotifyDeregisterPath = Array("/api/universal/device/deregister".utf8)
    private static let connectPath = Array("/v1/me/devices".utf8)
    private static let jsonLine = Array("Content-Type: application/json\r\nContent-Length: ".utf8)
    private static let crlf = Array("\r\n".utf8)

    private func identityLine(_ person: Int) -> [UInt8] {
        precondition(person < shape.identityTokens.count, "no identity token for person \(person)")
        return Array("Authorization: Bearer \(shape.identityTokens[person])\r\n".utf8)
    }

    /// Writes the request line, the headers and `body` (when not empty) into `request`.
    private func head(_ method: String, _ target: [UInt8], auth: [UInt8]?, into request: inout [UInt8]) {
        request.removeAll(keepingCapacity: true)
        request += method.utf8
        request.append(UInt8(ascii: " "))
        request += target
        request += " HTTP/1.1\r\n".utf8
        request += hostLine
        if let auth { request += auth }
        if !body.isEmpty {
            request += Self.jsonLine
            RequestBytes.appendDecimal(body.count, to: &request)
            request += Self.crlf
        }
        request += Self.crlf
        request += body
    }

    private mutating func appendToken(_ index: Int, generation: UInt32) {
        if shape.isAndroid(index) { body += "fcm_".utf8 }
        RequestBytes.appendTokenHex(index: index, generation: generation, to: &body)
    }

    private mutating func appendPlatform(_ index: Int) {
        body += (shape.isAndroid(index) ? "android" : "ios").utf8
    }

    private mutating func appendTags(_ index: Int) {
        guard shape.tags > 0 else { return }
        body += #","tags":{"#.utf8
        for tag in 0..<shape.tags {
            if tag > 0 { body.append(UInt8(ascii: ",")) }
            body += #""t"#.utf8
            RequestBytes.appendDecimal(tag, to: &body)
            body += #"":"v"#.utf8
            RequestBytes.appendDecimal((index / (tag + 1)) % 8, to: &body)
            body.append(UInt8(ascii: "\""))
        }
        body.append(UInt8(ascii: "}"))
    }

    /// `{"platform":"ios","environment":"production","token":"…","external_id":"user_N",
    /// "app_version":"2.4.0","locale":"en-US","timezone":"Europe/Berlin"}`, plus
    /// `installation_id` and `tags` when the shape has them.
    private mutating func appendNativeBody(_ index: Int, side: UInt8, generation: UInt32) {
        body += #"{"platform":""#.utf8
        appendPlatform(index)
        body += #"","environment":"production","token":""#.utf8
        appendToken(index, generation: generation)
        body += #"","external_id":"user_"#.utf8
        RequestBytes.appendDecimal(shape.person(of: index, side: side), to: &body)
        body += #"","app_version":"2.4.0","locale":"en-US","timezone":"Europe/Berlin""#.utf8
        if shape.namesInstallations {
            body += #","installation_id":"inst_"#.utf8
            RequestBytes.appendDecimal(index, to: &body)
            body.append(UInt8(ascii: "\""))
        }
        appendTags(index)
        body.append(UInt8(ascii: "}"))
    }

    private mutating func appendBaruaBody(_ index: Int, side: UInt8, generation: UInt32) {
        body += #"{"provider":"apns","app":""#.utf8
        body += shape.bundleID.utf8
        body += #"","environment":"production","token":""#.utf8
        RequestBytes.appendTokenHex(index: index, generation: generation, to: &body)
        body += #"","external_id":"user_"#.utf8
        RequestBytes.appendDecimal(shape.person(of: index, side: side), to: &body)
        body += #""}"#.utf8
    }

    private mutating func appendNativeNotifyBody(_ index: Int, side: UInt8, generation: UInt32, register: Bool) {
        body += #"{"appId":"#.utf8
        RequestBytes.appendDecimal(shape.appID ?? 0, to: &body)
        body += #","appToken":""#.utf8
        body += shape.key.utf8
        body += #"","deviceId":"inst_"#.utf8
        RequestBytes.appendDecimal(index, to: &body)
        guard register else {
            body += #""}"#.utf8
            return
        }
        body += #"","platform":""#.utf8
        appendPlatform(index)
        body += #"","subscriberId":"user_"#.utf8
        RequestBytes.appendDecimal(shape.person(of: index, side: side), to: &body)
        body += #"","appVersion":"2.4.0","timezone":"Europe/Berlin","tokens":{""#.utf8
        body += (shape.isAndroid(index) ? "fcmToken" : "apnsToken").utf8
        body += #"":""#.utf8
        appendToken(index, generation: generation)
        body += #""}}"#.utf8
    }

    private mutating func appendConnectBody(_ index: Int, generation: UInt32) {
        body += #"{"installation_id":"inst_"#.utf8
        RequestBytes.appendDecimal(index, to: &body)
        body += #"","platform":""#.utf8
        appendPlatform(index)
        body += #"","environment":"production","token":""#.utf8
        appendToken(index, generation: generation)
        body.append(UInt8(ascii: "\""))
        appendTags(index)
        body.append(UInt8(ascii: "}"))
    }
}
