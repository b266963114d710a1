/// The bounds an HTTP client puts on what a server sends it, so that a
/// broken or hostile peer costs at most a known amount of memory.
package struct HTTPClientLimits: Hashable, Sendable {
    /// The longest response head (status line and header fields), in bytes.
    package var headBytesMax: Int
    /// The longest chunk-size line or trailer field, in bytes.
    package var lineBytesMax: Int
    /// The most trailer bytes after the last chunk.
    package var trailerBytesMax: Int

    /// 16 KiB of head, 1 KiB per chunk line, 16 KiB of trailers.
    package static let `default` = HTTPClientLimits(
        headBytesMax: 16 * 1024, lineBytesMax: 1024, trailerBytesMax: 16 * 1024)

    package init(headBytesMax: Int, lineBytesMax: Int, trailerBytesMax: Int) {
        precondition(headBytesMax > 0, "HTTPClientLimits.headBytesMax must be positive, got \(headBytesMax)")
        precondition(lineBytesMax > 0, "HTTPClientLimits.lineBytesMax must be positive, got \(lineBytesMax)")
        precondition(trailerBytesMax > 0, "HTTPClientLimits.trailerBytesMax must be positive, got \(trailerBytesMax)")
        self.headBytesMax = headBytesMax
        self.lineBytesMax = lineBytesMax
        self.trailerBytesMax = trailerBytesMax
    }
}

/// One header field of a response, as sent.
package struct HTTPClientHeaderField: Hashable, Sendable {
    package var name: String
    package var value: String

    package init(name: String, value: String) {
        self.name = name
        self.value = value
    }
}

/// The status line and header fields of a response.
package struct HTTPClientResponseHead: Hashable, Sendable {
    /// The status code (100–599).
    package var status: Int
    /// Whether the server spoke HTTP/1.1 (HTTP/1.0 closes after each response by default).
    package var isHTTP11: Bool
    package var fields: [HTTPClientHeaderField]

    package init(status: Int, isHTTP11: Bool, fields: [HTTPClientHeaderField]) {
        self.status = status
        self.isHTTP11 = isHTTP11
        self.fields = fields
    }

    /// Returns the value of the first field named `name` (ASCII case-insensitive), or nil. O(fields).
    package func field(_ name: String) -> String? {
        fields.first { HTTPClientResponseHead.sameName($0.name, name) }?.value
    }

    /// Whether the server lets the connection carry another request after this response.
    package var keepsConnection: Bool {
        let tokens = (field("Connection") ?? "").lowercased().utf8.split(separator: UInt8(ascii: ",")).map {
            String(decoding: trimmingBlanks(ArraySlice($0)), as: UTF8.self)
        }
        if tokens.contains("close") { return false }
        return isHTTP11 || tokens.contains("keep-alive")
    }

    private static func sameName(_ lhs: String, _ rhs: String) -> Bool {
        lhs.utf8.count == rhs.utf8.count
            && zip(lhs.utf8, rhs.utf8).allSatisfy { asciiLower($0) == asciiLower($1) }
    }

    private static func asciiLower(_ byte: UInt8) -> UInt8 {
        byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte + 32 : byte
    }
}

/// Why the bytes a server sent are not an HTTP/1.1 response this client accepts.
package enum HTTPClientResponseError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The head is longer than `HTTPClientLimits.headBytesMax`.
    case headTooLarge
    /// A chunk-size line or the trailers are longer than their limit.
    case lineTooLarge
    /// The status line, a header field, the framing or a chunk is malformed.
    case malformed(String)
    /// The connection ended inside a response.
    case truncated

    package var description: String {
        switch self {
        case .headTooLarge: "response head larger than the limit"
        case .lineTooLarge: "chunk line or trailers larger than the limit"
        case .malformed(let what): "malformed response: \(what)"
        case .truncated: "connection closed inside a response"
        }
    }
}

/// What `HTTPClientResponseParser.next()` found in the bytes fed so far.
package enum HTTPClientResponseEvent: Hashable, Sendable {
    /// A complete head (interim 1xx responses are skipped).
    case head(HTTPClientResponseHead)
    /// Some body bytes, de-chunked; never empty.
    case body([UInt8])
    /// The response is complete; the next bytes belong to the next response.
    case end
}

