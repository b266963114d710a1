import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting
import Synchronization
import Testing

/// The operator's side of the built `roost` binary (spec §11): --version and
/// --help, /readyz, IPv6 listen addresses, backup and restore.
@Suite("roost operator commands (system)", .serialized)
struct OperatorCLITests {
    /// Runs the binary with `arguments`; returns its exit code, stdout and stderr.
    static func run(_ arguments: [String], in directory: String) -> (code: Int32, out: String, err: String) {
        let out = directory + "/cli.out"
        let err = directory + "/cli.err"
        let quoted = arguments.map { "'\($0)'" }.joined(separator: " ")
        let status = system(
            "ROOST_ADMIN_KEY=\(ServeTests.adminKey) timeout 120 '\(RoostProcess.builtProduct("roost"))' \(quoted) "
                + "> '\(out)' 2> '\(err)'")
        func text(_ path: String) -> String {
            (try? DurableFile.readIfExists(path: path, limitBytes: 1 << 20)).flatMap { $0 }.map {
                String(decoding: $0, as: UTF8.self)
            } ?? ""
        }
        return ((status >> 8) & 0xFF, text(out), text(err))
    }

    // MARK: - --version, --help, bad command lines

    @Test("--version prints 'roost <version>' and exits 0")
    func version() throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-cli")
        defer { TemporaryDirectory.remove(directory) }
        let result = Self.run(["--version"], in: directory)
        #expect(result.code == 0)
        let line = result.out.split(separator: "\n")
        #expect(line.count == 1)
        let parts = line.first?.split(separator: " ") ?? []
        #expect(parts.count == 2 && parts[0] == "roost", "\(result.out)")
        let numbers = parts.last?.split(separator: ".").map { Int($0) } ?? []
        #expect(numbers.count == 3 && numbers.allSatisfy { $0 != nil }, "not a version: \(result.out)")
        #expect(result.err.isEmpty)
    }

    @Test(
        "--help on every command prints its usage to stdout and exits 0",
        arguments: [
            (["--help"], "roost serve"), (["-h"], "roost serve"), (["serve", "--help"], "--listen HOST:PORT"),
            (["serve", "--fsync", "never", "--help"], "--snapshot-log-bytes"), (["wal", "--help"], "roost wal verify"),
            (["wal", "verify", "--help"], "roost wal dump"), (["wal", "dump", "-h"], "roost wal verify"),
            (["backup", "--help"], "roost backup DIR OUT"), (["restore", "--help"], "roost restore BACKUP DIR"),
        ])
    func help(arguments: [String], expected: String) throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-cli")
        defer { TemporaryDirectory.remove(directory) }
        let result = Self.run(arguments, in: directory)
        #expect(result.code == 0, "\(arguments): \(result.err)")
        #expect(result.out.hasPrefix("usage: roost"), "\(arguments): \(result.out)")
        #expect(result.out.contains(expected), "\(arguments): \(result.out)")
        #expect(result.err.isEmpty, "\(arguments): \(result.err)")
    }

    @Test(
        "a command line that cannot be understood prints the usage to stderr and exits 2, stdout empty",
        arguments: [
            ["serve", "--bogus"], ["serve", "--listen"], ["serve", "--listen", "::1:8080"],
            ["serve", "--listen", "[::1]8080"], ["serve", "--listen", "example.com:80"], ["frob"], [],
            ["--version", "extra"], ["wal", "verify"], ["wal", "check", "x"], ["wal", "verify", "--bogus"],
            ["backup", "onlyone"], ["backup", "--bogus", "a", "b"], ["restore", "a"], ["restore", "a", "b", "c"],
        ])
    func badCommandLine(arguments: [String]) throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-cli")
        defer { TemporaryDirectory.remove(directory) }
        let result = Self.run(arguments, in: directory)
        #expect(result.code == 2, "\(arguments): \(result.out) \(result.err)")
        #expect(result.out.isEmpty, "\(arguments): \(result.out)")
        #expect(result.err.hasPrefix("roost: "), "\(arguments): \(result.err)")
        #expect(result.err.contains("usage: roost"), "\(arguments): \(result.err)")
    }

    // MARK: - /readyz and IPv6

    @Test("GET /readyz answers 200 {\"status\":\"ready\"} without a key once the server listens")
    func readyWhenListening() throws {
        let (process, directory) = try ServeTests.start()
        defer { TemporaryDirectory.remove(directory) }
        let answer = try ServeTests.request(process.port, "GET", "/readyz")
        #expect(answer.status == 200)
        #expect(answer.bodyText == #"{"status":"ready"}"#)
        #expect(process.stop(signal: SIGTERM) == 0)
    }

    /// True when the machine has the IPv6 loopback address (::1 in /proc/net/if_inet6).
    static var hasIPv6Loopback: Bool {
        guard let table = try? DurableFile.readIfExists(path: "/proc/net/if_inet6", limitBytes: 1 << 20) else {
            return false
        }
        return String(decoding: table, as: UTF8.self).split(separator: "\n").contains {
            $0.hasPrefix("00000000000000000000000000000001")
        }
    }

    @Test(
        "--listen [::1]:0 serves over IPv6 and prints 'listening on [::1]:PORT'",
        .enabled(if: OperatorCLITests.hasIPv6Loopback, "no IPv6 loopback (::1) on this machine"))
    func listensOnIPv6() throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-system")
        defer { TemporaryDirectory.remove(directory) }
        let process = try RoostProcess(
            arguments: ["serve", "--listen", "[::1]:0", "--data", directory + "/data"],
            environment: ["ROOST_ADMIN_KEY=\(ServeTests.adminKey)"])
        #expect(process.startupOutput == "listening on [::1]:\(process.port)\n")
        for path in ["/healthz", "/readyz"] {
            let connection = try LoopbackConnection(host: "::1", port: process.port)
            try connection.send("GET \(path) HTTP/1.1\r\nHost: [::1]\r\n\r\n")
            #expect(try connection.readResponse(timeout: .seconds(5)).status == 200)
        }
        #expect(process.stop(signal: SIGTERM) == 0)
    }

    // MARK: - Backup and restore

    /// The 64-hex-digit APNs token of (client, number).
    static func token(client: Int, number: Int) -> String {
        let suffix = String(UInt64(client) << 32 | UInt64(number), radix: 16)
        return String(repeating: "cd", count: 24) + String(repeating: "0", count: 16 - suffix.count) + suffix
    }

    /// The tokens of the NDJSON export.
    static func exportedTokens(port: UInt16, key: String) throws -> Set<String> {
        let answer = try ServeTests.request(port, "GET", "/v1/devices/export", key: key)
        #expect(answer.status == 200)
        var tokens: Set<String> = []
        for line in answer.bodyText.split(separator: "\n") {
            if let token = try JSONReader.parse(Array(line.utf8))["token"]?.stringValue { tokens.insert(token) }
        }
        return tokens
    }

    /// Waits until a checkpoint exists in `data` (a snapshot was written), at most 20 s.
    static func waitForCheckpoint(_ data: String) -> Bool {
        ConditionWait.until(within: .seconds(20)) {
            DurableFile.exists(data + "/checkpoint.0") || DurableFile.exists(data + "/checkpoint.1")
        }
    }

    /// Registrations acknowledged after one backup ends and before the next
    /// begins (the load also goes on while each backup is taken), so that
    /// each backup has more to keep. It replaced a 200 ms pause, in which a
    /// debug build on two cores acknowledged 300 to 500.
    static let acknowledgedBetweenBackups = 300

    @Test(
        "backups taken under concurrent registrations restore every write acknowledged before each began, and nothing never sent"
    )
    func backupUnderLoadRestoresEveryAcknowledgedWrite() throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-backup")
        defer { TemporaryDirectory.remove(directory) }
        let data = directory + "/data"
        // Small snapshot trigger: snapshots and checkpoints (which remove old
        // files) keep happening while the backups copy.
        let (server, _) = try ServeTests.start(data: directory, extra: ["--snapshot-log-bytes", "4096"])
        let key = try CrashRecoveryTests.setUp(port: server.port)
        let load = RegistrationLoad(port: server.port, key: key, clients: 4)
        load.start()
        #expect(Self.waitForCheckpoint(data), "no snapshot was written under load")
        var backups: [(path: String, acknowledged: Set<String>)] = []
        for round in 0..<3 {
            let acknowledgedAfterLastBackup = load.acknowledged.count
            #expect(
                ConditionWait.until(within: .seconds(20)) {
                    load.acknowledged.count >= acknowledgedAfterLastBackup + Self.acknowledgedBetweenBackups
                }, "round \(round): the load stalled")
            let before = load.acknowledged
            let out = directory + "/backup-\(round)"
            let result = Self.run(["backup", data, out], in: directory)
            #expect(result.code == 0, "round \(round): \(result.err)")
            #expect(result.out.hasPrefix("backup \(out): snapshot LSN "), "\(result.out)")
            backups.append((out, before))
        }
        let sent = load.stop()
        #expect(server.stop(signal: SIGTERM) == 0)
        #expect(backups.last.map { $0.acknowledged.count > 100 } ?? false, "too little load to mean anything")

        for (round, backup) in backups.enumerated() {
            let manifest = try #require(
                try DurableFile.readIfExists(path: backup.path + "/backup.manifest", limitBytes: 1 << 20))
            #expect(
                !String(decoding: manifest, as: UTF8.self).contains("snapshot-lsn 0\n"), "round \(round): no snapshot")
            let restored = directory + "/restored-\(round)"
            let result = Self.run(["restore", backup.path, restored], in: directory)
            #expect(result.code == 0, "round \(round): \(result.err)")
            let process = try RoostProcess(
                arguments: ["serve", "--listen", "127.0.0.1:0", "--data", restored],
                environment: ["ROOST_ADMIN_KEY=\(ServeTests.adminKey)"])
            let found = try Self.exportedTokens(port: process.port, key: key)
            let missing = backup.acknowledged.subtracting(found)
            #expect(
                missing.isEmpty,
                "round \(round): \(missing.count) acknowledged writes missing, e.g. \(missing.first ?? "")")
            let phantoms = found.subtracting(sent)
            #expect(phantoms.isEmpty, "round \(round): \(phantoms.count) tokens never sent")
            #expect(process.stop(signal: SIGTERM) == 0)
        }
    }

    /// Starts a server, registers 20 devices, backs it up, stops it; returns
    /// the data directory, the backup and the devices key.
    static func smallBackup(in directory: String) throws -> (data: String, backup: String, key: String) {
        let data = directory + "/data"
        let (server, _) = try ServeTests.start(data: directory)
        let key = try CrashRecoveryTests.setUp(port: server.port)
        for number in 0..<20 {
            let body = #"{"platform":"ios","token":"\#(token(client: 1, number: number))"}"#
            #expect(try ServeTests.request(server.port, "POST", "/v1/devices", key: key, body: body).status == 201)
        }
        let backup = directory + "/backup"
        let result = run(["backup", data, backup], in: directory)
        #expect(result.code == 0, "\(result.err)")
        #expect(server.stop(signal: SIGTERM) == 0)
        return (data, backup, key)
    }

    @Test("restore refuses a directory that is not empty, and one a running server holds; it changes neither")
    func restoreRefusesBusyDirectories() throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-backup")
        defer { TemporaryDirectory.remove(directory) }
        let (data, backup, _) = try Self.smallBackup(in: directory)
        let before = try FileCopyProbe.listing(data)
        let refused = Self.run(["restore", backup, data], in: directory)
        #expect(refused.code == 2)
        #expect(refused.err.contains("is not empty"), "\(refused.err)")
        #expect(try FileCopyProbe.listing(data) == before)

        let empty = directory + "/served"
        let busy = try RoostProcess(
            arguments: ["serve", "--listen", "127.0.0.1:0", "--data", empty],
            environment: ["ROOST_ADMIN_KEY=\(ServeTests.adminKey)"])
        let inUse = Self.run(["restore", backup, empty], in: directory)
        #expect(inUse.code == 2)
        #expect(inUse.err.contains("in use by another roost process"), "\(inUse.err)")
        #expect(busy.stop(signal: SIGTERM) == 0)

        let out = Self.run(["backup", data, backup], in: directory)
        #expect(out.code == 2, "a backup into a backup that is there must refuse")
        #expect(out.err.contains("is not empty"), "\(out.err)")
    }

    @Test("backup refuses a source whose log is damaged before its last record, naming the file; OUT has no manifest")
    func backupRefusesDamagedSource() throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-backup")
        defer { TemporaryDirectory.remove(directory) }
        let (data, _, _) = try Self.smallBackup(in: directory)
        let segment = try #require(try FileCopyProbe.listing(data + "/wal").first)
        // The first record's payload: valid records follow, so this is not a torn tail.
        try FileCopyProbe.flip(data + "/wal/" + segment, at: 60)
        let out = directory + "/second"
        let result = Self.run(["backup", data, out], in: directory)
        #expect(result.code == 2, "\(result.out)")
        #expect(result.err.contains(segment) && result.err.contains("roost wal verify"), "\(result.err)")
        #expect(!DurableFile.exists(out + "/backup.manifest"))
        #expect(Self.run(["restore", out, directory + "/restored"], in: directory).code == 2)
    }

    @Test(
        "a torn tail in the source (a server killed mid-write) is cut in the copy, as recovery would; all else is kept")
    func backupCutsATornTail() throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-backup")
        defer { TemporaryDirectory.remove(directory) }
        let (data, _, key) = try Self.smallBackup(in: directory)
        let segment = data + "/wal/" + (try #require(try FileCopyProbe.listing(data + "/wal").last))
        // Garbage after the last record, nothing valid after it: a torn
        // write. Near the end of the file, so that the scan past it is short.
        var info = stat()
        #expect(stat(segment, &info) == 0)
        try FileCopyProbe.write(segment, at: Int(info.st_size) - 16, bytes: [5, 0, 0, 0, 1, 0, 0, 0, 0xEE])
        let out = directory + "/second"
        let result = Self.run(["backup", data, out], in: directory)
        #expect(result.code == 0, "\(result.err)")
        #expect(result.err.contains("torn tail cut"), "\(result.err)")
        let restored = directory + "/restored"
        #expect(Self.run(["restore", out, restored], in: directory).code == 0)
        let process = try RoostProcess(
            arguments: ["serve", "--listen", "127.0.0.1:0", "--data", restored],
            environment: ["ROOST_ADMIN_KEY=\(ServeTests.adminKey)"])
        #expect(try Self.exportedTokens(port: process.port, key: key).count == 20)
        #expect(process.stop(signal: SIGTERM) == 0)
    }

    @Test(
        "a restore killed with DIR/restore.partial left: serve refuses DIR (exit 2, one line naming restore), restore again finishes it with every device",
        arguments: ["before the first rename", "after wal/ was renamed"])
    func unfinishedRestoreIsRefusedThenFinished(interrupted: String) throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-backup")
        defer { TemporaryDirectory.remove(directory) }
        let (_, backup, key) = try Self.smallBackup(in: directory)
        // What `roost restore` leaves when killed while it stages, or between its renames.
        let restored = directory + "/restored"
        let staging = restored + "/restore.partial"
        #expect(mkdir(restored, 0o700) == 0)
        #expect(system("cp -r '\(backup)' '\(staging)' && rm '\(staging)/backup.manifest'") == 0)
        if interrupted == "after wal/ was renamed" { #expect(rename(staging + "/wal", restored + "/wal") == 0) }
        let log = directory + "/refused.log"
        let arguments = ["serve", "--listen", "127.0.0.1:0", "--data", restored]
        if let served = try? RoostProcess(arguments: arguments, environment: [], standardErrorPath: log) {
            Issue.record("\(interrupted): roost serve started on an unfinished restore")
            served.stop(signal: SIGTERM)
        }
        let refusal = String(
            decoding: try #require(try DurableFile.readIfExists(path: log, limitBytes: 1 << 20)), as: UTF8.self)
        #expect(refusal.split(separator: "\n").count == 1, "\(refusal)")
        #expect(refusal.contains(#""event":"start.refused""#), "\(refusal)")
        #expect(refusal.contains("\(staging) is left by a `roost restore` that did not finish"), "\(refusal)")
        #expect(refusal.contains("roost restore BACKUP \(restored)"), "\(refusal)")
        #expect(DurableFile.exists(staging), "the refusal changed DIR")

        let again = Self.run(["restore", backup, restored], in: directory)
        #expect(again.code == 0, "\(interrupted): \(again.err)")
        #expect(!DurableFile.exists(staging))
        let server = try RoostProcess(arguments: arguments, environment: ["ROOST_ADMIN_KEY=\(ServeTests.adminKey)"])
        let tokens = try Self.exportedTokens(port: server.port, key: key)
        #expect(tokens == Set((0..<20).map { Self.token(client: 1, number: $0) }), "\(interrupted)")
        #expect(server.stop(signal: SIGTERM) == 0)
    }

    @Test(
        "restore refuses a damaged, cut, incomplete or padded backup before touching DIR",
        arguments: ["flip", "cut", "no manifest", "extra segment", "manifest edited"])
    func restoreRefusesBadBackups(damage: String) throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-backup")
        defer { TemporaryDirectory.remove(directory) }
        let (_, backup, _) = try Self.smallBackup(in: directory)
        let segments = try FileCopyProbe.listing(backup + "/wal")
        let segment = backup + "/wal/" + (segments.first ?? "")
        switch damage {
        case "flip":
            // A byte inside the first record (after the 32-byte header).
            try FileCopyProbe.flip(segment, at: 40)
        case "cut":
            #expect(truncate(segment, 4096) == 0)
        case "no manifest":
            #expect(unlink(backup + "/backup.manifest") == 0)
        case "extra segment":
            try DurableFile.replace(path: backup + "/wal/00000000000099999999.seg", with: [0])
        default:
            try FileCopyProbe.flip(backup + "/backup.manifest", at: 20)
        }
        let restored = directory + "/restored"
        let result = Self.run(["restore", backup, restored], in: directory)
        #expect(result.code == 2, "\(damage): \(result.out)")
        #expect(result.err.hasPrefix("roost: restore failed: "), "\(damage): \(result.err)")
        #expect(!DurableFile.exists(restored), "\(damage): the restore touched DIR")
    }
}

