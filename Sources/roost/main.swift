import Dispatch
import Glibc
import RoostAPI
import RoostCluster
import RoostClusterNode
import RoostEngine
import RoostHTTP
import RoostModel
import RoostPlatform
import RoostStorage
import RoostTelemetry

/// `roost serve` (spec §1), `roost wal verify|dump DIR`, `roost backup DIR OUT`,
/// `roost restore BACKUP DIR`, `roost --version`, `roost --help`. `serve`
/// prints exactly one line to stdout, `listening on HOST:PORT`, once it
/// serves; everything else goes to stderr (`serve`: one JSON object a line,
/// `Logger`, docs/metrics-and-logs.md). `--help` (on every command) prints
/// usage to stdout and exits 0; a command line that cannot be understood
/// prints the usage to stderr and exits 2.

func fail(_ message: String, code: Int32 = 2) -> Never {
    StandardStreams.error("roost: \(message)")
    exit(code)
}

/// Prints `text` to stdout and exits 0 (`--help`).
func printUsage(_ text: String) -> Never {
    StandardStreams.out(text)
    exit(0)
}

/// Returns whether a tool's arguments ask for help.
func asksForHelp(_ arguments: [String]) -> Bool {
    arguments.contains("--help") || arguments.contains("-h")
}

/// Exits 2 with the usage when an argument looks like a flag: the tools take
/// paths only, and a path that starts with `-` is far more likely a typo.
func refuseFlags(_ arguments: [String], usage: String) {
    if let flag = arguments.first(where: { $0.hasPrefix("-") }) { fail("unknown flag '\(flag)'\n\(usage)") }
}

/// Ends a `serve` that cannot start: one error line, exit status 2.
func refuse(_ message: String) -> Never {
    let logger = Logger.standard
    logger.log(.error, "start.refused") { $0.field("message", "cannot start: \(message)") }
    logger.flush()
    exit(2)
}

/// Runs async work to completion from the synchronous main thread.
func blocking<Value: Sendable>(_ body: @escaping @Sendable () async -> Value) -> Value {
    let done = DispatchSemaphore(value: 0)
    let result = ResultBox<Value>()
    Task.detached {
        result.value = await body()
        done.signal()
    }
    done.wait()
    return result.value!
}

/// Carries a value from a task to the thread waiting on the semaphore; the
/// semaphore orders the write before the read.
final class ResultBox<Value: Sendable>: @unchecked Sendable {
    var value: Value?
}

// SIGPIPE is ignored by every command (a peer or a pipe closing mid-write is
// an error code, not a death). Only `serve` blocks SIGTERM, SIGINT and SIGHUP
// (it takes them with sigwait, `ServeSignals`); the tools die on Ctrl-C as any
// tool does, and leave their output marked incomplete (docs/operations.md).
signal(SIGPIPE, SIG_IGN)

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "serve":
    serve(Array(arguments.dropFirst()))
case "wal":
    walTool(Array(arguments.dropFirst()))
case "backup":
    backupCommand(Array(arguments.dropFirst()))
case "restore":
    restoreCommand(Array(arguments.dropFirst()))
case "cluster":
    clusterCommand(Array(arguments.dropFirst()))
case "--version", "-V":
    guard arguments.count == 1 else { fail("--version takes no arguments\n\(Usage.all)") }
    StandardStreams.out("roost \(RoostVersion.current)")
    exit(0)
case "--help", "-h", "help":
    printUsage(Usage.all)
case nil:
    fail("no command given\n\(Usage.all)")
case let other?:
    fail("unknown command '\(other)'\n\(Usage.all)")
}

func walTool(_ arguments: [String]) -> Never {
    if asksForHelp(arguments) { printUsage(Usage.wal) }
    refuseFlags(arguments, usage: Usage.wal)
    guard arguments.count == 2, ["verify", "dump"].contains(arguments[0]) else { fail(Usage.wal) }
    let directory = arguments[1]
    do {
        if arguments[0] == "verify" {
            // The checks start-up makes, the engine's replay included (issue 24, L-6).
            let report = try DurableEngine.verify(directory: directory, options: StorageOptions())
            for line in report.lines { StandardStreams.out(line) }
            exit(report.exitCode)
        }
        try WALTool.dump(directory: directory, options: StorageOptions()) { StandardStreams.out($0) }
        exit(0)
    } catch {
        fail("\(error)")
    }
}

