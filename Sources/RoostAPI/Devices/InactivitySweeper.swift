import RoostEngine
import RoostModel
import RoostTelemetry
import Synchronization

/// The server's inactivity sweep (spec §8): every `interval`, each index of an
/// app whose `inactive_after_days` is set has its active devices last seen
/// more than that many days ago invalidated with reason `Inactive`.
///
/// It goes through the log like any write: each step is a value command
/// (`Command.invalidateInactive`) on the shard that owns the index, examining
/// at most `examineMax` devices and invalidating at most `invalidateMax` in
/// that one turn, whose mutations go into the turn's one log append; the next
/// step is submitted only once the previous one is durable, so the commands
/// of requests run between steps and a sweep never stalls a shard. One wall
/// clock read per sweep (the `APIClock`, so tests move time by hand) gives
/// both the cutoff and `invalidated_at`. Already invalidated devices are left
/// as they are (decision 0052).
package final class InactivitySweeper: Sendable {
    /// How often `roost serve` sweeps: spec §8 asks for at least every 10 minutes.
    package static let intervalDefault: Duration = .seconds(300)
    /// The longest interval allowed (spec §8).
    package static let intervalMax: Duration = .seconds(600)

    private let catalog: Catalog
    private let registry: Registry
    private let clock: any APIClock
    private let logger: Logger
    private let examineMax: Int
    private let invalidateMax: Int
    private let task = Mutex<Task<Void, Never>?>(nil)
    private let totals = Mutex(InactivitySweepTotals())

    /// A sweeper with the named per-turn bounds, or smaller ones (tests).
    package init(
        catalog: Catalog, registry: Registry, clock: any APIClock, logger: Logger,
        examineMax: Int = Limits.inactiveScanDevicesPerTurnMax,
        invalidateMax: Int = Limits.inactiveInvalidationsPerTurnMax
    ) {
        self.catalog = catalog
        self.registry = registry
        self.clock = clock
        self.logger = logger
        self.examineMax = examineMax
        self.invalidateMax = invalidateMax
    }

    /// What every sweep since start did (metrics).
    package var sweepTotals: InactivitySweepTotals { totals.withLock { $0 } }

    /// Runs one whole sweep now and returns what it did. Stops early (and
    /// says so) when the log refuses a step or the task is cancelled; the
    /// next sweep continues, as the rule is idempotent. O(devices of swept
    /// indexes), in steps of one shard turn each.
    @discardableResult
    package func sweep() async -> InactivitySweepSummary {
        var pass = await beginPass()
        while await step(&pass) {}
        return finish(pass)
    }

    /// Starts a sweep: one wall-clock read for its cutoff and `invalidated_at`,
    /// and the indexes to sweep (only existing ones: a step would create an
    /// empty index), of apps whose `inactive_after_days` is set.
    package func beginPass() async -> InactivitySweepPass {
        let now = Timestamp(millisecondsSinceEpoch: clock.wallMilliseconds())
        var work: [(IndexKey, AppSettings, InactivityStep)] = []
        for shard in registry.shardSet.shards {
            for key in await shard.keys() {
                guard let app = catalog.acknowledgedApp(key.app), let days = app.settings.inactiveAfterDays else {
                    continue
                }
                let step = InactivityStep(
                    lastSeenBefore: InactivityStep.cutoff(olderThanDays: days, now: now), examineMax: examineMax,
                    invalidateMax: invalidateMax)
                work.append((key, app.settings, step))
            }
        }
        var pass = InactivitySweepPass(now: now, started: ContinuousClock.now, pending: work.reversed())
        pass.summary.indexes = work.count
        return pass
    }

    /// Runs the pass's next step: one command in one turn of the index's
    /// shard, answered once its records are durable. Returns false when the
    /// pass is over (done, refused by the log, or cancelled). An index whose
    /// app was deleted or whose `inactive_after_days` changed since the pass
    /// began is left for the next sweep (a step would recreate a deleted
    /// app's index).
    package func step(_ pass: inout InactivitySweepPass) async -> Bool {
        guard let (key, settings, step) = pass.pending.last else { return false }
        guard catalog.app(key.app)?.settings.inactiveAfterDays == settings.inactiveAfterDays else {
            pass.pending.removeLast()
            return !pass.pending.isEmpty
        }
        guard !Task.isCancelled else {
            pass.summary.complete = false
            pass.pending.removeAll()
            return false
        }
        guard let outcome = await registry.execute(key, settings: settings, .invalidateInactive(step, at: pass.now))
        else {
            pass.summary.complete = false
            pass.pending.removeAll()
            return false
        }
        guard case .inactiveInvalidated(let slice) = outcome else {
            preconditionFailure("an inactivity step answered \(outcome)")
        }
        precondition(slice.invalidated <= step.invalidateMax, "a step invalidated \(slice.invalidated)")
        pass.summary.steps += 1
        pass.summary.invalidated += slice.invalidated
        if let next = slice.next {
            pass.pending[pass.pending.count - 1].2 = step.continued(after: next)
        } else {
            pass.pending.removeLast()
        }
        return !pass.pending.isEmpty
    }

    /// Ends a pass: adds it to the totals and logs `inactivity.sweep` when it
    /// invalidated something or stopped early. Returns its summary.
    @discardableResult
    package func finish(_ pass: InactivitySweepPass) -> InactivitySweepSummary {
        let summary = pass.summary
        let duration = ContinuousClock.now - pass.started
        totals.withLock { totals in
            totals.sweeps += 1
            totals.steps += UInt64(summary.steps)
            totals.invalidated += UInt64(summary.invalidated)
            if !summary.complete { totals.incomplete += 1 }
            totals.lastDuration = duration
        }
        if summary.invalidated > 0 || !summary.complete {
            logger.log(summary.complete ? .info : .warning, "inactivity.sweep") { line in
                line.field("inactivity.indexes", summary.indexes)
                line.field("inactivity.steps", summary.steps)
                line.field("inactivity.invalidated", summary.invalidated)
                line.field("inactivity.complete", summary.complete)
                line.field("duration.ms", milliseconds: duration)
            }
        }
        return summary
    }

    /// Sweeps every `interval` (at most `intervalMax`) of `clock` on a task of
    /// its own until `stop`. Once. (Tests give a clock they move by hand.)
    package func start(
        interval: Duration = InactivitySweeper.intervalDefault, clock: any Clock<Duration> = ContinuousClock()
    ) {
        precondition(interval > .zero && interval <= Self.intervalMax, "sweep interval \(interval) out of range")
        logger.info("inactivity.started") { $0.field("inactivity.interval_s", Int(interval.components.seconds)) }
        task.withLock { task in
            precondition(task == nil, "the inactivity sweeper started twice")
            task = Task.detached { [self] in
                while !Task.isCancelled {
                    try? await clock.sleep(for: interval)
                    if Task.isCancelled { return }
                    await sweep()
                }
            }
        }
    }

    /// Stops sweeping; a sweep in progress ends after its current step.
    /// Call while the loops still run (the step waits for its shard).
    package func stop() async {
        let running = task.withLock { task -> Task<Void, Never>? in
            defer { task = nil }
            return task
        }
        running?.cancel()
        await running?.value
    }
}

/// One sweep in progress: its time and the indexes still to step through
/// (the next one last), each with the step it continues at.
package struct InactivitySweepPass: Sendable {
    package let now: Timestamp
    let started: ContinuousClock.Instant
    var pending: [(IndexKey, AppSettings, InactivityStep)]
    package var summary = InactivitySweepSummary()
}

/// What one sweep did.
package struct InactivitySweepSummary: Sendable, Equatable {
    /// Indexes of apps with `inactive_after_days` set.
    package var indexes = 0
    /// Shard turns taken (one command each).
    package var steps = 0
    package var invalidated = 0
    /// False when the log refused a step or the sweep was stopped.
    package var complete = true
}

/// What every sweep since start did (`/metrics`).
package struct InactivitySweepTotals: Sendable, Equatable {
    package var sweeps: UInt64 = 0
    package var incomplete: UInt64 = 0
    package var steps: UInt64 = 0
    package var invalidated: UInt64 = 0
    package var lastDuration: Duration?
}
