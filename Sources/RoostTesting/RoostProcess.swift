import Glibc

/// A `roost serve` started by a test or by the crash harness: spawned with
/// posix_spawn, its stdout read until the `listening on HOST:PORT` line,
/// stopped by its own PID only.
public final class RoostProcess {
    /// How long start-up may take before the test fails.
    public static let startTimeoutMilliseconds = 30_000

    /// Where the child's stderr goes.
    public enum StandardError: Sendable {
        /// The parent's own stderr.
        case inherited
        /// This file, created or truncated, mode 0600.
        case file(String)
        /// This file, created or appended to, mode 0644 (one log across restarts).
        case appended(String)
    }

    public let pid: pid_t
    public let port: UInt16
    /// Everything the process wrote to stdout before the listening line, and that line.
    public let startupOutput: String
    /// From the spawn to the listening line (recovery included).
    public let startupDuration: Duration
    private var reaped = false

    /// Returns the path of a product built next to the running test binary.
    public static func builtProduct(_ name: String) -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        precondition(length > 0, "cannot read /proc/self/exe")
        let executable = String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        var directory = executable[..<(executable.lastIndex(of: "/") ?? executable.endIndex)]
        // The test runner may sit inside an .xctest bundle directory.
        if directory.hasSuffix(".xctest") {
            directory = directory[..<(directory.lastIndex(of: "/") ?? directory.endIndex)]
        }
        return String(directory) + "/" + name
    }

    /// Starts the `roost` built beside the tests with `arguments` (add
    /// `--listen 127.0.0.1:0`) and waits for its listening line. The test's
    /// own `ROOST_ADMIN_KEY` is never passed on. With `standardErrorPath`,
    /// stderr goes to that file (created, 0600) instead of the test's own.
    public convenience init(arguments: [String], environment: [String] = [], standardErrorPath: String? = nil) throws {
        try self.init(
            binary: RoostProcess.builtProduct("roost"), arguments: arguments, environment: environment,
            notInherited: ["ROOST_ADMIN_KEY"], standardError: standardErrorPath.map { .file($0) } ?? .inherited)
    }

    /// Starts `binary` with `arguments` and the environment, where each
    /// `environment` entry (`NAME=value`) replaces an inherited one of that
    /// name and `notInherited` names are dropped, and waits up to
    /// `startTimeoutMilliseconds` for the listening line.
    public init(
        binary: String, arguments: [String], environment: [String], notInherited: Set<String> = [],
        standardError: StandardError, startTimeoutMilliseconds: Int = RoostProcess.startTimeoutMilliseconds
    ) throws {
        let clock = ContinuousClock()
        let started = clock.now
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { throw RoostProcessError.spawn("pipe: errno \(errno)") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
        switch standardError {
        case .inherited: break
        case .file(let path): posix_spawn_file_actions_addopen(&actions, 2, path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        case .appended(let path):
            posix_spawn_file_actions_addopen(&actions, 2, path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        }
        posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
        let argv = ([binary] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let replaced = notInherited.union(environment.map(RoostProcess.name(of:)))
        let envp =
            (RoostProcess.inheritedEnvironment().filter { !replaced.contains(RoostProcess.name(of: $0)) }
            + environment).map { strdup($0) } + [nil]
        defer { envp.forEach { free($0) } }
        // As a supervisor starts it: no signal blocked, and the signals an
        // operator sends at their default action, whatever the test runner's
        // thread blocks or ignores (both pass through exec).
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var emptyMask = sigset_t()
        sigemptyset(&emptyMask)
        var defaulted = sigset_t()
        sigemptyset(&defaulted)
        for signal in [SIGHUP, SIGINT, SIGTERM] { sigaddset(&defaulted, signal) }
        posix_spawnattr_setsigmask(&attributes, &emptyMask)
        posix_spawnattr_setsigdefault(&attributes, &defaulted)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var child: pid_t = 0
        let status = posix_spawn(&child, binary, &actions, &attributes, argv, envp)
        close(pipeFDs[1])
        guard status == 0 else {
            close(pipeFDs[0])
            throw RoostProcessError.spawn("posix_spawn \(binary): \(status)")
        }
        pid = child
        var output: [UInt8] = []
        var parsedPort: UInt16?
        var pollFD = pollfd(fd: pipeFDs[0], events: Int16(POLLIN), revents: 0)
        var chunk = [UInt8](repeating: 0, count: 4096)
        while parsedPort == nil && clock.now - started < .milliseconds(startTimeoutMilliseconds) {
            guard poll(&pollFD, 1, 50) > 0 else { continue }
            let count = read(pipeFDs[0], &chunk, chunk.count)
            if count <= 0 { break }
            output.append(contentsOf: chunk[0..<count])
            parsedPort = RoostProcess.listeningPort(in: output)
        }
        close(pipeFDs[0])
        startupOutput = String(decoding: output, as: UTF8.self)
        startupDuration = clock.now - started
        guard let parsedPort else {
            kill(child, SIGKILL)
            var ignored: Int32 = 0
            waitpid(child, &ignored, 0)
            reaped = true
            port = 0
            throw RoostProcessError.noListeningLine(output: startupOutput)
        }
        port = parsedPort
    }

    deinit {
        if !reaped {
            kill(pid, SIGKILL)
            var ignored: Int32 = 0
            waitpid(pid, &ignored, 0)
        }
    }

    /// Sends `signal` and waits for the exit. Returns the exit code, or
    /// 128 + signal number when a signal ended it.
    @discardableResult
    public func stop(signal: Int32 = SIGTERM) -> Int32 {
        precondition(!reaped, "process \(pid) already reaped")
        kill(pid, signal)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        reaped = true
        let termSignal = status & 0x7F
        return termSignal == 0 ? (status >> 8) & 0xFF : 128 + termSignal
    }

    /// How often `waitForExit` looks at the child.
    public static let exitCheckIntervalMilliseconds = 10

    /// Waits up to `timeout` for the process to exit on its own; returns its
    /// exit code (128 + signal number when a signal ended it), or nil when it
    /// still runs.
    public func waitForExit(within timeout: Duration) -> Int32? {
        precondition(!reaped, "process \(pid) already reaped")
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while true {
            var status: Int32 = 0
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid {
                reaped = true
                let termSignal = status & 0x7F
                return termSignal == 0 ? (status >> 8) & 0xFF : 128 + termSignal
            }
            if clock.now >= deadline { return nil }
            var pause = timespec(tv_sec: 0, tv_nsec: RoostProcess.exitCheckIntervalMilliseconds * 1_000_000)
            nanosleep(&pause, nil)
        }
    }

    /// Returns the port of a complete `listening on HOST:PORT` line in `output`.
    static func listeningPort(in output: [UInt8]) -> UInt16? {
        let text = String(decoding: output, as: UTF8.self)
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        where line.hasPrefix("listening on ") {
            guard let colon = line.lastIndex(of: ":") else { return nil }
            return UInt16(line[line.index(after: colon)...])
        }
        return nil
    }

    /// This process's environment, `NAME=value` each.
    public static func inheritedEnvironment() -> [String] {
        var result: [String] = []
        var cursor = environ
        while let entry = cursor.pointee {
            result.append(String(cString: entry))
            cursor += 1
        }
        return result
    }

    /// The `NAME` of a `NAME=value` entry.
    static func name(of entry: String) -> String {
        String(entry.prefix { $0 != "=" })
    }
}

public enum RoostProcessError: Error, CustomStringConvertible {
    case spawn(String)
    case noListeningLine(output: String)

    public var description: String {
        switch self {
        case .spawn(let reason): "cannot start roost: \(reason)"
        case .noListeningLine(let output): "roost printed no listening line; stdout was: \(output)"
        }
    }
}