/// An incremental, sans-I/O HTTP/1.1 response parser: feed it bytes with
/// `append`, call `next` until it returns nil, and `finish` at end of stream.
/// It reads Content-Length, chunked (chunk extensions and trailers are
/// skipped) and close-delimited bodies; a response to a request that had no
/// body is still expected to frame its own body (no HEAD support). The result
/// does not depend on how bytes are split across `append` calls.
package struct HTTPClientResponseParser {
    private enum State {
        case head
        case fixedBody(remaining: Int)
        case untilClose
        case chunkSize
        case chunkData(remaining: Int)
        case chunkDataEnd
        case trailers(bytesSeen: Int)
        case done
    }

    private let limits: HTTPClientLimits
    private var state = State.head
    private var buffer: [UInt8] = []
    private var readIndex = 0

    package init(limits: HTTPClientLimits = .default) {
        self.limits = limits
    }

    /// Bytes received and not yet consumed.
    package var bufferedBytes: Int { buffer.count - readIndex }

    /// Whether a response is under way (a head byte, or a body, is pending).
    package var isInsideResponse: Bool {
        switch state {
        case .head: readIndex < buffer.count
        case .fixedBody, .untilClose, .chunkSize, .chunkData, .chunkDataEnd, .trailers: true
        case .done: false
        }
    }

    /// Adds received bytes. O(bytes), amortized.
    package mutating func append(_ bytes: some Collection<UInt8>) {
        if readIndex > 0 && readIndex * 2 >= buffer.count {
            buffer.removeSubrange(0..<readIndex)
            readIndex = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// Returns the next event, or nil when more bytes are needed.
    package mutating func next() throws(HTTPClientResponseError) -> HTTPClientResponseEvent? {
        while true {
            switch state {
            case .done:
                state = .head
                continue
            case .head:
                guard let head = try parseHead() else { return nil }
                return .head(head)
            case .fixedBody(let remaining):
                if remaining == 0 {
                    state = .done
                    return .end
                }
                guard let piece = take(atMost: remaining) else { return nil }
                state = .fixedBody(remaining: remaining - piece.count)
                return .body(piece)
            case .untilClose:
                guard let piece = take(atMost: Int.max) else { return nil }
                return .body(piece)
            case .chunkSize:
                guard let line = try takeLine(limit: limits.lineBytesMax) else { return nil }
                let size = try Self.chunkSize(line)
                state = size == 0 ? .trailers(bytesSeen: 0) : .chunkData(remaining: size)
            case .chunkData(let remaining):
                guard let piece = take(atMost: remaining) else { return nil }
                state = piece.count == remaining ? .chunkDataEnd : .chunkData(remaining: remaining - piece.count)
                return .body(piece)
            case .chunkDataEnd:
                guard let line = try takeLine(limit: 2) else { return nil }
                guard line.isEmpty else { throw .malformed("chunk data not followed by CRLF") }
                state = .chunkSize
            case .trailers(let bytesSeen):
                guard let line = try takeLine(limit: limits.trailerBytesMax - bytesSeen) else { return nil }
                if line.isEmpty {
                    state = .done
                    return .end
                }
                state = .trailers(bytesSeen: bytesSeen + line.count + 2)
            }
        }
    }

    /// The connection ended: returns `.end` when that ends a close-delimited
    /// body, nil when no response was under way, and throws when it cuts one.
    package mutating func finish() throws(HTTPClientResponseError) -> HTTPClientResponseEvent? {
        switch state {
        case .untilClose:
            state = .done
            return .end
        case .head where readIndex == buffer.count, .done:
            return nil
        case .head, .fixedBody, .chunkSize, .chunkData, .chunkDataEnd, .trailers:
            throw .truncated
        }
    }

    // MARK: - Pieces

    private mutating func take(atMost count: Int) -> [UInt8]? {
        let available = min(count, buffer.count - readIndex)
        guard available > 0 else { return nil }
        let piece = Array(buffer[readIndex..<(readIndex + available)])
        readIndex += available
        return piece
    }

    /// Returns the next CRLF-terminated line without its CRLF, or nil when
    /// none is complete yet; throws when it is longer than `limit` bytes.
    private mutating func takeLine(limit: Int) throws(HTTPClientResponseError) -> [UInt8]? {
        var index = readIndex
        while index < buffer.count {
            if buffer[index] == UInt8(ascii: "\n") {
                guard index > readIndex, buffer[index - 1] == UInt8(ascii: "\r") else {
                    throw .malformed("line ends without CR")
                }
                let line = Array(buffer[readIndex..<(index - 1)])
                guard line.count <= limit else { throw .lineTooLarge }
                readIndex = index + 1
                return line
            }
            index += 1
        }
        guard buffer.count - readIndex <= limit + 1 else { throw .lineTooLarge }
        return nil
    }

    private static func chunkSize(_ line: [UInt8]) throws(HTTPClientResponseError) -> Int {
        let digits = line.prefix { $0 != UInt8(ascii: ";") && $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\t") }
        guard !digits.isEmpty, digits.count <= 15 else { throw .malformed("chunk size") }
        var size = 0
        for byte in digits {
            guard let value = hexValue(byte) else { throw .malformed("chunk size") }
            size = size << 4 | value
        }
        return size
    }

    private static func hexValue(_ byte: UInt8) -> Int? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): Int(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): Int(byte - UInt8(ascii: "a")) + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): Int(byte - UInt8(ascii: "A")) + 10
        default: nil
        }
    }

    // MARK: - Head

    /// Parses a complete head and picks the body's framing; nil when the head is incomplete.
    private mutating func parseHead() throws(HTTPClientResponseError) -> HTTPClientResponseHead? {
        guard let end = headEnd() else {
            guard buffer.count - readIndex <= limits.headBytesMax else { throw .headTooLarge }
            return nil
        }
        guard end - readIndex <= limits.headBytesMax else { throw .headTooLarge }
        let lines = buffer[readIndex..<end].split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
            .map { line -> ArraySlice<UInt8> in line.last == UInt8(ascii: "\r") ? line.dropLast() : line }
        readIndex = end + 4
        let head = try Self.head(lines)
        if head.status < 200 {
            // An interim response (100 Continue): the real one follows.
            return try parseHead()
        }
        try frameBody(of: head)
        return head
    }

    /// The index of the CRLFCRLF that ends the head, or nil.
    private func headEnd() -> Int? {
        guard buffer.count - readIndex >= 4 else { return nil }
        var index = readIndex
        while index + 3 < buffer.count {
            if buffer[index] == 13 && buffer[index + 1] == 10 && buffer[index + 2] == 13 && buffer[index + 3] == 10 {
                return index
            }
            index += 1
        }
        return nil
    }

    private static func head(_ lines: [ArraySlice<UInt8>]) throws(HTTPClientResponseError) -> HTTPClientResponseHead {
        guard let statusLine = lines.first else { throw .malformed("no status line") }
        let version = statusLine.prefix(9)
        let isHTTP11: Bool
        switch String(decoding: version, as: UTF8.self) {
        case "HTTP/1.1 ": isHTTP11 = true
        case "HTTP/1.0 ": isHTTP11 = false
        default: throw .malformed("status line \(String(decoding: statusLine.prefix(40), as: UTF8.self))")
        }
        let code = statusLine.dropFirst(9).prefix(3)
        guard code.count == 3, code.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
            statusLine.count == 12 || statusLine[statusLine.startIndex + 12] == UInt8(ascii: " ")
        else { throw .malformed("status code") }
        let status = code.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
        guard status >= 100 && status <= 599 else { throw .malformed("status code \(status)") }
        var fields: [HTTPClientHeaderField] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > line.startIndex else {
                throw .malformed("header field")
            }
            let name = line[..<colon]
            guard name.allSatisfy({ $0 > 32 && $0 < 127 }) else { throw .malformed("header field name") }
            let value = trimmingBlanks(line[(colon + 1)...])
            guard value.allSatisfy({ $0 >= 32 || $0 == 9 }) else { throw .malformed("header field value") }
            fields.append(
                HTTPClientHeaderField(
                    name: String(decoding: name, as: UTF8.self), value: String(decoding: value, as: UTF8.self)))
        }
        return HTTPClientResponseHead(status: status, isHTTP11: isHTTP11, fields: fields)
    }

    private mutating func frameBody(of head: HTTPClientResponseHead) throws(HTTPClientResponseError) {
        let lengths = head.fields.filter { $0.name.lowercased() == "content-length" }
        let encoding = head.field("Transfer-Encoding")
        if head.status == 204 || head.status == 304 {
            state = .fixedBody(remaining: 0)
        } else if let encoding {
            guard lengths.isEmpty else { throw .malformed("both Content-Length and Transfer-Encoding") }
            guard encoding.lowercased() == "chunked" else { throw .malformed("transfer coding \(encoding)") }
            state = .chunkSize
        } else if let length = lengths.first {
            guard lengths.count == 1, length.value.utf8.count <= 18,
                length.value.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
                let count = Int(length.value)
            else { throw .malformed("Content-Length \(length.value)") }
            state = .fixedBody(remaining: count)
        } else {
            state = .untilClose
        }
    }
}

/// `bytes` without its leading and trailing spaces and tabs (RFC 9110
/// §5.5: optional whitespace around a field value). Works on the bytes:
/// the etcd client reads a head per request, and trimming through
/// `String`'s generic collection views cost more than the rest of the
/// head's parse (a quarter of the leader's etcd-thread samples).
private func trimmingBlanks(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
    var start = bytes.startIndex
    var end = bytes.endIndex
    while start < end && (bytes[start] == 32 || bytes[start] == 9) { start += 1 }
    while end > start && (bytes[end - 1] == 32 || bytes[end - 1] == 9) { end -= 1 }
    return bytes[start..<end]
}
