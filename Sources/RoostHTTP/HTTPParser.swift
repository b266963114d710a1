import Glibc

/// What the parser produced from the bytes fed so far.
package enum HTTPParserEvent: Sendable {
    /// A complete request: head and de-chunked body.
    case request(HTTPRequest)
    /// The bytes cannot be a valid request. The parser accepts nothing more:
    /// whatever follows on the connection is never parsed.
    case failure(HTTPRequestFailure)
    /// The head of a request with a body carries `Expect: 100-continue`, its
    /// declared length is within the limit, and no body byte has arrived yet:
    /// the connection should send `100 Continue`. Parsing goes on with the body.
    /// (Whether it appears depends on how bytes were split; nothing else does.)
    case expectsContinue
}

/// Where the parser stands within the current request; the connection uses it
/// to pick the header or body timeout.
package enum HTTPParserPhase: Equatable, Sendable {
    /// No byte of a next request is buffered.
    case idle
    /// Some bytes of a request head are buffered, the head is not complete.
    case head
    /// The head is complete; the body is still arriving.
    case body
    /// A failure was returned; nothing more will be parsed.
    case failed
}

/// An incremental, sans-I/O HTTP/1.1 request parser. Feed it bytes as they
/// arrive with `append`, then call `next` until it returns nil. The result is
/// the same however the bytes are split across calls.
///
/// It is strict on framing (RFC 9112): CRLF line endings only, no obs-fold,
/// no whitespace before a field's colon, no control characters, one
/// `Content-Length` at most, never both `Content-Length` and
/// `Transfer-Encoding`, `chunked` as the only transfer coding.
package struct HTTPParser {
    private enum State {
        case head
        case fixedBody(remaining: Int)
        case chunkSize
        case chunkData(remaining: Int)
        case chunkDataEnd
        case trailers(bytesSeen: Int)
        case failed
    }

    private let limits: HTTPServerLimits
    private var state: State = .head
    /// Received bytes; those before `readIndex` are consumed.
    private var buffer: [UInt8] = []
    private var readIndex = 0
    /// How far the current line or head has been scanned (absolute index).
    private var scanIndex = 0
    /// The head whose body is being read, and the body so far.
    private var head: HTTPRequestHead?
    /// The last request's header fields: the next head is written over
    /// them, and keeps the strings of the fields it repeats (`HeadParser.parse`).
    private var previousHeaders: HTTPHeaders?
    private var body: [UInt8] = []
    /// A body buffer the server gave back once its request was answered or
    /// handed on (`recycle(body:)`), emptied, for the next request's body:
    /// a request with a body allocates none on a warm connection (issue 25).
    /// At most `limits.bufferBytesRetainedMax` of capacity.
    private var spareBody: [UInt8] = []
    private var bodyLimitBytes = 0

    /// Requests returned so far; a change tells the connection a new request began.
    package private(set) var requestsParsed = 0

    package init(limits: HTTPServerLimits) {
        self.limits = limits
    }

    /// The capacity of the input buffer, in bytes.
    package var bufferCapacityBytes: Int { buffer.capacity }

    /// Where the parser stands (see `HTTPParserPhase`).
    package var phase: HTTPParserPhase {
        switch state {
        case .head: readIndex < buffer.count ? .head : .idle
        case .fixedBody, .chunkSize, .chunkData, .chunkDataEnd, .trailers: .body
        case .failed: .failed
        }
    }

    /// Adds received bytes. O(bytes), amortized.
    package mutating func append(_ bytes: UnsafeRawBufferPointer) {
        if case .failed = state { return }
        compact()
        buffer.append(contentsOf: bytes)
    }

    /// Adds received bytes (convenience for tests and tools).
    package mutating func append(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { append($0) }
    }

    /// Drops consumed bytes so the buffer does not grow with the connection's age,
    /// and releases a large buffer once a big body has been handed over.
    private mutating func compact() {
        // Body states consume bytes without scanning lines.
        scanIndex = max(scanIndex, readIndex)
        if readIndex == buffer.count {
            buffer.removeAll(keepingCapacity: buffer.capacity <= limits.bufferBytesRetainedMax)
            scanIndex -= readIndex
            readIndex = 0
        } else if readIndex >= 32 * 1024 || (readIndex > 0 && readIndex * 2 >= buffer.count) {
            buffer.removeSubrange(0..<readIndex)
            scanIndex -= readIndex
            readIndex = 0
        }
        precondition(scanIndex >= 0, "scan index \(scanIndex) before buffer start")
    }

    /// Returns the next complete request or failure, or nil when more bytes are needed.
    /// `bodyLimit` gives the body limit for a head (the responder's choice); it is
    /// clamped to `limits.bodyBytesCeiling`.
    package mutating func next(bodyLimit: (HTTPRequestHead) -> Int) -> HTTPParserEvent? {
        let event = parseNext(bodyLimit: bodyLimit)
        // Everything consumed: free a large buffer now rather than at the
        // next read, which an idle connection may never do.
        if readIndex > 0 && readIndex == buffer.count { compact() }
        return event
    }

    /// Unread bytes in the buffer (received, not yet consumed by a request).
    package var bufferedBytes: Int { buffer.count - readIndex }

    private mutating func parseNext(bodyLimit: (HTTPRequestHead) -> Int) -> HTTPParserEvent? {
        while true {
            switch state {
            case .failed:
                return nil
            case .head:
                switch scanHead() {
                case .incomplete:
                    return nil
                case .failed(let failure):
                    return fail(failure)
                case .complete(let headEnd):
                    if let event = startBody(headEnd: headEnd, limitFor: bodyLimit) { return event }
                }
            case .fixedBody(let remaining):
                let available = min(remaining, buffer.count - readIndex)
                body.append(contentsOf: buffer[readIndex..<(readIndex + available)])
                readIndex += available
                if available < remaining {
                    state = .fixedBody(remaining: remaining - available)
                    return nil
                }
                return finishRequest()
            case .chunkSize:
                switch scanLine(
                    lengthMax: limits.chunkLineBytesMax, tooLong: .badRequest(reason: "chunk size line too long"))
                {
                case .incomplete: return nil
                case .failed(let failure): return fail(failure)
                case .line(let start, let end):
                    readIndex = end + 2
                    switch parseChunkSize(start, end) {
                    case .failure(let failure): return fail(failure)
                    case .success(0): state = .trailers(bytesSeen: 0)
                    case .success(let size):
                        if size > bodyLimitBytes - body.count { return fail(.bodyTooLarge(limitBytes: bodyLimitBytes)) }
                        state = .chunkData(remaining: size)
                    }
                }
            case .chunkData(let remaining):
                let available = min(remaining, buffer.count - readIndex)
                body.append(contentsOf: buffer[readIndex..<(readIndex + available)])
                readIndex += available
                if available < remaining {
                    state = .chunkData(remaining: remaining - available)
                    return nil
                }
                state = .chunkDataEnd
            case .chunkDataEnd:
                if buffer.count - readIndex < 2 { return nil }
                guard buffer[readIndex] == cr, buffer[readIndex + 1] == lf else {
                    return fail(.badRequest(reason: "chunk data not followed by CRLF"))
                }
                readIndex += 2
                scanIndex = readIndex
                state = .chunkSize
            case .trailers(let bytesSeen):
                let tooLarge = HTTPRequestFailure.headersTooLarge(limitBytes: limits.headBytesMax)
                switch scanLine(lengthMax: limits.headBytesMax - bytesSeen, tooLong: tooLarge) {
                case .incomplete: return nil
                case .failed(let failure): return fail(failure)
                case .line(let start, let end):
                    readIndex = end + 2
                    if start == end { return finishRequest() }
                    let line = buffer[start..<end]
                    if case .failure(let failure) = Self.checkFieldLine(line) { return fail(failure) }
                    state = .trailers(bytesSeen: bytesSeen + (end + 2 - start))
                }
            }
        }
    }

    private mutating func fail(_ failure: HTTPRequestFailure) -> HTTPParserEvent {
        state = .failed
        buffer = []
        body = []
        head = nil
        readIndex = 0
        scanIndex = 0
        return .failure(failure)
    }

    /// Takes back a request's body once the server is done with it, for the
    /// next request's body. Emptied here; a body something else still holds
    /// (a route that kept it) is copied on that empty, as any shared array,
    /// so the holder's bytes never change. Too large a one is let go.
    package mutating func recycle(body returned: consuming [UInt8]) {
        guard returned.capacity > 0, returned.capacity <= limits.bufferBytesRetainedMax,
            spareBody.capacity < returned.capacity
        else { return }
        var returned = returned
        returned.removeAll(keepingCapacity: true)
        spareBody = returned
    }

    /// Hands over the finished request; the parser keeps no reference to its body.
    private mutating func finishRequest() -> HTTPParserEvent {
        guard let finished = head else { preconditionFailure("a body ended without a head") }
        let request = HTTPRequest(head: finished, body: body)
        body = []
        head = nil
        state = .head
        scanIndex = readIndex
        requestsParsed += 1
        return .request(request)
    }

    // MARK: - Head

    private enum HeadScan {
        case incomplete
        case complete(headEnd: Int)
        case failed(HTTPRequestFailure)
    }

    /// Scans for the blank line ending the head, enforcing CRLF and the size limit.
    /// Resumes where the previous call stopped, so the whole head is scanned once.
    ///
    /// Line by line with `memchr` (a byte-by-byte loop cost ~3,500
    /// instructions a registration's head). It reports what that loop
    /// reported, at the same byte: the first of a bare CR (a CR whose next
    /// byte is not LF: at that next byte), a bare LF, the blank line, or the
    /// limit passed (the byte at `start + limit` is still looked at first).
    private mutating func scanHead() -> HeadScan {
        // Blank lines before a request line are skipped (RFC 9112 2.2).
        while buffer.count - readIndex >= 2 && buffer[readIndex] == cr && buffer[readIndex + 1] == lf {
            readIndex += 2
        }
        if scanIndex < readIndex { scanIndex = readIndex }
        let start = readIndex
        let limit = limits.headBytesMax
        let result: HeadScan = buffer.withUnsafeBufferPointer { bytes in
            // Bytes past `start + limit` are never looked at.
            let end = min(bytes.count, start + limit + 1)
            var index = scanIndex
            defer { scanIndex = index }
            while index < end {
                let lineFeed = Self.firstIndex(of: lf, in: bytes, from: index, to: end)
                let segmentEnd = lineFeed ?? end
                // A CR before the segment's last byte is followed by a byte that is not LF; the
                // byte before `index` (a CR that ended the previous call's bytes) is looked at too.
                if let bareCR = Self.firstIndex(of: cr, in: bytes, from: max(start, index - 1), to: segmentEnd - 1) {
                    index = bareCR + 1
                    return .failed(.badRequest(reason: "bare CR in head"))
                }
                guard let lineFeed else {
                    index = end
                    break
                }
                index = lineFeed
                if lineFeed == start || bytes[lineFeed - 1] != cr {
                    return .failed(.badRequest(reason: "bare LF in head"))
                }
                index = lineFeed + 1
                // An empty line (CRLF right after a CRLF) ends the head.
                if lineFeed - start >= 3 && bytes[lineFeed - 2] == lf && bytes[lineFeed - 3] == cr {
                    if index - start > limit { return .failed(.headersTooLarge(limitBytes: limit)) }
                    return .complete(headEnd: index)
                }
            }
            if index - start > limit { return .failed(.headersTooLarge(limitBytes: limit)) }
            return .incomplete
        }
        return result
    }

    /// The index of the first `byte` in `bytes[from..<to]`, or nil (also when the range is empty).
    private static func firstIndex(of byte: UInt8, in bytes: UnsafeBufferPointer<UInt8>, from: Int, to: Int) -> Int? {
        guard from < to, let base = bytes.baseAddress else { return nil }
        guard let found = memchr(base + from, Int32(byte), to - from) else { return nil }
        return base.distance(to: found.assumingMemoryBound(to: UInt8.self))
    }

    /// Parses the complete head in `readIndex..<headEnd`, chooses the body framing
    /// and returns an event if the request is already complete or refused.
    private mutating func startBody(headEnd: Int, limitFor: (HTTPRequestHead) -> Int) -> HTTPParserEvent? {
        var previous = previousHeaders.take()
        let parsed = buffer.withUnsafeBufferPointer { bytes in
            HeadParser.parse(
                UnsafeBufferPointer(rebasing: bytes[readIndex..<(headEnd - 2)]), limits: limits,
                previous: previous.take())
        }
        readIndex = headEnd
        scanIndex = headEnd
        // Consumed, not bound by copy: each copy of a head retained its strings and header array.
        switch consume parsed {
        case .failure(let failure):
            return fail(failure)
        case .success(let parsed):
            head = parsed.head
            previousHeaders = parsed.head.headers
            body = []
            switch parsed.framing {
            case .none:
                return finishRequest()
            case .contentLength(let length):
                bodyLimitBytes = min(max(0, limitFor(parsed.head)), limits.bodyBytesCeiling)
                if length > bodyLimitBytes { return fail(.bodyTooLarge(limitBytes: bodyLimitBytes)) }
                if length == 0 { return finishRequest() }
                swap(&body, &spareBody)
                body.reserveCapacity(length)
                state = .fixedBody(remaining: length)
            case .chunked:
                bodyLimitBytes = min(max(0, limitFor(parsed.head)), limits.bodyBytesCeiling)
                swap(&body, &spareBody)
                state = .chunkSize
            }
            // RFC 9110 10.1.1: a server may omit the 100 once body bytes have arrived.
            if parsed.expectsContinue && readIndex == buffer.count { return .expectsContinue }
            return nil
        }
    }

    // MARK: - Chunked body

    private enum LineScan {
        case incomplete
        case line(start: Int, end: Int)
        case failed(HTTPRequestFailure)
    }

    /// Scans one CRLF-terminated line starting at `readIndex`; `end` is the index of its CR.
    private mutating func scanLine(lengthMax: Int, tooLong: HTTPRequestFailure) -> LineScan {
        if scanIndex < readIndex { scanIndex = readIndex }
        let start = readIndex
        while scanIndex < buffer.count {
            let byte = buffer[scanIndex]
            let previous: UInt8 = scanIndex > start ? buffer[scanIndex - 1] : 0
            if previous == cr && byte != lf { return .failed(.badRequest(reason: "bare CR in chunked framing")) }
            if byte == lf {
                if previous != cr { return .failed(.badRequest(reason: "bare LF in chunked framing")) }
                let end = scanIndex - 1
                scanIndex += 1
                return .line(start: start, end: end)
            }
            scanIndex += 1
            if scanIndex - start > lengthMax { return .failed(tooLong) }
        }
        return .incomplete
    }

    /// Parses `size [ws] [; extensions]`; extensions are ignored.
    private func parseChunkSize(_ start: Int, _ end: Int) -> Result<Int, HTTPRequestFailure> {
        var index = start
        var size: UInt64 = 0
        var digits = 0
        while index < end, let value = hexValue(buffer[index]) {
            digits += 1
            if digits > 16 { return .failure(.badRequest(reason: "chunk size overflows")) }
            size = size << 4 | UInt64(value)
            index += 1
        }
        if digits == 0 { return .failure(.badRequest(reason: "chunk size is not hexadecimal")) }
        if size > UInt64(Int.max) { return .failure(.badRequest(reason: "chunk size overflows")) }
        while index < end && (buffer[index] == space || buffer[index] == tab) { index += 1 }
        if index < end && buffer[index] != semicolon {
            return .failure(.badRequest(reason: "chunk size is not hexadecimal"))
        }
        while index < end {
            if isControl(buffer[index]) { return .failure(.badRequest(reason: "control character in chunk extension")) }
            index += 1
        }
        return .success(Int(size))
    }

    /// Checks a trailer line with the same rules as a header line.
    private static func checkFieldLine(_ line: ArraySlice<UInt8>) -> Result<Void, HTTPRequestFailure> {
        line.withUnsafeBufferPointer { bytes in
            switch HeadParser.splitField(bytes) {
            case .failure(let failure): .failure(failure)
            case .success: .success(())
            }
        }
    }
}

