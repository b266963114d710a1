import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

/// The write routes' fast path (`PlainBodyScan`) against the general
/// reader: a body the scan takes gives the same request, or the same error,
/// as the tree `JSONReader` builds; a body it declines goes the general way.
/// Register, PATCH and feedback bodies.
@Suite("Plain bodies scanned in place (issue 25)")
struct PlainBodyScanTests {
    /// What the general path answers: the request, or the error's envelope.
    static func general(_ body: [UInt8]) -> Result<RegisterRequest, APIError> {
        Result { () throws(APIError) -> RegisterRequest in
            let value = try JSONBody.parse(body)
            guard value.objectMembers != nil else { throw APIError.invalidJSON("the body must be a JSON object") }
            return try RegisterBody.parse(value)
        }
    }

    /// What the fast path answers, nil when it declines the body.
    static func scanned(_ body: [UInt8]) -> Result<RegisterRequest, APIError>? {
        guard let scan = PlainBodyScan(body) else { return nil }
        return Result { () throws(APIError) -> RegisterRequest in try RegisterBody.parse(members: scan) }
    }

    static let token = TestTokens.apns(7)
    static let seeds: [String] = [
        #"{"platform":"ios","token":"\#(token)"}"#,
        #"{"platform":"ios","token":"\#(token)","external_id":"user_1","app_version":"1.2.3","locale":"en_US","timezone":"Europe/Paris","push_permission":true,"opted_in":false}"#,
        #"{"platform":"android","token":"\#(TestTokens.fcm(3))","tags":{"plan":"pro","n":3,"beta":true,"old":null},"client_sequence":42}"#,
        #" { "platform" : "ios" , "token" : "\#(token)" , "environment" : "sandbox" , "bundle_id" : "com.example.app" } "#,
        #"{"platform":"ios","token":"\#(token)","device_id":"dev_abc","installation_id":"inst-1","installation_secret":"s3cret","unknown":[1,2],"extra":{"a":1}}"#,
        #"{"platform":"ios","token":"\#(token)","external_id":null,"bundle_id":null,"app_version":"","tags":null,"push_permission":null}"#,
        #"{"platform":"ios","token":"\#(token)","client_sequence":-1.5e+3,"tags":{"x":1e2,"y":-0}}"#,
        #"{"platform":"ios","token":"ExponentPushToken[abc]"}"#,
        #"{"platform":"web","token":"\#(token)"}"#,
        #"{"platform":"ios","token":7}"#,
        #"{"platform":"ios"}"#,
        #"{}"#,
        // Platform and environment, read in place by the scan: every answer of both.
        #"{"platform":"IOS","token":"\#(token)","environment":"production"}"#,
        #"{"platform":"android","token":"\#(TestTokens.fcm(3))","environment":"sandbox"}"#,
        #"{"platform":"android","token":"\#(TestTokens.fcm(3))","environment":"production"}"#,
        #"{"platform":"ios","token":"\#(token)","environment":"prod"}"#,
        #"{"platform":null,"token":"\#(token)","environment":null}"#,
        #"{"platform":1,"token":"\#(token)","environment":true}"#,
        #"{"platform":"ios","token":"\#(token)","environment":7}"#,
    ]

