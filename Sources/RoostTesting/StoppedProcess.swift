import Glibc

/// Whether a process a test sent SIGSTOP has stopped: the signal is
/// asynchronous, and a process still running takes what the test sends it
/// next (a write the test expected it to miss).
package enum StoppedProcess {
    /// The longest `waitUntilStopped` waits.
    package static let waitLimit = Duration.seconds(10)

    /// Whether process `pid` is stopped (state T in /proc/PID/stat).
    package static func isStopped(_ pid: pid_t) -> Bool {
        let fd = open("/proc/\(pid)/stat", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 4096)
        let count = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count > 0 else { return false }
        let stat = bytes[..<count]
        guard let close = stat.lastIndex(of: UInt8(ascii: ")")), close + 2 < count else { return false }
        return stat[close + 2] == UInt8(ascii: "T")
    }

    /// Polls until `pid` is stopped, at most `waitLimit`; whether it is.
    @discardableResult
    package static func waitUntilStopped(_ pid: pid_t) -> Bool {
        let deadline = ContinuousClock.now.advanced(by: waitLimit)
        while !isStopped(pid) {
            guard ContinuousClock.now < deadline else { return false }
            usleep(1_000)
        }
        return true
    }
}
