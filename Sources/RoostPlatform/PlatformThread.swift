import Glibc

/// A joinable POSIX thread running one closure. Used for event loops, which
/// must own their thread rather than share Swift's cooperative pool.
package final class PlatformThread: Sendable {
    private let handle: pthread_t

    private init(handle: pthread_t) {
        self.handle = handle
    }

    /// Starts a thread that runs `body` and returns its handle; `name` (at
    /// most 15 bytes) shows in `top -H` and /proc.
    package static func spawn(
        name: String? = nil, _ body: @escaping @Sendable () -> Void
    ) throws(SystemCallError) -> PlatformThread {
        final class Box {
            let name: String?
            let body: @Sendable () -> Void
            init(_ name: String?, _ body: @escaping @Sendable () -> Void) {
                self.name = name
                self.body = body
            }
        }
        let context = Unmanaged.passRetained(Box(name, body)).toOpaque()
        var handle = pthread_t()
        let result = pthread_create(
            &handle, nil,
            { raw in
                guard let raw else { return nil }
                let box = Unmanaged<Box>.fromOpaque(raw).takeRetainedValue()
                if let name = box.name { PlatformThread.setCurrentName(name) }
                box.body()
                return nil
            }, context)
        guard result == 0 else {
            Unmanaged<Box>.fromOpaque(context).release()
            throw SystemCallError(call: "pthread_create", errno: result)
        }
        return PlatformThread(handle: handle)
    }

    /// The number of online processors, at least 1.
    package static var onlineProcessorCount: Int {
        max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
    }

    /// True when the caller runs on this thread.
    package var isCurrent: Bool { pthread_equal(handle, pthread_self()) != 0 }

    /// Blocks until the thread has returned. Call at most once.
    package func join() {
        let result = pthread_join(handle, nil)
        precondition(result == 0, "pthread_join failed with \(result)")
    }

    /// Lets the thread release its resources when it returns, without a join.
    /// Call at most once, and never together with `join`.
    package func detach() {
        let result = pthread_detach(handle)
        precondition(result == 0, "pthread_detach failed with \(result)")
    }

    /// Names the calling thread (the kernel keeps 15 bytes) through
    /// /proc/thread-self/comm; Glibc's pthread_setname_np is not imported.
    package static func setCurrentName(_ name: String) {
        let fd = Glibc.open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { _ = Glibc.close(fd) }
        let bytes = Array(name.utf8.prefix(15))
        _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    }
}
