import Glibc
import RoostPlatform

/// Compresses and writes a snapshot's records on a thread of its own at the
/// lowest scheduling priority (nice 19), so that zstd does not take the cores
/// from requests while a snapshot runs. The engine offers batches of encoded
/// records; a bounded queue gives backpressure.
package final class BackgroundSnapshotWriter: Sendable {
    /// Batches queued before `offer` refuses (about 256 records each).
    package static let queuedBatchesMax = 2

    private struct State {
        var batches: [[[UInt8]]] = []
        var closed = false
        var done = false
        var failure: StorageError?
    }

    /// The writer is touched only by the background thread until it has
    /// stopped (`done`), then only by `finish`/`abandon`: confinement, asserted
    /// with `done`.
    private final class WriterBox: @unchecked Sendable {
        let writer: SnapshotWriter
        init(_ writer: SnapshotWriter) { self.writer = writer }
    }

    private let state = ConditionLock(State())
    private let box: WriterBox
    private let thread: PlatformThread

    package init(_ writer: SnapshotWriter) {
        let box = WriterBox(writer)
        let state = self.state
        self.box = box
        self.thread = startThread(name: "roost-snapshot") {
            // Linux keeps the nice value per thread: this lowers only this one.
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)
            while true {
                let batches = state.waitFor { state -> (result: [[[UInt8]]]?, deadline: UInt64?) in
                    if !state.batches.isEmpty {
                        defer { state.batches.removeAll(keepingCapacity: true) }
                        return (state.batches, nil)
                    }
                    return (state.closed ? [] : nil, nil)
                }
                if batches.isEmpty { break }
                do throws(StorageError) {
                    for batch in batches {
                        for record in batch { try box.writer.append(record) }
                    }
                } catch {
                    state.withLockSignalling { $0.failure = $0.failure ?? error }
                }
            }
            state.withLockSignalling { $0.done = true }
        }
    }

    /// Queues a batch; false when the queue is full (offer it again later) or
    /// a write already failed.
    package func offer(_ records: [[UInt8]]) -> Bool {
        if records.isEmpty { return true }
        return state.withLockSignalling { state in
            guard state.failure == nil, state.batches.count < Self.queuedBatchesMax else { return false }
            precondition(!state.closed, "offer after close")
            state.batches.append(records)
            return true
        }
    }

    /// The first write error, if any (the engine stops offering then).
    package var failure: StorageError? { state.withLock { $0.failure } }

    /// Whether the background thread has written everything and stopped.
    package var isDone: Bool { state.withLock { $0.done } }

    /// No more batches will come.
    package func close() {
        state.withLockSignalling { $0.closed = true }
    }

    /// After `isDone`: seals the snapshot (trailer, fsync, rename, directory
    /// fsync); on any failure removes the temporary file and throws.
    package func finish() throws(StorageError) -> SnapshotSummary {
        let failure = state.withLock { state -> StorageError? in
            precondition(state.done, "finish before the snapshot thread stopped")
            return state.failure
        }
        thread.join()
        do throws(StorageError) {
            if let failure { throw failure }
            return try box.writer.finish()
        } catch {
            box.writer.abandon()
            throw error
        }
    }

    /// After `isDone`: removes the temporary file.
    package func abandon() {
        precondition(isDone, "abandon before the snapshot thread stopped")
        thread.join()
        box.writer.abandon()
    }
}
