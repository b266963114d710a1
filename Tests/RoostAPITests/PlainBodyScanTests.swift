import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

/// The register route's fast path (`RegisterBodyScan`) against the general
/// reader: a body the scan takes gives the same request, or the same error,
/// as the tree `JSONReader` builds; a body it declines goes the general way.
@Suite("Register bodies scanned in place (issue 25)")
struct RegisterBodyScanTests {
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
        guard let scan = RegisterBodyScan(body) else { return nil }
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
    ]

    @Test("every seed body and thousands of mutations answer the same on both paths; plain bodies take the scan")
    func sameAnswersAsTheTree() {
        var random = SeededRandom(seed: 0x5CA9_B0D1)
        let alphabet = Array(#"{}[],:"\ 0123456789eE.+-tfnul"#.utf8) + [0x00, 0x1F, 0x7F, 0xC3, 0xA9, 0xFF]
        var taken = 0
        var compared = 0
        for seed in Self.seeds {
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
                guard let fast = Self.scanned(body) else { continue }
                taken += 1
                let slow = Self.general(body)
                #expect(fast == slow, "\(String(decoding: body, as: UTF8.self))")
            }
        }
        #expect(compared == Self.seeds.count * 600)
        #expect(taken > compared / 10, "the scan took \(taken) of \(compared) bodies")
    }

    @Test("the plain bodies of the seeds are taken; escapes, non-ASCII, repeats, arrays and nesting are not")
    func whatTheScanTakes() {
        for seed in Self.seeds where !seed.contains("unknown") {
            #expect(RegisterBodyScan(Array(seed.utf8)) != nil, "\(seed)")
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
        for body in declined { #expect(RegisterBodyScan(Array(body.utf8)) == nil, "\(body)") }
        // More members than the scan holds: the general path.
        let many = (0..<RegisterBodyScan.membersMax).map { #""m\#($0)":1"# }.joined(separator: ",")
        #expect(RegisterBodyScan(Array(#"{"platform":"ios",\#(many)}"#.utf8)) == nil)
    }
}
