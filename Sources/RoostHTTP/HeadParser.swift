import RoostPlatform

/// Lets refusals be thrown inside the parser (typed throws).
extension HTTPRequestFailure: Error {}

/// How the body of a request is delimited.
enum BodyFraming: Equatable {
    case none
    case contentLength(Int)
    case chunked
}

/// A parsed head with what the parser needs to read its body.
struct ParsedHead {
    var head: HTTPRequestHead
    var framing: BodyFraming
    /// `Expect: 100-continue` on an HTTP/1.1 request (ignored for HTTP/1.0, RFC 9110 10.1.1).
    var expectsContinue: Bool
}

/// Parses one complete request head (request line and header lines, each
/// ending in CRLF, line endings already checked) into an `HTTPRequestHead`.
/// Strings are made only for what is stored: target, header names and values.
enum HeadParser {
    /// Returns the head and its body framing, or the refusal.
    ///
    /// `previous` is the connection's previous request's fields. The new
    /// fields are written over them, in their own storage when nothing else
    /// holds it (the previous request was answered and let go: no array per
    /// request), and a field sent again with the same name and value at the
    /// same place (a keep-alive client's `Authorization`) keeps its `String`
    /// instead of building one (an allocation per request for a value past
    /// 15 bytes). Issue 25.
    static func parse(
        _ bytes: UnsafeBufferPointer<UInt8>, limits: HTTPServerLimits, previous: consuming HTTPHeaders? = nil
    ) -> Result<ParsedHead, HTTPRequestFailure> {
        do {
            return .success(try parseHead(bytes, limits: limits, previous: previous))
        } catch {
            return .failure(error)
        }
    }

    /// The field lines after the request line end at `requestLineEnd`, at
    /// most (each ends with a line feed): what the headers reserve. O(bytes),
    /// eight bytes at a time (byte by byte it was ~1,100 instructions a
    /// registration's head; issue 25).
    private static func fieldLinesAtMost(_ bytes: UnsafeBufferPointer<UInt8>, after requestLineEnd: Int) -> Int {
        countOfByte(lf, in: bytes, from: min(requestLineEnd + 1, bytes.count))
    }

    /// Values sent with nearly every request, as one shared `String` each
    /// (longer than a small string: built from the bytes, each would be an
    /// allocation per request).
    private static let commonValues: [String] = [
        "application/json", "application/x-ndjson", "application/json; charset=utf-8",
    ]

    /// The field's value as a `String`, shared when it is a common one.
    private static func fieldValue(_ value: UnsafeBufferPointer<UInt8>) -> String {
        if value.count > 15 {
            for common in commonValues where utf8Equals(common, value) { return common }
        }
        return String(decoding: value, as: UTF8.self)
    }

    /// Whether `headers` holds, at `index`, a field with these name and value bytes. O(name + value).
    private static func holds(
        _ headers: HTTPHeaders, _ name: UnsafeBufferPointer<UInt8>, _ value: UnsafeBufferPointer<UInt8>, at index: Int
    ) -> Bool {
        guard index < headers.fields.count else { return false }
        return utf8Equals(headers.fields[index].name, name) && utf8Equals(headers.fields[index].value, value)
    }

