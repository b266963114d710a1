import Glibc
import RoostPlatform
import RoostTesting
import Testing

/// A running process's system calls made to fail with strace's fault
/// injection (`-e inject=…`): a real disk full or failing disk as the
/// process sees it, without filling a disk. Started and stopped by PID.
struct InjectedFault {
    /// strace's PID.
    let tracer: pid_t

    /// Whether strace is here (the tests that need it are skipped without it).
    static var isAvailable: Bool { access("/usr/bin/strace", X_OK) == 0 }

    /// Attaches strace to every thread of `pid` with `options` (e.g. `-e
    /// trace=pwrite64 -e inject=pwrite64:error=ENOSPC`), and returns once
    /// every thread is traced (at most 5 s; `attached` says whether it was).
    /// `scratch` is a path the test owns, for strace's PID.
    static func start(pid: pid_t, options: String, scratch: String) throws -> (InjectedFault, attached: Bool) {
        #expect(system("strace -f -qq -o /dev/null -p \(pid) \(options) & echo $! > '\(scratch)'") == 0)
        let tracerPID = (try? DurableFile.readIfExists(path: scratch, limitBytes: 64)).flatMap { $0 }.flatMap {
            pid_t(String(decoding: $0.filter { $0 >= 0x30 && $0 <= 0x39 }, as: UTF8.self))
        }
        let fault = InjectedFault(tracer: try #require(tracerPID))
        let attached = ConditionWait.until(within: .seconds(5)) { everyThreadTraced(pid) }
        return (fault, attached)
    }

    /// Stops strace (the process goes on untraced, if it still runs).
    func stop() {
        kill(tracer, SIGTERM)
        var status: Int32 = 0
        waitpid(tracer, &status, 0)
    }

    private static func everyThreadTraced(_ pid: pid_t) -> Bool {
        guard let tasks = try? DurableFile.names(in: "/proc/\(pid)/task") else { return false }
        var all = true
        for name in tasks {
            guard name.first?.isNumber == true else { continue }
            let status =
                (try? DurableFile.readIfExists(path: "/proc/\(pid)/task/\(name)/status", limitBytes: 1 << 16))
                .flatMap { $0 }.map { String(decoding: $0, as: UTF8.self) } ?? ""
            if status.contains("TracerPid:\t0\n") { all = false }
        }
        return all
    }
}
