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
    /// Seeds per `swift test` run: about 20 s on a shared 2-core machine (debug build).
    static let defaultSeedCount: UInt64 = 1_500

    static func environment(_ name: String) -> UInt64? {
        guard let text = getenv(name) else { return nil }
        return UInt64(String(cString: text))
    }

    @Test("every seeded schedule keeps the invariants: fenced epochs, acknowledged = committed, logs converge")
    func seededSchedules() {
        let seeds: ClosedRange<UInt64>
        if let one = Self.environment("ROOST_SIM_SEED") {
            seeds = one...one
        } else {
            let first = Self.environment("ROOST_SIM_FIRST_SEED") ?? 1
            seeds = first...(first + (Self.environment("ROOST_SIM_SEEDS") ?? Self.defaultSeedCount) - 1)
        }
        SeedOnCrash.install()
        var total = ReplicationSimulator.Statistics()
        let clock = ContinuousClock()
        let started = clock.now
        var failures = 0
        for seed in seeds {
            SeedOnCrash.set(seed)
            var simulator = ReplicationSimulator(seed: seed)
            if !simulator.run() {
                failures += 1
                let message: String =
                    "seed \(seed): \(simulator.violations.joined(separator: "; ")); \(simulator.summary()); "
                    + "replay: ROOST_SIM_SEED=\(seed) swift test --skip-build --filter ReplicationSimulationTests"
                Issue.record(Comment(rawValue: message))
                if failures >= 3 { break }
            }
            total.events += simulator.statistics.events
            total.acknowledged += simulator.statistics.acknowledged
            total.epochs += simulator.statistics.epochs
            total.crashes += simulator.statistics.crashes
            total.pauses += simulator.statistics.pauses
            total.deposed += simulator.statistics.deposed
            total.reseeds += simulator.statistics.reseeds
            total.purges += simulator.statistics.purges
            total.unavailableWindows += simulator.statistics.unavailableWindows
            total.refusedBatches += simulator.statistics.refusedBatches
        }
        SeedOnCrash.clear()
        let elapsed = clock.now - started
        print(
            "replication simulation: \(seeds.count) seeds (\(seeds.lowerBound)...\(seeds.upperBound)) in \(elapsed): "
                + "\(total.events) events, \(total.acknowledged) LSNs acknowledged, \(total.epochs) epochs, "
                + "\(total.crashes) crashes, \(total.pauses) pauses, \(total.deposed) deposed, "
                + "\(total.unavailableWindows) etcd outages, \(total.purges) purges, \(total.reseeds) reseeds, "
                + "\(total.refusedBatches) batches refused")
        #expect(total.acknowledged > 0, "the schedules acknowledged nothing")
        #expect(total.deposed > 0, "no schedule deposed a leader")
    }
}

/// Prints the seed being simulated when a `precondition` kills the process
/// (SIGILL or SIGTRAP), so that a crash is replayable like a failed check.
enum SeedOnCrash {
    static let capacity = 160
    nonisolated(unsafe) static var message = UnsafeMutablePointer<UInt8>.allocate(capacity: capacity)
    nonisolated(unsafe) static var length = 0

    static func install() {
        for number in [SIGILL, SIGTRAP] {
            signal(number) { received in
                if SeedOnCrash.length > 0 { _ = write(2, SeedOnCrash.message, SeedOnCrash.length) }
                signal(received, SIG_DFL)
                raise(received)
            }
        }
    }

    static func set(_ seed: UInt64) {
        let text = Array("\nreplication simulation crashed: replay with ROOST_SIM_SEED=\(seed)\n".utf8)
        let count = min(text.count, capacity)
        length = 0
        for index in 0..<count { message[index] = text[index] }
        length = count
    }

    static func clear() { length = 0 }
}
