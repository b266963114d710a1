import CSystemShims

/// Readiness conditions reported by or registered with epoll.
package struct EpollEvents: OptionSet, Sendable {
    package let rawValue: UInt32
    @inlinable package init(rawValue: UInt32) { self.rawValue = rawValue }

    // The set operations an event loop uses, concrete and inlinable: the
    // OptionSet defaults are generic, and from another module each call went
    // through the protocols' dispatch thunks (eight a request: about 200
    // instructions of a registration, issue 25).
    @inlinable package init() { rawValue = 0 }

    @inlinable package func contains(_ member: EpollEvents) -> Bool { rawValue & member.rawValue == member.rawValue }

    @inlinable @discardableResult
    package mutating func insert(_ newMember: EpollEvents) -> (inserted: Bool, memberAfterInsert: EpollEvents) {
        let inserted = !contains(newMember)
        self = EpollEvents(rawValue: rawValue | newMember.rawValue)
        return (inserted, newMember)
    }

    @inlinable package static func == (left: EpollEvents, right: EpollEvents) -> Bool {
        left.rawValue == right.rawValue
    }

    package static let readable = EpollEvents(rawValue: roost_epoll_in)
    package static let writable = EpollEvents(rawValue: roost_epoll_out)
    package static let error = EpollEvents(rawValue: roost_epoll_err)
    package static let hangUp = EpollEvents(rawValue: roost_epoll_hup)
}

/// A level-triggered epoll instance that owns its descriptor and its buffer of
/// ready events. Confined to one thread (the event loop that created it).
package final class Epoll {
    /// The most events one `wait` returns.
    package static let eventsPerWaitMax = 256

    package let descriptor: FileDescriptor
    private let ready: UnsafeMutablePointer<roost_ready_event>

    /// Creates an epoll instance.
    package convenience init() throws(SystemCallError) {
        self.init(adopting: try Self.makeDescriptor())
    }

    /// Takes ownership of a descriptor from `makeDescriptor` (created on another thread).
    package init(adopting descriptor: FileDescriptor) {
        self.descriptor = descriptor
        ready = .allocate(capacity: Self.eventsPerWaitMax)
    }

    /// Returns a new epoll descriptor (close-on-exec), to be adopted by one `Epoll`.
    package static func makeDescriptor() throws(SystemCallError) -> FileDescriptor {
        let fd = try retryingSyscall("epoll_create1") { roost_epoll_create() }
        return FileDescriptor(rawValue: fd)
    }

    deinit {
        ready.deallocate()
        descriptor.close()
    }

    /// Registers `fd` for `events`; `token` comes back with each readiness report.
    package func add(_ fd: FileDescriptor, events: EpollEvents, token: UInt64) throws(SystemCallError) {
        _ = try retryingSyscall("epoll_ctl(ADD)", subject: "fd \(fd.rawValue)") {
            roost_epoll_add(descriptor.rawValue, fd.rawValue, events.rawValue, token)
        }
    }

    /// Changes the conditions `fd` is watched for.
    package func modify(_ fd: FileDescriptor, events: EpollEvents, token: UInt64) throws(SystemCallError) {
        _ = try retryingSyscall("epoll_ctl(MOD)", subject: "fd \(fd.rawValue)") {
            roost_epoll_modify(descriptor.rawValue, fd.rawValue, events.rawValue, token)
        }
    }

    /// Stops watching `fd`. Failures are ignored: closing the descriptor removes it anyway.
    package func remove(_ fd: FileDescriptor) {
        _ = roost_epoll_remove(descriptor.rawValue, fd.rawValue)
    }

    /// Waits up to `timeoutMs` (-1: forever) and returns how many events are ready;
    /// read them with `event(at:)` before the next wait.
    package func wait(timeoutMs: Int32) throws(SystemCallError) -> Int {
        let count = try retryingSyscall("epoll_wait") {
            roost_epoll_wait(descriptor.rawValue, ready, Int32(Self.eventsPerWaitMax), timeoutMs)
        }
        return Int(count)
    }

    /// Returns the token and conditions of the `index`th ready event of the last wait.
    @inline(__always)
    package func event(at index: Int) -> (token: UInt64, events: EpollEvents) {
        precondition(index >= 0 && index < Self.eventsPerWaitMax, "epoll event index \(index) out of range")
        let event = ready[index]
        return (event.token, EpollEvents(rawValue: event.events))
    }
}

/// A non-blocking eventfd used to wake an event loop from another thread.
package struct EventFD: Sendable {
    package let descriptor: FileDescriptor

    package init() throws(SystemCallError) {
        let fd = try retryingSyscall("eventfd") { roost_eventfd_create() }
        descriptor = FileDescriptor(rawValue: fd)
    }

    /// Adds one to the counter, waking a waiter. Safe from any thread.
    package func signal() {
        _ = roost_eventfd_signal(descriptor.rawValue)
    }

    /// Resets the counter so the descriptor stops being readable.
    package func drain() {
        _ = roost_eventfd_drain(descriptor.rawValue)
    }
}
