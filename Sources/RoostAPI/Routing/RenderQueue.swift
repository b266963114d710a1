import RoostPlatform

/// The engine answers of one loop whose outcomes are all in, waiting to be
/// rendered in the order they became complete, and the loop round's budget
/// for rendering them (docs/http.md, "A round's rendering budget").
///
/// A round renders entries while it is younger than `budget`, and at least
/// one, so every round makes progress; what is left waits, in order, for the
/// next round, ahead of everything that becomes complete later (FIFO across
/// rounds: no entry waits behind one that arrived after it). Before the
/// first round begins there is no budget (a loop outside an HTTP server).
/// Sans-I/O: every call takes `now`; `LoopRequests` owns one per loop and
/// passes the loop's clock.
struct RenderQueue<Entry> {
    /// How long a round renders; a round renders one entry past it at most.
    let budget: Duration
    /// Entries from `head` on wait; taken slots are nil so that what they
    /// held (pages of devices) is freed when taken, not when compacted.
    private var slots: [Entry?] = []
    private var head = 0
    private var roundStart: LoopInstant?
    private var renderedInRound = 0
    /// Slots taken before `head` past which the array is compacted (when they
    /// are also half of it), so that a queue that never empties stays O(waiting).
    private static var compactAfterSlots: Int { 1024 }

    init(budget: Duration) {
        precondition(budget >= .zero, "render budget \(budget) < 0")
        self.budget = budget
    }

    /// Entries waiting.
    var count: Int { slots.count - head }

    var isEmpty: Bool { head == slots.count }

    /// Slots the array holds, taken ones included: less than twice the
    /// entries waiting plus `compactAfterSlots` (tests).
    var storedSlots: Int { slots.count }

    /// Entries rendered since the round began.
    var renderedInThisRound: Int { renderedInRound }

    /// Starts a round that began at `start` (the loop's round, not later
    /// than now): its budget runs from there.
    mutating func beginRound(at start: LoopInstant) {
        if let roundStart {
            precondition(start >= roundStart, "round began at \(start), before the last one at \(roundStart)")
        }
        roundStart = start
        renderedInRound = 0
    }

    /// Queues an entry behind every one waiting. O(1) amortized.
    mutating func append(_ entry: Entry) {
        slots.append(entry)
    }

    /// Returns the oldest entry if this round may render it at `now`: when
    /// it rendered none yet, or began less than `budget` before `now`.
    /// Returns nil when none waits or the budget is spent.
    mutating func next(now: LoopInstant) -> Entry? {
        guard head < slots.count else { return nil }
        if let roundStart, renderedInRound > 0, now - roundStart >= budget { return nil }
        guard let entry = slots[head].take() else { preconditionFailure("render queue slot \(head) empty") }
        head += 1
        renderedInRound += 1
        if head == slots.count {
            // Emptied: the capacity of a usual round is kept, a burst's is not.
            slots.removeAll(keepingCapacity: slots.capacity <= Self.compactAfterSlots)
            head = 0
        } else if head >= Self.compactAfterSlots && head * 2 >= slots.count {
            slots.removeFirst(head)
            head = 0
        }
        return entry
    }
}
