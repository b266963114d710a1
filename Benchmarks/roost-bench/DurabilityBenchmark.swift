import Glibc
import RoostEngine
import RoostModel
import RoostStorage
import RoostTelemetry
import Synchronization

/// `roost-bench snapshot DIR [devices] [log-records]`: the durable engine on a
/// real directory (`--fsync never` while loading, so the load is quick).
///
/// 1. populate `devices` APNs devices, each bound to a person, two tags;
/// 2. latency of single re-registrations (one in flight, like one client)
///    for 3 s without a snapshot, then while a snapshot of everything runs:
///    p50/p99 of each, and the snapshot's seconds and bytes per device;
///    then the same probe again, as long as the snapshot took, without one;
/// 3. `log-records` more registrations after the snapshot, then close;
/// 4. reopen (recovery: checkpoint → snapshot → replay) and time it.
enum DurabilityBenchmark {
    static func run(directory: String, devices: Int, logRecords: Int) async throws {
        precondition(!directory.isEmpty && directory != "/", "refusing directory \(directory)")
        _ = system("rm -rf '\(directory)'")
        var options = StorageOptions()
        options.logger = Logger(output: .memory)
        let (engine, _) = try DurableEngine.open(directory: directory, policy: .never, shardCount: 1, options: options)
        let app = AppID(1)
        let clock = ContinuousClock()

        var started = clock.now
        await RegistryBenchmark.measure("populate", count: devices, registry: engine.registry) { number in
            var request = RegisterRequest(token: RegistryBenchmark.token(number, generation: 0))
            request.externalID = .set(try! ExternalID("user_\(number)"))
            request.tags = .merge(["plan": .string("pro"), "score": .number(7)])
            return (app, request)
        }
        _ = started

        let quiet = await probeLatency(engine.registry, devices: devices, for: .seconds(3))
        print("latency without snapshot: \(quiet)")
        let probing = Task {
            await probeLatency(engine.registry, devices: devices, for: .seconds(600), untilCancelled: true)
        }
        started = clock.now
        let summary = try await engine.snapshot()
        let snapshotSeconds = seconds(clock.now - started)
        probing.cancel()
        let during = await probing.value
        print("latency during snapshot: \(during)")
        if let summary {
            print(
                "snapshot: \(summary.recordCount) records in \(RegistryBenchmark.format3(snapshotSeconds)) s, "
                    + "\(summary.fileBytes) bytes = \(Int(summary.fileBytes) / max(1, devices)) bytes/device on disk, "
                    + "\(Int(Double(devices) / max(snapshotSeconds, 1e-9))) devices/s, "
                    + "pinned \((engine.snapshotFigures.lastPinnedBytesMax ?? 0) >> 20) MiB at most, "
                    + "\(engine.snapshotFigures.pinLimitStops) views stopped at the pinned limit")
        }

        // The same probe for as long as the snapshot took (at most 60 s), after it: the
        // 3 s window before is short for a p99 on a machine that other work shares.
        let afterSeconds = min(60, max(3, Int(snapshotSeconds.rounded(.up))))
        let after = await probeLatency(engine.registry, devices: devices, for: .seconds(afterSeconds))
        print("latency after snapshot (\(afterSeconds) s, no snapshot): \(after)")

        await RegistryBenchmark.measure(
            "log records after the snapshot", count: logRecords, registry: engine.registry
        ) {
            number in
            var request = RegisterRequest(token: RegistryBenchmark.token(number % devices, generation: 0))
            request.externalID = .set(try! ExternalID("user_\(number % devices)"))
            return (app, request)
        }
        engine.close()

        try recover(directory: directory, shardCount: 1)
    }

    /// `roost-bench recover DIR [runs] [shards]`: reopens a directory that
    /// `snapshot` left (recovery only, nothing is written) `runs` times.
    static func recover(directory: String, shardCount: Int, runs: Int = 1) throws {
        var options = StorageOptions()
        options.logger = Logger(output: .memory)
        let clock = ContinuousClock()
        for _ in 0..<runs {
            let cpuBefore = processCPUSeconds()
            let started = clock.now
            let (reopened, report) = try DurableEngine.open(
                directory: directory, policy: .never, shardCount: shardCount, options: options)
            let recoverySeconds = seconds(clock.now - started)
            let cpu = processCPUSeconds() - cpuBefore
            reopened.close()
            print(
                "recovery: \(RegistryBenchmark.format3(recoverySeconds)) s for \(report.snapshotRecords) snapshot records "
                    + "+ \(report.logRecords) log records (cpu \(RegistryBenchmark.format3(cpu)) s; files "
                    + "\(RegistryBenchmark.format3(seconds(report.filesDuration))) s, snapshot "
                    + "\(RegistryBenchmark.format3(seconds(report.snapshotDuration))) s, log "
                    + "\(RegistryBenchmark.format3(seconds(report.logDuration))) s)")
        }
    }

    /// CPU seconds used by the whole process so far (every thread).
    static func processCPUSeconds() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// One re-registration at a time for `duration` (or until cancelled):
    /// returns "p50 … µs, p99 … µs (n samples)".
    static func probeLatency(
        _ registry: Registry, devices: Int, for duration: Duration, untilCancelled: Bool = false
    ) async -> String {
        let clock = ContinuousClock()
        let end = clock.now + duration
        var samples: [Double] = []
        var number = 0
        let now = Timestamp(millisecondsSinceEpoch: 1_790_000_000_000)
        while clock.now < end && !(untilCancelled && Task.isCancelled) {
            var request = RegisterRequest(token: RegistryBenchmark.token((number &* 7919) % devices, generation: 0))
            request.externalID = .set(try! ExternalID("user_\((number &* 7919) % devices)"))
            number += 1
            let sent = request
            let started = clock.now
            _ = await registry.perform(IndexKey(app: AppID(1), mode: .live)) { index in
                switch index.register(sent, at: now) {
                case .success(let outcome): return (0, outcome.mutations)
                case .failure: return (0, [])
                }
            }
            samples.append(seconds(clock.now - started) * 1e6)
        }
        guard !samples.isEmpty else { return "no samples" }
        samples.sort()
        let p50 = Int(samples[samples.count / 2])
        let p99 = Int(samples[min(samples.count - 1, samples.count * 99 / 100)])
        return "p50 \(p50) µs, p99 \(p99) µs (\(samples.count) samples)"
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
