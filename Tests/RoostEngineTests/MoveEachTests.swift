import RoostPlatform
import Testing

/// `Array.moveEach`: how a loop hands commands and outcomes from list to
/// list without copying them (a copy of a command retained every reference
/// of its request, and the list it came from released them again).
@Suite("Moving a loop's lists (Array.moveEach)")
struct MoveEachTests {
    /// A reference the test can ask about: is the array still holding it?
    final class Item {
        let number: Int
        init(_ number: Int) { self.number = number }
    }

    @Test("hands every element once, first to last, and leaves the array empty with its capacity")
    func inOrder() {
        for count in [0, 1, 2, 3, 64, 65] {
            var items = (0..<count).map(Item.init)
            let capacity = items.capacity
            var seen: [Int] = []
            items.moveEach { seen.append($0.number) }
            #expect(seen == Array(0..<count), "\(count) elements")
            #expect(items.isEmpty && items.capacity == capacity, "\(count) elements: the array keeps its storage")
        }
    }

    @Test("an element handed over is no longer held by the array: moved, not copied")
    func moved() {
        var items = (0..<5).map(Item.init)
        var kept: [Item] = []
        items.moveEach { (item: consuming Item) in
            var item = item
            // The array gave up its reference before handing the element over.
            let unique = isKnownUniquelyReferenced(&item)
            #expect(unique, "element \(item.number) is still held by the array")
            kept.append(item)
        }
        #expect(kept.map(\.number) == [0, 1, 2, 3, 4])
    }
}
