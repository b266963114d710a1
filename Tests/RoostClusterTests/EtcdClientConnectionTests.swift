import Glibc
import RoostCluster
import RoostPlatform
import RoostTesting
import Synchronization
import Testing

/// A scripted HTTP server on loopback, one thread, one connection at a
/// time: what etcd does not do on demand (answer late, close an idle
/// connection, send garbage, dribble a chunked answer).
final class ScriptedServer: Sendable {
    enum Step: Sendable {
        /// Writes these bytes, in pieces of `pieceBytes` (0: at once); each
        /// piece once the client has read the one before, so that it reads
        /// them one at a time.
        case answer(String, pieceBytes: Int = 0)
        /// Writes these bytes once the test calls `releaseLateAnswer()`: an
        /// answer that comes after the client stopped waiting for it.
        case lateAnswer(String)
        /// Writes these bytes, then closes the connection.
        case answerThenClose(String)
    }

    /// What the script did so far, for the test to wait on.
    final class Served: Sendable {
        /// For each request served, the number of the connection it came on (1, 2, …).
        let connections = Mutex<[Int]>([])
        /// Answers written whole.
        let answersWritten = Atomic<Int>(0)
        /// Connections the server closed.
        let closes = Atomic<Int>(0)
        /// Opened by the test: a `lateAnswer` step writes its answer.
        let lateAnswerReleased = Latch()
        /// Opened by `finish()`: the script's last connection may close.
        let finishing = Latch()
    }

    let port: UInt16
    private let thread: PlatformThread
    private let served = Served()

    init(_ steps: [Step]) throws {
        let listener = try TCPSocket.listen(host: "127.0.0.1", port: 0, backlog: 8, reusePort: false)
        port = try TCPSocket.localPort(of: listener)
        let served = self.served
        thread = try PlatformThread.spawn {
            ScriptedServer.run(steps, listener: listener, served: served)
            listener.close()
        }
    }

    /// Answers written whole so far (on loopback, they are in the client's socket).
    var answersWritten: Int { served.answersWritten.load(ordering: .acquiring) }

    /// Connections the server closed so far (on loopback, the client's socket has the FIN).
    var connectionsClosed: Int { served.closes.load(ordering: .acquiring) }

    /// Lets a `lateAnswer` step write its answer.
    func releaseLateAnswer() {
        served.lateAnswerReleased.open()
    }

    /// Ends the script (the last connection is closed), waits for it, and
    /// returns each request's connection number.
    func finish() -> [Int] {
        served.finishing.open()
        served.lateAnswerReleased.open()
        thread.join()
        return served.connections.withLock { $0 }
    }

    private static func run(_ steps: [Step], listener: FileDescriptor, served: Served) {
        var client: FileDescriptor?
        var opened = 0
        for step in steps {
            // The request comes on the open connection, or (when the client
            // closed that one) on the next one accepted.
            while true {
                if client == nil {
                    guard (try? listener.wait(for: .readable, timeoutMilliseconds: 5000)) == true,
                        case .done(let accepted)? = try? TCPSocket.accept(listener)
                    else { return }
                    client = accepted
                    opened += 1
                }
                guard let open = client else { return }
                if readRequest(open) { break }
                open.close()
                client = nil
            }
            guard let connection = client else { return }
            served.connections.withLock { $0.append(opened) }
            switch step {
            case .answer(let text, let pieceBytes):
                let bytes = Array(text.utf8)
                let size = pieceBytes > 0 ? pieceBytes : bytes.count
                for start in stride(from: 0, to: bytes.count, by: size) {
                    if start > 0 { _ = ConditionWait.until { peerHasReadEverything(connection) } }
                    write(connection, Array(bytes[start..<min(bytes.count, start + size)]))
                }
            case .lateAnswer(let text):
                served.lateAnswerReleased.wait()
                write(connection, Array(text.utf8))
            case .answerThenClose(let text):
                write(connection, Array(text.utf8))
                connection.close()
                client = nil
                served.closes.add(1, ordering: .releasing)
            }
            served.answersWritten.add(1, ordering: .releasing)
        }
        // The client may still read the last answer on a connection kept alive.
        served.finishing.wait()
        client?.close()
    }

