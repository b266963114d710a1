import CSystemShims
import Glibc

/// TCP sockets over IPv4 and IPv6: listening, accepting and (blocking) connecting.
package enum TCPSocket {
    /// Returns a non-blocking listening socket on host:port (`host` an IPv4 dotted
    /// quad, or an IPv6 address without brackets, which listens on IPv6 only).
    /// With `reusePort`, several sockets may listen on the same port and the
    /// kernel spreads new connections over them.
    package static func listen(
        host: String, port: UInt16, backlog: Int32, reusePort: Bool
    ) throws(SystemCallError) -> FileDescriptor {
        let fd = try retryingSyscall("listen", subject: "\(host):\(port)") {
            roost_tcp_listen(host, port, backlog, reusePort ? 1 : 0)
        }
        return FileDescriptor(rawValue: fd)
    }

    /// Returns the local port a socket is bound to.
    package static func localPort(of socket: FileDescriptor) throws(SystemCallError) -> UInt16 {
        let port = try retryingSyscall("getsockname", subject: "fd \(socket.rawValue)") {
            roost_socket_port(socket.rawValue)
        }
        return UInt16(port)
    }

    /// Accepts one pending connection (non-blocking, close-on-exec, TCP_NODELAY).
    @inline(__always)
    package static func accept(_ listener: FileDescriptor) throws(SystemCallError) -> NonBlockingResult<FileDescriptor>
    {
        switch try nonBlockingSyscall(
            "accept4", subject: "fd \(listener.rawValue)", { roost_accept(listener.rawValue) })
        {
        case .done(let fd): return .done(FileDescriptor(rawValue: fd))
        case .wouldBlock: return .wouldBlock
        }
    }

    /// Returns a blocking connection to host:port (IPv4 or IPv6) with TCP_NODELAY.
    package static func connect(host: String, port: UInt16) throws(SystemCallError) -> FileDescriptor {
        let fd = try retryingSyscall("connect", subject: "\(host):\(port)") { roost_tcp_connect(host, port) }
        return FileDescriptor(rawValue: fd)
    }

    /// Makes blocking reads on `socket` fail with EAGAIN after `milliseconds` (0: wait forever).
    package static func setReceiveTimeout(_ socket: FileDescriptor, milliseconds: Int) throws(SystemCallError) {
        precondition(milliseconds >= 0, "receive timeout must not be negative, got \(milliseconds)")
        _ = try retryingSyscall("setsockopt(SO_RCVTIMEO)", subject: "fd \(socket.rawValue)") {
            roost_set_receive_timeout(socket.rawValue, Int32(clamping: milliseconds))
        }
    }
}
