import Dispatch
import Glibc
import RoostAPI
import RoostEngine
import RoostHTTP
import RoostModel
import RoostPlatform
import RoostStorage
import RoostTelemetry

/// `roost serve` (spec §1) and `roost wal verify|dump DIR`. `serve` prints
/// exactly one line to stdout, `listening on HOST:PORT`, once it serves;
/// everything else goes to stderr, one JSON object a line (`Logger`,
/// docs/metrics-and-logs.md).

let usage = """
    usage: roost serve [--listen HOST:PORT] [--data DIR] [--fsync always|everysec|never] [--shards N]
                       [--event-loops N] [--max-connections N] [--header-timeout-ms N] [--body-timeout-ms N] [--idle-timeout-ms N]
                       [--snapshot-log-bytes N] [--access-log]
           roost wal verify DIR     check every segment, snapshot and checkpoint (exit 0 intact, 1 damage recovery
                                    repairs, e.g. a torn tail; 2 damage that stops start-up, or an error)
           roost wal dump DIR       one line per record, payloads cut to 16 bytes
    """

func fail(_ message: String, code: Int32 = 2) -> Never {
    StandardStreams.error("roost: \(message)")
    exit(code)
}

/// Ends a `serve` that cannot start: one error line, exit status 2.
func refuse(_ message: String) -> Never {
    let logger = Logger.standard
    logger.log(.error, "start.refused") { $0.field("message", "cannot start: \(message)") }
    logger.flush()
    exit(2)
}

// Signals, before any thread exists so that every thread inherits the mask:
// SIGPIPE is ignored (a peer closing mid-write is an error code, not a death);
// SIGTERM and SIGINT are blocked everywhere and taken by sigwait on the main
// thread. The main thread stays synchronous (no top-level await): an async
// main hands the main thread to Dispatch, which unblocks signals.
signal(SIGPIPE, SIG_IGN)
var blockedSignals = sigset_t()
sigemptyset(&blockedSignals)
sigaddset(&blockedSignals, SIGTERM)
sigaddset(&blockedSignals, SIGINT)
pthread_sigmask(SIG_BLOCK, &blockedSignals, nil)

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

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "serve":
    serve(Array(arguments.dropFirst()))
case "wal":
    walTool(Array(arguments.dropFirst()))
default:
    fail(usage)
}

func walTool(_ arguments: [String]) -> Never {
    guard arguments.count == 2, ["verify", "dump"].contains(arguments[0]) else { fail(usage) }
    let directory = arguments[1]
    do {
        if arguments[0] == "verify" {
            let report = try WALTool.verify(directory: directory, options: StorageOptions())
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
        options = try ServeOptions.parse(arguments, coreCount: PlatformThread.onlineProcessorCount)
    } catch {
        fail("\(error)\n\(usage)")
    }
    let logger = Logger.standard
    let clock = ContinuousClock()
    let started = clock.now

    let server: HTTPServer
    let engine: DurableEngine
    // Held until the process ends: one process per data directory (spec §11).
    let directoryLock: DirectoryLock
    do {
        try DurableFile.createDirectory(path: options.dataDirectory)
        do {
            directoryLock = try DirectoryLock(directory: options.dataDirectory)
        } catch {
            refuse("\(error)")
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
                "\(options.host):\(options.port) is already in use by another process; "
                    + "stop it or choose another --listen")
        }
        let admin = try AdminKey.resolve(
            environmentValue: getenv("ROOST_ADMIN_KEY").map { String(cString: $0) },
            dataDirectory: options.dataDirectory)
        // The path only: the key itself is never logged.
        if let path = admin.filePath { logger.info("start.admin_key_file") { $0.field("path", path) } }
        logger.info("start.recovering") { line in
            line.field("data", options.dataDirectory)
            line.field("fsync", options.fsync.rawValue)
            line.field("shards", options.shards)
            line.field("event_loops", options.eventLoops)
        }
        let (opened, report) = try DurableEngine.open(
            directory: options.dataDirectory, policy: options.fsync, shardCount: options.shards,
            loopCount: options.eventLoops)
        engine = opened
        for note in report.notes { logger.info("recovery.note") { $0.field("note", note) } }
        for (phase, duration) in [
            ("files", report.filesDuration), ("snapshot", report.snapshotDuration), ("log", report.logDuration),
        ] {
            logger.info("recovery.phase") { line in
                line.field("phase", phase)
                line.field("duration.ms", milliseconds: duration)
            }
        }
        logger.info("recovery.done") { line in
            line.field("recovery.snapshot_records", report.snapshotRecords)
            line.field("recovery.log_records", report.logRecords)
            line.field("duration.ms", milliseconds: report.filesDuration + report.snapshotDuration + report.logDuration)
        }
        // The catalog from its log records (and a migration of an older
        // release's files), then the indexes made to agree with it, before
        // anything is served (docs/recovery.md, "The catalog at start-up").
        let catalogStarted = clock.now
        let service = try RoostService(
            dataDirectory: options.dataDirectory, adminKey: admin.key, engine: engine,
            catalogRecords: report.catalogRecords, logger: logger, accessLog: options.accessLog)
        let reconciled = blocking { () async -> String? in
            do {
                try await service.reconcile(dataDirectory: options.dataDirectory)
                return nil
            } catch {
                return "\(error)"
            }
        }
        if let reconciled {
            engine.close()
            refuse(reconciled)
        }
        let catalogDuration = clock.now - catalogStarted
        logger.info("recovery.phase") { line in
            line.field("phase", "catalog")
            line.field("duration.ms", milliseconds: catalogDuration)
        }
        // The event loops run the shards from here on: the engine's own
        // threads hand them over (docs/architecture.md, "Threads").
        let registry = engine.registry
        registry.shardSet.stopOwnThreads()
        server = try HTTPServer(
            configuration: options.httpConfiguration, responder: service, executors: registry.shardSet.executors)
        service.metrics.attach(server: server)
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
        StandardStreams.out("listening on \(options.host):\(port)")
    } catch {
        refuse("\(error)")
    }

    let snapshots = SnapshotScheduler(engine: engine, logBytesTrigger: options.snapshotLogBytes)

    var signals = sigset_t()
    sigemptyset(&signals)
    sigaddset(&signals, SIGTERM)
    sigaddset(&signals, SIGINT)
    var received: Int32 = 0
    sigwait(&signals, &received)
    logger.info("shutdown.draining") { $0.field("signal", Int(received)) }
    server.beginShutdown()
    server.waitUntilStopped()
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
        line.field("wal.io_wait_us_mean", io.plans == 0 ? 0 : io.waitNanoseconds / io.plans / 1000)
        line.field("wal.loop_wakeups", io.loopWakeups)
        line.field("wal.groups", io.plans)
        line.field("duration.ms", milliseconds: clock.now - started)
    }
    logger.flush()
    // The log is closed: only now may another process take the directory.
    withExtendedLifetime(directoryLock) {}
    exit(0)
}
