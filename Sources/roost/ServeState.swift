import Glibc
import RoostAPI
import RoostCluster
import RoostClusterNode
import RoostEngine
import RoostHTTP
import RoostStorage
import RoostTelemetry

/// What `roost serve` opens before it listens: the engine recovered from
/// DIR, the service over it and, in cluster mode, the node caught up with
/// the group log (spec §13.6).
struct ServeState {
    /// At start, how many times a node may cut its log's unacknowledged end
    /// and open again (one cut is all a log can need; more is a bug).
    static let cutsMax = 2

    let engine: DurableEngine
    let report: DurableEngine.RecoveryReport
    let service: RoostService
    let node: ClusterNode?
    let catalogDuration: Duration

    /// Recovers DIR, opens the service and, in cluster mode, starts the node
    /// and waits until it serves: a node whose log ends with records the
    /// group log does not hold cuts them and opens again (spec §13.2).
    /// Ends the process (exit 2, 75) where the node cannot serve.
    static func open(options: ServeOptions, adminKey: String, advertisePort: UInt16, logger: Logger) throws
        -> ServeState
    {
        var cuts = 0
        var reseeds = 0
        while true {
            let state = try openOnce(options: options, adminKey: adminKey, advertisePort: advertisePort, logger: logger)
            guard let node = state.node else { return state }
            logger.info("cluster.catching_up") { $0.field("position", state.engine.log.appendedThrough.rawValue) }
            logger.flush()
            guard let ending = node.waitUntilServing() else { return state }
            node.stop()
            state.engine.close()
            switch ending {
            case .cutNeeded(let after):
                guard cuts < cutsMax else {
                    refuse("the log of \(options.dataDirectory) was cut \(cuts) times at start")
                }
                cuts += 1
                let cut = try LogCut.cut(directory: options.dataDirectory, after: after)
                logger.warning("cluster.log_cut") { line in
                    line.field("after_lsn", after.rawValue)
                    line.field("records_cut", cut.recordsCut)
                    line.field(
                        "message", "the group log does not hold these records: they were never acknowledged")
                }
            case .reseedNeeded(let start):
                guard reseeds < reseedsMax, let cluster = options.cluster else {
                    refuse("re-seeded \(reseeds) times and etcd's group log still starts after this node's log")
                }
                reseeds += 1
                try reseed(
                    directory: options.dataDirectory, cluster: cluster, groupLogStart: start,
                    localEnd: state.engine.log.appendedThrough, adminKey: adminKey, logger: logger)
            case .deposed(let reason):
                logger.error("cluster.exit") { $0.field("reason", reason) }
                logger.flush()
                exit(75)
            case .failed(let reason):
                refuse(reason)
            case .stopped:
                refuse("replication stopped before the node served")
            }
        }
    }

    /// At start, how many times a node may install another node's snapshot.
    static let reseedsMax = 3

    /// Installs the newest snapshot of a live member whose snapshot reaches
    /// the group log's start (spec §13.6); waits and asks again while none
    /// has one, logging every few seconds.
    private static func reseed(
        directory: String, cluster: ClusterOptions, groupLogStart: LogSequenceNumber, localEnd: LogSequenceNumber,
        adminKey: String, logger: Logger
    ) throws {
        logger.warning("cluster.reseeding") { line in
            line.field("group_log_start", groupLogStart.rawValue)
            line.field("local_end", localEnd.rawValue)
            line.field("message", "etcd no longer holds this node's next position: installing a live node's snapshot")
        }
        logger.flush()
        var lastError = "no member has a snapshot that reaches the group log's start"
        for attempt in 0..<ClusterRecord.reseedAttemptsMax {
            if attempt > 0 {
                var pause = timespec(tv_sec: 1, tv_nsec: 0)
                nanosleep(&pause, nil)
            }
            let sources: [ClusterReseed.Source]
            do {
                sources = try ClusterReseed.sources(
                    endpoints: cluster.endpoints, cluster: cluster.name, node: cluster.node,
                    groupLogStart: groupLogStart)
            } catch {
                lastError = "etcd: \(error)"
                continue
            }
            for source in sources {
                do {
                    let start = try ClusterReseed.install(from: source, directory: directory, adminKey: adminKey)
                    logger.info("cluster.reseeded") { line in
                        line.field("from", source.node)
                        line.field("snapshot_lsn", start.rawValue)
                    }
                    logger.flush()
                    return
                } catch {
                    lastError = "\(source.node) (\(source.url)): \(error)"
                }
            }
            if attempt % 5 == 0 {
                logger.warning("cluster.reseed_waiting") { $0.field("message", lastError) }
                logger.flush()
            }
        }
        refuse("cannot re-seed \(directory): \(lastError)")
    }

