import Glibc

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
    func waitFor<Result>(_ body: (inout Value) -> (result: Result?, deadline: UInt64?)) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while true {
            let (result, deadline) = body(&value)
            if let result { return result }
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

/// A started pthread running a closure; `join` waits for it.
final class IOThread: Sendable {
    private final class Box {
        let name: String?
        let body: @Sendable () -> Void
        init(_ name: String?, _ body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }

    private let handle: pthread_t

    /// Starts the thread; `name` (at most 15 bytes) shows in `top -H` and /proc.
    init(name: String? = nil, _ body: @escaping @Sendable () -> Void) {
        let box = Unmanaged.passRetained(Box(name, body)).toOpaque()
        var handle = pthread_t()
        let code = pthread_create(
            &handle, nil,
            { raw in
                guard let raw else { return nil }
                let box = Unmanaged<Box>.fromOpaque(raw).takeRetainedValue()
                if let name = box.name { IOThread.setCurrentName(name) }
                box.body()
                return nil
            }, box)
        precondition(code == 0, "pthread_create failed with \(code)")
        self.handle = handle
    }

    /// Names the calling thread (the kernel keeps 15 bytes) through
    /// /proc/thread-self/comm; Glibc's pthread_setname_np is not imported.
    static func setCurrentName(_ name: String) {
        let fd = Glibc.open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { _ = Glibc.close(fd) }
        let bytes = Array(name.utf8.prefix(15))
        _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    }

    /// Waits for the thread to return.
    func join() {
        pthread_join(handle, nil)
    }
}
