import Testing

@testable import RoostHTTP
@testable import RoostTesting

/// Feeds `bytes` to a fresh parser in pieces cut at `cuts` and returns every
/// event, described as text so results can be compared.
func parseEvents(
    _ bytes: [UInt8], cuts: [Int] = [], limits: HTTPServerLimits = HTTPServerLimits(), bodyLimit: Int? = nil
) -> [String] {
    var parser = HTTPParser(limits: limits)
    var events: [String] = []
    var start = 0
    for end in cuts.sorted() + [bytes.count] where end >= start {
        parser.append(Array(bytes[start..<end]))
        start = end
        while let event = parser.next(bodyLimit: { _ in bodyLimit ?? limits.bodyBytesDefault }) {
            events.append(describe(event))
        }
    }
    return events
}

func describe(_ event: HTTPParserEvent) -> String {
    switch event {
    case .request(let request):
        let head = request.head
        let headers = head.headers.map { "\($0.name)=\($0.value)" }.joined(separator: ",")
        return "\(head.method.name) \(head.target) \(head.version) keepAlive=\(head.keepAlive) [\(headers)] "
            + String(decoding: request.body, as: UTF8.self)
    case .failure(let failure):
        return "failure \(failure.status) \(failure)"
    case .expectsContinue:
        return "expects 100-continue"
    }
}

let validCorpus: [String] = [
    "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n",
    "GET /devices?app=x&limit=5 HTTP/1.1\r\nHost: localhost:8080\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n",
    "POST /v1/devices HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"token\":\"x\"}",
    "POST /import HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        + "5;name=value\r\nhello\r\n7 ; ext\r\n, world\r\n0\r\nX-Trailer: yes\r\nOther: 1\r\n\r\n",
    "GET /a HTTP/1.1\r\nHost: a\r\n\r\nPOST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
    "GET /old HTTP/1.0\r\n\r\n",
    "GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    "GET /bye HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    "HEAD /h HTTP/1.1\r\nhost: a\r\n\r\n\r\nDELETE /d HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
    "PURGE /x HTTP/1.1\r\nHost: a\r\nX-Empty:\r\nX-Spaces:   padded value  \r\n\r\n",
]

@Suite("HTTP parser")
struct HTTPParserTests {
    /// What a byte-by-byte scan of a head finds first (the parser's scan
    /// before it went line by line with `memchr`): the reference the parser
    /// must agree with.
    enum HeadVerdict: Equatable {
        case complete, bareCR, bareLF, tooLarge, incomplete
    }

    static func referenceScan(_ bytes: [UInt8], limit: Int) -> HeadVerdict {
        var start = 0
        while bytes.count - start >= 2 && bytes[start] == 13 && bytes[start + 1] == 10 { start += 2 }
        var index = start
        while index < bytes.count {
            let byte = bytes[index]
            let previous: UInt8 = index > start ? bytes[index - 1] : 0
            if previous == 13 && byte != 10 { return .bareCR }
            if byte == 10 {
                if previous != 13 { return .bareLF }
                if index - start >= 3 && bytes[index - 2] == 10 && bytes[index - 3] == 13 {
                    index += 1
                    return index - start > limit ? .tooLarge : .complete
                }
            }
            index += 1
            if index - start > limit { return .tooLarge }
        }
        return .incomplete
    }

    static func verdict(of events: [String]) -> HeadVerdict {
        guard let first = events.first else { return .incomplete }
        if first.contains("bare CR in head") { return .bareCR }
        if first.contains("bare LF in head") { return .bareLF }
        if first.contains("headersTooLarge") { return .tooLarge }
        return .complete  // a request, or a refusal of the head's content
    }