    private static func parseHead(
        _ bytes: UnsafeBufferPointer<UInt8>, limits: HTTPServerLimits, previous: consuming HTTPHeaders?
    ) throws(HTTPRequestFailure) -> ParsedHead {
        var lineStart = 0
        var lineEnd = lineEndIndex(bytes, from: lineStart)
        let (method, target, version) = try parseRequestLine(UnsafeBufferPointer(rebasing: bytes[lineStart..<lineEnd]))
        // The previous request's fields, overwritten field by field below
        // (a field it repeats at the same place stays as it is).
        var headers = previous ?? HTTPHeaders()
        headers.reserveCapacity(min(fieldLinesAtMost(bytes, after: lineEnd), limits.headerFieldsMax))
        var fieldCount = 0
        var hostCount = 0
        var contentLength: Int?
        var transferEncoding: [UInt8]?
        var chunkedCount = 0
        var unknownCoding = false
        var connectionClose = false
        var connectionKeepAlive = false
        var expectsContinue = false
        lineStart = lineEnd + 2
        while lineStart < bytes.count {
            lineEnd = lineEndIndex(bytes, from: lineStart)
            let line = UnsafeBufferPointer(rebasing: bytes[lineStart..<lineEnd])
            lineStart = lineEnd + 2
            let (name, value) = try splitField(line).get()
            fieldCount += 1
            if fieldCount > limits.headerFieldsMax { throw .headersTooLarge(limitBytes: limits.headBytesMax) }
            if !holds(headers, name, value, at: fieldCount - 1) {
                headers.set(name: String(decoding: name, as: UTF8.self), value: fieldValue(value), at: fieldCount - 1)
            }
            if equalsLowercase(name, "host") {
                hostCount += 1
            } else if equalsLowercase(name, "content-length") {
                if contentLength != nil { throw .badRequest(reason: "more than one Content-Length") }
                contentLength = try parseContentLength(value)
            } else if equalsLowercase(name, "transfer-encoding") {
                if transferEncoding != nil { transferEncoding?.append(comma) }
                transferEncoding = (transferEncoding ?? []) + Array(value)
                forEachListElement(value) { coding in
                    if equalsLowercase(coding, "chunked") {
                        chunkedCount += 1
                    } else {
                        unknownCoding = true
                    }
                }
            } else if equalsLowercase(name, "expect") {
                // Only 100-continue is known (RFC 9110 10.1.1); anything else is a 417.
                var known = !value.isEmpty
                forEachListElement(value) { expectation in
                    if equalsLowercase(expectation, "100-continue") { expectsContinue = true } else { known = false }
                }
                if !known { throw .expectationFailed(String(decoding: value, as: UTF8.self)) }
            } else if equalsLowercase(name, "connection") {
                forEachListElement(value) { option in
                    if equalsLowercase(option, "close") { connectionClose = true }
                    if equalsLowercase(option, "keep-alive") { connectionKeepAlive = true }
                }
            }
        }
        if hostCount > 1 { throw .badRequest(reason: "more than one Host") }
        if hostCount == 0 && version == .http11 { throw .badRequest(reason: "HTTP/1.1 request without Host") }
        let framing: BodyFraming
        if let codings = transferEncoding {
            if contentLength != nil { throw .badRequest(reason: "both Content-Length and Transfer-Encoding") }
            if version == .http10 { throw .badRequest(reason: "Transfer-Encoding in an HTTP/1.0 request") }
            if unknownCoding { throw .unsupportedTransferCoding(String(decoding: codings, as: UTF8.self)) }
            if chunkedCount != 1 { throw .badRequest(reason: "chunked must be applied exactly once") }
            framing = .chunked
        } else if let length = contentLength {
            framing = .contentLength(length)
        } else {
            framing = .none
        }
        let keepAlive =
            switch version {
            case .http11: !connectionClose
            case .http10: connectionKeepAlive && !connectionClose
            }
        headers.removeFields(from: fieldCount)  // the previous request's beyond this one's
        let head = HTTPRequestHead(
            method: method, target: target, version: version, headers: headers, keepAlive: keepAlive)
        return ParsedHead(head: head, framing: framing, expectsContinue: expectsContinue && version == .http11)
    }

    /// Returns the index of the CR ending the line that starts at `start`.
    private static func lineEndIndex(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
        let index = firstByteIndex(in: bytes, from: start, mayStop: { wordHasByte(cr, in: $0) }, stops: { $0 == cr })
        precondition(index + 1 < bytes.count && bytes[index + 1] == lf, "head line at \(start) lacks its CRLF")
        return index
    }

