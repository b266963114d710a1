import Glibc

/// A `roost` binary started by a test: spawned with posix_spawn, its stdout
/// read until the `listening on HOST:PORT` line, stopped by its own PID only.
public final class RoostProcess {
    /// How long start-up may take before the test fails.
    public static let startTimeoutMilliseconds = 30_000

    public let pid: pid_t
    public let port: UInt16
    /// Everything the process wrote to stdout before the listening line, and that line.
    public let startupOutput: String
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

    /// Starts `roost serve` with `arguments` (add `--listen 127.0.0.1:0`) and
    /// waits for its listening line. `environment` entries are `NAME=value`.
    /// With `standardErrorPath`, stderr goes to that file (created, 0600)
    /// instead of the test's own.
    public init(arguments: [String], environment: [String] = [], standardErrorPath: String? = nil) throws {
        let binary = RoostProcess.builtProduct("roost")
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { throw RoostProcessError.spawn("pipe: errno \(errno)") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
        if let standardErrorPath {
            posix_spawn_file_actions_addopen(&actions, 2, standardErrorPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        }
        posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
        let argv = ([binary] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let inherited = environ.pointee == nil ? [] : RoostProcess.currentEnvironment()
        let envp = (inherited.filter { !$0.hasPrefix("ROOST_ADMIN_KEY=") } + environment).map { strdup($0) } + [nil]
        defer { envp.forEach { free($0) } }
        var child: pid_t = 0
        let status = posix_spawn(&child, binary, &actions, nil, argv, envp)
        close(pipeFDs[1])
        guard status == 0 else {
            close(pipeFDs[0])
            throw RoostProcessError.spawn("posix_spawn \(binary): \(status)")
        }
        pid = child
        var output: [UInt8] = []
        var parsedPort: UInt16?
        var pollFD = pollfd(fd: pipeFDs[0], events: Int16(POLLIN), revents: 0)
        var waited = 0
        while parsedPort == nil && waited < RoostProcess.startTimeoutMilliseconds {
            let ready = poll(&pollFD, 1, 100)
            waited += 100
            guard ready > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let count = read(pipeFDs[0], &chunk, chunk.count)
            if count <= 0 { break }
            output.append(contentsOf: chunk[0..<count])
            parsedPort = RoostProcess.listeningPort(in: output)
        }
        close(pipeFDs[0])
        startupOutput = String(decoding: output, as: UTF8.self)
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
