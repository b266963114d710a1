extension Array {
    /// Hands every element to `body`, first to last, moved out of the array
    /// (no copy, so no reference of it is retained and released again), and
    /// leaves the array empty with its capacity. How values travel between
    /// lists on the request path: a copy of a command or an outcome retained
    /// every reference of its request (issue 25). O(count).
    @inlinable
    package mutating func moveEach(_ body: (consuming Element) -> Void) {
        // Reversed through the buffer, whose swaps move (the array's own copied).
        withUnsafeMutableBufferPointer { $0.reverse() }
        while let element = popLast() { body(consume element) }
    }
}