/// Small file helpers for the backup tests.
enum FileCopyProbe {
    /// Returns the sorted names in `directory`.
    static func listing(_ directory: String) throws -> [String] {
        try DurableFile.names(in: directory)
    }

    /// Writes `bytes` at `offset` of `path`.
    static func write(_ path: String, at offset: Int, bytes: [UInt8]) throws {
        let fd = open(path, O_RDWR)
        guard fd >= 0 else { throw ProbeError(what: "open \(path)") }
        defer { close(fd) }
        guard pwrite(fd, bytes, bytes.count, off_t(offset)) == bytes.count else {
            throw ProbeError(what: "pwrite \(path)")
        }
    }

    /// Flips every bit of the byte at `offset` of `path`.
    static func flip(_ path: String, at offset: Int) throws {
        let fd = open(path, O_RDWR)
        guard fd >= 0 else { throw ProbeError(what: "open \(path)") }
        defer { close(fd) }
        var byte: UInt8 = 0
        guard pread(fd, &byte, 1, off_t(offset)) == 1 else { throw ProbeError(what: "pread \(path)") }
        byte ^= 0xFF
        guard pwrite(fd, &byte, 1, off_t(offset)) == 1 else { throw ProbeError(what: "pwrite \(path)") }
    }

    struct ProbeError: Error {
        var what: String
    }
}

