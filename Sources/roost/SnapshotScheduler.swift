import Glibc
import RoostEngine
import RoostPlatform

/// Starts a snapshot whenever the log has grown by `logBytesTrigger` bytes of
/// records since the last one, checking once a second, one snapshot at a time.
final class SnapshotScheduler: Sendable {
    /// How often the trigger is checked.
    static let checkInterval: Duration = .seconds(1)

    private let engine: DurableEngine
    private let logBytesTrigger: Int
    private let task: Task<Void, Never>

    init(engine: DurableEngine, logBytesTrigger: Int) {
        self.engine = engine
        self.logBytesTrigger = logBytesTrigger
        self.task = Task.detached {
            while !Task.isCancelled {
                try? await Task.sleep(for: SnapshotScheduler.checkInterval)
                if Task.isCancelled { return }
                guard engine.log.bytesAppendedSinceSnapshot >= logBytesTrigger else { continue }
                let clock = ContinuousClock()
                let started = clock.now
                do {
                    if let summary = try await engine.snapshot() {
                        StandardStreams.error(
                            "roost: snapshot snapshot.lsn=\(summary.startLSN.rawValue) "
                                + "snapshot.records=\(summary.recordCount) snapshot.bytes=\(summary.fileBytes) "
                                + "snapshot.seconds=\(clock.now - started)")
                    }
                } catch {
                    StandardStreams.error("roost: snapshot failed: \(error)")
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
