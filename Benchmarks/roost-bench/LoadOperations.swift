import RoostTesting

/// One kind of request `roost-bench load` sends (`--mix`).
enum LoadOperation: Int, CaseIterable, Sendable {
    /// A registration of any device of the key space (new or known).
    case register
    /// The same registration again for a device the generator knows is registered.
    case refresh
    /// A new token for a registered device (same installation).
    case rotate
    /// A registered device's token presented for its other person.
    case move
    /// A registered device removed.
    case delete
    /// Provider feedback (`POST /v1/feedback`) for a registered device's token.
    case feedback
    /// A read of a registered device (or of what the dialect can read).
    case read

    var name: String {
        switch self {
        case .register: "register"
        case .refresh: "refresh"
        case .rotate: "rotate"
        case .move: "move"
        case .delete: "delete"
        case .feedback: "feedback"
        case .read: "read"
        }
    }

    /// Whether the operation needs a device the generator knows to be registered.
    var needsRegisteredDevice: Bool {
        switch self {
        case .register: false
        case .refresh, .rotate, .move, .delete, .feedback, .read: true
        }
    }
}

/// The share of each operation in a run, as weights (`register=80,refresh=10,…`).
struct OperationMix: Sendable, Equatable, CustomStringConvertible {
    /// Weight by `LoadOperation.rawValue`.
    private(set) var weights: [Int]

    /// The largest weight one operation may have.
    static let weightMax = 1_000_000

    /// The mix of issue 10: mostly registrations, a little of everything else.
    static let standard = OperationMix(weights: [80, 10, 4, 3, 1, 1, 1])
    /// Registrations only: the spine benchmark's workload.
    static let registerOnly = OperationMix(weights: [1, 0, 0, 0, 0, 0, 0])

    private init(weights: [Int]) {
        precondition(weights.count == LoadOperation.allCases.count, "weights \(weights) per operation")
        self.weights = weights
    }

    /// Parses `name=weight,…` with names from `LoadOperation`; unnamed
    /// operations get weight 0; at least one weight must be positive.
    static func parse(_ text: String) throws(UsageError) -> OperationMix {
        var weights = [Int](repeating: 0, count: LoadOperation.allCases.count)
        var seen: Set<String> = []
        for part in text.split(separator: ",", omittingEmptySubsequences: false) {
            let pair = part.split(separator: "=", omittingEmptySubsequences: false)
            guard pair.count == 2, let weight = Arguments.integer(String(pair[1])), weight >= 0, weight <= weightMax
            else { throw UsageError("--mix \(text): expected name=weight pairs, weights 0 to \(weightMax)") }
            let name = String(pair[0])
            guard let operation = LoadOperation.allCases.first(where: { $0.name == name }) else {
                throw UsageError(
                    "--mix: unknown operation '\(name)' (known: "
                        + LoadOperation.allCases.map(\.name).joined(separator: ", ") + ")")
            }
            guard seen.insert(name).inserted else { throw UsageError("--mix: \(name) given twice") }
            weights[operation.rawValue] = weight
        }
        guard weights.contains(where: { $0 > 0 }) else { throw UsageError("--mix \(text): every weight is 0") }
        return OperationMix(weights: weights)
    }

    var total: Int { weights.reduce(0, +) }

    func weight(_ operation: LoadOperation) -> Int { weights[operation.rawValue] }

    /// The operation a uniform random number `draw` falls on.
    func pick(_ draw: UInt64) -> LoadOperation {
        var point = Int(draw % UInt64(total))
        for operation in LoadOperation.allCases {
            point -= weights[operation.rawValue]
            if point < 0 { return operation }
        }
        preconditionFailure("mix \(weights): draw \(draw) beyond the total \(total)")
    }

    var description: String {
        LoadOperation.allCases.filter { weight($0) > 0 }.map { "\($0.name)=\(weight($0))" }.joined(separator: ",")
    }
}

/// The API a run speaks (`--dialect`): the native routes or one of the
/// compatibility routes of spec §6 (docs/compat.md).
enum Dialect: String, CaseIterable, Sendable {
    case native
    case barua
    case nativenotify
    case connect

    /// Whether registrations carry tags (Barua and Native Notify have none).
    var hasTags: Bool {
        switch self {
        case .native, .connect: true
        case .barua, .nativenotify: false
        }
    }

    /// Whether Android (FCM) devices exist on these routes (Barua is APNs only).
    var hasAndroid: Bool {
        switch self {
        case .native, .nativenotify, .connect: true
        case .barua: false
        }
    }

    /// Whether the answer to a registration tells new (201) from known (200).
    var registrationTellsNew: Bool {
        switch self {
        case .native, .connect: true
        case .barua, .nativenotify: false
        }
    }
}

/// At most two HTTP statuses an answer may have, or any 2xx (`--any-2xx`).
struct ExpectedStatuses: Sendable, Equatable {
    private var first: Int16
    private var second: Int16
    private var anySuccess = false

    init(_ status: Int) {
        first = Int16(status)
        second = Int16(status)
    }

    init(_ one: Int, or other: Int) {
        first = Int16(one)
        second = Int16(other)
    }

    /// Any status from 200 to 299: for a peer that answers every request
    /// with a fixed body, where only a non-2xx answer means something.
    static let anySuccess: ExpectedStatuses = {
        var statuses = ExpectedStatuses(200)
        statuses.anySuccess = true
        return statuses
    }()

    func contains(_ status: Int) -> Bool {
        anySuccess ? (200...299).contains(status) : status == Int(first) || status == Int(second)
    }
}