// MARK: - Byte classes

let cr: UInt8 = 13
let lf: UInt8 = 10
let space: UInt8 = 32
let tab: UInt8 = 9
let colon: UInt8 = 58
let semicolon: UInt8 = 59
let comma: UInt8 = 44

@inline(__always)
func isControl(_ byte: UInt8) -> Bool {
    (byte < 0x20 && byte != tab) || byte == 0x7F
}

@inline(__always)
func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case 48...57: byte - 48
    case 65...70: byte - 55
    case 97...102: byte - 87
    default: nil
    }
}

/// Whether a byte may appear in a token (method, field name): RFC 9110
/// tchar (`!#$%&'*+-.^_\`|~`, digits, letters), as a set of 128 bits, one
/// per byte below 0x80 (none above is a tchar): a shift and a mask, not a
/// chain of range checks, for every byte of every field name.
@inline(__always)
func isTokenByte(_ byte: UInt8) -> Bool {
    let bits: UInt64 = byte < 64 ? 0x03FF_6CFA_0000_0000 : 0x57FF_FFFF_C7FF_FFFE
    return byte < 128 && bits >> UInt64(byte & 63) & 1 != 0
}

@usableFromInline @inline(__always)
func lowercased(_ byte: UInt8) -> UInt8 {
    (byte >= 65 && byte <= 90) ? byte | 0x20 : byte
}

/// Returns whether `string`'s UTF-8 equals `bytes`: one length check and a
/// `memcmp` over the string's own storage (a generic `elementsEqual` over a
/// `String.UTF8View` walks it index by index: 1.7 % of a registration).
@inline(__always)
func utf8Equals(_ string: String, _ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
    guard string.utf8.count == bytes.count else { return false }
    // In place (`withUTF8` on a copy retains and releases the string: two calls per field).
    return string.utf8.withContiguousStorageIfAvailable { stored in
        bytes.isEmpty || memcmp(stored.baseAddress!, bytes.baseAddress!, bytes.count) == 0
    } ?? string.utf8.elementsEqual(bytes)
}

/// Returns whether `bytes` equals the lowercase ASCII `name` ignoring case.
@inline(__always)
func equalsLowercase(_ bytes: UnsafeBufferPointer<UInt8>, _ name: StaticString) -> Bool {
    guard bytes.count == name.utf8CodeUnitCount else { return false }
    let expected = name.utf8Start
    for index in 0..<bytes.count where lowercased(bytes[index]) != expected[index] { return false }
    return true
}