func serve(_ arguments: [String]) -> Never {
    let options: ServeOptions
    do {
        switch try ServeOptions.parse(arguments, coreCount: PlatformThread.onlineProcessorCount) {
        case .serve(let parsed): options = parsed
        case .help: printUsage(Usage.serve)
        }
    } catch {
        fail("\(error)\n\(Usage.serve)")
    }
    let logger = Logger.standard
    let clock = ContinuousClock()
    let started = clock.now

    // Before any thread exists, so that every thread inherits the mask:
    // SIGTERM, SIGINT and SIGHUP are blocked everywhere and taken by sigwait
    // on the main thread. The main thread stays synchronous (no top-level
    // await): an async main hands the main thread to Dispatch, which
    // unblocks signals.
    var blockedSignals = sigset_t()
    sigemptyset(&blockedSignals)
    let takenSignals = ServeSignals.taken + (options.cluster == nil ? [] : [ServeSignals.clusterEnded])
    for signal in takenSignals { sigaddset(&blockedSignals, signal) }
    pthread_sigmask(SIG_BLOCK, &blockedSignals, nil)

    let server: HTTPServer
    let engine: DurableEngine
    let service: RoostService
    let node: ClusterNode?
    // Held until the process ends: one process per data directory (spec §11).
    let directoryLock: DirectoryLock
    do {
        try DurableFile.createDirectory(path: options.dataDirectory)
        do {
            directoryLock = try DirectoryLock(directory: options.dataDirectory)
        } catch {
            refuse("\(error)")
        }
        // A restore into DIR that did not finish left only a part of a
        // backup (or nothing): never serve it as if it were the state.
        if DurableFile.exists(options.dataDirectory + "/" + Restore.stagingName) {
            refuse(Restore.unfinishedMessage(directory: options.dataDirectory))
        }
        // Bound before recovery: an address another process listens on is
        // refused at once, with nothing else done (spec §11).
        let bound: BoundListener
        switch Result(catching: { () throws(SystemCallError) in try HTTPServer.bind(options.httpConfiguration) }) {
        case .success(let listener):
            bound = listener
        case .failure(let error):
            guard error.errno == EADDRINUSE else { refuse("\(error)") }
            refuse(
                "\(options.address(port: options.port)) is already in use by another process; "
                    + "stop it or choose another --listen")
        }
        if options.cluster != nil, getenv("ROOST_ADMIN_KEY") == nil {
            refuse("cluster mode needs ROOST_ADMIN_KEY in the environment, the same on every node")
        }
        let admin = try AdminKey.resolve(
            environmentValue: getenv("ROOST_ADMIN_KEY").map { String(cString: $0) },
            dataDirectory: options.dataDirectory)
        // The path only: the key itself is never logged.
        if let path = admin.filePath { logger.info("start.admin_key_file") { $0.field("path", path) } }
        if let cluster = options.cluster {
            try ClusterRecord.requireInitialised(endpoints: cluster.endpoints, cluster: cluster.name, logger: logger)
            if try ClusterMembershipFile.claim(
                directory: options.dataDirectory, cluster: cluster.name, node: cluster.node)
            {
                logger.info("cluster.joined") { line in
                    line.field("cluster", cluster.name.rawValue)
                    line.field("node", cluster.node.rawValue)
                    line.field("data", options.dataDirectory)
                }
            }
        }
        let opened = try ServeState.open(
            options: options, adminKey: admin.key, advertisePort: bound.port, logger: logger)
        engine = opened.engine
        service = opened.service
        node = opened.node
        let report = opened.report
        let catalogDuration = opened.catalogDuration
        // The event loops run the shards from here on: the engine's own
        // threads hand them over (docs/architecture.md, "Threads").
        let registry = engine.registry
        registry.shardSet.stopOwnThreads()
        server = try HTTPServer(
            configuration: options.httpConfiguration, responder: service, executors: registry.shardSet.executors)
        service.metrics.attach(server: server)
        service.readiness.attach(server: server)
        let port = try server.start(on: bound)
        let startUp = clock.now - started
        service.metrics.setRecovery(
            RecoveryFigures(
                files: report.filesDuration, snapshot: report.snapshotDuration, log: report.logDuration,
                catalog: catalogDuration, total: startUp, snapshotRecords: report.snapshotRecords,
                logRecords: report.logRecords))
        logger.info("start.listening") { line in
            line.field("host", options.host)
            line.field("port", Int(port))
            line.field("access_log", options.accessLog)
            line.field("duration.ms", milliseconds: startUp)
        }
        // Every start-up line is out before the one line on stdout.
        logger.flush()
        StandardStreams.out("listening on \(options.address(port: port))")
    } catch {
        refuse("\(error)")
    }

    let snapshots = SnapshotScheduler(engine: engine, logBytesTrigger: options.snapshotLogBytes, node: node)
    // Spec §8: every InactivitySweeper.intervalDefault (5 minutes), through the log.
    service.inactivity.start()

    var signals = sigset_t()
    sigemptyset(&signals)
    for signal in takenSignals { sigaddset(&signals, signal) }
    var received: Int32 = 0
    while true {
        sigwait(&signals, &received)
        if ServeSignals.stopping.contains(received) { break }
        if received == ServeSignals.clusterEnded, let node, let ending = node.ending {
            ServeState.endCluster(ending, node: node, service: service, server: server, engine: engine, logger: logger)
        }
        // SIGHUP (a closed terminal, or a habit of asking daemons to reopen
        // their logs): the server writes only to stderr, nothing to reopen.
        logger.info("signal.ignored") { line in
            line.field("signal", Int(received))
            line.field("message", "roost serve ignores SIGHUP; SIGTERM or SIGINT stops it")
        }
        logger.flush()
    }
    logger.info("shutdown.draining") { $0.field("signal", Int(received)) }
    // A leader lets go of its lease at once, so that another node takes over
    // without waiting for it to expire (writes in flight are answered 503).
    if let node {
        _ = node.stepDown()
        node.stop()
    }
    // While the loops still run: a sweep step in progress waits for its shard.
    let sweeper = service.inactivity
    blocking { await sweeper.stop() }
    // /readyz says so first, for a balancer polling a kept-alive connection:
    // the drain keeps idle connections open for one last request while it
    // finishes what is owed (docs/http.md, "Shutdown").
    service.beginShutdown()
    server.beginShutdown()
    server.waitUntilStopped()
    // Every key's last use of this run reaches the log (decision 0053: the hot
    // path logs it at most once a minute); the final snapshot and close flush it.
    _ = service.catalog.flushKeyUsage()
    // The loops are gone: the engine's threads run the shards for the final snapshot.
    engine.registry.shardSet.startOwnThreads()
    let finalEngine = engine
    let snapshotError = blocking { () async -> String? in
        await snapshots.stop()
        do {
            _ = try await finalEngine.snapshot()
            return nil
        } catch {
            return "\(error)"
        }
    }
    if let snapshotError {
        logger.error("shutdown.snapshot_failed") { line in
            line.field("error", snapshotError)
            line.field("message", "the log still holds every write")
        }
    }
    engine.close()
    let counts = engine.log.wal.groupCommitCounts
    let io = engine.log.wal.ioStatistics
    logger.info("shutdown.stopped") { line in
        line.field("wal.records_appended", counts.records)
        line.field("wal.fdatasyncs", counts.syncs)
        line.field("wal.records_per_fdatasync", counts.syncs == 0 ? 0 : counts.records / counts.syncs)
        line.field("wal.fdatasync_us_mean", io.syncs == 0 ? 0 : io.syncNanoseconds / io.syncs / 1000)
        let ioThreadPlans = io.plans - io.writesOnAppender
        line.field("wal.io_wait_us_mean", ioThreadPlans == 0 ? 0 : io.waitNanoseconds / ioThreadPlans / 1000)
        line.field("wal.loop_wakeups", io.loopWakeups)
        line.field("wal.groups", io.plans)
        line.field("wal.groups_written_by_loops", io.writesOnAppender)
        line.field("duration.ms", milliseconds: clock.now - started)
    }
    logger.flush()
    // The log is closed: only now may another process take the directory.
    withExtendedLifetime(directoryLock) {}
    exit(0)
}

