/// A sans-I/O reader of HTTP/1.1 responses on one keep-alive connection: the
/// loop feeds it the bytes it reads and takes whole responses out. Only what
/// the load generator meets is understood: a status line, headers, and a body
/// of `Content-Length` bytes (no chunked encoding, no 1xx). Anything else is
/// `.malformed`, and the connection is closed by the caller.
struct HTTPResponseReader {
    /// What the next call to `next()` found.
    enum Step: Equatable {
        /// Not a whole response yet: read more.
        case needMore
        /// One whole response; `closes` when it said `Connection: close`.
        case response(status: Int, closes: Bool)
        /// Bytes that are not a response this reader understands.
        case malformed(String)
    }

    /// The largest response head accepted (status line and headers).
    static let headBytesMax = 16 * 1024
    /// The largest body accepted.
    static let bodyBytesMax = 1 << 20

    private var buffer: [UInt8] = []
    /// Where the unconsumed bytes start in `buffer`.
    private var start = 0
    /// The body of the response `next()` returned last, valid until the next `feed`.
    private var lastBody = 0..<0

    /// Bytes received and not yet part of a returned response.
    var pendingBytes: Int { buffer.count - start }

    /// Appends bytes read from the socket.
    mutating func feed(_ bytes: UnsafeRawBufferPointer) {
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
            lastBody = 0..<0
        }
        buffer.append(contentsOf: bytes)
    }

    /// Returns the next whole response, if the bytes hold one. O(head + body).
    mutating func next() -> Step {
        let available = buffer.count - start
        guard available >= 4 else { return .needMore }
        guard let headEnd = findHeadEnd() else {
            return available > Self.headBytesMax
                ? .malformed("response head over \(Self.headBytesMax) bytes") : .needMore
        }
        guard let status = parseStatus() else { return .malformed("bad status line") }
        var contentLength: Int? = nil
        var closes = false
        var lineStart = indexAfterLine(from: start, limit: headEnd)
        while lineStart < headEnd {
            let lineEnd = endOfLine(from: lineStart, limit: headEnd)
            if let value = headerValue(named: Self.contentLength, line: lineStart..<lineEnd) {
                guard let length = Self.decimal(value), length <= Self.bodyBytesMax else {
                    return .malformed("bad Content-Length")
                }
                contentLength = length
            } else if headerValue(named: Self.transferEncoding, line: lineStart..<lineEnd) != nil {
                return .malformed("Transfer-Encoding is not supported by this reader")
            } else if let value = headerValue(named: Self.connection, line: lineStart..<lineEnd) {
                closes = Self.lowercased(value) == Self.close
            }
            lineStart = lineEnd + 2
        }
        let bodyStart = headEnd + 4
        let total = bodyStart - start + (contentLength ?? 0)
        guard status == 204 || status == 304 || contentLength != nil else {
            return .malformed("no Content-Length on a \(status) answer")
        }
        guard available >= total else { return .needMore }
        lastBody = bodyStart..<(start + total)
        start += total
        return .response(status: status, closes: closes)
    }

    /// Calls `body` with the body of the response `next()` returned last
    /// (before any later `feed`).
    func withLastBody<Result>(_ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        buffer.withUnsafeBytes { bytes in body(UnsafeRawBufferPointer(rebasing: bytes[lastBody])) }
    }

    /// Index of the "\r\n\r\n" that ends the head, if present. O(head).
    private func findHeadEnd() -> Int? {
        var index = start
        let limit = buffer.count - 3
        while index < limit {
            if buffer[index] == 13 && buffer[index + 1] == 10 && buffer[index + 2] == 13 && buffer[index + 3] == 10 {
                return index
            }
            index += 1
        }
        return nil
    }

    /// "HTTP/1.x NNN": the three digits.
    private func parseStatus() -> Int? {
        guard buffer.count - start >= 12 else { return nil }
        for offset in 0..<Self.versionPrefix.count where buffer[start + offset] != Self.versionPrefix[offset] {
            return nil
        }
        guard buffer[start + 8] == UInt8(ascii: " ") else { return nil }
        var status = 0
        for offset in 9..<12 {
            let digit = buffer[start + offset]
            guard digit >= UInt8(ascii: "0") && digit <= UInt8(ascii: "9") else { return nil }
            status = status * 10 + Int(digit - UInt8(ascii: "0"))
        }
        return status
    }

    private func endOfLine(from index: Int, limit: Int) -> Int {
        var position = index
        while position < limit && !(buffer[position] == 13 && buffer[position + 1] == 10) { position += 1 }
        return position
    }

    private func indexAfterLine(from index: Int, limit: Int) -> Int {
        let end = endOfLine(from: index, limit: limit)
        return end + 2
    }

    /// The trimmed value of `line` when it is the header `nameBytes` (lowercase), else nil.
    private func headerValue(named nameBytes: [UInt8], line: Range<Int>) -> ArraySlice<UInt8>? {
        guard line.count > nameBytes.count, buffer[line.lowerBound + nameBytes.count] == UInt8(ascii: ":") else {
            return nil
        }
        for offset in 0..<nameBytes.count {
            var byte = buffer[line.lowerBound + offset]
            if byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") { byte += 32 }
            if byte != nameBytes[offset] { return nil }
        }
        var valueStart = line.lowerBound + nameBytes.count + 1
        var valueEnd = line.upperBound
        while valueStart < valueEnd && (buffer[valueStart] == 32 || buffer[valueStart] == 9) { valueStart += 1 }
        while valueEnd > valueStart && (buffer[valueEnd - 1] == 32 || buffer[valueEnd - 1] == 9) { valueEnd -= 1 }
        return buffer[valueStart..<valueEnd]
    }

    private static let versionPrefix = Array("HTTP/1.".utf8)
    private static let contentLength = Array("content-length".utf8)
    private static let transferEncoding = Array("transfer-encoding".utf8)
    private static let connection = Array("connection".utf8)
    private static let close = Array("close".utf8)

    private static func decimal(_ bytes: ArraySlice<UInt8>) -> Int? {
        guard !bytes.isEmpty && bytes.count <= 9 else { return nil }
        var value = 0
        for byte in bytes {
            guard byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return value
    }

    private static func lowercased(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
        bytes.map { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") ? $0 + 32 : $0 }
    }
}