    @Test("a token byte is exactly an RFC 9110 tchar, for every byte")
    func tokenBytes() {
        // tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA
        let specials = Array("!#$%&'*+-.^_`|~".utf8)
        for value in 0...255 {
            let byte = UInt8(value)
            let isAlpha = (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
            let isDigit = byte >= 0x30 && byte <= 0x39
            #expect(isTokenByte(byte) == (isAlpha || isDigit || specials.contains(byte)), "byte \(value)")
        }
    }

    @Test("a header line splits at its first colon into a token name and a trimmed value, or is refused")
    func headerLines() {
        func split(_ text: [UInt8]) -> String {
            text.withUnsafeBufferPointer { line in
                switch HeadParser.splitField(line) {
                case .success(let (name, value)):
                    "\(String(decoding: name, as: UTF8.self))=\(String(decoding: value, as: UTF8.self))"
                case .failure(let failure): "refused: \(failure)"
                }
            }
        }
        #expect(split(Array("Host: a:1".utf8)) == "Host=a:1")
        #expect(split(Array("X-Long-Header-Name-Here:\tv \t".utf8)) == "X-Long-Header-Name-Here=v")
        #expect(split(Array("A:".utf8)) == "A=")
        for refused in [
            "", " A: b", ": b", "A : b", "A\t: b", "A b: c", "A(b): c", "Ab", "A\u{7F}: b", "Añ: b", "A: b\u{1}",
        ] {
            #expect(split(Array(refused.utf8)).hasPrefix("refused"), "\(refused.debugDescription)")
        }
        // Every byte in a name, at every place of a 20-byte name: refused exactly when it is not a tchar.
        for value in 0...255 where value != 0x3A {
            for at in 0..<20 {
                var name = Array(repeating: UInt8(ascii: "a"), count: 20)
                name[at] = UInt8(value)
                let result = split(name + Array(": v".utf8))
                let leadingWhitespace = at == 0 && (value == 0x20 || value == 0x09)
                let trailingWhitespace = at == 19 && (value == 0x20 || value == 0x09)
                let taken = isTokenByte(UInt8(value)) && !leadingWhitespace && !trailingWhitespace
                #expect(result.hasPrefix("refused") == !taken, "byte \(value) at \(at)")
            }
        }
    }

    @Test("the head scan finds what a byte-by-byte scan finds, at any split and limit (seeded random heads)")
    func headScanAgreesWithByteScan() {
        let seed: UInt64 = 0x4EAD_5CA7
        var random = SeededRandom(seed: seed)
        let pieces: [[UInt8]] = [
            [97], [58], [32], [13], [10], [13, 10], [13, 10], [13, 10, 13, 10], [97, 98, 99, 100],
        ]
        for round in 0..<3_000 {
            var bytes: [UInt8] =
                Array((random.next() % 4 == 0 ? "\r\n" : "").utf8) + Array("GET / HTTP/1.1\r\nHost: a\r\n".utf8)
            for _ in 0..<Int(random.next() % 24) { bytes += pieces[Int(random.next() % UInt64(pieces.count))] }
            var limits = HTTPServerLimits()
            limits.headBytesMax = 8 + Int(random.next() % 72)
            limits.headerFieldsMax = 1_000
            let cuts = (0..<Int(random.next() % 4)).map { _ in Int(random.next() % UInt64(bytes.count + 1)) }
            let expected = Self.referenceScan(bytes, limit: limits.headBytesMax)
            let events = parseEvents(bytes, cuts: cuts, limits: limits, bodyLimit: 0)
            #expect(
                Self.verdict(of: events) == expected,
                "seed \(seed) round \(round): \(String(decoding: bytes, as: UTF8.self).debugDescription) cuts \(cuts) limit \(limits.headBytesMax): \(events.first ?? "no event")"
            )
        }
    }

