import Glibc
import RoostPlatform

/// Why an HTTP exchange failed. Every case leaves the connection unusable:
/// its owner closes it.
package enum HTTPClientError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The connection could not be made (refused, unreachable, or not within the timeout).
    case connect(SystemCallError)
    /// The deadline passed before the request was sent.
    case sendTimedOut
    /// The deadline passed before the whole answer (or the next piece of a stream) arrived.
    case answerTimedOut
    /// Sending or receiving failed (reset, broken pipe).
    case transfer(SystemCallError)
    /// The server closed the connection before any byte of an answer
    /// (one cut inside an answer is `.response(.truncated)`).
    case closedByPeer
    /// The answer is not an HTTP/1.1 response this client accepts.
    case response(HTTPClientResponseError)
    /// The answer's body is longer than the caller's limit.
    case answerTooLarge(limitBytes: Int)
    /// The owner cancelled the exchange from another thread (a watch's `cancel`).
    case cancelled

    package var description: String {
        switch self {
        case .connect(let error): "cannot connect: \(error)"
        case .sendTimedOut: "timed out sending the request"
        case .answerTimedOut: "timed out waiting for the answer"
        case .transfer(let error): "connection failed: \(error)"
        case .closedByPeer: "connection closed by the server before an answer"
        case .response(let error): error.description
        case .answerTooLarge(let limit): "answer larger than \(limit) bytes"
        case .cancelled: "cancelled"
        }
    }
}

/// A whole answer: head and de-chunked body.
package struct HTTPClientAnswer: Hashable, Sendable {
    package var head: HTTPClientResponseHead
    package var body: [UInt8]

    package var status: Int { head.status }
}

