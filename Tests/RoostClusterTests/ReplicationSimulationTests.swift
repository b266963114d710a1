import Glibc
import RoostCluster
import RoostStorage
import RoostTesting
import Testing

/// The deterministic simulation of the replication state machine (spec §13,
/// HOUSE_STYLE 21, docs/cluster.md): thousands of seeded schedules of three
/// nodes against `FakeEtcd`, with crashes, pauses, watch faults, etcd
/// outages and purges, each checked against the invariants.
///
/// `ROOST_SIM_SEED=N` replays one seed; `ROOST_SIM_SEEDS=N` runs N seeds (a
/// soak) from `ROOST_SIM_FIRST_SEED` (default 1).
@Suite("Replication: the state machine under a seeded simulation")
struct ReplicationSimulationTests {
    /// Seeds per `swift test` run: 20 to 30 s on a shared 2-core machine (debug build).
    static let defaultSeedCount: UInt64 = 2_000

    static func environment(_ name: String) -> UInt64? {
        guard let text = getenv(name) else { return nil }
        return UInt64(String(cString: text))
    }

    /// What one job of the run found.
    struct JobResult: Sendable {
        var seeds = 0
        var statistics = ReplicationSimulator.Statistics()
        var failures: [String] = []
    }

    /// Runs every `jobs`-th seed of `seeds` from the `job`-th; stops after three failures.
    static func runJob(_ job: Int, of jobs: Int, seeds: ClosedRange<UInt64>) -> JobResult {
        var result = JobResult()
        for seed in stride(from: seeds.lowerBound + UInt64(job), through: seeds.upperBound, by: jobs) {
            SeedOnCrash.set(seed, job: job)
            var simulator = ReplicationSimulator(seed: seed)
            simulator.trace = seeds.count == 1 && environment("ROOST_SIM_TRACE") != nil
            result.seeds += 1
            if !simulator.run() {
                result.failures.append(
                    "seed \(seed): \(simulator.violations.joined(separator: "; ")); \(simulator.summary()); "
                        + "replay: ROOST_SIM_SEED=\(seed) swift test --skip-build --filter ReplicationSimulationTests")
                if result.failures.count >= 3 { break }
            }
            result.statistics.add(simulator.statistics)
        }
        SeedOnCrash.set(nil, job: job)
        return result
    }

    @Test("every seeded schedule keeps the invariants: fenced epochs, acknowledged = committed, logs converge")
    func seededSchedules() async {
        let seeds: ClosedRange<UInt64>
        if let one = Self.environment("ROOST_SIM_SEED") {
            seeds = one...one
        } else {
            let first = Self.environment("ROOST_SIM_FIRST_SEED") ?? 1
            seeds = first...(first + max(1, Self.environment("ROOST_SIM_SEEDS") ?? Self.defaultSeedCount) - 1)
        }
        // ROOST_SIM_JOBS=2 runs the seeds on two threads (a machine to itself).
        let jobs = Int(min(max(Self.environment("ROOST_SIM_JOBS") ?? 1, 1), UInt64(SeedOnCrash.jobsMax)))
        SeedOnCrash.install()
        let clock = ContinuousClock()
        let started = clock.now
        let results = await withTaskGroup(of: JobResult.self) { group in
            for job in 0..<jobs { group.addTask { Self.runJob(job, of: jobs, seeds: seeds) } }
            var all: [JobResult] = []
            for await result in group { all.append(result) }
            return all
        }
        let elapsed = clock.now - started
        var total = ReplicationSimulator.Statistics()
        for result in results { total.add(result.statistics) }
        for failure in results.flatMap(\.failures) { Issue.record(Comment(rawValue: failure)) }
        print(
            "replication simulation: \(results.reduce(0) { $0 + $1.seeds }) seeds "
                + "(\(seeds.lowerBound)...\(seeds.upperBound), \(jobs) jobs) in \(elapsed): "
                + "\(total.events) events, \(total.acknowledged) LSNs acknowledged, \(total.epochs) epochs, "
                + "\(total.crashes) crashes, \(total.pauses) pauses, \(total.deposed) deposed (\(total.fenced) by the fence), "
                + "\(total.unavailableWindows) etcd outages, \(total.purges) purges, \(total.reseeds) reseeds, "
                + "\(total.refusedBatches) batches refused, \(total.logFailures) leaders' logs failed, "
                + "\(total.answersTooLarge) answers over the client's limit")
        #expect(total.acknowledged > 0, "the schedules acknowledged nothing")
        if seeds.count > 100 {
            #expect(total.deposed > 0, "no schedule deposed a leader")
            #expect(total.fenced > 0, "no schedule exercised the fence")
            #expect(total.logFailures > 0, "no schedule failed a leader's log")
            #expect(total.answersTooLarge > 0, "no read was over the client's answer limit")
        }
    }
}

/// Prints the seed being simulated when a `precondition` kills the process
/// (SIGILL or SIGTRAP), so that a crash is replayable like a failed check.
enum SeedOnCrash {
    /// The most jobs whose seeds it can print.
    static let jobsMax = 8
    static let slotBytes = 120
    nonisolated(unsafe) static let messages = UnsafeMutablePointer<UInt8>.allocate(capacity: jobsMax * slotBytes)
    nonisolated(unsafe) static let lengths = UnsafeMutablePointer<Int>.allocate(capacity: jobsMax)
    static let installed: Bool = {
        lengths.initialize(repeating: 0, count: jobsMax)
        for number in [SIGILL, SIGTRAP] {
            signal(number) { received in
                for job in 0..<SeedOnCrash.jobsMax where SeedOnCrash.lengths[job] > 0 {
                    _ = write(2, SeedOnCrash.messages + job * SeedOnCrash.slotBytes, SeedOnCrash.lengths[job])
                }
                signal(received, SIG_DFL)
                raise(received)
            }
        }
        return true
    }()

    static func install() { precondition(installed, "the crash handler is installed") }

    /// Records the seed job `job` simulates now (nil: none).
    static func set(_ seed: UInt64?, job: Int) {
        precondition(job < jobsMax, "job \(job) >= \(jobsMax)")
        lengths[job] = 0
        guard let seed else { return }
        let text = Array("\nreplication simulation crashed; replay with ROOST_SIM_SEED=\(seed)\n".utf8)
        let count = min(text.count, slotBytes)
        for index in 0..<count { messages[job * slotBytes + index] = text[index] }
        lengths[job] = count
    }
}
