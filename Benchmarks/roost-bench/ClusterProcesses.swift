import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting
import Synchronization

extension Subprocess {
    /// Starts `arguments` (the first is the executable's path) with stdout
    /// and stderr appended to `logPath` and the inherited environment less
    /// the names starting with `droppedPrefix`; returns its PID. The caller
    /// stops and reaps it by that PID.
    static func spawn(_ arguments: [String], logPath: String, droppedPrefix: String) throws(LoadError) -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, logPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let environment = RoostProcess.inheritedEnvironment().filter { !$0.hasPrefix(droppedPrefix) }
        let envp = environment.map { strdup($0) } + [nil]
        defer { envp.forEach { free($0) } }
        var child: pid_t = 0
        let status = posix_spawn(&child, arguments[0], &actions, nil, argv, envp)
        guard status == 0 else { throw LoadError("posix_spawn \(arguments[0]): \(status)") }
        return child
    }

    /// The exit code of `pid` if it has exited (128 + signal when a signal
    /// ended it), reaping it; nil while it runs.
    static func exited(_ pid: pid_t) -> Int32? {
        var status: Int32 = 0
        let result = waitpid(pid, &status, WNOHANG)
        guard result == pid else { return result < 0 && errno == ECHILD ? -1 : nil }
        let signal = status & 0x7F
        return signal == 0 ? (status >> 8) & 0xFF : 128 + signal
    }
}

/// Free loopback ports: each bound to port 0 at once, then all released.
enum FreePorts {
    static func take(_ count: Int) throws(LoadError) -> [UInt16] {
        var sockets: [FileDescriptor] = []
        defer { sockets.forEach { $0.close() } }
        var ports: [UInt16] = []
        do {
            for _ in 0..<count {
                let socket = try TCPSocket.listen(host: "127.0.0.1", port: 0, backlog: 1, reusePort: false)
                sockets.append(socket)
                ports.append(try TCPSocket.localPort(of: socket))
            }
        } catch {
            throw LoadError("cannot find free ports: \(error)")
        }
        return ports
    }
}

/// One member of the run's etcd cluster (Debian `etcd-server`): fast
/// elections (heartbeat 50 ms, election 500 ms, spec §13.5), its data kept
/// across a kill -9 and a restart. Stopped by its own PID only.
final class ClusterEtcdMember {
    static let binaryPath = "/usr/bin/etcd"
    /// How long a member (or the whole etcd cluster) may take to answer `/health`.
    static let healthyWithin = Duration.seconds(30)

    let name: String
    let clientPort: UInt16
    let peerPort: UInt16
    let directory: String
    private(set) var pid: pid_t?
    /// When it was killed (a restart waits `ClusterOptions.etcdRestartAfter`).
    private(set) var killedAt: ContinuousClock.Instant?

    init(index: Int, clientPort: UInt16, peerPort: UInt16, directory: String) {
        name = "e\(index)"
        self.clientPort = clientPort
        self.peerPort = peerPort
        self.directory = directory
    }

    var clientURL: String { "http://127.0.0.1:\(clientPort)" }
    var peerURL: String { "http://127.0.0.1:\(peerPort)" }
    var isRunning: Bool { pid != nil }

    /// Starts the member in a cluster of `initialCluster` (`name=peerURL,…`).
    func start(initialCluster: String) throws(LoadError) {
        precondition(pid == nil, "etcd member \(name) runs already")
        pid = try Subprocess.spawn(
            [
                Self.binaryPath, "--name", name, "--data-dir", directory + "/" + name,
                "--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
                "--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
                "--initial-cluster", initialCluster, "--initial-cluster-state", "new",
                "--heartbeat-interval", "50", "--election-timeout", "500",
            ], logPath: directory + "/" + name + ".log", droppedPrefix: "ETCD_")
        killedAt = nil
    }

    /// Sends `signal` and, for SIGKILL and SIGTERM, waits for the exit.
    func kill(_ signal: Int32) {
        guard let pid else { return }
        Glibc.kill(pid, signal)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        self.pid = nil
        killedAt = ContinuousClock.now
    }

