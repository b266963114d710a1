import Synchronization

/// A growable array kept in fixed-size chunks that are never moved or freed.
///
/// Why: a `ContiguousArray` that doubles leaves each outgrown buffer behind;
/// below glibc's (self-raising) mmap threshold those buffers stay in the heap,
/// and at 1M devices that was ~47 of 290 bytes of RSS per device. Chunks of
/// about 32 KiB are allocated once and filled, so growth leaves nothing behind
/// but the first chunk's own doublings (under 32 KiB) and never copies more.
/// The size is what a snapshot costs a writer: the first write to a chunk a
/// frozen view shares copies the whole chunk, and at 256 KiB those copies put
/// a single registration's p99 at 4–9× its p99 without a snapshot; at 64 KiB
/// 1.7–2.3×, at 32 KiB 1.5–1.9× (docs/performance.md, "With index images").
/// Element access costs one more (cached) indirection.
///
/// Chunks are copy-on-write values, so a copy of the array (a snapshot's
/// frozen view, `frozenCopy()`) shares every chunk, and a writer that touches
/// a chunk the copy still holds copies that one chunk only (decision 0054).
/// While `shareChunks(pin:)` is in force the array remembers which chunks a
/// frozen copy may share: the first write to each copies it with its full
/// capacity (so appends after it do not double it) and adds the bytes to the
/// snapshot's `SnapshotPin`.
struct ChunkedArray<Element>: RandomAccessCollection, MutableCollection {
    private var chunks: [ContiguousArray<Element>] = []
    private(set) var count = 0
    private let shift: Int
    private let mask: Int
    /// Chunks a frozen copy may share, by chunk number (empty when no snapshot runs).
    private var sharedChunks: [Bool] = []
    /// Where the bytes of chunks copied while shared are counted.
    private var pin: SnapshotPin?

    /// An empty array whose chunks hold about `chunkBytes` of elements each (a power of two count).
    init(chunkBytes: Int = 32 << 10) {
        var shift = 0
        while (2 << shift) * MemoryLayout<Element>.stride <= chunkBytes { shift += 1 }
        self.shift = shift
        self.mask = (1 << shift) - 1
    }

    var startIndex: Int { 0 }
    var endIndex: Int { count }

    /// Elements that fit without allocating another chunk.
    var capacity: Int { chunks.count << shift }

    /// Bytes of the elements stored: chunks fill in order, and the untouched
    /// tail of the last one takes address space, not memory.
    var usedBytes: Int { count * MemoryLayout<Element>.stride }

    /// Elements in one whole chunk.
    var elementsPerChunk: Int { mask + 1 }

    subscript(position: Int) -> Element {
        @inline(__always) get {
            precondition(position >= 0 && position < count, "index \(position) out of 0..<\(count)")
            return chunks[position >> shift][position & mask]
        }
        @inline(__always) _modify {
            precondition(position >= 0 && position < count, "index \(position) out of 0..<\(count)")
            if !sharedChunks.isEmpty { unshare(position >> shift) }
            yield &chunks[position >> shift][position & mask]
        }
    }

    /// Appends `element`, allocating a new chunk when the last one is full. O(1).
    mutating func append(_ element: Element) {
        addChunkIfFull()
        if !sharedChunks.isEmpty { unshare(count >> shift) }
        chunks[count >> shift].append(element)
        count += 1
    }

    /// Appends `count` elements, each made by `make(i)` for `i` in `0..<count`,
    /// straight into the chunks (an image loading: no per-element checks of
    /// sharing or capacity). Not while a frozen copy shares chunks. O(count).
    mutating func append(count added: Int, _ make: (Int) -> Element) {
        precondition(sharedChunks.isEmpty, "bulk append while a frozen copy shares chunks")
        var made = 0
        while made < added {
            addChunkIfFull()
            let chunk = count >> shift
            let room = (mask + 1) - (count & mask)
            let taken = Swift.min(room, added - made)
            for index in made..<made + taken { chunks[chunk].append(make(index)) }
            count += taken
            made += taken
        }
    }

    /// Adds the chunk the next element goes in when the last one is full.
    @inline(__always)
    private mutating func addChunkIfFull() {
        guard count & mask == 0 && count >> shift == chunks.count else { return }
        // The first chunk grows as usual (a small index stays small); later ones are made whole.
        var chunk = ContiguousArray<Element>()
        if !chunks.isEmpty { chunk.reserveCapacity(mask + 1) }
        chunks.append(chunk)
    }

