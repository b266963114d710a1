import RoostHTTP

/// The parser's invariants checked on arbitrary bytes: shared by the libFuzzer
/// target (Fuzz/HTTPParserFuzz) and the test that replays committed inputs.
package enum HTTPParserFuzzCheck {
    /// Small limits, so that arbitrary inputs reach every limit check.
    package static let limits: HTTPServerLimits = {
        var limits = HTTPServerLimits()
        limits.headBytesMax = 512
        limits.headerFieldsMax = 16
        limits.chunkLineBytesMax = 64
        limits.bodyBytesDefault = 256
        limits.bodyBytesCeiling = 4096
        return limits
    }()

    /// The body limit every head gets.
    package static let bodyLimitBytes = 256

    /// Returns a description of the first broken invariant for `input`, or nil.
    /// The first byte seeds where the rest is cut; the rest is what a client sent.
    /// Checks: the events are the same whole, byte by byte (inputs up to 4 KiB)
    /// and cut at seeded random places; at most one failure, and nothing after
    /// it; no body over the limit; `requestsParsed` counts the requests. O(n) to
    /// O(n²) for the byte-by-byte pass over small inputs.
    package static func violation(in input: [UInt8]) -> String? {
        guard let seed = input.first else { return nil }
        let bytes = Array(input.dropFirst())
        let whole = events(bytes, cuts: [])
        if let problem = checkSequence(whole.events, requestsParsed: whole.requestsParsed) { return problem }
        var state = UInt64(seed) &* 0x9E37_79B9_7F4A_7C15 &+ UInt64(bytes.count)
        var cuts: [Int] = []
        for _ in 0..<(Int(seed % 8) + 1) {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            cuts.append(bytes.isEmpty ? 0 : Int((state >> 33) % UInt64(bytes.count + 1)))
        }
        let split = events(bytes, cuts: cuts.sorted())
        if split.events != whole.events {
            return "cuts \(cuts) give \(split.events), whole gives \(whole.events)"
        }
        if bytes.count <= 4096 {
            let single = events(bytes, cuts: Array(0..<bytes.count))
            if single.events != whole.events {
                return "byte by byte gives \(single.events), whole gives \(whole.events)"
            }
        }
        return nil
    }

    private static func checkSequence(_ events: [String], requestsParsed: Int) -> String? {
        let failures = events.filter { $0.hasPrefix("failure") }.count
        if failures > 1 { return "\(failures) failures: \(events)" }
        if failures == 1 && events.last?.hasPrefix("failure") != true { return "events after a failure: \(events)" }
        if events.count - failures != requestsParsed {
            return "requestsParsed \(requestsParsed) but \(events.count - failures) requests"
        }
        return nil
    }

    /// Feeds `bytes` cut at `cuts` (sorted) and returns the events (without
    /// `expectsContinue`, which depends on the cuts by design).
    private static func events(_ bytes: [UInt8], cuts: [Int]) -> (events: [String], requestsParsed: Int) {
        var parser = HTTPParser(limits: limits)
        var described: [String] = []
        var start = 0
        for end in cuts + [bytes.count] where end >= start {
            parser.append(Array(bytes[start..<end]))
            start = end
            while let event = parser.next(bodyLimit: { _ in bodyLimitBytes }) {
                switch event {
                case .request(let request):
                    precondition(
                        request.body.count <= bodyLimitBytes,
                        "body of \(request.body.count) bytes over the limit \(bodyLimitBytes)")
                    let head = request.head
                    let fields = head.headers.map { "\($0.name)=\($0.value)" }.joined(separator: ",")
                    described.append(
                        "request \(head.method.name) \(head.target) \(head.version) \(head.keepAlive) [\(fields)] "
                            + "\(request.body)")
                case .failure(let failure):
                    precondition(parser.phase == .failed, "a failure left the parser in \(parser.phase)")
                    described.append("failure \(failure)")
                case .expectsContinue:
                    break
                }
            }
        }
        return (described, parser.requestsParsed)
    }
}