    /// Parses `method SP target SP HTTP/x.y` with single spaces.
    private static func parseRequestLine(
        _ line: UnsafeBufferPointer<UInt8>
    ) throws(HTTPRequestFailure) -> (HTTPMethod, String, HTTPVersion) {
        guard let firstSpace = line.firstIndex(of: space) else {
            throw .badRequest(reason: "request line without target")
        }
        let methodBytes = UnsafeBufferPointer(rebasing: line[0..<firstSpace])
        if methodBytes.isEmpty || !methodBytes.allSatisfy(isTokenByte) {
            throw .badRequest(reason: "invalid method")
        }
        let afterMethod = firstSpace + 1
        guard let secondSpace = line[afterMethod...].firstIndex(of: space) else {
            throw .badRequest(reason: "request line without version (HTTP/0.9)")
        }
        let targetBytes = UnsafeBufferPointer(rebasing: line[afterMethod..<secondSpace])
        if targetBytes.isEmpty || !targetBytes.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) {
            throw .badRequest(reason: "invalid request target")
        }
        let versionBytes = UnsafeBufferPointer(rebasing: line[(secondSpace + 1)...])
        let version = try parseVersion(versionBytes)
        return (parseMethod(methodBytes), String(decoding: targetBytes, as: UTF8.self), version)
    }

    private static func parseVersion(_ bytes: UnsafeBufferPointer<UInt8>) throws(HTTPRequestFailure) -> HTTPVersion {
        guard bytes.count == 8, bytes[0] == UInt8(ascii: "H"), bytes[1] == UInt8(ascii: "T"),
            bytes[2] == UInt8(ascii: "T"), bytes[3] == UInt8(ascii: "P"), bytes[4] == UInt8(ascii: "/"),
            bytes[6] == UInt8(ascii: "."),
            let major = decimalValue(bytes[5]), let minor = decimalValue(bytes[7])
        else {
            throw .badRequest(reason: "malformed HTTP version")
        }
        switch (major, minor) {
        case (1, 1): return .http11
        case (1, 0): return .http10
        default: throw .unsupportedVersion(String(decoding: bytes, as: UTF8.self))
        }
    }

    private static func parseMethod(_ bytes: UnsafeBufferPointer<UInt8>) -> HTTPMethod {
        // Case-sensitive (RFC 9110 §9.1).
        if sameBytes(bytes, "GET") { return .get }
        if sameBytes(bytes, "POST") { return .post }
        if sameBytes(bytes, "HEAD") { return .head }
        if sameBytes(bytes, "PUT") { return .put }
        if sameBytes(bytes, "DELETE") { return .delete }
        if sameBytes(bytes, "PATCH") { return .patch }
        if sameBytes(bytes, "OPTIONS") { return .options }
        return .other(String(decoding: bytes, as: UTF8.self))
    }

    /// Splits `name: value` and checks both: the name a token right before the
    /// colon, the value free of control characters; surrounding whitespace removed.
    static func splitField(
        _ line: UnsafeBufferPointer<UInt8>
    ) -> Result<(name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>), HTTPRequestFailure> {
        guard let first = line.first else { return .failure(.badRequest(reason: "empty header line")) }
        if first == space || first == tab {
            return .failure(.badRequest(reason: "obs-fold (line starts with whitespace)"))
        }
        // The name's bytes checked on the way to the colon (one pass): the
        // first byte that is not a tchar must be the colon.
        var colonIndex = 0
        while colonIndex < line.count && isTokenByte(line[colonIndex]) { colonIndex += 1 }
        guard colonIndex < line.count, line[colonIndex] == colon else { return .failure(nameRefusal(line)) }
        let name = UnsafeBufferPointer(rebasing: line[0..<colonIndex])
        if name.isEmpty { return .failure(.badRequest(reason: "empty header name")) }
        var valueStart = colonIndex + 1
        var valueEnd = line.count
        while valueStart < valueEnd && (line[valueStart] == space || line[valueStart] == tab) { valueStart += 1 }
        while valueEnd > valueStart && (line[valueEnd - 1] == space || line[valueEnd - 1] == tab) { valueEnd -= 1 }
        let value = UnsafeBufferPointer(rebasing: line[valueStart..<valueEnd])
        // Eight bytes at a time: a control byte is below 0x20 (a tab, also
        // there, is let through byte by byte) or 0x7F.
        let control = firstByteIndex(
            in: value, from: 0, mayStop: { wordHasByte(below: 0x20, in: $0) || wordHasByte(0x7F, in: $0) },
            stops: isControl)
        if control != value.count { return .failure(.badRequest(reason: "control character in header value")) }
        return .success((name, value))
    }

    /// Why a header line whose name does not end at a colon is refused: the
    /// checks of a name, in their order (a cold path: it runs once, for a
    /// request answered 400).
    private static func nameRefusal(_ line: UnsafeBufferPointer<UInt8>) -> HTTPRequestFailure {
        guard let colonIndex = line.firstIndex(of: colon) else {
            return .badRequest(reason: "header line without colon")
        }
        let name = line[0..<colonIndex]
        if name.isEmpty { return .badRequest(reason: "empty header name") }
        if let last = name.last, last == space || last == tab {
            return .badRequest(reason: "whitespace before colon in header name")
        }
        return .badRequest(reason: "invalid byte in header name")
    }

    /// Parses a Content-Length value: decimal digits only, no sign, no list.
    private static func parseContentLength(_ value: UnsafeBufferPointer<UInt8>) throws(HTTPRequestFailure) -> Int {
        if value.isEmpty { throw .badRequest(reason: "empty Content-Length") }
        var length = 0
        for byte in value {
            guard let digit = decimalValue(byte) else { throw .badRequest(reason: "Content-Length is not a number") }
            let (times10, overflow1) = length.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times10.addingReportingOverflow(Int(digit))
            if overflow1 || overflow2 { throw .badRequest(reason: "Content-Length overflows") }
            length = sum
        }
        return length
    }

    /// Calls `body` with each non-empty element of a comma-separated list, trimmed.
    private static func forEachListElement(
        _ value: UnsafeBufferPointer<UInt8>, _ body: (UnsafeBufferPointer<UInt8>) -> Void
    ) {
        var start = 0
        while start <= value.count {
            var end = start
            while end < value.count && value[end] != comma { end += 1 }
            var elementStart = start
            var elementEnd = end
            while elementStart < elementEnd && (value[elementStart] == space || value[elementStart] == tab) {
                elementStart += 1
            }
            while elementEnd > elementStart && (value[elementEnd - 1] == space || value[elementEnd - 1] == tab) {
                elementEnd -= 1
            }
            if elementEnd > elementStart { body(UnsafeBufferPointer(rebasing: value[elementStart..<elementEnd])) }
            start = end + 1
        }
    }

    @inline(__always)
    private static func decimalValue(_ byte: UInt8) -> Int? {
        byte >= 48 && byte <= 57 ? Int(byte - 48) : nil
    }
}
