import Glibc
import RoostPlatform

/// A value that produces a snapshot's encoded records in bounded batches on
/// the snapshot thread (decision 0054): a frozen view of one index and where
/// its encoding has got to. A value, not a closure: it crosses to the
/// snapshot thread and comes back (`BackgroundSnapshotWriter.takeReturnedSource`)
/// telling the engine whether it finished or stopped early.
package protocol SnapshotRecordSource: Sendable {
    /// Returns the next batch of encoded records, or nil when the source is
    /// exhausted or must stop (the engine reads which from the returned value).
    mutating func nextBatch() -> [[UInt8]]?
}

/// Compresses and writes a snapshot's records on a thread of its own at the
/// lowest scheduling priority (nice 19), so that zstd does not take the cores
/// from requests while a snapshot runs. The engine offers batches of encoded
/// records, or sources that encode their records on this thread too (frozen
/// index views, decision 0054); a bounded queue gives backpressure.
package final class BackgroundSnapshotWriter: Sendable {
    /// Items (batches of about 256 records, or sources) queued before `offer` refuses.
    package static let queuedBatchesMax = 2

    private enum Item: Sendable {
        case records([[UInt8]])
        case source(any SnapshotRecordSource)
    }

    private struct State {
        var items: [Item] = []
        var closed = false
        var done = false
        var failure: StorageError?
        /// Sources the thread has drained (or stopped), in order, until taken.
        var returned: [any SnapshotRecordSource] = []
        /// The engine's task suspended in `wait(for:)`, and what it waits for.
        var waiter: (event: Event, continuation: CheckedContinuation<Void, Never>)?
    }

    /// What the engine's snapshot task waits for (`wait(for:)`).
    package enum Event: Sendable {
        /// The queue has room for one more offer (or a write failed).
        case room
        /// A source came back (or a write failed, or the thread stopped).
        case returnedSource
        /// The thread has written everything and stopped.
        case done
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
                let (taken, roomMade) = state.waitFor {
                    state -> (result: ([Item], CheckedContinuation<Void, Never>?)?, deadline: UInt64?) in
                    if !state.items.isEmpty {
                        let items = state.items
                        state.items.removeAll(keepingCapacity: true)
                        return ((items, Self.readyWaiter(&state)), nil)
                    }
                    return (state.closed ? ([], nil) : nil, nil)
                }
                roomMade?.resume()
                var queued = taken
                if queued.isEmpty { break }
                while !queued.isEmpty {
                    // Taken out of the queue, so that a source is held once (it may let go of memory as it goes).
                    let item = queued.removeFirst()
                    switch consume item {
                    case .records(let batch):
                        Self.write(batch, box.writer, state)
                    case .source(var source):
                        while state.withLock({ $0.failure == nil }), let batch = source.nextBatch() {
                            Self.write(batch, box.writer, state)
                        }
                        Self.change(state) { $0.returned.append(source) }
                    }
                }
            }
            Self.change(state) { $0.done = true }
        }
    }

    /// Changes the state on the snapshot thread, then resumes the engine's
    /// task if what it waits for now holds.
    private static func change(_ state: ConditionLock<State>, _ body: (inout State) -> Void) {
        let ready = state.withLock { state in
            body(&state)
            return readyWaiter(&state)
        }
        ready?.resume()
    }

    private static func holds(_ event: Event, in state: State) -> Bool {
        switch event {
        case .room: state.failure != nil || state.items.count < queuedBatchesMax
        case .returnedSource: !state.returned.isEmpty || state.failure != nil || state.done
        case .done: state.done
        }
    }

    /// Takes the waiting task's continuation when its event holds (lock
    /// held; the caller resumes it after letting go of the lock).
    private static func readyWaiter(_ state: inout State) -> CheckedContinuation<Void, Never>? {
        guard let waiter = state.waiter, holds(waiter.event, in: state) else { return nil }
        state.waiter = nil
        return waiter.continuation
    }

    /// Suspends the calling task until `event` holds: the snapshot thread
    /// resumes it when it makes it so (no thread blocked, no polling). One
    /// waiting task at a time: the engine's snapshot.
    package func wait(for event: Event) async {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> Bool in
                if Self.holds(event, in: state) { return true }
                precondition(state.waiter == nil, "two tasks wait on one snapshot writer")
                state.waiter = (event, continuation)
                return false
            }
            if ready { continuation.resume() }
        }
    }

    /// Appends a batch unless a write already failed; records the first failure.
    private static func write(_ batch: [[UInt8]], _ writer: SnapshotWriter, _ state: ConditionLock<State>) {
        guard state.withLock({ $0.failure == nil }) else { return }
        do throws(StorageError) {
            for record in batch { try writer.append(record) }
        } catch {
            change(state) { $0.failure = $0.failure ?? error }
        }
    }

    /// Queues a batch; false when the queue is full (offer it again later) or
    /// a write already failed.
    package func offer(_ records: [[UInt8]]) -> Bool {
        if records.isEmpty { return true }
        return enqueue(.records(records))
    }

    /// Queues a source, drained on the snapshot thread after what is queued
    /// before it; false when the queue is full or a write already failed. The
    /// source comes back through `takeReturnedSource` once drained or stopped
    /// (also after a failed write).
    package func offer(source: any SnapshotRecordSource) -> Bool {
        enqueue(.source(source))
    }

    private func enqueue(_ item: Item) -> Bool {
        state.withLockSignalling { state in
            guard state.failure == nil, state.items.count < Self.queuedBatchesMax else { return false }
            precondition(!state.closed, "offer after close")
            state.items.append(item)
            return true
        }
    }

    /// Whether one more batch or source can be queued now (only the caller
    /// queues, so it stays true until the caller offers; false after a failure).
    package var hasRoom: Bool {
        state.withLock { $0.failure == nil && $0.items.count < Self.queuedBatchesMax }
    }

    /// The oldest source the snapshot thread has finished with, or nil.
    package func takeReturnedSource() -> (any SnapshotRecordSource)? {
        state.withLock { $0.returned.isEmpty ? nil : $0.returned.removeFirst() }
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
