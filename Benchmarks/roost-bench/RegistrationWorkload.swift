/// The registration request of the spine benchmark: `POST /v1/devices` for
/// device number `index` out of a key space of `tokens`, bound to person
/// `index % people`. The same index always gives the same token and person,
/// so drawing indexes at random re-registers known devices once the space
/// fills. Benchmarks/spine/register.lua builds byte-identical bodies:
///
/// - token: eight 32-bit words, each the next xorshift32 (13, 17, 5) step
///   from `index + 1`, as lowercase hex (64 digits; the first word alone is a
///   bijection of the index, so different indexes never share a token);
/// - body: `{"platform":"ios","environment":"production","token":"…",
///   "external_id":"user_N","app_version":"2.4.0","locale":"en-US",
///   "timezone":"Europe/Berlin"}`.
struct RegistrationWorkload {
    /// Distinct tokens (device indexes are drawn from 0..<tokens).
    let tokens: Int
    /// Distinct people (`external_id` `user_0` … `user_(people-1)`).
    let people: Int
    /// Everything before the Content-Length value, built once.
    private let headPrefix: [UInt8]

    init(host: String, port: UInt16, key: String, tokens: Int, people: Int) {
        precondition(tokens >= 1 && tokens < Int(UInt32.max), "tokens \(tokens) outside 1..<2^32")
        precondition(people >= 1, "people \(people) must be at least 1")
        self.tokens = tokens
        self.people = people
        headPrefix = Array(
            ("POST /v1/devices HTTP/1.1\r\nHost: \(host):\(port)\r\nAuthorization: Bearer \(key)\r\n"
                + "Content-Type: application/json\r\nContent-Length: ").utf8)
    }

    /// Replaces `request` with the whole HTTP request for device `index`
    /// (keeps its capacity, so a connection reuses one buffer).
    func write(index: Int, into request: inout [UInt8]) {
        precondition(index >= 0 && index < tokens, "device index \(index) outside 0..<\(tokens)")
        var body: [UInt8] = []
        body.reserveCapacity(200)
        body += Self.bodyStart
        var state = UInt32(truncatingIfNeeded: index &+ 1)
        for _ in 0..<8 {
            state ^= state << 13
            state ^= state >> 17
            state ^= state << 5
            for shift in stride(from: 28, through: 0, by: -4) {
                body.append(Self.hexDigits[Int((state >> UInt32(shift)) & 0xF)])
            }
        }
        body += Self.bodyPerson
        Self.appendDecimal(index % people, to: &body)
        body += Self.bodyEnd

        request.removeAll(keepingCapacity: true)
        request += headPrefix
        Self.appendDecimal(body.count, to: &request)
        request += Self.headEnd
        request += body
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)
    private static let bodyStart = Array(#"{"platform":"ios","environment":"production","token":""#.utf8)
    private static let bodyPerson = Array(#"","external_id":"user_"#.utf8)
    private static let bodyEnd = Array(
        #"","app_version":"2.4.0","locale":"en-US","timezone":"Europe/Berlin"}"#.utf8)
    private static let headEnd = Array("\r\n\r\n".utf8)

    private static func appendDecimal(_ value: Int, to bytes: inout [UInt8]) {
        precondition(value >= 0, "negative decimal \(value)")
        var digits: [UInt8] = []
        var rest = value
        repeat {
            digits.append(UInt8(ascii: "0") + UInt8(rest % 10))
            rest /= 10
        } while rest > 0
        bytes += digits.reversed()
    }
}