/// What the generator remembers about a request in flight: which operation,
/// on which device (or person), what the device becomes when the answer is
/// the expected one, and which statuses are expected.
struct LoadTicket: Sendable {
    /// Index into the source's `operationNames`.
    var operation: Int
    /// The source's own index (a device of the thread's share, a person); -1: none.
    var subject: Int32
    var expected: ExpectedStatuses
    /// The device's person side and token generation after the request.
    var side: UInt8 = 0
    var generation: UInt32 = 0
}

/// Where requests come from and what their answers teach: the load
/// generator's engine asks a source for each request and hands it each answer.
protocol LoadSource {
    /// The names of the operations tickets refer to, by index.
    var operationNames: [String] { get }
    /// Whether the source will never produce another request (finite sources).
    var exhausted: Bool { get }
    /// Writes the next request into `request` (replacing it) and returns its
    /// ticket; nil when nothing can be sent now (every device busy, or exhausted).
    mutating func next(into request: inout [UInt8], random: inout SeededRandom) -> LoadTicket?
    /// Takes the answer to `ticket`; returns whether its status was expected.
    mutating func answered(_ ticket: LoadTicket, status: Int, body: UnsafeRawBufferPointer) -> Bool
    /// The request of `ticket` got no answer (connection lost): its outcome is unknown.
    mutating func abandoned(_ ticket: LoadTicket)
}

/// Byte-level helpers for building requests without Foundation.
enum RequestBytes {
    static let hexDigits = Array("0123456789abcdef".utf8)

    /// Appends the decimal digits of `value` (≥ 0).
    static func appendDecimal(_ value: Int, to bytes: inout [UInt8]) {
        precondition(value >= 0, "negative decimal \(value)")
        var divisor = 1
        while divisor <= value / 10 { divisor *= 10 }
        var rest = value
        while divisor > 0 {
            bytes.append(UInt8(ascii: "0") + UInt8(rest / divisor))
            rest %= divisor
            divisor /= 10
        }
    }

    /// Appends the 64 lowercase hex digits of the token of device `index`,
    /// generation `generation`: eight 32-bit words, each the next xorshift32
    /// (13, 17, 5) step from `index + 1` (the first word alone is a bijection
    /// of the index, so devices never share a token); a generation above 0
    /// changes the second word by `generation × 0x9E3779B9` (odd, so every
    /// generation gives another token). Generation 0 is the spine
    /// benchmark's token (Benchmarks/spine/register.lua computes the same).
    static func appendTokenHex(index: Int, generation: UInt32, to bytes: inout [UInt8]) {
        var state = UInt32(truncatingIfNeeded: index &+ 1)
        for word in 0..<8 {
            state ^= state << 13
            state ^= state >> 17
            state ^= state << 5
            let value = word == 1 ? state ^ (generation &* 0x9E37_79B9) : state
            for shift in stride(from: 28, through: 0, by: -4) {
                bytes.append(hexDigits[Int((value >> UInt32(shift)) & 0xF)])
            }
        }
    }

    /// Appends `text` percent-encoded for a query value (unreserved characters kept).
    static func appendQueryValue(_ text: String, to bytes: inout [UInt8]) {
        for byte in text.utf8 {
            let unreserved =
                (byte >= 48 && byte <= 57) || (byte >= 65 && byte <= 90) || (byte >= 97 && byte <= 122)
                || byte == 45 || byte == 46 || byte == 95 || byte == 126
            if unreserved {
                bytes.append(byte)
            } else {
                bytes.append(UInt8(ascii: "%"))
                bytes.append(Array("0123456789ABCDEF".utf8)[Int(byte >> 4)])
                bytes.append(Array("0123456789ABCDEF".utf8)[Int(byte & 0xF)])
            }
        }
    }

    /// Returns the string value of the first `"name":"…"` member in a JSON
    /// body (no escapes inside the value), or nil. O(body).
    static func firstStringMember(_ name: String, in body: UnsafeRawBufferPointer) -> [UInt8]? {
        firstStringMember(needle: Array("\"\(name)\":\"".utf8), in: body)
    }

    /// The status of the next `"status":N` member at or after `from`, and
    /// the offset after it; nil when there is none (a batch answer's results).
    static func nextStatus(in body: UnsafeRawBufferPointer, from: Int) -> (status: Int, end: Int)? {
        let needle = statusNeedle
        var index = from
        while index + needle.count + 3 <= body.count {
            var matched = true
            for offset in 0..<needle.count where body[index + offset] != needle[offset] {
                matched = false
                break
            }
            if matched {
                var status = 0
                var end = index + needle.count
                while end < body.count, body[end] >= UInt8(ascii: "0"), body[end] <= UInt8(ascii: "9"), status < 1000 {
                    status = status * 10 + Int(body[end] - UInt8(ascii: "0"))
                    end += 1
                }
                return (status, end)
            }
            index += 1
        }
        return nil
    }

    static let statusNeedle = Array(#""status":"#.utf8)

    /// The needle of `"id":"`, built once (every registration answer is searched for it).
    static let idNeedle = Array(#""id":""#.utf8)

    /// `firstStringMember` with the `"name":"` bytes given.
    static func firstStringMember(needle: [UInt8], in body: UnsafeRawBufferPointer) -> [UInt8]? {
        guard body.count > needle.count else { return nil }
        var index = 0
        let last = body.count - needle.count
        while index <= last {
            if body[index] == needle[0] {
                var matched = true
                for offset in 1..<needle.count where body[index + offset] != needle[offset] {
                    matched = false
                    break
                }
                if matched {
                    var end = index + needle.count
                    let start = end
                    while end < body.count && body[end] != UInt8(ascii: "\"") {
                        if body[end] == UInt8(ascii: "\\") { return nil }
                        end += 1
                    }
                    guard end < body.count else { return nil }
                    return Array(body[start..<end])
                }
            }
            index += 1
        }
        return nil
    }
}
