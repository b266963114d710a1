import Glibc
import RoostPlatform

/// Why an `EtcdProcess` did not start.
package enum EtcdProcessError: Error, CustomStringConvertible {
    case spawn(String)
    /// etcd exited, or did not answer `/health` in time; the end of its log.
    case notReady(String)

    package var description: String {
        switch self {
        case .spawn(let reason): "cannot start etcd: \(reason)"
        case .notReady(let log): "etcd did not become healthy; its log ends: \(log)"
        }
    }
}

/// A one-member etcd (Debian `etcd-server`, `/usr/bin/etcd`) started by a
/// test on free loopback ports with its data in a fresh temporary
/// directory, fast elections (heartbeat 50 ms, election 500 ms, as spec
/// §13.5 assumes), ready once `/health` says so (polled, no fixed sleep).
/// `stop` (or deinit) ends it by its own PID and removes the directory.
package final class EtcdProcess {
    /// Where Debian's `etcd-server` installs the server.
    package static let binaryPath = "/usr/bin/etcd"
    /// How long start-up may take (a one-member etcd is healthy in ~0.2 s).
    package static let startTimeout = Duration.seconds(15)
    /// How long `stop` waits after SIGTERM before SIGKILL.
    package static let stopTimeout = Duration.seconds(5)
    /// Start attempts: a free port found by binding port 0 may be taken again before etcd binds it.
    static let startAttemptsMax = 3

    /// Whether etcd is installed (`make test-deps` installs it).
    package static var isInstalled: Bool { access(binaryPath, X_OK) == 0 }

    package let pid: pid_t
    package let clientPort: UInt16
    package let peerPort: UInt16
    /// The temporary directory: `data/` (etcd's) and `etcd.log`.
    package let directory: String
    private var reaped = false
    private var removed = false

    /// The client URL, `http://127.0.0.1:PORT`.
    package var clientURL: String { "http://127.0.0.1:\(clientPort)" }

    /// Starts etcd with `arguments` added to the standard ones (such as
    /// `--max-request-bytes N`) and waits until it is healthy.
    package static func start(arguments: [String] = []) throws -> EtcdProcess {
        var lastError: Error = EtcdProcessError.spawn("no attempt")
        for _ in 0..<startAttemptsMax {
            do {
                return try EtcdProcess(attempt: arguments)
            } catch {
                lastError = error
            }
        }
        throw lastError
    }

    private init(attempt arguments: [String]) throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-etcd")
        let clientPort: UInt16
        let peerPort: UInt16
        do {
            (clientPort, peerPort) = try EtcdProcess.freePorts()
        } catch {
            TemporaryDirectory.remove(directory)
            throw error
        }
        let peerURL = "http://127.0.0.1:\(peerPort)"
        let clientURL = "http://127.0.0.1:\(clientPort)"
        let standard = [
            "--name", "roost-test", "--data-dir", directory + "/data",
            "--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
            "--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
            "--initial-cluster", "roost-test=\(peerURL)", "--initial-cluster-state", "new",
            "--heartbeat-interval", "50", "--election-timeout", "500",
        ]
        let child: pid_t
        do {
            child = try EtcdProcess.spawn(standard + arguments, log: directory + "/etcd.log")
        } catch {
            TemporaryDirectory.remove(directory)
            throw error
        }
        self.pid = child
        self.clientPort = clientPort
        self.peerPort = peerPort
        self.directory = directory
        do {
            try waitUntilHealthy()
        } catch {
            stop()
            throw error
        }
    }

    deinit {
        stop()
    }

    /// Stops etcd (SIGTERM, then SIGKILL after `stopTimeout`), waits for it
    /// and removes its directory. Idempotent.
    package func stop() {
        if !reaped {
            kill(pid, SIGCONT)
            kill(pid, SIGTERM)
            if !waitForExit(within: EtcdProcess.stopTimeout) {
                kill(pid, SIGKILL)
                var status: Int32 = 0
                while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            }
            reaped = true
        }
        if !removed {
            removed = true
            TemporaryDirectory.remove(directory)
        }
    }

    /// Stops the process with SIGSTOP: it keeps its sockets but answers nothing.
    /// Stops the process (SIGSTOP) and returns once it is stopped: a signal
    /// is asynchronous, and an etcd still running would answer what the
    /// test sends next.
    package func pause() {
        precondition(!reaped, "etcd \(pid) already stopped")
        kill(pid, SIGSTOP)
        precondition(StoppedProcess.waitUntilStopped(pid), "etcd \(pid) did not stop on SIGSTOP")
    }

    /// Lets a paused process run again.
    package func resume() {
        precondition(!reaped, "etcd \(pid) already stopped")
        kill(pid, SIGCONT)
    }

    /// The last `bytes` of etcd's log.
    package func logTail(bytes: Int = 2000) -> String {
        let fd = open(directory + "/etcd.log", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return "(no log)" }
        defer { close(fd) }
        var text: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = read(fd, &chunk, chunk.count)
            if count <= 0 { break }
            text.append(contentsOf: chunk[0..<count])
            if text.count > 4 * bytes { text.removeFirst(text.count - bytes) }
        }
        return String(decoding: text.suffix(bytes), as: UTF8.self)
    }

    // MARK: - Start-up

    /// Returns two ports free on 127.0.0.1 now (bound to port 0, then released).
    private static func freePorts() throws(SystemCallError) -> (UInt16, UInt16) {
        let first = try TCPSocket.listen(host: "127.0.0.1", port: 0, backlog: 1, reusePort: false)
        defer { first.close() }
        let second = try TCPSocket.listen(host: "127.0.0.1", port: 0, backlog: 1, reusePort: false)
        defer { second.close() }
        return (try TCPSocket.localPort(of: first), try TCPSocket.localPort(of: second))
    }

    private static func spawn(_ arguments: [String], log: String) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let argv = ([binaryPath] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        // etcd reads ETCD_* variables as flags: none of the test runner's may reach it.
        let environment = RoostProcess.inheritedEnvironment().filter { !$0.hasPrefix("ETCD_") }
        let envp = environment.map { strdup($0) } + [nil]
        defer { envp.forEach { free($0) } }
        var child: pid_t = 0
        let status = posix_spawn(&child, binaryPath, &actions, nil, argv, envp)
        guard status == 0 else { throw EtcdProcessError.spawn("posix_spawn \(binaryPath): \(status)") }
        return child
    }

    /// Polls `/health` until it answers `"health":"true"`, the process exits, or `startTimeout` passes.
    private func waitUntilHealthy() throws {
        let deadline = ContinuousClock.now + EtcdProcess.startTimeout
        while ContinuousClock.now < deadline {
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                reaped = true
                throw EtcdProcessError.notReady("exited with status \(status): " + logTail())
            }
            if let connection = try? LoopbackConnection(port: clientPort) {
                let answer: LoopbackResponse? = try? {
                    try connection.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                    return try connection.readResponse(timeout: .seconds(1))
                }()
                connection.close()
                if let answer, answer.status == 200, answer.bodyText.contains("\"health\":\"true\"") { return }
            }
            usleep(20_000)
        }
        throw EtcdProcessError.notReady(logTail())
    }

    /// Waits up to `timeout` for the process to exit. Returns whether it did.
    private func waitForExit(within timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        var status: Int32 = 0
        while true {
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid || (result < 0 && errno == ECHILD) { return true }
            if ContinuousClock.now >= deadline { return false }
            usleep(10_000)
        }
    }
}