    /// Each seed and 599 mutations of it (one to three edits each), given
    /// to `compare`, which returns whether the scan took the body.
    static func mutations(of seeds: [String], seed: UInt64, _ compare: ([UInt8]) -> Bool) -> (
        compared: Int, taken: Int
    ) {
        var random = SeededRandom(seed: seed)
        let alphabet = Array(#"{}[],:"\ 0123456789eE.+-tfnul"#.utf8) + [0x00, 0x1F, 0x7F, 0xC3, 0xA9, 0xFF]
        var taken = 0
        var compared = 0
        for seed in seeds {
            let bytes = Array(seed.utf8)
            for round in 0..<600 {
                var body = bytes
                // Round 0 is the seed itself; then one to three edits.
                for _ in 0..<(round == 0 ? 0 : 1 + Int(random.next() % 3)) where !body.isEmpty {
                    let at = Int(random.next() % UInt64(body.count))
                    let byte = alphabet[Int(random.next() % UInt64(alphabet.count))]
                    switch random.next() % 4 {
                    case 0: body[at] = byte
                    case 1: body.insert(byte, at: at)
                    case 2: body.remove(at: at)
                    default: body.insert(contentsOf: body[at..<min(body.count, at + 12)], at: at)
                    }
                }
                compared += 1
                if compare(body) { taken += 1 }
            }
        }
        return (compared, taken)
    }

    @Test("a register field is found by its name's bytes, and by no other name")
    func fieldsByName() {
        func field(_ name: [UInt8]) -> RegisterField? { name.withUnsafeBufferPointer { RegisterField.named($0) } }
        let names = Set(RegisterField.allCases.map(\.name))
        #expect(names.count == RegisterField.allCases.count)
        #expect(RegisterBody.memberNames == RegisterField.allCases.map(\.name))
        for field in RegisterField.allCases { #expect(field.name == field.staticName.description) }
        for expected in RegisterField.allCases {
            let name = Array(expected.name.utf8)
            #expect(field(name) == expected)
            // Every name one edit away is another field's only when it is spelled as one.
            var near: [[UInt8]] = [Array(name.dropLast()), Array(name.dropFirst()), name + [0x73], [0x5F] + name]
            for at in name.indices {
                var changed = name
                changed[at] ^= 0x20  // case flipped, or `_` → DEL
                near.append(changed)
            }
            for other in near {
                let spelled = String(decoding: other, as: UTF8.self)
                #expect(field(other) == RegisterField.allCases.first { $0.name == spelled }, "\(spelled)")
            }
        }
        #expect(field([]) == nil)
    }

    @Test("every seed body and thousands of mutations answer the same on both paths; plain bodies take the scan")
    func sameAnswersAsTheTree() {
        let (compared, taken) = Self.mutations(of: Self.seeds, seed: 0x5CA9_B0D1) { body in
            guard let fast = Self.scanned(body) else { return false }
            #expect(fast == Self.general(body), "\(String(decoding: body, as: UTF8.self))")
            return true
        }
        #expect(compared == Self.seeds.count * 600)
        #expect(taken > compared / 10, "the scan took \(taken) of \(compared) bodies")
    }

    /// A route's rules over a body's members, on both paths: the general one
    /// (`JSONBody`, whose errors come first), and the scan (nil when it declines).
    static func bothPaths<Value: Equatable>(
        _ body: [UInt8], _ rules: (any BodyMembers) throws(APIError) -> Value
    ) -> (general: Result<Value, APIError>, scanned: Result<Value, APIError>?) {
        let general = Result { () throws(APIError) -> Value in
            let value = try JSONBody.parse(body)
            guard value.objectMembers != nil else { throw APIError.invalidJSON("the body must be a JSON object") }
            return try rules(value)
        }
        guard let scan = PlainBodyScan(body) else { return (general, nil) }
        return (general, Result { () throws(APIError) -> Value in try rules(scan) })
    }

    /// What a PATCH body asks for, comparable.
    struct PatchFields: Equatable {
        let tags: TagsChange
        let optedIn: Bool?
    }

    /// What a feedback body asks for, comparable.
    struct Report: Equatable {
        let token: PushToken
        let reason: InvalidationReason
        let reportedAt: Timestamp?
    }

    @Test("PATCH and feedback bodies and their mutations answer the same on both paths")
    func patchAndFeedbackBodies() {
        let patches = [
            #"{"tags":{"plan":"pro","n":3,"beta":true,"old":null}}"#, #"{"opted_in":false}"#,
            #"{"tags":null,"opted_in":true,"other":"x"}"#, #"{"tags":{}}"#, #"{}"#, #"{"opted_in":"no"}"#,
        ]
        let patched = Self.mutations(of: patches, seed: 0x9A7C) { body in
            let (general, scanned) = Self.bothPaths(body) { (members) throws(APIError) -> PatchFields in
                let fields = try DeviceRoutes.patchFields(members)
                return PatchFields(tags: fields.tags, optedIn: fields.optedIn)
            }
            guard let scanned else { return false }
            #expect(scanned == general, "\(String(decoding: body, as: UTF8.self))")
            return true
        }
        #expect(patched.taken > patched.compared / 10, "the scan took \(patched.taken) of \(patched.compared)")
        let at = Timestamp(millisecondsSinceEpoch: 1_790_000_000_000)
        let reports = [
            #"{"provider":"apns","token":"\#(Self.token)"}"#,
            #"{"provider":"fcm","token":"\#(TestTokens.fcm(3))","reason":"UNREGISTERED","timestamp":"2026-09-20T14:02:11.000Z"}"#,
            #"{"provider":"apns","token":"\#(Self.token)","reason":"BadDeviceToken","timestamp":"yesterday"}"#,
            #"{"provider":"gcm","token":"x"}"#, #"{"token":"\#(Self.token)"}"#,
        ]
        let reported = Self.mutations(of: reports, seed: 0xFEED) { body in
            let (general, scanned) = Self.bothPaths(body) { (members) throws(APIError) -> Report in
                guard
                    case .reportFeedback(let token, let reason, let reportedAt, let now) =
                        try FeedbackRoutes.report(members, at: at)
                else { preconditionFailure("feedback made another command") }
                #expect(now == at)
                return Report(token: token, reason: reason, reportedAt: reportedAt)
            }
            guard let scanned else { return false }
            #expect(scanned == general, "\(String(decoding: body, as: UTF8.self))")
            return true
        }
        #expect(reported.taken > reported.compared / 10, "the scan took \(reported.taken) of \(reported.compared)")
    }

    @Test("the plain bodies of the seeds are taken; escapes, non-ASCII, repeats, arrays and nesting are not")
    func whatTheScanTakes() {
        for seed in Self.seeds where !seed.contains("unknown") {
            #expect(PlainBodyScan(Array(seed.utf8)) != nil, "\(seed)")
        }
        let declined = [
            #"{"platform":"ios","token":"\#(Self.token)","external_id":"caf\u00e9"}"#,
            #"{"platform":"ios","token":"\#(Self.token)","external_id":"café"}"#,
            #"{"platform":"ios","platform":"ios","token":"\#(Self.token)"}"#,
            #"{"platform":"ios","token":"\#(Self.token)","tags":{"a":1,"a":2}}"#,
            #"{"platform":"ios","token":"\#(Self.token)","tags":{"a":{"b":1}}}"#,
            #"{"platform":"ios","token":"\#(Self.token)","list":[]}"#,
            #"{"platform":"ios","token":"\#(Self.token)"} x"#,
            #"{"platform":"ios","token":"\#(Self.token)","n":01}"#,
            #"["platform"]"#, "", "  ",
        ]
        for body in declined { #expect(PlainBodyScan(Array(body.utf8)) == nil, "\(body)") }
        // More members than the scan holds: the general path.
        let many = (0..<PlainBodyScan.membersMax).map { #""m\#($0)":1"# }.joined(separator: ",")
        #expect(PlainBodyScan(Array(#"{"platform":"ios",\#(many)}"#.utf8)) == nil)
    }
}