    /// Whether the client has read every byte sent on `connection`: the
    /// receive queue of its socket (`rx_queue` in /proc/net/tcp, on the line
    /// whose local address is this connection's peer and whose remote
    /// address is this connection) is empty. Searched with memmem: the table
    /// holds every socket of the machine.
    private static func peerHasReadEverything(_ connection: FileDescriptor) -> Bool {
        func port(_ name: (Int32, UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32) -> String?
        {
            var address = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let named = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { name(connection.rawValue, $0, &length) }
            }
            guard named == 0 else { return nil }
            let hex = String(UInt16(bigEndian: address.sin_port), radix: 16, uppercase: true)
            return String(repeating: "0", count: 4 - hex.count) + hex
        }
        guard let client = port({ getpeername($0, $1, $2) }), let server = port({ getsockname($0, $1, $2) }),
            let table = try? DurableFile.readIfExists(path: "/proc/net/tcp", limitBytes: 1 << 26)
        else { return true }
        // A line: "SL: 0100007F:CLIENT 0100007F:SERVER ST TX_QUEUE:RX_QUEUE …",
        // RX_QUEUE 8 hex digits.
        let wanted = Array("0100007F:\(client) 0100007F:\(server) ".utf8)
        let rxQueueOffset = wanted.count + 3 + 9
        return table.withUnsafeBytes { haystack in
            wanted.withUnsafeBytes { pattern in
                guard let base = haystack.baseAddress else { return true }
                var lineStart = 0
                while lineStart < haystack.count {
                    let remaining = haystack.count - lineStart
                    let lineEnd =
                        memchr(base + lineStart, 10, remaining).map { base.distance(to: $0) } ?? haystack.count
                    if let colon = memchr(base + lineStart, 58, lineEnd - lineStart) {  // after SL
                        let address = base.distance(to: colon) + 2
                        if address + rxQueueOffset + 8 <= lineEnd,
                            memcmp(base + address, pattern.baseAddress!, pattern.count) == 0
                        {
                            let queue = address + rxQueueOffset
                            return Int(String(decoding: haystack[queue..<(queue + 8)], as: UTF8.self), radix: 16) == 0
                        }
                    }
                    lineStart = lineEnd + 1
                }
                return true
            }
        }
    }

    /// Reads one request (head and Content-Length body). Returns false at end of stream or after 5 s.
    private static func readRequest(_ connection: FileDescriptor) -> Bool {
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            if let end = headEnd(received) {
                let head = String(decoding: received[..<end], as: UTF8.self).lowercased()
                let length =
                    head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                    .flatMap { Int($0.dropFirst("content-length:".count).drop { $0 == " " }) } ?? 0
                if received.count >= end + 4 + length { return true }
            }
            guard (try? connection.wait(for: .readable, timeoutMilliseconds: 5000)) == true else { return false }
            let result = chunk.withUnsafeMutableBytes { raw in try? connection.read(into: raw) }
            switch result {
            case .done(let count)? where count > 0: received.append(contentsOf: chunk[0..<count])
            case .wouldBlock?: continue
            case .done?, nil: return false
            }
        }
    }

    private static func headEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        return (0...(bytes.count - 4)).first { bytes[$0..<($0 + 4)].elementsEqual([13, 10, 13, 10]) }
    }

    private static func write(_ connection: FileDescriptor, _ bytes: [UInt8]) {
        _ = bytes.withUnsafeBytes { raw in try? connection.sendAll(raw) }
    }
}

/// `EtcdClient`'s connection handling against a scripted server: keep-alive
/// reuse and its end, the request timeout, a malformed answer moving on to
/// the next endpoint, a chunked answer in small pieces.
@Suite("EtcdClient connections (scripted server)", .serialized)
struct EtcdClientConnectionTests {
    static func revoked(_ revision: Int, chunked: Bool = false, close: Bool = false) -> String {
        let body = "{\"header\":{\"revision\":\"\(revision)\"}}"
        let framing =
            chunked
            ? "Transfer-Encoding: chunked\r\n\r\n\(String(body.utf8.count, radix: 16))\r\n\(body)\r\n0\r\n\r\n"
            : "Content-Length: \(body.utf8.count)\r\n\r\n\(body)"
        return "HTTP/1.1 200 OK\r\n" + (close ? "Connection: close\r\n" : "") + framing
    }