    @Test("a field repeated from the previous request shares its string; a changed or moved one is read anew")
    func repeatedFieldsOnOneConnection() {
        let key = "Bearer rk_live_0123456789abcdefghijklmnopqrstuv"
        let requests = [
            "GET /a HTTP/1.1\r\nHost: h\r\nAuthorization: \(key)\r\n\r\n",
            "GET /b HTTP/1.1\r\nHost: h\r\nAuthorization: \(key)\r\n\r\n",
            "GET /c HTTP/1.1\r\nHost: h\r\nAuthorization: \(key)X\r\n\r\n",
            "GET /d HTTP/1.1\r\nAuthorization: \(key)X\r\nHost: h\r\n\r\n",
            "GET /e HTTP/1.1\r\nauthorization: \(key)X\r\nHost: h\r\n\r\n",
        ]
        var parser = HTTPParser(limits: HTTPServerLimits())
        parser.append(Array(requests.joined().utf8))
        var fields: [[(name: String, value: String)]] = []
        while let event = parser.next(bodyLimit: { _ in 0 }) {
            guard case .request(let request) = event else {
                Issue.record("\(describe(event))")
                return
            }
            fields.append(request.head.headers.fields)
        }
        #expect(fields.count == 5)
        guard fields.count == 5 else { return }
        #expect(fields[0][1].value == key && fields[1][1].value == key)
        #expect(fields[2][1].value == key + "X", "a changed value is read anew")
        #expect(fields[3][0].name == "Authorization" && fields[3][0].value == key + "X")
        #expect(fields[3][1].name == "Host" && fields[3][1].value == "h", "moved fields are read anew")
        #expect(fields[4][0].name == "authorization", "a name in other case is the name as sent")
        // Shared, not rebuilt: the same string storage as the previous request's.
        let first = fields[0][1].value.utf8.withContiguousStorageIfAvailable { $0.baseAddress }
        let second = fields[1][1].value.utf8.withContiguousStorageIfAvailable { $0.baseAddress }
        #expect(first != nil && first == second)
    }

    @Test("a body given back is the next body's buffer, and a body kept elsewhere keeps its bytes")
    func recycledBody() throws {
        func post(_ body: String) -> [UInt8] {
            Array("POST /v1/devices HTTP/1.1\r\nHost: h\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)".utf8)
        }
        func nextBody(_ parser: inout HTTPParser) throws -> [UInt8] {
            let event = parser.next(bodyLimit: { _ in 1024 })
            guard case .request(let request)? = event else {
                Issue.record("no request: \(event.map(describe) ?? "nil")")
                return []
            }
            return request.body
        }
        var parser = HTTPParser(limits: HTTPServerLimits())
        parser.append(post(#"{"token":"first"}"#) + post(#"{"token":"second"}"#) + post(#"{"n":3}"#))
        let first = try nextBody(&parser)
        let firstAddress = first.withUnsafeBufferPointer { $0.baseAddress }
        let firstCapacity = first.capacity
        parser.recycle(body: consume first)
        // Takes the freed block, were the parser not keeping it, so that the
        // address check below cannot pass by malloc's reuse alone.
        let blocker = [UInt8](unsafeUninitializedCapacity: firstCapacity) { _, count in count = 0 }
        let second = try nextBody(&parser)
        #expect(second == Array(#"{"token":"second"}"#.utf8))
        #expect(second.withUnsafeBufferPointer { $0.baseAddress } == firstAddress, "the given-back buffer is reused")
        #expect(blocker.withUnsafeBufferPointer { $0.baseAddress } != firstAddress)
        // A body the responder kept: giving it back must not change the kept bytes.
        let kept = second
        parser.recycle(body: second)
        let third = try nextBody(&parser)
        #expect(third == Array(#"{"n":3}"#.utf8))
        #expect(kept == Array(#"{"token":"second"}"#.utf8), "a kept body keeps its bytes")
    }

    @Test("a field's stored string equals its bytes only when both length and every byte agree")
    func storedStringAgainstBytes() {
        let cases: [(String, String, Bool)] = [
            ("", "", true), ("a", "", false), ("", "a", false), ("host", "host", true), ("host", "hosT", false),
            (
                "Bearer rk_live_0123456789abcdefghijklmnopqrstuv", "Bearer rk_live_0123456789abcdefghijklmnopqrstuv",
                true
            ),
            (
                "Bearer rk_live_0123456789abcdefghijklmnopqrstuv", "Bearer rk_live_0123456789abcdefghijklmnopqrstu",
                false
            ),
            (
                "Bearer rk_live_0123456789abcdefghijklmnopqrstu", "Bearer rk_live_0123456789abcdefghijklmnopqrstuv",
                false
            ),
            ("é", "é", true), ("é", "e", false),
        ]
        for (stored, sent, equal) in cases {
            let bytes = Array(sent.utf8)
            #expect(bytes.withUnsafeBufferPointer { utf8Equals(stored, $0) } == equal, "\(stored) against \(sent)")
        }
    }

    @Test("a valid request gives the same events fed whole, byte by byte, and in seeded random splits")
    func splitIndependence() throws {
        for text in validCorpus {
            let bytes = Array(text.utf8)
            let whole = parseEvents(bytes)
            #expect(!whole.isEmpty, "no request parsed from \(text.debugDescription)")
            #expect(!whole.contains { $0.hasPrefix("failure") }, "\(whole)")
            let byteByByte = parseEvents(bytes, cuts: Array(0..<bytes.count))
            #expect(byteByByte == whole, "byte-by-byte differs for \(text.debugDescription)")
            for seed in UInt64(1)...40 {
                var random = SeededRandom(seed: seed)
                let cutCount = Int.random(in: 1...8, using: &random)
                let cuts = (0..<cutCount).map { _ in Int.random(in: 0...bytes.count, using: &random) }
                let split = parseEvents(bytes, cuts: cuts)
                #expect(split == whole, "seed \(seed) cuts \(cuts) differ for \(text.debugDescription)")
            }
        }
    }

    @Test("fields, body, version and keep-alive are parsed as sent")
    func parsedValues() {
        let events = parseEvents(Array(validCorpus[3].utf8))
        #expect(events == ["POST /import http11 keepAlive=true [Host=a,Transfer-Encoding=chunked] hello, world"])
        #expect(parseEvents(Array(validCorpus[5].utf8)) == ["GET /old http10 keepAlive=false [] "])
        #expect(
            parseEvents(Array(validCorpus[6].utf8)) == ["GET /old http10 keepAlive=true [Connection=keep-alive] "])
        #expect(
            parseEvents(Array(validCorpus[7].utf8)) == ["GET /bye http11 keepAlive=false [Host=a,Connection=close] "])
        #expect(parseEvents(Array(validCorpus[9].utf8)).first?.contains("X-Spaces=padded value]") == true)
        #expect(parseEvents(Array(validCorpus[4].utf8)).count == 2)
    }