    /// Whether `/health` answers `"health":"true"` now.
    func isHealthy() -> Bool {
        guard let connection = try? LoopbackConnection(port: clientPort) else { return false }
        defer { connection.close() }
        guard (try? connection.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")) != nil,
            let answer = try? connection.readResponse(timeout: .seconds(1))
        else { return false }
        return answer.status == 200 && answer.bodyText.contains(#""health":"true""#)
    }
}

/// The current port of every node (0 while it is down), shared by the
/// harness (which writes it) and the clients (which read it).
final class ClusterPorts: Sendable {
    private let ports: Mutex<[UInt16]>

    init(count: Int) { ports = Mutex(Array(repeating: 0, count: count)) }

    func set(_ node: Int, _ port: UInt16) { ports.withLock { $0[node] = port } }
    var current: [UInt16] { ports.withLock { $0 } }
}

/// One `roost serve --cluster` node of the run: its data directory and
/// log kept across restarts, stopped by its own PID only.
final class ClusterRoostNode {
    let index: Int
    let name: ClusterNodeName
    let dataDirectory: String
    let logPath: String
    private(set) var process: RoostProcess?
    /// Exit codes of its ends so far (75: deposed, 137: kill -9).
    private(set) var exits: [Int32] = []

    init(index: Int, directory: String) {
        self.index = index
        name = ClusterNodeName("n\(index + 1)")
        dataDirectory = directory + "/" + name.rawValue
        logPath = directory + "/" + name.rawValue + ".log"
    }

    var port: UInt16? { process?.port }

    /// Starts the node and waits for its listening line (it serves).
    func start(_ options: ClusterOptions, etcd: String, ports: ClusterPorts) throws {
        precondition(process == nil, "\(name) runs already")
        let arguments = [
            "serve", "--listen", "127.0.0.1:0", "--data", dataDirectory, "--fsync", "always",
            "--cluster", ClusterOptions.clusterName, "--node-id", name.rawValue, "--etcd", etcd,
            "--lease-ttl-s", String(ClusterOptions.leaseTTLSeconds),
            "--changes-retained", String(ClusterOptions.changesRetained),
            "--snapshot-log-bytes", String(ClusterOptions.snapshotLogBytes),
        ]
        let started = try RoostProcess(
            binary: options.binary, arguments: arguments, environment: ["ROOST_ADMIN_KEY=\(ClusterOptions.adminKey)"],
            standardError: .appended(logPath), startTimeoutMilliseconds: ClusterOptions.startTimeoutMilliseconds)
        process = started
        ports.set(index, started.port)
    }

    /// Sends `signal` and waits for the exit (SIGKILL, SIGTERM).
    func stop(_ signal: Int32, ports: ClusterPorts) {
        guard let process else { return }
        ports.set(index, 0)
        // A stopped process acts on no SIGTERM: continue it first (a no-op for a running one).
        kill(process.pid, SIGCONT)
        exits.append(process.stop(signal: signal))
        self.process = nil
    }

    /// Sends `signal` without waiting (SIGSTOP, SIGCONT).
    func signal(_ signal: Int32) {
        guard let process else { return }
        kill(process.pid, signal)
    }

    /// Whether the node exited on its own (reaping it); then its port is 0.
    func reapIfExited(ports: ClusterPorts) -> Bool {
        guard let process else { return false }
        guard let code = process.waitForExit(within: .zero) else { return false }
        exits.append(code)
        ports.set(index, 0)
        self.process = nil
        return true
    }

    /// The epochs this node's log says it won (`cluster.elected`), and how
    /// many times it logged `cluster.deposed`.
    func logEvents() -> (elected: [ClusterEpoch], deposed: Int) {
        let bytes = FileOutput.read(logPath, limitBytes: ClusterOptions.logBytesMax) ?? []
        var elected: [ClusterEpoch] = []
        var deposed = 0
        for line in bytes.split(separator: UInt8(ascii: "\n")) {
            let text = String(decoding: line, as: UTF8.self)
            if text.contains(#""event":"cluster.deposed""#) { deposed += 1 }
            guard text.contains(#""event":"cluster.elected""#), let value = try? JSONReader.parse(Array(line)),
                let epoch = value["epoch"]?.intValue
            else { continue }
            elected.append(ClusterEpoch(Int64(epoch)))
        }
        return (elected, deposed)
    }
}
