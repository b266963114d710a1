/// A growable array kept in fixed-size chunks that are never moved or freed.
///
/// Why: a `ContiguousArray` that doubles leaves each outgrown buffer behind;
/// below glibc's (self-raising) mmap threshold those buffers stay in the heap,
/// and at 1M devices that was ~47 of 290 bytes of RSS per device. Chunks of
/// about 256 KiB are allocated once and filled, so growth leaves nothing behind
/// but the first chunk's own doublings (under 256 KiB) and never copies more.
/// Element access costs one more (cached) indirection.
struct ChunkedArray<Element>: RandomAccessCollection, MutableCollection {
    private var chunks: [ContiguousArray<Element>] = []
    private(set) var count = 0
    private let shift: Int
    private let mask: Int

    /// An empty array whose chunks hold about `chunkBytes` of elements each (a power of two count).
    init(chunkBytes: Int = 256 << 10) {
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

    subscript(position: Int) -> Element {
        @inline(__always) get {
            precondition(position >= 0 && position < count, "index \(position) out of 0..<\(count)")
            return chunks[position >> shift][position & mask]
        }
        @inline(__always) _modify {
            precondition(position >= 0 && position < count, "index \(position) out of 0..<\(count)")
            yield &chunks[position >> shift][position & mask]
        }
    }

    /// Appends `element`, allocating a new chunk when the last one is full. O(1).
    mutating func append(_ element: Element) {
        if count & mask == 0 && count >> shift == chunks.count {
            // The first chunk grows as usual (a small index stays small); later ones are made whole.
            var chunk = ContiguousArray<Element>()
            if !chunks.isEmpty { chunk.reserveCapacity(mask + 1) }
            chunks.append(chunk)
        }
        chunks[count >> shift].append(element)
        count += 1
    }
}

extension ChunkedArray: Sendable where Element: Sendable {}
