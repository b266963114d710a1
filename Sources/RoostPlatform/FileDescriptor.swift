import CSystemShims
import Glibc

/// An open file descriptor. A value type over the raw number: whoever holds it
/// decides when to `close` it, exactly once.
package struct FileDescriptor: Sendable, Hashable {
    /// The kernel's descriptor number.
    package let rawValue: Int32

    package init(rawValue: Int32) {
        precondition(rawValue >= 0, "a file descriptor is never negative, got \(rawValue)")
        self.rawValue = rawValue
    }

    /// Reads at most `buffer.count` bytes. Returns `.done(0)` at end of stream.
    @inline(__always)
    package func read(into buffer: UnsafeMutableRawBufferPointer) throws(SystemCallError) -> NonBlockingResult<Int> {
        try nonBlockingSyscall("read", subject: "fd \(rawValue)") {
            Glibc.read(rawValue, buffer.baseAddress, buffer.count)
        }
    }

    /// Writes at most `bytes.count` bytes once (a short write is the caller's to continue).
    @inline(__always)
    package func write(_ bytes: UnsafeRawBufferPointer) throws(SystemCallError) -> NonBlockingResult<Int> {
        try nonBlockingSyscall("write", subject: "fd \(rawValue)") {
            Glibc.write(rawValue, bytes.baseAddress, bytes.count)
        }
    }

    /// Sends at most `bytes.count` bytes once on a socket, like `write`, but a
    /// peer that has gone away is an error (EPIPE), never a SIGPIPE that would
    /// stop the process (MSG_NOSIGNAL).
    @inline(__always)
    package func send(_ bytes: UnsafeRawBufferPointer) throws(SystemCallError) -> NonBlockingResult<Int> {
        try nonBlockingSyscall("send", subject: "fd \(rawValue)") {
            Glibc.send(rawValue, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
        }
    }

    /// Sends every byte on a blocking socket without SIGPIPE, looping over short sends.
    package func sendAll(_ bytes: UnsafeRawBufferPointer) throws(SystemCallError) {
        var offset = 0
        while offset < bytes.count {
            let rest = UnsafeRawBufferPointer(rebasing: bytes[offset...])
            let sent = try retryingSyscall("send", subject: "fd \(rawValue)") {
                Glibc.send(rawValue, rest.baseAddress, rest.count, Int32(MSG_NOSIGNAL))
            }
            offset += sent
        }
    }

    /// Writes every byte on a blocking descriptor, looping over short writes.
    package func writeAll(_ bytes: UnsafeRawBufferPointer) throws(SystemCallError) {
        var offset = 0
        while offset < bytes.count {
            let rest = UnsafeRawBufferPointer(rebasing: bytes[offset...])
            let written = try retryingSyscall("write", subject: "fd \(rawValue)") {
                Glibc.write(rawValue, rest.baseAddress, rest.count)
            }
            offset += written
        }
    }

    /// Shuts down the sending direction (the peer reads end of stream).
    package func shutdownWrite() {
        _ = Glibc.shutdown(rawValue, Int32(SHUT_WR))
    }

    /// Stops a listening socket from taking connections while the descriptor
    /// stays open (Linux: new connections are refused and the loops' pending
    /// accepts return at once), so that it can be closed later, once no
    /// thread polls it any more.
    package func stopListening() {
        _ = Glibc.shutdown(rawValue, Int32(SHUT_RDWR))
    }

    /// Closes the descriptor. EINTR is not retried: on Linux the descriptor is
    /// released even then, and a retry could close a reused number.
    package func close() {
        _ = Glibc.close(rawValue)
    }
}
