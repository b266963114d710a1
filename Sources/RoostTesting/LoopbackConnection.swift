import Glibc
import RoostPlatform

/// A response as read by `LoopbackConnection`.
public struct LoopbackResponse: Sendable {
    public var status: Int
    /// Header fields in order, names as sent.
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    /// Returns the first value of the named header (case-insensitive), or nil.
    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    /// The body decoded as UTF-8.
    public var bodyText: String { String(decoding: body, as: UTF8.self) }
}

/// Why a `LoopbackConnection` read failed.
public enum LoopbackError: Error, Sendable, Equatable {
    /// Nothing (or not enough) arrived within the timeout.
    case timedOut
    /// The server closed the connection before a whole response arrived.
    case closed(bytesReceived: Int)
    /// The bytes are not an HTTP/1.1 response.
    case malformed(String)
    /// A system call failed.
    case system(SystemCallError)
}

/// A small blocking HTTP/1.1 client over 127.0.0.1 for tests: send raw bytes,
/// read whole responses with a timeout, detect the server's close.
public final class LoopbackConnection {
    private let socket: FileDescriptor
    private var buffer: [UInt8] = []
    private var isClosed = false

    /// Connects to `host`:`port` (an IPv4 or IPv6 address; 127.0.0.1 by default).
    public init(host: String = "127.0.0.1", port: UInt16) throws(LoopbackError) {
        do {
            socket = try TCPSocket.connect(host: host, port: port)
        } catch {
            throw .system(error)
        }
    }

    deinit {
        if !isClosed { socket.close() }
    }

    /// Sends raw bytes.
    public func send(_ bytes: [UInt8]) throws(LoopbackError) {
        let result = bytes.withUnsafeBytes { raw in
            Result { () throws(SystemCallError) in try socket.sendAll(raw) }
        }
        if case .failure(let error) = result { throw .system(error) }
    }

    /// Sends a string's UTF-8 bytes.
    public func send(_ text: String) throws(LoopbackError) {
        try send(Array(text.utf8))
    }

    /// Closes the connection with a reset (SO_LINGER 0): the server sees an
    /// error, not an end of stream.
    public func reset() {
        guard !isClosed else { return }
        var option = linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(socket.rawValue, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
        close()
    }

    /// Closes the connection.
    public func close() {
        if !isClosed {
            isClosed = true
            socket.close()
        }
    }

    /// Reads one whole response (Content-Length, chunked, or until close).
    /// `forHead`: the answer to a HEAD request has no body.
    public func readResponse(timeout: Duration = .seconds(2), forHead: Bool = false) throws(LoopbackError)
        -> LoopbackResponse
    {
        let deadline = ContinuousClock.now + timeout
        var headEnd = findHeadEnd()
        while headEnd == nil {
            try fill(until: deadline)
            headEnd = findHeadEnd()
        }
        guard let headEnd else { throw .malformed("no head") }
        let headText = String(decoding: buffer[0..<headEnd], as: UTF8.self)
        var lines = headText.split(separator: "\r\n", omittingEmptySubsequences: false)
        let statusLine = lines.removeFirst()
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
            throw .malformed("status line \(statusLine)")
        }
        var headers: [(name: String, value: String)] = []
        for line in lines where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":") else { throw .malformed("header line \(line)") }
            let value = line[line.index(after: colon)...].drop { $0 == " " }
            headers.append((String(line[..<colon]), String(value)))
        }
        buffer.removeSubrange(0..<(headEnd + 4))
        var response = LoopbackResponse(status: status, headers: headers, body: [])
        let noBody = forHead || status == 204 || status == 304 || status < 200
        if noBody { return response }
        if let length = response.header("Content-Length").flatMap({ Int($0) }) {
            while buffer.count < length { try fill(until: deadline) }
            response.body = Array(buffer[0..<length])
            buffer.removeSubrange(0..<length)
        } else if response.header("Transfer-Encoding")?.lowercased() == "chunked" {
            response.body = try readChunkedBody(until: deadline)
        } else {
            while true {
                do {
                    try fill(until: deadline)
                } catch .closed {
                    break
                }
            }
            response.body = buffer
            buffer = []
        }
        return response
    }

    /// Waits until the server closes the connection. Returns every byte that
    /// arrived first, or throws `.timedOut` if it stays open.
    public func readUntilClosed(timeout: Duration = .seconds(2)) throws(LoopbackError) -> [UInt8] {
        let deadline = ContinuousClock.now + timeout
        while true {
            do {
                try fill(until: deadline)
            } catch .closed {
                let rest = buffer
                buffer = []
                return rest
            }
        }
    }

    /// Returns whether the server has closed the connection within `timeout`
    /// (bytes that arrive meanwhile are kept for `readResponse`).
    public func isClosedByPeer(timeout: Duration = .seconds(2)) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while true {
            do {
                try fill(until: deadline)
            } catch .closed {
                return true
            } catch {
                return false
            }
        }
    }

    private func findHeadEnd() -> Int? {
        guard buffer.count >= 4 else { return nil }
        for index in 0...(buffer.count - 4)
        where buffer[index] == 13 && buffer[index + 1] == 10 && buffer[index + 2] == 13 && buffer[index + 3] == 10 {
            return index
        }
        return nil
    }

    private func readChunkedBody(until deadline: ContinuousClock.Instant) throws(LoopbackError) -> [UInt8] {
        var body: [UInt8] = []
        while true {
            let line = try readLine(until: deadline)
            let sizeText = line.split(separator: ";").first.map(String.init) ?? ""
            guard let size = Int(sizeText.trimmingSpaces(), radix: 16) else { throw .malformed("chunk size \(line)") }
            if size == 0 {
                while try !readLine(until: deadline).isEmpty {}
                return body
            }
            while buffer.count < size + 2 { try fill(until: deadline) }
            body.append(contentsOf: buffer[0..<size])
            buffer.removeSubrange(0..<(size + 2))
        }
    }

    private func readLine(until deadline: ContinuousClock.Instant) throws(LoopbackError) -> String {
        while true {
            if let index = buffer.firstIndex(of: 10) {
                let line = String(decoding: buffer[0..<index], as: UTF8.self)
                buffer.removeSubrange(0...index)
                return line.hasSuffix("\r") ? String(line.dropLast()) : line
            }
            try fill(until: deadline)
        }
    }

    /// Reads more bytes into the buffer, waiting at most until `deadline`.
    private func fill(until deadline: ContinuousClock.Instant) throws(LoopbackError) {
        let remaining = deadline - ContinuousClock.now
        if remaining <= .zero { throw .timedOut }
        let (seconds, attoseconds) = remaining.components
        let milliseconds = max(1, Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000))
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        let outcome = chunk.withUnsafeMutableBytes { raw in
            Result { () throws(SystemCallError) in
                try TCPSocket.setReceiveTimeout(socket, milliseconds: milliseconds)
                return try socket.read(into: raw)
            }
        }
        let result: NonBlockingResult<Int>
        switch outcome {
        case .success(let value): result = value
        case .failure(let error):
            // A reset after the server closed counts as closed.
            if error.errno == 104 { throw .closed(bytesReceived: buffer.count) }
            throw .system(error)
        }
        switch result {
        case .wouldBlock: throw .timedOut
        case .done(0): throw .closed(bytesReceived: buffer.count)
        case .done(let count): buffer.append(contentsOf: chunk[0..<count])
        }
    }
}

extension String {
    fileprivate func trimmingSpaces() -> String {
        String(self.drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}
