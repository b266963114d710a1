import Synchronization

/// Counts record bytes appended since the last snapshot began and wakes the
/// one task waiting for that count to reach its trigger (the snapshot
/// scheduler), instead of that task polling the count. Appends (shard loops,
/// the follower's applier) pay one relaxed add and one relaxed load; the
/// wake-up happens once per crossing.
package final class LogGrowthTrigger: Sendable {
    /// Bytes appended since `reset`.
    private let bytes = Atomic<Int>(0)
    /// The count the waiter waits for; `Int.max` while nobody waits.
    private let threshold = Atomic<Int>(Int.max)
    private let waiter = Mutex<CheckedContinuation<Void, Never>?>(nil)

    package init() {}

    /// Bytes appended since `reset`.
    package var bytesSinceReset: Int { bytes.load(ordering: .relaxed) }

    /// Counts `count` bytes appended; wakes the waiter if they reach its trigger.
    package func appended(_ count: Int) {
        let after = bytes.wrappingAdd(count, ordering: .relaxed).newValue
        if after >= threshold.load(ordering: .relaxed) { wakeWaiter() }
    }

    /// Starts the count again (a snapshot began).
    package func reset() {
        bytes.store(0, ordering: .relaxed)
    }

    /// Returns once `triggerBytes` bytes were appended since `reset`, or when
    /// the calling task is cancelled (check `Task.isCancelled`). One waiter at a time.
    package func waitUntilGrown(by triggerBytes: Int) async {
        precondition(triggerBytes > 0, "a trigger of \(triggerBytes) bytes")
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                waiter.withLock { waiting in
                    precondition(waiting == nil, "two tasks wait for the log to grow")
                    waiting = continuation
                    threshold.store(triggerBytes, ordering: .relaxed)
                }
                // An append between the caller's last look and the store above
                // saw no threshold: look again now that it is set.
                if bytes.load(ordering: .relaxed) >= triggerBytes || Task.isCancelled { wakeWaiter() }
            }
        } onCancel: {
            wakeWaiter()
        }
    }

    private func wakeWaiter() {
        let continuation = waiter.withLock { waiting in
            defer { waiting = nil }
            threshold.store(Int.max, ordering: .relaxed)
            return waiting
        }
        continuation?.resume()
    }
}
