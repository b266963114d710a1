import RoostPlatform

/// Serializes responses into a connection's output buffer. It owns the
/// framing headers (`Content-Length`, `Connection`): a responder's own
/// `Content-Length`, `Connection` or `Transfer-Encoding` fields are dropped.
package enum HTTPResponseWriter {
    /// Appends `response` as HTTP/1.1 bytes to `out`. A HEAD answer, 204 and
    /// 304 carry no body. O(size of the response).
    static func append(_ response: HTTPResponse, keepAlive: Bool, isHead: Bool, to out: inout [UInt8]) {
        let status = response.status
        let bodyAllowed = status >= 200 && status != 204 && status != 304
        writeHead(status: status, headers: response.headers, to: &out) { head in
            if bodyAllowed {
                head.put("Content-Length: ")
                head.putDecimal(response.body.count)
                head.put("\r\n")
            }
            head.put(keepAlive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n")
        }
        if bodyAllowed && !isHead {
            out.append(contentsOf: response.body)
        }
    }

    /// Appends the head of a streamed response: `Transfer-Encoding: chunked`
    /// when `chunked`, otherwise no length at all (the body ends with the
    /// connection, for HTTP/1.0; `keepAlive` must then be false).
    static func appendStreamHead(
        status: Int, headers: [(name: String, value: String)], keepAlive: Bool, chunked: Bool, to out: inout [UInt8]
    ) {
        precondition(status >= 200 && status != 204 && status != 304, "streamed status \(status) has no body")
        precondition(chunked || !keepAlive, "a close-delimited body cannot keep the connection alive")
        writeHead(status: status, headers: headers, to: &out) { head in
            if chunked { head.put("Transfer-Encoding: chunked\r\n") }
            head.put(keepAlive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n")
        }
    }

    /// Appends one chunk of a chunked body: size in hex, CRLF, data, CRLF.
    /// An empty chunk would end the body, so it is refused.
    static func appendChunk(_ chunk: [UInt8], to out: inout [UInt8]) {
        precondition(!chunk.isEmpty, "an empty chunk would end the body")
        // The size's hex digits, most significant first, formatted on the
        // stack (an array per chunk before, issue 25).
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 2 * MemoryLayout<Int>.size) { digits in
            var start = digits.count
            var rest = chunk.count
            while rest > 0 {
                start -= 1
                digits[start] = hexDigits[rest & 15]
                rest >>= 4
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: digits[start...]))
        }
        appendBytes(of: "\r\n", to: &out)
        out.append(contentsOf: chunk)
        appendBytes(of: "\r\n", to: &out)
    }

    /// The last chunk and the empty trailer section that end a chunked body.
    static let lastChunk: [UInt8] = Array("0\r\n\r\n".utf8)

    /// The interim answer to `Expect: 100-continue`.
    package static let continueResponse: [UInt8] = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    /// The bytes a head's framing fields take at most (`Content-Length` of
    /// any length or `Transfer-Encoding: chunked`, then `Connection` and the
    /// blank line), beside the status line's.
    private static let framingBytesMax = 64
    /// The longest status line (`HTTP/1.1 431 Request Header Fields Too Large\r\n` is 46).
    private static let statusLineBytesMax = 64

    /// Writes a head into `out`'s new capacity in one append: the status
    /// line, the responder's fields, then what `framing` puts. The constant
    /// parts are static bytes; a field's name and value are copied from the
    /// strings' own storage, checked first. One capacity check and no
    /// per-part `append` (eleven of them a registration's answer cost ~90
    /// instructions each after the generic `append(contentsOf: string.utf8)`
    /// had cost ~170; issue 25).
    private static func writeHead(
        status: Int, headers: [(name: String, value: String)], to out: inout [UInt8],
        framing: (inout HeadCursor) -> Void
    ) {
        precondition(status >= 100 && status <= 999, "response status \(status) is not three digits")
        var bytesMax = statusLineBytesMax + framingBytesMax
        for index in headers.indices {
            bytesMax += headers[index].name.utf8.count + headers[index].value.utf8.count + 4
        }
        out.append(addingCapacity: bytesMax) { span in
            span.withUnsafeMutableBufferPointer { buffer, initialized in
                var head = HeadCursor(UnsafeMutableBufferPointer(rebasing: buffer[0..<bytesMax]))
                head.put("HTTP/1.1 ")
                head.put(UInt8(48 + status / 100))
                head.put(UInt8(48 + status / 10 % 10))
                head.put(UInt8(48 + status % 10))
                head.put(space)
                head.put(reasonPhrase(status))
                head.put("\r\n")
                for index in headers.indices {
                    putField(name: headers[index].name, value: headers[index].value, into: &head)
                }
                framing(&head)
                initialized = head.count
            }
        }
    }

    /// A responder's field, checked: a name that is not a token, or a value
    /// holding CR, LF or NUL, stops the process (user data must never split
    /// a response); a framing field is dropped (the writer owns those).
    private static func putField(name: String, value: String, into head: inout HeadCursor) {
        withContiguousUTF8(of: name) { name in
            precondition(
                !name.isEmpty && name.allSatisfy(isTokenByte),
                "invalid response header name \(String(decoding: name, as: UTF8.self).debugDescription)")
            if isFramingField(name) { return }
            withContiguousUTF8(of: value) { value in
                precondition(
                    !value.contains(where: { $0 == cr || $0 == lf || $0 == 0 }),
                    "response header \(String(decoding: name, as: UTF8.self)) holds CR, LF or NUL: user data "
                        + "would split the response")
                head.put(name)
                head.put(": ")
                head.put(value)
                head.put("\r\n")
            }
        }
    }

    /// Bytes written into a bounded buffer (a head's reserved capacity);
    /// writing past the bound stops the process.
    struct HeadCursor {
        private let buffer: UnsafeMutableBufferPointer<UInt8>
        private(set) var count = 0

        init(_ buffer: UnsafeMutableBufferPointer<UInt8>) { self.buffer = buffer }

        mutating func put(_ bytes: UnsafeBufferPointer<UInt8>) {
            precondition(count + bytes.count <= buffer.count, "response head past its bound")
            guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
            (buffer.baseAddress! + count).initialize(from: source, count: bytes.count)
            count += bytes.count
        }

        mutating func put(_ text: StaticString) { put(text.bytes) }

        mutating func put(_ byte: UInt8) {
            precondition(count < buffer.count, "response head past its bound")
            buffer[count] = byte
            count += 1
        }

        /// `value` in decimal, most significant digit first.
        mutating func putDecimal(_ value: Int) {
            precondition(value >= 0, "negative length \(value)")
            var divisor = 1
            while divisor <= value / 10 { divisor *= 10 }
            var rest = value
            while divisor > 0 {
                put(UInt8(48 + rest / divisor))
                rest %= divisor
                divisor /= 10
            }
        }
    }

    @inline(__always)
    private static func appendBytes(of text: StaticString, to out: inout [UInt8]) {
        out.append(contentsOf: text.bytes)
    }

    private static func isFramingField(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
        switch name.count {
        case 10: sameIgnoringCase(name, "Connection")
        case 14: sameIgnoringCase(name, "Content-Length")
        case 17: sameIgnoringCase(name, "Transfer-Encoding")
        default: false
        }
    }

    @inline(__always)
    private static func sameIgnoringCase(_ name: UnsafeBufferPointer<UInt8>, _ known: StaticString) -> Bool {
        asciiCaseInsensitiveEqual(name, known.bytes)
    }

    /// Returns the standard reason phrase for the statuses Roost uses.
    static func reasonPhrase(_ status: Int) -> StaticString {
        switch status {
        case 100: "Continue"
        case 200: "OK"
        case 201: "Created"
        case 202: "Accepted"
        case 204: "No Content"
        case 304: "Not Modified"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 408: "Request Timeout"
        case 409: "Conflict"
        case 413: "Content Too Large"
        case 415: "Unsupported Media Type"
        case 417: "Expectation Failed"
        case 422: "Unprocessable Content"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 503: "Service Unavailable"
        case 505: "HTTP Version Not Supported"
        default: "Status"
        }
    }
}