    static func client(_ servers: ScriptedServer..., timeout: Duration = .seconds(2)) throws -> EtcdClient {
        EtcdClient(
            endpoints: try EtcdEndpoint.parseList(servers.map { "http://127.0.0.1:\($0.port)" }.joined(separator: ",")),
            options: EtcdClientOptions(requestTimeout: timeout))
    }

    static let revoke = EtcdRequest.revokeLease(EtcdLeaseID(1))

    @Test("keep-alive: requests share a connection until the server closes it or says Connection: close")
    func keepAliveAndItsEnd() throws {
        let server = try ScriptedServer([
            .answer(Self.revoked(2)), .answer(Self.revoked(3, chunked: true)), .answerThenClose(Self.revoked(4)),
            .answerThenClose(Self.revoked(5, close: true)), .answer(Self.revoked(6)),
        ])
        let client = try Self.client(server)
        #expect(client.perform(Self.revoke) == .revoked(revision: EtcdRevision(2)))
        #expect(client.perform(Self.revoke) == .revoked(revision: EtcdRevision(3)))
        #expect(client.perform(Self.revoke) == .revoked(revision: EtcdRevision(4)))
        // The server closed: the FIN is in the client's socket, the idle connection is seen closed.
        #expect(ConditionWait.until { server.connectionsClosed == 1 })
        #expect(client.perform(Self.revoke) == .revoked(revision: EtcdRevision(5)))
        #expect(client.perform(Self.revoke) == .revoked(revision: EtcdRevision(6)))
        #expect(server.finish() == [1, 1, 1, 2, 3])
        #expect(client.connectionsOpened == 3)
    }

    @Test("a late answer fails the request within its timeout and is never read as the next one's")
    func lateAnswer() throws {
        let server = try ScriptedServer([
            .lateAnswer(Self.revoked(2)), .answer(Self.revoked(3)),
        ])
        let client = try Self.client(server, timeout: .milliseconds(200))
        let started = ContinuousClock.now
        #expect(client.perform(Self.revoke) == .failed(.unavailable))
        #expect(ContinuousClock.now - started < .milliseconds(390))
        #expect(client.lastError?.reason == .http(.answerTimedOut))
        server.releaseLateAnswer()
        #expect(ConditionWait.until { server.answersWritten == 1 }, "the late answer is in the first connection")
        #expect(client.perform(Self.revoke) == .revoked(revision: EtcdRevision(3)))
        #expect(server.finish() == [1, 2])
    }

    @Test("a 200 answer that is not etcd's JSON is unavailable (malformed); the next request goes to the next endpoint")
    func malformedMovesOn() throws {
        let broken = try ScriptedServer([.answer("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")])
        let healthy = try ScriptedServer([.answer(Self.revoked(7))])
        let client = try Self.client(broken, healthy)
        #expect(client.perform(Self.revoke) == .failed(.unavailable))
        guard case .malformedAnswer? = client.lastError?.reason else {
            Issue.record("reason \(String(describing: client.lastError))")
            return
        }
        #expect(client.lastError?.endpoint == "http://127.0.0.1:\(broken.port)")
        #expect(client.perform(Self.revoke) == .revoked(revision: EtcdRevision(7)))
        #expect(client.endpointChanges == 1)
        _ = broken.finish()
        _ = healthy.finish()
    }

    @Test("a chunked answer arriving a few bytes at a time is read whole")
    func dribbledChunks() throws {
        let server = try ScriptedServer([.answer(Self.revoked(8, chunked: true), pieceBytes: 3)])
        let client = try Self.client(server)
        #expect(client.perform(Self.revoke) == .revoked(revision: EtcdRevision(8)))
        #expect(server.finish() == [1])
    }
}
