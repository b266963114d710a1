import Glibc

/// Processes the harness starts: every one by posix_spawn, stopped only by
/// its own PID.
enum Subprocess {
    /// How long `output` waits for a command.
    static let outputTimeoutMilliseconds = 10_000
    /// The most output `output` keeps.
    static let outputBytesMax = 64 * 1024

    /// Runs `arguments` (the first is the executable's path), its stderr to
    /// /dev/null, and returns its stdout when it exits 0 within the timeout;
    /// nil otherwise (killed on timeout).
    static func output(_ arguments: [String]) -> String? {
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { return nil }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
        posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var child: pid_t = 0
        let status = posix_spawn(&child, arguments[0], &actions, nil, argv, environ)
        close(pipeFDs[1])
        guard status == 0 else {
            close(pipeFDs[0])
            return nil
        }
        var output: [UInt8] = []
        var pollFD = pollfd(fd: pipeFDs[0], events: Int16(POLLIN), revents: 0)
        var waited = 0
        var chunk = [UInt8](repeating: 0, count: 4096)
        while waited < outputTimeoutMilliseconds && output.count < outputBytesMax {
            let ready = poll(&pollFD, 1, 100)
            waited += 100
            guard ready > 0 else { continue }
            let count = read(pipeFDs[0], &chunk, chunk.count)
            if count <= 0 { break }
            output += chunk[0..<count]
        }
        close(pipeFDs[0])
        if waited >= outputTimeoutMilliseconds { kill(child, SIGKILL) }
        var exit: Int32 = 0
        while waitpid(child, &exit, 0) < 0 && errno == EINTR {}
        guard exit == 0 else { return nil }
        return String(decoding: output, as: UTF8.self)
    }
}

extension Subprocess {
    /// Runs `/bin/sh -c command` with the environment plus `environment`
    /// (`NAME=value`), its output going where the harness's goes; returns
    /// its exit status, or nil when it could not start or ran past
    /// `timeoutMilliseconds` (then it is killed by its PID).
    static func shell(_ command: String, environment: [String], timeoutMilliseconds: Int) -> Int32? {
        let words: [String] = ["/bin/sh", "-c", command]
        let argv = words.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var inherited: [String] = []
        var cursor = environ
        while let entry = cursor.pointee {
            inherited.append(String(cString: entry))
            cursor += 1
        }
        let envp = (inherited + environment).map { strdup($0) } + [nil]
        defer { envp.forEach { free($0) } }
        var child: pid_t = 0
        guard posix_spawn(&child, "/bin/sh", nil, nil, argv, envp) == 0 else { return nil }
        var status: Int32 = 0
        var waited = 0
        while waitpid(child, &status, WNOHANG) == 0 {
            if waited >= timeoutMilliseconds {
                kill(child, SIGKILL)
                waitpid(child, &status, 0)
                return nil
            }
            usleep(10_000)
            waited += 10
        }
        return (status & 0x7F) == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
    }
}

/// A `roost serve` started by the crash harness: spawned with posix_spawn,
/// stdout read until the `listening on HOST:PORT` line, stderr appended to a
/// log file, stopped by its own PID only.
final class ServerProcess {
    let pid: pid_t
    let port: UInt16
    /// How long from the spawn to the listening line (recovery included).
    let startupDuration: Duration
    private var reaped = false

    /// Starts `binary` with `arguments`, the environment plus `environment`
    /// (`NAME=value`), stderr appended to `stderrPath`, and waits up to
    /// `timeoutMilliseconds` for the listening line.
    init(
        binary: String, arguments: [String], environment: [String], stderrPath: String, timeoutMilliseconds: Int
    ) throws(LoadError) {
        let clock = ContinuousClock()
        let started = clock.now
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { throw LoadError("pipe: errno \(errno)") }
        let log = open(stderrPath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard log >= 0 else {
            close(pipeFDs[0])
            close(pipeFDs[1])
            throw LoadError("cannot open \(stderrPath): errno \(errno)")
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
        posix_spawn_file_actions_adddup2(&actions, log, 2)
        posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
        let argv = ([binary] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let names = Set(environment.map { String($0.prefix { $0 != "=" }) })
        let inherited = Self.currentEnvironment().filter { !names.contains(String($0.prefix { $0 != "=" })) }
        let envp = (inherited + environment).map { strdup($0) } + [nil]
        defer { envp.forEach { free($0) } }
        var child: pid_t = 0
        let status = posix_spawn(&child, binary, &actions, nil, argv, envp)
        close(pipeFDs[1])
        close(log)
        guard status == 0 else {
            close(pipeFDs[0])
            throw LoadError("cannot start \(binary): posix_spawn error \(status)")
        }
        pid = child
        var output: [UInt8] = []
        var parsedPort: UInt16? = nil
        var pollFD = pollfd(fd: pipeFDs[0], events: Int16(POLLIN), revents: 0)
        var chunk = [UInt8](repeating: 0, count: 4096)
        while parsedPort == nil && clock.now - started < .milliseconds(timeoutMilliseconds) {
            guard poll(&pollFD, 1, 50) > 0 else { continue }
            let count = read(pipeFDs[0], &chunk, chunk.count)
            if count <= 0 { break }
            output += chunk[0..<count]
            parsedPort = Self.listeningPort(in: output)
        }
        close(pipeFDs[0])
        startupDuration = clock.now - started
        guard let parsedPort else {
            kill(child, SIGKILL)
            var ignored: Int32 = 0
            waitpid(child, &ignored, 0)
            reaped = true
            port = 0
            throw LoadError(
                "\(binary) printed no listening line within \(timeoutMilliseconds) ms; stdout: "
                    + String(decoding: output.prefix(2000), as: UTF8.self) + " (stderr in \(stderrPath))")
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
    func stop(signal: Int32) -> Int32 {
        precondition(!reaped, "process \(pid) already reaped")
        kill(pid, signal)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        reaped = true
        let termSignal = status & 0x7F
        return termSignal == 0 ? (status >> 8) & 0xFF : 128 + termSignal
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

    private static func currentEnvironment() -> [String] {
        var result: [String] = []
        var cursor = environ
        while let entry = cursor.pointee {
            result.append(String(cString: entry))
            cursor += 1
        }
        return result
    }
}
