import CSystemShims
import Glibc

/// What `FileDescriptor.wait(for:timeoutMilliseconds:)` waits for.
package enum SocketReadiness: Sendable {
    /// Bytes to read, the peer's end of stream, or an error.
    case readable
    /// Room to write, a finished connect, or an error.
    case writable
}

extension TCPSocket {
    /// Returns a non-blocking client connection to host:port (an IPv4 dotted
    /// quad or an IPv6 address without brackets) with TCP_NODELAY, made within
    /// `timeoutMilliseconds`: a connect still in progress then fails with
    /// ETIMEDOUT (the socket is closed), a refused one with ECONNREFUSED.
    package static func connect(host: String, port: UInt16, timeoutMilliseconds: Int) throws(SystemCallError)
        -> FileDescriptor
    {
        precondition(timeoutMilliseconds >= 0, "connect timeout must not be negative, got \(timeoutMilliseconds)")
        var inProgress: Int32 = 0
        let raw = try retryingSyscall("connect", subject: "\(host):\(port)") {
            roost_tcp_connect_start(host, port, &inProgress)
        }
        let socket = FileDescriptor(rawValue: raw)
        guard inProgress != 0 else { return socket }
        do throws(SystemCallError) {
            guard try socket.wait(for: .writable, timeoutMilliseconds: timeoutMilliseconds) else {
                throw SystemCallError(call: "connect", subject: "\(host):\(port)", errno: ETIMEDOUT)
            }
            let pending = try retryingSyscall("getsockopt(SO_ERROR)", subject: "\(host):\(port)") {
                roost_socket_error(raw)
            }
            guard pending == 0 else {
                throw SystemCallError(call: "connect", subject: "\(host):\(port)", errno: pending)
            }
            return socket
        } catch {
            socket.close()
            throw error
        }
    }
}

extension FileDescriptor {
    /// Waits with poll(2) until the descriptor is ready for `readiness` (an
    /// error or hang-up counts as ready: the next call reports it), at most
    /// `timeoutMilliseconds` (0: only looks). Returns whether it is ready. An
    /// EINTR waits again for the whole timeout: callers hold a deadline.
    package func wait(for readiness: SocketReadiness, timeoutMilliseconds: Int) throws(SystemCallError) -> Bool {
        precondition(timeoutMilliseconds >= 0, "poll timeout must not be negative, got \(timeoutMilliseconds)")
        let events: Int16
        switch readiness {
        case .readable: events = Int16(POLLIN)
        case .writable: events = Int16(POLLOUT)
        }
        var entry = pollfd(fd: rawValue, events: events, revents: 0)
        let ready = try retryingSyscall("poll", subject: "fd \(rawValue)") {
            poll(&entry, 1, Int32(clamping: timeoutMilliseconds))
        }
        return ready > 0
    }
}
