import RoostCluster
import RoostTesting
import Testing

/// The etcd client's HTTP/1.1 response parser: framing by Content-Length,
/// chunked (with etcd's gRPC trailer) and close; bytes split anyhow give the
/// same answer; malformed and oversized input refused.
@Suite("HTTP client response parser")
struct HTTPClientResponseParserTests {
    /// A whole answer as the parser reports it: head, body, whether it ended.
    struct Parsed: Equatable {
        var heads: [HTTPClientResponseHead] = []
        var bodies: [[UInt8]] = []
        var ends = 0
    }

    static func parse(_ pieces: [[UInt8]], finish: Bool = false, limits: HTTPClientLimits = .default)
        throws(HTTPClientResponseError) -> Parsed
    {
        var parser = HTTPClientResponseParser(limits: limits)
        var parsed = Parsed()
        func drain() throws(HTTPClientResponseError) {
            while let event = try parser.next() { record(event) }
        }
        func record(_ event: HTTPClientResponseEvent) {
            switch event {
            case .head(let head):
                parsed.heads.append(head)
                parsed.bodies.append([])
            case .body(let bytes): parsed.bodies[parsed.bodies.count - 1].append(contentsOf: bytes)
            case .end: parsed.ends += 1
            }
        }
        for piece in pieces {
            parser.append(piece)
            try drain()
        }
        if finish, let last = try parser.finish() { record(last) }
        return parsed
    }

    static let etcdError = Array(
        ("HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nTrailer: Grpc-Trailer-Content-Type\r\n"
            + "Transfer-Encoding: chunked\r\n\r\n"
            + "21\r\n{\"error\":\"lease not found\",\"x\":1}\r\n0\r\nGrpc-Trailer-Content-Type: application/grpc\r\n\r\n"
            + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}").utf8)

    @Test("a chunked answer with a trailer, then a Content-Length one on the same connection")
    func chunkedThenLength() throws {
        let parsed = try Self.parse([Self.etcdError])
        #expect(parsed.heads.map(\.status) == [404, 200])
        #expect(parsed.heads[0].field("transfer-encoding") == "chunked")
        #expect(parsed.bodies == [Array("{\"error\":\"lease not found\",\"x\":1}".utf8), Array("{}".utf8)])
        #expect(parsed.ends == 2)
        #expect(parsed.heads[0].keepsConnection)
    }

    @Test("the same answers whatever the split (seeded random splits)")
    func splitIndependence() throws {
        let whole = try Self.parse([Self.etcdError])
        let seed: UInt64 = 0x5EED_E7CD
        var random = SeededRandom(seed: seed)
        for round in 0..<200 {
            var pieces: [[UInt8]] = []
            var index = 0
            while index < Self.etcdError.count {
                let length = 1 + Int(random.next() % 9)
                let end = min(Self.etcdError.count, index + length)
                pieces.append(Array(Self.etcdError[index..<end]))
                index = end
            }
            #expect(try Self.parse(pieces) == whole, "seed \(seed) round \(round)")
        }
    }

    @Test("a close-delimited body ends at end of stream; HTTP/1.0 and Connection: close do not keep the connection")
    func closeDelimited() throws {
        let bytes = Array("HTTP/1.0 200 OK\r\n\r\nabc".utf8)
        let parsed = try Self.parse([bytes], finish: true)
        #expect(parsed.bodies == [Array("abc".utf8)] && parsed.ends == 1)
        #expect(!parsed.heads[0].keepsConnection)
        let closing = try Self.parse([Array("HTTP/1.1 204 No Content\r\nConnection: Close\r\n\r\n".utf8)])
        #expect(closing.ends == 1 && !closing.heads[0].keepsConnection)
    }

    @Test("a field value loses its leading and trailing spaces and tabs, and keeps those inside")
    func fieldValueWhitespace() throws {
        let parsed = try Self.parse([
            Array(
                ("HTTP/1.1 200 OK\r\nX-Note: \t a \tb \t \r\nX-Empty: \t \r\nContent-Length:  1\t\r\n"
                    + "Connection: keep-alive ,\t close \r\n\r\nx").utf8)
        ])
        #expect(parsed.heads[0].field("x-note") == "a \tb")
        #expect(parsed.heads[0].field("x-empty") == "")
        #expect(parsed.bodies == [Array("x".utf8)] && parsed.ends == 1)
        #expect(!parsed.heads[0].keepsConnection)
        let keeping = try Self.parse([
            Array("HTTP/1.0 200 OK\r\nConnection:\tKeep-Alive \r\nContent-Length: 0\r\n\r\n".utf8)
        ])
        #expect(keeping.heads[0].keepsConnection)
    }

    @Test("an interim 100 Continue is skipped")
    func interim() throws {
        let parsed = try Self.parse([
            Array("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".utf8)
        ])
        #expect(parsed.heads.map(\.status) == [200] && parsed.ends == 1)
    }

    @Test("a cut answer is truncated at end of stream")
    func truncated() {
        for text in [
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", "HTTP/1.1 2",
        ] {
            #expect(throws: HTTPClientResponseError.truncated) { try Self.parse([Array(text.utf8)], finish: true) }
        }
    }

    @Test(
        "malformed answers are refused",
        arguments: [
            "HTTP/2 200 OK\r\n\r\n", "HTTP/1.1 20 OK\r\n\r\n", "HTTP/1.1 700 Odd\r\n\r\n", "HTTP/1.1 200OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nNo colon\r\n\r\n", "HTTP/1.1 200 OK\r\n: empty\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\nx\r\n",
        ])
    func malformed(text: String) {
        #expect(throws: HTTPClientResponseError.self) { try Self.parse([Array(text.utf8)]) }
    }

    @Test("heads, chunk lines and trailers beyond their limits are refused")
    func limits() {
        let limits = HTTPClientLimits(headBytesMax: 64, lineBytesMax: 8, trailerBytesMax: 16)
        let longHead = "HTTP/1.1 200 OK\r\nX: " + String(repeating: "a", count: 80)
        #expect(throws: HTTPClientResponseError.headTooLarge) { try Self.parse([Array(longHead.utf8)], limits: limits) }
        let chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        #expect(throws: HTTPClientResponseError.lineTooLarge) {
            try Self.parse([Array((chunked + "1;ext=aaaaaaaa\r\n").utf8)], limits: limits)
        }
        #expect(throws: HTTPClientResponseError.lineTooLarge) {
            try Self.parse([Array((chunked + "0\r\nA: 1\r\nB: 22222222\r\n\r\n").utf8)], limits: limits)
        }
    }
}
