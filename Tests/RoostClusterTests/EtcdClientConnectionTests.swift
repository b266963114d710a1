import Glibc
import RoostCluster
import RoostPlatform
import Synchronization
import Testing

/// A scripted HTTP server on loopback, one thread, one connection at a
/// time: what etcd does not do on demand (answer late, close an idle
/// connection, send garbage, dribble a chunked answer).
final class ScriptedServer: Sendable {
    enum Step: Sendable {
        /// Writes these bytes, in pieces of `pieceBytes` (0: at once), after `delayMilliseconds`.
        case answer(String, delayMilliseconds: Int = 0, pieceBytes: Int = 0)
        /// Writes these bytes, then closes the connection.
        case answerThenClose(String)
    }

    /// For each request served, the number of the connection it came on (1, 2, …).
    final class Served: Sendable {
        let connections = Mutex<[Int]>([])
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

    /// Waits for the script to end; returns each request's connection number.
    func finish() -> [Int] {
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
            case .answer(let text, let delay, let pieceBytes):
                if delay > 0 { usleep(UInt32(delay * 1000)) }
                let bytes = Array(text.utf8)
                let size = pieceBytes > 0 ? pieceBytes : bytes.count
                for start in stride(from: 0, to: bytes.count, by: size) {
                    write(connection, Array(bytes[start..<min(bytes.count, start + size)]))
                    if pieceBytes > 0 { usleep(1000) }
                }
            case .answerThenClose(let text):
                write(connection, Array(text.utf8))
                connection.close()
                client = nil
            }
        }
        usleep(50_000)
        client?.close()
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
        usleep(100_000)  // the server's FIN arrives: the idle connection is seen closed
        #expect(client.perform(Self.revoke) == .revoked(revision: EtcdRevision(5)))
        #expect(client.perform(Self.revoke) == .revoked(revision: EtcdRevision(6)))
        #expect(server.finish() == [1, 1, 1, 2, 3])
        #expect(client.connectionsOpened == 3)
    }

    @Test("a late answer fails the request within its timeout and is never read as the next one's")
    func lateAnswer() throws {
        let server = try ScriptedServer([
            .answer(Self.revoked(2), delayMilliseconds: 400), .answer(Self.revoked(3)),
        ])
        let client = try Self.client(server, timeout: .milliseconds(200))
        let started = ContinuousClock.now
        #expect(client.perform(Self.revoke) == .failed(.unavailable))
        #expect(ContinuousClock.now - started < .milliseconds(390))
        #expect(client.lastError?.reason == .http(.answerTimedOut))
        usleep(300_000)  // the late answer has been written to the first connection
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