    private static func openOnce(options: ServeOptions, adminKey: String, advertisePort: UInt16, logger: Logger)
        throws -> ServeState
    {
        let clock = ContinuousClock()
        logger.info("start.recovering") { line in
            line.field("data", options.dataDirectory)
            line.field("fsync", options.fsync.rawValue)
            line.field("shards", options.shards)
            line.field("event_loops", options.eventLoops)
        }
        let (engine, report) = try DurableEngine.open(
            directory: options.dataDirectory, policy: options.fsync, shardCount: options.shards,
            loopCount: options.eventLoops, changesRetained: options.changesRetained, cluster: options.cluster != nil)
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
        var node: ClusterNode?
        if let cluster = options.cluster {
            var replication = ReplicationConfiguration(
                node: cluster.node,
                advertiseURL: cluster.advertise ?? "http://\(options.address(port: advertisePort))",
                keys: ClusterKeys(cluster: cluster.name))
            replication.leaseTTLSeconds = cluster.leaseTTLSeconds
            replication.etcdTimeoutMilliseconds = cluster.etcdTimeoutMilliseconds
            var configuration = ClusterNodeConfiguration(replication: replication, endpoints: cluster.endpoints)
            configuration.readLagMilliseconds = cluster.readLagMilliseconds
            configuration.logRetainBytes = cluster.logRetainBytes
            node = try ClusterNode(
                configuration: configuration, engine: engine, logger: logger, endSignal: ServeSignals.clusterEnded)
        }
        // The catalog from its log records (and a migration of an older
        // release's files), then the indexes made to agree with it, before
        // anything is served (docs/recovery.md, "The catalog at start-up").
        let catalogStarted = clock.now
        let service = try RoostService(
            dataDirectory: options.dataDirectory, adminKey: adminKey, engine: engine,
            logger: logger, accessLog: options.accessLog,
            trustedProxies: options.trustedProxies, cluster: node)
        let reconciling = service
        let reconciled = blocking { () async -> String? in
            do {
                try await reconciling.reconcile(dataDirectory: options.dataDirectory)
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
        try node?.start()
        return ServeState(
            engine: engine, report: report, service: service, node: node, catalogDuration: catalogDuration)
    }

    /// The node's replication ended while serving: deposed (spec §13.5) →
    /// exit 75 once the connections drained; anything else → exit 1.
    static func endCluster(
        _ ending: ClusterNodeEnding, node: ClusterNode, service: RoostService, server: HTTPServer,
        engine: DurableEngine, logger: Logger
    ) -> Never {
        service.beginShutdown()
        server.beginShutdown()
        server.waitUntilStopped()
        node.stop()
        engine.close()
        let code: Int32
        switch ending {
        case .deposed(let reason):
            logger.error("cluster.exit") { line in
                line.field("reason", reason)
                line.field("message", "this node lost its epoch; start it again and it joins as a follower")
            }
            code = 75
        case .reseedNeeded:
            logger.error("cluster.exit") { line in
                line.field("reason", "\(ending)")
                line.field("message", "etcd no longer holds this node's next position; started again it re-seeds")
            }
            code = 75
        case .failed, .cutNeeded, .stopped:
            logger.error("cluster.exit") { $0.field("reason", "\(ending)") }
            code = 1
        }
        logger.flush()
        exit(code)
    }
}