/// The signals `roost serve` takes with sigwait (docs/operations.md, "Signals").
enum ServeSignals {
    /// Those that begin the drain and the exit.
    static let stopping: [Int32] = [SIGTERM, SIGINT]
    /// Every signal taken: SIGHUP is logged (`signal.ignored`) and ignored.
    static let taken: [Int32] = stopping + [SIGHUP]
    /// Cluster mode: the node's replication ended on its own (deposed, or it cannot go on).
    static let clusterEnded = SIGUSR1
}

func backupCommand(_ arguments: [String]) -> Never {
    if asksForHelp(arguments) { printUsage(Usage.backup) }
    refuseFlags(arguments, usage: Usage.backup)
    guard arguments.count == 2 else { fail("backup needs DIR and OUT\n\(Usage.backup)") }
    do {
        let summary = try Backup.run(source: arguments[0], output: arguments[1])
        for note in summary.notes { StandardStreams.error("roost: backup: \(note)") }
        let manifest = summary.manifest
        StandardStreams.out(
            "backup \(arguments[1]): snapshot LSN \(manifest.snapshotLSN?.rawValue ?? 0), log through LSN "
                + "\(manifest.endLSN), \(manifest.files.count) files, "
                + "\(manifest.files.values.reduce(0) { $0 + $1.bytes }) bytes, verified")
        exit(0)
    } catch {
        fail("backup failed: \(error)")
    }
}

func restoreCommand(_ arguments: [String]) -> Never {
    if asksForHelp(arguments) { printUsage(Usage.restore) }
    refuseFlags(arguments, usage: Usage.restore)
    guard arguments.count == 2 else { fail("restore needs BACKUP and DIR\n\(Usage.restore)") }
    do {
        let manifest = try Restore.run(backup: arguments[0], directory: arguments[1])
        StandardStreams.out(
            "restored \(arguments[0]) into \(arguments[1]): snapshot LSN \(manifest.snapshotLSN?.rawValue ?? 0), "
                + "log through LSN \(manifest.endLSN), made by roost \(manifest.roostVersion) at \(manifest.createdAt)")
        exit(0)
    } catch {
        fail("restore failed: \(error)")
    }
}