    /// Stores `element` in a slot taken from `free` (slots given back earlier),
    /// else appends it; returns its slot. O(1).
    mutating func store(_ element: Element, reusing free: inout [UInt32]) -> UInt32 {
        if let reused = free.popLast() {
            self[Int(reused)] = element
            return reused
        }
        append(element)
        return UInt32(count - 1)
    }

    /// Inserts `element` at `position`, moving the later elements up by one. O(count - position).
    mutating func insert(_ element: Element, at position: Int) {
        precondition(position >= 0 && position <= count, "insert at \(position) out of 0...\(count)")
        guard position < count else { return append(element) }
        append(self[count - 1])
        var index = count - 2
        while index > position {
            self[index] = self[index - 1]
            index -= 1
        }
        self[position] = element
    }

    /// Removes the last `removed` elements; emptied chunks stay allocated for
    /// later appends (never freed, like the rest). O(chunks).
    mutating func removeLast(_ removed: Int) {
        precondition(removed >= 0 && removed <= count, "removing \(removed) of \(count) elements")
        count -= removed
        for chunk in chunks.indices {
            let kept = Swift.min(Swift.max(count - (chunk << shift), 0), mask + 1)
            if chunks[chunk].count > kept {
                if !sharedChunks.isEmpty { unshare(chunk) }
                chunks[chunk].removeLast(chunks[chunk].count - kept)
            }
        }
    }

    // MARK: Sharing with a snapshot's frozen copy

    /// Marks every chunk as shared with a frozen copy about to be taken:
    /// the first later write to each copies it and counts it in `pin`. O(chunks).
    mutating func shareChunks(pin: SnapshotPin) {
        sharedChunks = Array(repeating: true, count: chunks.count)
        self.pin = pin
    }

    /// Forgets the sharing marks (the frozen copy has been dropped). O(1).
    mutating func endSharing() {
        sharedChunks = []
        pin = nil
    }

    /// A read-only copy that shares every chunk (O(chunks) reference counts, no element copied).
    func frozenCopy() -> ChunkedArray {
        var copy = self
        copy.sharedChunks = []
        copy.pin = nil
        return copy
    }

    /// Copies chunk `chunk` if a frozen copy still shares it, keeping its
    /// capacity, and counts the copy in the pin; a chunk the copy has let go
    /// of (`releaseChunks`) is written in place. O(chunk) once per snapshot.
    @inline(never)
    private mutating func unshare(_ chunk: Int) {
        guard chunk < sharedChunks.count, sharedChunks[chunk] else { return }
        sharedChunks[chunk] = false
        let capacity = chunks[chunk].capacity
        let before = chunks[chunk].withUnsafeBufferPointer { $0.baseAddress }
        chunks[chunk].reserveCapacity(capacity)  // copies a shared buffer, keeping room for appends
        if chunks[chunk].withUnsafeBufferPointer({ $0.baseAddress }) != before {
            pin?.add(bytes: capacity * MemoryLayout<Element>.stride)
        }
    }

    /// Lets go of chunks `range` of a frozen copy whose reader has passed
    /// them, so that the live array writes them in place instead of copying
    /// them (decision 0056). Their elements must not be read again. O(range).
    mutating func releaseChunks(_ range: Range<Int>) {
        for chunk in range where chunk < chunks.count { chunks[chunk] = [] }
    }

    /// The chunk that holds element `position`.
    func chunk(of position: Int) -> Int { position >> shift }
}

extension ChunkedArray: Sendable where Element: Sendable {}

/// The memory a running snapshot pins: bytes of the chunks writers copied
/// because the snapshot's frozen view still shared them (the view keeps the
/// old ones alive). Written by the shard that owns the index, read by the
/// snapshot thread, which gives up the view past `Limits.snapshotPinnedBytesMax`.
package final class SnapshotPin: Sendable {
    private let bytes = Atomic<Int>(0)

    /// An empty count.
    package init() {}

    /// Bytes copied so far (an upper bound of what the view pins: a chunk the
    /// view had already let go of is counted too).
    package var pinnedBytes: Int { bytes.load(ordering: .relaxed) }

    /// Counts `count` more copied bytes.
    package func add(bytes count: Int) {
        bytes.wrappingAdd(count, ordering: .relaxed)
    }
}
