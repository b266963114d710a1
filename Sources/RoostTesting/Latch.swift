import Synchronization

/// A one-way signal between a test and a thread it drives (a fake server, a
/// responder holding its loop): one side opens it, the other waits for it
/// with a deadline. It replaces a fixed sleep that stood for "by now the
/// other side has got there" (issue 24 item 8): the wait ends as soon as the
/// other side is there, and the deadline only bounds a failure.
package final class Latch: Sendable {
    private let opened = Atomic<Bool>(false)

    package init() {}

    /// Whether `open()` was called.
    package var isOpen: Bool { opened.load(ordering: .acquiring) }

    /// Opens the latch: every waiter, now or later, goes on.
    package func open() {
        opened.store(true, ordering: .releasing)
    }

    /// Returns whether the latch was opened within `deadline`.
    @discardableResult
    package func wait(within deadline: Duration = ConditionWait.defaultDeadline) -> Bool {
        ConditionWait.until(within: deadline) { isOpen }
    }
}