/// Where an HTTP client connects: a numeric host (IPv4, or IPv6 without
/// brackets) and a port.
package struct HTTPClientAddress: Hashable, Sendable, CustomStringConvertible {
    package var host: String
    package var port: UInt16

    package init(host: String, port: UInt16) {
        precondition(IPAddress(parsing: Substring(host)) != nil, "an HTTP client address is numeric, got \(host)")
        self.host = host
        self.port = port
    }

    /// `host:port`, with brackets around an IPv6 host (the `Host` header's form).
    package var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// One blocking HTTP/1.1 client connection over a non-blocking socket, every
/// wait bounded by a deadline (poll(2)), used by one thread at a time. It
/// sends `POST`s with a JSON body and reads whole answers (Content-Length,
/// chunked, or close-delimited) or, for a stream, the body piece by piece.
/// A failure of any kind leaves it unusable (`isUsable` false): the owner
/// closes it and opens another.
package final class HTTPClientConnection {
    /// The most bytes read from the socket in one call.
    package static let readChunkBytes = 64 * 1024

    package let address: HTTPClientAddress
    private let socket: FileDescriptor
    private var parser: HTTPClientResponseParser
    private var isClosed = false
    private var failed = false
    /// Whether the server let the connection carry another request after the last answer.
    private var keepsConnection = true
    private var readBuffer = [UInt8](repeating: 0, count: HTTPClientConnection.readChunkBytes)
    /// Requests sent on this connection.
    package private(set) var requestsSent = 0

    /// Connects to `address` before `deadline`.
    package init(
        to address: HTTPClientAddress, deadline: ContinuousClock.Instant, limits: HTTPClientLimits = .default
    ) throws(HTTPClientError) {
        self.address = address
        self.parser = HTTPClientResponseParser(limits: limits)
        do {
            socket = try TCPSocket.connect(
                host: address.host, port: address.port,
                timeoutMilliseconds: HTTPClientConnection.milliseconds(until: deadline))
        } catch {
            throw .connect(error)
        }
    }

    deinit {
        close()
    }

    /// The descriptor, for a canceller on another thread (shutdown only, never close).
    package var descriptor: FileDescriptor { socket }

    /// Whether another request may be sent: no failure, no close asked by
    /// the server, no answer under way, and the server has not closed its
    /// end meanwhile (nothing readable while idle). O(1): one poll(2).
    package var isUsable: Bool {
        guard !isClosed, !failed, keepsConnection, !parser.isInsideResponse, parser.bufferedBytes == 0 else {
            return false
        }
        // Idle, a readable socket means end of stream (or bytes nobody asked
        // for): either way the connection cannot carry a request.
        let readable = (try? socket.wait(for: .readable, timeoutMilliseconds: 0)) ?? true
        return !readable
    }

    /// Closes the socket (once).
    package func close() {
        guard !isClosed else { return }
        isClosed = true
        socket.close()
    }

    /// Sends `POST path` with a JSON `body` and `Host: hostHeader`, before `deadline`.
    package func sendPost(
        path: String, hostHeader: String, body: [UInt8], deadline: ContinuousClock.Instant
    ) throws(HTTPClientError) {
        precondition(!isClosed && !failed, "a request on a closed or failed connection to \(address)")
        precondition(!parser.isInsideResponse, "a request on \(address) while an answer is under way")
        precondition(path.hasPrefix("/") && !path.contains(" "), "an HTTP path starts with / and has no space: \(path)")
        var request = Array("POST \(path) HTTP/1.1\r\nHost: \(hostHeader)\r\n".utf8)
        request.append(contentsOf: "Content-Type: application/json\r\nContent-Length: \(body.count)\r\n\r\n".utf8)
        request.append(contentsOf: body)
        requestsSent += 1
        do {
            try send(request, deadline: deadline)
        } catch {
            failed = true
            throw error
        }
    }

    /// Sends `GET path` with `Host: hostHeader` and `headers` (`Name: value`, no line breaks), before `deadline`.
    package func sendGet(
        path: String, hostHeader: String, headers: [(name: String, value: String)], deadline: ContinuousClock.Instant
    ) throws(HTTPClientError) {
        precondition(!isClosed && !failed, "a request on a closed or failed connection to \(address)")
        precondition(!parser.isInsideResponse, "a request on \(address) while an answer is under way")
        precondition(path.hasPrefix("/") && !path.contains(" "), "an HTTP path starts with / and has no space: \(path)")
        var request = "GET \(path) HTTP/1.1\r\nHost: \(hostHeader)\r\n"
        for header in headers {
            precondition(
                !header.name.contains("\r") && !header.name.contains("\n") && !header.value.contains("\r")
                    && !header.value.contains("\n"), "a header with a line break")
            request += "\(header.name): \(header.value)\r\n"
        }
        requestsSent += 1
        do {
            try send(Array((request + "\r\n").utf8), deadline: deadline)
        } catch {
            failed = true
            throw error
        }
    }

    /// Reads one whole answer before `deadline`; a body longer than `bodyBytesMax` fails.
    package func readAnswer(deadline: ContinuousClock.Instant, bodyBytesMax: Int) throws(HTTPClientError)
        -> HTTPClientAnswer
    {
        precondition(bodyBytesMax >= 0, "body limit must not be negative, got \(bodyBytesMax)")
        let head = try readHead(deadline: deadline)
        var body: [UInt8] = []
        while let piece = try readBodyPiece(deadline: deadline) {
            guard body.count + piece.count <= bodyBytesMax else {
                failed = true
                throw .answerTooLarge(limitBytes: bodyBytesMax)
            }
            body.append(contentsOf: piece)
        }
        return HTTPClientAnswer(head: head, body: body)
    }

    /// Reads the head of the next answer before `deadline`.
    package func readHead(deadline: ContinuousClock.Instant) throws(HTTPClientError) -> HTTPClientResponseHead {
        while true {
            switch try nextEvent(deadline: deadline) {
            case .head(let head):
                keepsConnection = head.keepsConnection
                return head
            case .body, .end:
                failed = true
                throw .response(.malformed("body before head"))
            }
        }
    }

    /// Returns the next piece of the current answer's body, waiting until
    /// `deadline`, or nil once the body is complete.
    package func readBodyPiece(deadline: ContinuousClock.Instant) throws(HTTPClientError) -> [UInt8]? {
        switch try nextEvent(deadline: deadline) {
        case .body(let piece): return piece
        case .end: return nil
        case .head:
            failed = true
            throw .response(.malformed("a head inside a body"))
        }
    }

    /// Like `readBodyPiece`, for a body that streams without end (a watch):
    /// a deadline that passes throws `.answerTimedOut` and leaves the
    /// connection as it was, to be read again.
    package func readStreamPiece(deadline: ContinuousClock.Instant) throws(HTTPClientError) -> [UInt8]? {
        switch try nextEvent(deadline: deadline, timeoutEndsConnection: false) {
        case .body(let piece): return piece
        case .end: return nil
        case .head:
            failed = true
            throw .response(.malformed("a head inside a body"))
        }
    }

    // MARK: - I/O

    /// Returns the parser's next event, reading until `deadline`. A timeout
    /// ends the connection unless `timeoutEndsConnection` is false: an answer
    /// that arrives after its request timed out must never be read as the
    /// next request's.
    private func nextEvent(deadline: ContinuousClock.Instant, timeoutEndsConnection: Bool = true)
        throws(HTTPClientError) -> HTTPClientResponseEvent
    {
        precondition(!isClosed, "reading a closed connection to \(address)")
        while true {
            let event: HTTPClientResponseEvent?
            do {
                event = try parser.next()
            } catch {
                failed = true
                throw .response(error)
            }
            if let event { return event }
            let more: Bool
            do {
                more = try fill(deadline: deadline)
            } catch {
                if error != .answerTimedOut || timeoutEndsConnection { failed = true }
                throw error
            }
            guard more else {
                keepsConnection = false
                let last: HTTPClientResponseEvent?
                do {
                    last = try parser.finish()
                } catch {
                    failed = true
                    throw .response(error)
                }
                if let last { return last }
                failed = true
                throw .closedByPeer
            }
        }
    }

    /// Reads what the socket holds, waiting until `deadline`. Returns false at end of stream.
    private func fill(deadline: ContinuousClock.Instant) throws(HTTPClientError) -> Bool {
        while true {
            let remaining = HTTPClientConnection.milliseconds(until: deadline)
            let ready: Bool
            do {
                ready = try socket.wait(for: .readable, timeoutMilliseconds: remaining)
            } catch {
                throw .transfer(error)
            }
            guard ready else {
                if remaining == 0 { throw .answerTimedOut }
                continue
            }
            let result = readBuffer.withUnsafeMutableBytes { raw in
                Result { () throws(SystemCallError) in try socket.read(into: raw) }
            }
            switch result {
            case .success(.done(0)): return false
            case .success(.done(let count)):
                parser.append(readBuffer[0..<count])
                return true
            case .success(.wouldBlock): continue
            case .failure(let error):
                // A reset is the server going away, as an end of stream would be.
                if error.errno == ECONNRESET { return false }
                throw .transfer(error)
            }
        }
    }

    private func send(_ bytes: [UInt8], deadline: ContinuousClock.Instant) throws(HTTPClientError) {
        var offset = 0
        while offset < bytes.count {
            let result = bytes.withUnsafeBytes { raw in
                Result { () throws(SystemCallError) in try socket.send(UnsafeRawBufferPointer(rebasing: raw[offset...]))
                }
            }
            switch result {
            case .success(.done(let count)): offset += count
            case .success(.wouldBlock):
                let remaining = HTTPClientConnection.milliseconds(until: deadline)
                let ready: Bool
                do {
                    ready = try socket.wait(for: .writable, timeoutMilliseconds: remaining)
                } catch {
                    throw .transfer(error)
                }
                if !ready && remaining == 0 { throw .sendTimedOut }
            case .failure(let error): throw .transfer(error)
            }
        }
    }

    /// Whole milliseconds from now to `deadline`, rounded up; 0 once it passed.
    package static func milliseconds(until deadline: ContinuousClock.Instant) -> Int {
        let remaining = deadline - ContinuousClock.now
        guard remaining > .zero else { return 0 }
        let nanoseconds = remaining.wholeNanoseconds
        return Int((nanoseconds + 999_999) / 1_000_000)
    }
}
