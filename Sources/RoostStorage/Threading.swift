import Glibc
import RoostPlatform

/// A value guarded by a pthread mutex with a condition variable on the
/// monotonic clock, for the I/O thread's sleep-until-signal-or-deadline.
/// `@unchecked Sendable` is sound because `value` is only touched with the
/// mutex held (every access goes through `withLock` or `waitFor`).
final class ConditionLock<Value>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var value: Value

    init(_ value: Value) {
        self.value = value
        precondition(pthread_mutex_init(mutex, nil) == 0, "pthread_mutex_init failed")
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        precondition(pthread_cond_init(condition, &attributes) == 0, "pthread_cond_init failed")
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        condition.deallocate()
    }

    /// Runs `body` with the lock held.
    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }

    /// Runs `body` with the lock held, then wakes one waiter.
    func withLockSignalling<Result>(_ body: (inout Value) -> Result) -> Result {
        pthread_mutex_lock(mutex)
        defer {
            pthread_cond_broadcast(condition)
            pthread_mutex_unlock(mutex)
        }
        return body(&value)
    }

    /// Runs `body` with the lock held until it returns a result; in between,
    /// sleeps until signalled or until the monotonic `deadline` it returned.
    /// `announcingWaits`: wakes the other waiters before each sleep, so that
    /// one waiting for this thread to sleep (a test) learns of it.
    func waitFor<Result>(
        announcingWaits: Bool = false, _ body: (inout Value) -> (result: Result?, deadline: UInt64?)
    ) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while true {
            let (result, deadline) = body(&value)
            if let result { return result }
            if announcingWaits { pthread_cond_broadcast(condition) }
            if let deadline {
                var time = timespec(
                    tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
                _ = pthread_cond_timedwait(condition, mutex, &time)
            } else {
                pthread_cond_wait(condition, mutex)
            }
        }
    }
}

/// Returns the monotonic clock in nanoseconds.
func monotonicNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

/// Starts a named thread for the log; the log cannot run without its
/// threads, so failing to start one stops the process.
func startThread(name: String, _ body: @escaping @Sendable () -> Void) -> PlatformThread {
    do {
        return try PlatformThread.spawn(name: name, body)
    } catch {
        preconditionFailure("cannot start thread \(name): \(error)")
    }
}
