import Glibc
import RoostClusterNode
import RoostEngine
import RoostPlatform
import RoostTelemetry

/// Starts a snapshot whenever the log has grown by `logBytesTrigger` bytes of
/// records since the last one, one snapshot at a time: the log's
/// `LogGrowthTrigger` wakes it when the appends cross the trigger (no polling).
final class SnapshotScheduler: Sendable {
    private let engine: DurableEngine
    private let logBytesTrigger: Int
    private let task: Task<Void, Never>

    /// `node`: in cluster mode, told of each checkpoint (its member record publishes it).
    init(engine: DurableEngine, logBytesTrigger: Int, node: ClusterNode? = nil) {
        self.engine = engine
        self.logBytesTrigger = logBytesTrigger
        self.task = Task.detached {
            while !Task.isCancelled {
                await engine.log.growth.waitUntilGrown(by: logBytesTrigger)
                if Task.isCancelled { return }
                let clock = ContinuousClock()
                let started = clock.now
                do {
                    if let summary = try await engine.snapshot() {
                        node?.noteCheckpoint(snapshotLSN: summary.startLSN)
                        Logger.standard.info("snapshot.done") { line in
                            line.field("snapshot.lsn", summary.startLSN.rawValue)
                            line.field("snapshot.records", summary.recordCount)
                            line.field("snapshot.bytes", summary.fileBytes)
                            line.field("duration.ms", milliseconds: clock.now - started)
                        }
                    }
                } catch {
                    Logger.standard.error("snapshot.failed") { $0.field("error", "\(error)") }
                }
            }
        }
    }

    /// Stops checking and waits for a snapshot in progress to end.
    func stop() async {
        task.cancel()
        await task.value
    }
}