/// Clients on their own threads, each registering new tokens one after the
/// other over a kept-alive connection, recording each acknowledged one.
final class RegistrationLoad: Sendable {
    private let port: UInt16
    private let key: String
    private let clients: Int
    private let acknowledgedTokens = Mutex<Set<String>>([])
    private let sentTokens = Mutex<Set<String>>([])
    private let stopping = Atomic<Bool>(false)
    private let threads = Mutex<[PlatformThread]>([])

    init(port: UInt16, key: String, clients: Int) {
        self.port = port
        self.key = key
        self.clients = clients
    }

    /// The tokens acknowledged (201) so far.
    var acknowledged: Set<String> { acknowledgedTokens.withLock { $0 } }

    func start() {
        for client in 0..<clients {
            let thread = try? PlatformThread.spawn { self.run(client: client) }
            precondition(thread != nil, "cannot start a load thread")
            threads.withLock { $0.append(thread!) }
        }
    }

    /// Stops the clients, waits for them and returns every token sent.
    func stop() -> Set<String> {
        stopping.store(true, ordering: .relaxed)
        for thread in threads.withLock({ $0 }) { thread.join() }
        return sentTokens.withLock { $0 }
    }

    private func run(client: Int) {
        guard let connection = try? LoopbackConnection(port: port) else { return }
        var number = 0
        while !stopping.load(ordering: .relaxed) {
            let token = OperatorCLITests.token(client: client, number: number)
            number += 1
            let body = #"{"platform":"ios","token":"\#(token)"}"#
            sentTokens.withLock { _ = $0.insert(token) }
            guard
                (try? connection.send(
                    "POST /v1/devices HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer \(key)\r\n"
                        + "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"))
                    != nil,
                let answer = try? connection.readResponse(timeout: .seconds(10))
            else { return }
            if answer.status == 201 { acknowledgedTokens.withLock { _ = $0.insert(token) } }
        }
    }
}
