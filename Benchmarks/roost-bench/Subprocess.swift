import Glibc
import RoostTesting

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
        let envp = (RoostProcess.inheritedEnvironment() + environment).map { strdup($0) } + [nil]
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
