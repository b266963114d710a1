/// The most evictable connections one scan found, most evictable last: a
/// loop ranks its connections once (`HTTPConnectionMachine.evictionRank`)
/// and takes victims from here for the rest of a batch of newcomers at the
/// cap. Sans-I/O, so that the choice is tested on a manual clock with
/// machines and no sockets. `Item` is what the loop evicts (a connection).
package struct EvictionShortlist<Item> {
    /// How many the scan keeps (`EventLoop.evictionCandidatesPerScan`).
    package let capacity: Int
    /// Kept in descending rank order: the most evictable (smallest rank) at the end.
    private var kept: [(rank: HTTPEvictionRank, item: Item)] = []

    package init(capacity: Int) {
        precondition(capacity >= 1, "an eviction shortlist of \(capacity)")
        self.capacity = capacity
        kept.reserveCapacity(capacity + 1)
    }

    package var isEmpty: Bool { kept.isEmpty }

    package var count: Int { kept.count }

    /// Keeps `item` if it is among the `capacity` most evictable offered so
    /// far. O(log capacity) to find its place, O(capacity) to insert.
    package mutating func offer(_ rank: HTTPEvictionRank, _ item: Item) {
        if kept.count == capacity, let leastEvictable = kept.first, !(rank < leastEvictable.rank) { return }
        var low = 0
        var high = kept.count
        while low < high {
            let middle = (low + high) / 2
            if rank < kept[middle].rank { low = middle + 1 } else { high = middle }
        }
        kept.insert((rank, item), at: low)
        if kept.count > capacity { kept.removeFirst() }
        precondition(kept.count <= capacity, "shortlist of \(kept.count) > \(capacity)")
    }

    /// Returns and removes the most evictable item kept, with its rank.
    package mutating func popMostEvictable() -> (rank: HTTPEvictionRank, item: Item)? {
        kept.popLast()
    }

    /// Forgets everything kept (the ranks are valid only within one batch).
    package mutating func removeAll() {
        kept.removeAll(keepingCapacity: true)
    }
}
