import Glibc

/// A failed system call: which call, on what, and the errno it returned.
public struct SystemCallError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The call that failed, e.g. `"fdatasync"`.
    public var call: String
    /// What it acted on (a path or descriptor), for the operator.
    public var subject: String
    public var errno: Int32

    public init(call: String, subject: String = "", errno: Int32) {
        self.call = call
        self.subject = subject
        self.errno = errno
    }

    public var description: String {
        let reason = String(cString: strerror(errno))
        return subject.isEmpty
            ? "\(call): \(reason) (errno \(errno))" : "\(call) \(subject): \(reason) (errno \(errno))"
    }
}

/// The outcome of a call on a non-blocking descriptor.
public enum NonBlockingResult<Value> {
    case done(Value)
    /// EAGAIN/EWOULDBLOCK: try again when the descriptor is ready.
    case wouldBlock
}

/// Runs a system call that returns -1 with errno on failure, retrying EINTR.
/// This is the one place where EINTR is handled.
@inline(__always)
public func retryingSyscall<Result: BinaryInteger>(
    _ call: String, subject: @autoclosure () -> String = "", _ body: () -> Result
) throws(SystemCallError) -> Result {
    while true {
        let result = body()
        if result >= 0 { return result }
        let code = Glibc.errno
        if code == EINTR { continue }
        throw SystemCallError(call: call, subject: subject(), errno: code)
    }
}

/// Like `retryingSyscall`, but maps EAGAIN/EWOULDBLOCK to `.wouldBlock`.
@inline(__always)
public func nonBlockingSyscall<Result: BinaryInteger>(
    _ call: String, subject: @autoclosure () -> String = "", _ body: () -> Result
) throws(SystemCallError) -> NonBlockingResult<Result> {
    while true {
        let result = body()
        if result >= 0 { return .done(result) }
        let code = Glibc.errno
        if code == EINTR { continue }
        if code == EAGAIN || code == EWOULDBLOCK { return .wouldBlock }
        throw SystemCallError(call: call, subject: subject(), errno: code)
    }
}
