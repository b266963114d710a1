import Testing

@testable import RoostHTTP

/// The bytes `HTTPResponseWriter` puts on the wire, pinned: the status line,
/// the fields in the responder's order, the framing fields the writer owns.
@Suite("HTTP response writer: the exact bytes of an answer's head")
struct HTTPResponseWriterTests {
    private func written(_ response: HTTPResponse, keepAlive: Bool = true, isHead: Bool = false) -> String {
        var out: [UInt8] = Array("before|".utf8)
        HTTPResponseWriter.append(response, keepAlive: keepAlive, isHead: isHead, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    @Test(
        "an answer is its status line, its fields in order, Content-Length, Connection and its body, after what was there"
    )
    func answerBytes() {
        let longValue = String(repeating: "v", count: 40)  // not a small string
        let response = HTTPResponse(
            status: 201,
            headers: [("Content-Type", "application/json"), ("Location", "/v1/devices/é1"), ("X-Long", longValue)],
            body: Array("{}".utf8))
        #expect(
            written(response)
                == "before|HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nLocation: /v1/devices/é1\r\n"
                + "X-Long: \(longValue)\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n{}")
        #expect(
            written(HTTPResponse(status: 404, body: Array(repeating: 65, count: 1234)), keepAlive: false)
                == "before|HTTP/1.1 404 Not Found\r\nContent-Length: 1234\r\nConnection: close\r\n\r\n"
                + String(repeating: "A", count: 1234))
    }

    @Test("every status Roost answers has its reason phrase; another three-digit status says Status")
    func statusLines() {
        let reasons: [Int: String] = [
            100: "Continue", 200: "OK", 201: "Created", 202: "Accepted", 204: "No Content", 304: "Not Modified",
            400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 409: "Conflict", 413: "Content Too Large", 415: "Unsupported Media Type",
            417: "Expectation Failed", 422: "Unprocessable Content", 429: "Too Many Requests",
            431: "Request Header Fields Too Large", 500: "Internal Server Error", 501: "Not Implemented",
            503: "Service Unavailable", 505: "HTTP Version Not Supported", 299: "Status", 599: "Status",
        ]
        for (status, reason) in reasons {
            let bytes = written(HTTPResponse(status: status))
            #expect(bytes.hasPrefix("before|HTTP/1.1 \(status) \(reason)\r\n"), "\(status)")
        }
    }

    @Test(
        "the writer owns the framing: a responder's Content-Length, Connection and Transfer-Encoding are dropped in any case"
    )
    func framingFieldsDropped() {
        let response = HTTPResponse(
            status: 200,
            headers: [
                ("content-length", "99"), ("X-A", "1"), ("CONNECTION", "close"), ("Transfer-Encoding", "chunked"),
                ("Connections", "kept"),
            ],
            body: Array("abc".utf8))
        #expect(
            written(response)
                == "before|HTTP/1.1 200 OK\r\nX-A: 1\r\nConnections: kept\r\nContent-Length: 3\r\n"
                + "Connection: keep-alive\r\n\r\nabc")
    }

    @Test("HEAD gets the length without the body; 204 and 304 get neither")
    func bodylessAnswers() {
        let body = Array("hello".utf8)
        #expect(
            written(HTTPResponse(status: 200, body: body), isHead: true)
                == "before|HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\n")
        #expect(
            written(HTTPResponse(status: 204)) == "before|HTTP/1.1 204 No Content\r\nConnection: keep-alive\r\n\r\n")
        #expect(
            written(HTTPResponse(status: 304, headers: [("ETag", "\"7\"")]))
                == "before|HTTP/1.1 304 Not Modified\r\nETag: \"7\"\r\nConnection: keep-alive\r\n\r\n")
        #expect(
            written(HTTPResponse(status: 200))
                == "before|HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n")
    }

    @Test("a streamed head says chunked, or nothing and close")
    func streamHeads() {
        var out: [UInt8] = []
        HTTPResponseWriter.appendStreamHead(
            status: 200, headers: [("Content-Type", "application/x-ndjson")], keepAlive: true, chunked: true, to: &out)
        #expect(
            String(decoding: out, as: UTF8.self)
                == "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n"
                + "Connection: keep-alive\r\n\r\n")
        out.removeAll()
        HTTPResponseWriter.appendStreamHead(status: 200, headers: [], keepAlive: false, chunked: false, to: &out)
        #expect(String(decoding: out, as: UTF8.self) == "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
    }

    @Test("a header value holding NUL stops the process")
    func headerValueWithNULIsRefused() async {
        await #expect(processExitsWith: .failure) {
            var out: [UInt8] = []
            HTTPResponseWriter.append(
                HTTPResponse(status: 200, headers: [("X-Name", "a\u{0}b")]), keepAlive: true, isHead: false, to: &out)
        }
    }

    @Test("a header name that is not a token stops the process")
    func headerNameNotATokenIsRefused() async {
        await #expect(processExitsWith: .failure) {
            var out: [UInt8] = []
            HTTPResponseWriter.append(
                HTTPResponse(status: 200, headers: [("X Name", "a")]), keepAlive: true, isHead: false, to: &out)
        }
        await #expect(processExitsWith: .failure) {
            var out: [UInt8] = []
            HTTPResponseWriter.append(
                HTTPResponse(status: 200, headers: [("", "a")]), keepAlive: true, isHead: false, to: &out)
        }
    }
}