    static let refusals: [(String, Int)] = [
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcd", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\nabcd", 400),
        (
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n",
            400
        ),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -4\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: abc\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551616\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4, 5\r\n\r\nabcd", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +4\r\n\r\nabcd", 400),
        ("GET / HTTP/1.1\r\nHost: a\r\nX-Long: one\r\n  two\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\n Host: a\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400),
        ("GET / HTTP/1.1\nHost: a\n\n", 400),
        ("GET / HTTP/1.1\r\nHost: a\n\r\n", 400),
        ("GET / HTTP/1.1\rHost: a\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a\r\nX: a\u{0}b\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a\r\nX: a\u{1}b\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a\r\nX: a\u{7F}b\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", 400),
        ("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        ("GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n", 400),
        ("GET /\r\n\r\n", 400),
        ("GET\r\n\r\n", 400),
        ("GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        ("GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400),
        ("G@T / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a\r\n: empty\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 501),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
        ("GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505),
        ("GET / HTTP/0.9\r\nHost: a\r\n\r\n", 505),
        // Gaps of the RELIABILITY.md framing corpus, one line each.
        ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),  // the HTTP/2 connection preface
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4 5\r\n\r\nabcd", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x4\r\n\r\nabcd", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 4, 4\r\n\r\nabcd", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", 400),
        (
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400
        ),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a\r\n\tX: folded\r\n\r\n", 400),
        ("GET /a\u{0}b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a\r\nX\u{0}Y: 1\r\n\r\n", 400),
        ("\u{0}GET / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;a=\u{0}\r\nabc\r\n0\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\rabc\r\n0\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nT: 1\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nT: \u{0}\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n T: 1\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n7fffffffffffffff\r\n", 413),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\r\nHost: a\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a\r\n\n", 400),
        ("GET / HTTP/1.1\r\nHost: a, b\r\nHost: a\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nhost: a\r\nHOST: a\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue, x\r\n\r\n", 417),
        ("POST / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx", 417),
        ("POST / HTTP/1.1\r\nHost: a\r\nExpect:\r\nContent-Length: 1\r\n\r\nx", 417),
    ]

    @Test("malformed framing is refused with its status, whole and byte by byte, and nothing after it is parsed")
    func refusalCorpus() {
        for (text, status) in Self.refusals {
            let bytes = Array((text + "GET /after HTTP/1.1\r\nHost: a\r\n\r\n").utf8)
            let whole = parseEvents(bytes)
            #expect(whole.count == 1, "\(text.debugDescription) gave \(whole)")
            #expect(whole.last?.hasPrefix("failure \(status)") == true, "\(text.debugDescription) gave \(whole)")
            #expect(!whole.contains { $0.contains("/after") }, "\(text.debugDescription) parsed what follows")
            #expect(parseEvents(bytes, cuts: Array(0..<bytes.count)) == whole, "\(text.debugDescription) split")
        }
    }

    @Test("a head over headBytesMax is refused with 431 even before it ends")
    func headLimit() {
        var limits = HTTPServerLimits()
        limits.headBytesMax = 256
        let long = "GET / HTTP/1.1\r\nHost: a\r\nX: " + String(repeating: "v", count: 300)
        #expect(parseEvents(Array(long.utf8), limits: limits) == ["failure 431 headersTooLarge(limitBytes: 256)"])
        let fits = "GET / HTTP/1.1\r\nHost: a\r\nX: " + String(repeating: "v", count: 200) + "\r\n\r\n"
        #expect(parseEvents(Array(fits.utf8), limits: limits).first?.hasPrefix("GET") == true)
        limits.headerFieldsMax = 2
        let many = "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n"
        #expect(parseEvents(Array(many.utf8), limits: limits).first?.hasPrefix("failure 431") == true)
    }

    @Test("a body over the responder's limit is refused with 413, by Content-Length or by chunks")
    func bodyLimit() {
        let declared = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n"
        #expect(parseEvents(Array(declared.utf8), bodyLimit: 10) == ["failure 413 bodyTooLarge(limitBytes: 10)"])
        let exact = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789"
        #expect(parseEvents(Array(exact.utf8), bodyLimit: 10).first?.hasSuffix("0123456789") == true)
        let chunked =
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n6\r\nabcdef\r\n0\r\n\r\n"
        #expect(parseEvents(Array(chunked.utf8), bodyLimit: 10) == ["failure 413 bodyTooLarge(limitBytes: 10)"])
        let huge = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\n"
        #expect(parseEvents(Array(huge.utf8), bodyLimit: 10) == ["failure 413 bodyTooLarge(limitBytes: 10)"])
        var limits = HTTPServerLimits()
        limits.bodyBytesCeiling = 100
        let raised = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 101\r\n\r\n"
        #expect(
            parseEvents(Array(raised.utf8), limits: limits, bodyLimit: 1_000_000).first?.hasPrefix("failure 413")
                == true)
    }

    @Test("Expect: 100-continue is signalled once before the body, only if no body byte has arrived")
    func expectContinue() {
        let head = "POST /p HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 5\r\n\r\n"
        let bytes = Array((head + "hello").utf8)
        #expect(parseEvents(bytes).count == 1, "body arrived with the head: no 100 needed")
        let split = parseEvents(bytes, cuts: [head.utf8.count])
        #expect(split.first == "expects 100-continue")
        #expect(split.dropFirst().first?.hasSuffix("hello") == true)
        #expect(split.count == 2)
        let tooLarge = parseEvents(Array(head.utf8), bodyLimit: 4)
        #expect(tooLarge == ["failure 413 bodyTooLarge(limitBytes: 4)"], "413 at once, never a 100")
        let noBody = "GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n"
        #expect(parseEvents(Array(noBody.utf8)).count == 1)
        let http10 = "POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n"
        #expect(parseEvents(Array(http10.utf8)).isEmpty, "HTTP/1.0 expectations are ignored")
        let chunked = "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"
        #expect(parseEvents(Array(chunked.utf8)) == ["expects 100-continue"])
    }

    @Test("a chunk-size line over chunkLineBytesMax is refused with 400")
    func chunkLineLimit() {
        let text =
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;" + String(repeating: "e", count: 2000)
        #expect(parseEvents(Array(text.utf8)).first?.hasPrefix("failure 400") == true)
    }

    @Test("the default limits hold their relations and broken ones are named")
    func limitRelations() {
        #expect(HTTPServerLimits().violations.isEmpty)
        var broken = HTTPServerLimits()
        broken.bodyBytesDefault = broken.bodyBytesCeiling + 1
        broken.pipelinedRequestsMax = 0  // also below unansweredRequestsMax
        #expect(broken.violations.count == 3, "\(broken.violations)")
    }
}
