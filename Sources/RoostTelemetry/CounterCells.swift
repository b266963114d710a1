import Synchronization

/// A fixed block of 64-bit counters, each an `Atomic<UInt64>`, written by
/// one thread (mostly) and summed by a scrape from another.
///
/// The hot-path rule (docs/metrics-and-logs.md): every thread that counts
/// per request owns its own block (one per event loop), so an increment is a
/// relaxed atomic add on a cache line no other thread writes: no lock and no
/// contention. A scrape loads every cell of every block with relaxed
/// ordering and adds them up; a count may be a few increments behind, never
/// torn. Any thread may still add to any block (a sink answered from Swift's
/// pool): the add is atomic, so nothing is lost, it is only not free then.
package final class CounterCells: @unchecked Sendable {
    // @unchecked: the cells are only touched through `Atomic` operations;
    // the pointer itself never changes after init.

    /// Cells of padding on each side, so that two blocks never share a
    /// cache line (64 bytes = 8 cells).
    static let paddingCells = 8

    /// The number of counters.
    package let count: Int
    private let storage: UnsafeMutablePointer<Atomic<UInt64>>

    /// A block of `count` counters, all zero.
    package init(count: Int) {
        precondition(count >= 0, "a negative counter count \(count)")
        self.count = count
        let total = count + 2 * Self.paddingCells
        storage = .allocate(capacity: total)
        for index in 0..<total { (storage + index).initialize(to: Atomic(0)) }
    }

    deinit {
        storage.deinitialize(count: count + 2 * Self.paddingCells)
        storage.deallocate()
    }

    /// Adds `amount` to counter `index` (relaxed; wraps at 2^64).
    @inline(__always)
    package func add(_ index: Int, _ amount: UInt64 = 1) {
        precondition(index >= 0 && index < count, "counter \(index) outside 0..<\(count)")
        storage[Self.paddingCells + index].wrappingAdd(amount, ordering: .relaxed)
    }

    /// Adds one to counter `index` and returns its value before (a sequence number).
    package func increment(_ index: Int) -> UInt64 {
        precondition(index >= 0 && index < count, "counter \(index) outside 0..<\(count)")
        return storage[Self.paddingCells + index].wrappingAdd(1, ordering: .relaxed).oldValue
    }

    /// Returns counter `index` (relaxed).
    package func load(_ index: Int) -> UInt64 {
        precondition(index >= 0 && index < count, "counter \(index) outside 0..<\(count)")
        return storage[Self.paddingCells + index].load(ordering: .relaxed)
    }

    /// Returns every counter of every block added up, cell by cell. All
    /// blocks must have the same count. O(blocks × count).
    package static func sum(_ blocks: [CounterCells]) -> [UInt64] {
        guard let first = blocks.first else { return [] }
        var total = [UInt64](repeating: 0, count: first.count)
        for block in blocks {
            precondition(block.count == first.count, "summing blocks of \(block.count) and \(first.count) cells")
            for index in 0..<block.count { total[index] &+= block.load(index) }
        }
        return total
    }
}
