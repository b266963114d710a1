/// Where a blob lives in a `BlobStore`: a cell of the size class its length selects.
/// `length == 0` means "no blob". 6 bytes, so it packs into `DeviceRecord`.
struct BlobRef: Hashable, Sendable {
    var cell: UInt32
    var length: UInt16

    static let none = BlobRef(cell: 0, length: 0)
    var isNone: Bool { length == 0 }
}

/// Variable-length byte strings (long tokens, installation ids, external ids,
/// encoded tags) packed into per-size-class arrays instead of one heap object each.
///
/// Size classes are 16 bytes apart: a blob of 33 to 48 bytes takes a 48-byte
/// cell of class 2. Freed cells go on their class's free list and are reused;
/// arrays never shrink (a restart compacts). Waste is under 16 bytes per blob.
struct BlobStore: Sendable {
    /// One size class: cells in chunks of `cellsPerChunk` cells (about 32 KiB, as `ChunkedArray`;
    /// the first chunk grows from empty), never moved, so growth leaves no
    /// outgrown buffers in the heap (see `ChunkedArray`).
    private struct SizeClass: Sendable {
        var chunks: [[UInt8]] = []
        var cellCount = 0
        var freeCells: [UInt32] = []
        var liveCells = 0
        let cellSize: Int
        let chunkShift: Int
        /// Chunks a snapshot's frozen copy may share (see `ChunkedArray`); empty when none.
        var sharedChunks: [Bool] = []

        init(cellSize: Int) {
            self.cellSize = cellSize
            var shift = 0
            while (2 << shift) * cellSize <= BlobStore.chunkBytes { shift += 1 }
            chunkShift = shift
        }

        var reservedBytes: Int { cellCount * cellSize }

        /// Adds the chunk the next cell goes in when the last one is full (the
        /// first grows from empty, as a small store stays small; later ones are made whole).
        mutating func addChunkIfFull() {
            guard cellCount >> chunkShift == chunks.count else { return }
            var chunk: [UInt8] = []
            if cellCount > 0 { chunk.reserveCapacity(cellSize << chunkShift) }
            chunks.append(chunk)
        }
    }

    /// The size class of a blob of `length` bytes (1 to `lengthMax`).
    static func classIndex(ofLength length: Int) -> Int { (length - 1) / granularity }

    static let chunkBytes = 32 << 10

    static let granularity = 16
    static let lengthMax = Int(UInt16.max)

    private var classes: [SizeClass] = []
    /// Where the bytes of chunks copied while shared with a frozen copy are counted.
    private var pin: SnapshotPin?

    /// Total bytes held by all classes (live and free cells).
    var reservedBytes: Int { classes.reduce(0) { $0 + $1.reservedBytes + $1.freeCells.count * 4 } }
    /// Number of live blobs.
    var liveCount: Int { classes.reduce(0) { $0 + $1.liveCells } }

    /// Stores `source` (1 to 65,535 bytes) and returns where.
    mutating func store(_ source: UnsafeRawBufferPointer) -> BlobRef {
        precondition(source.count >= 1 && source.count <= Self.lengthMax, "blob length \(source.count) out of range")
        let classIndex = Self.classIndex(ofLength: source.count)
        while classes.count <= classIndex {
            classes.append(SizeClass(cellSize: (classes.count + 1) * Self.granularity))
        }
        let cellSize = classes[classIndex].cellSize
        let shift = classes[classIndex].chunkShift
        let cell: UInt32
        if let reused = classes[classIndex].freeCells.popLast() {
            cell = reused
        } else {
            let cellCount = classes[classIndex].cellCount
            precondition(cellCount < Int(UInt32.max), "blob class \(classIndex) full")
            cell = UInt32(cellCount)
            classes[classIndex].addChunkIfFull()
            unshare(classIndex, chunk: cellCount >> shift)
            classes[classIndex].chunks[cellCount >> shift].append(contentsOf: repeatElement(0, count: cellSize))
            classes[classIndex].cellCount += 1
        }
        let start = (Int(cell) & ((1 << shift) - 1)) * cellSize
        unshare(classIndex, chunk: Int(cell) >> shift)
        classes[classIndex].chunks[Int(cell) >> shift].withUnsafeMutableBytes { buffer in
            buffer.baseAddress!.advanced(by: start).copyMemory(from: source.baseAddress!, byteCount: source.count)
        }
        classes[classIndex].liveCells += 1
        return BlobRef(cell: cell, length: UInt16(source.count))
    }

    /// Stores `bytes` (1 to 65,535 of them) and returns where.
    mutating func store(_ bytes: [UInt8]) -> BlobRef {
        bytes.withUnsafeBytes { store($0) }
    }

    // MARK: Sharing with a snapshot's frozen copy (decision 0054)

    /// Marks every chunk as shared with a frozen copy about to be taken (see
    /// `ChunkedArray.shareChunks`). O(chunks).
    mutating func shareChunks(pin: SnapshotPin) {
        for index in classes.indices {
            classes[index].sharedChunks = Array(repeating: true, count: classes[index].chunks.count)
        }
        self.pin = pin
    }

    /// Forgets the sharing marks (the frozen copy has been dropped). O(classes).
    mutating func endSharing() {
        for index in classes.indices { classes[index].sharedChunks = [] }
        pin = nil
    }

    /// A read-only copy sharing every chunk, without the free lists (a
    /// reader never allocates). O(classes + chunks) reference counts.
    func frozenCopy() -> BlobStore {
        var copy = self
        for index in copy.classes.indices {
            copy.classes[index].sharedChunks = []
            copy.classes[index].freeCells = []
        }
        copy.pin = nil
        return copy
    }

    /// Copies a chunk a frozen copy may share before it is written, keeping its capacity.
    @inline(__always)
    private mutating func unshare(_ classIndex: Int, chunk: Int) {
        guard chunk < classes[classIndex].sharedChunks.count, classes[classIndex].sharedChunks[chunk] else { return }
        classes[classIndex].sharedChunks[chunk] = false
        let capacity = classes[classIndex].chunks[chunk].capacity
        let before = classes[classIndex].chunks[chunk].withUnsafeBufferPointer { $0.baseAddress }
        classes[classIndex].chunks[chunk].reserveCapacity(capacity)
        // A chunk the frozen copy let go of (`releaseChunk`) is written in place: nothing pinned.
        if classes[classIndex].chunks[chunk].withUnsafeBufferPointer({ $0.baseAddress }) != before {
            pin?.add(bytes: capacity)
        }
    }

    /// Lets go of chunk `chunk` of `classIndex` in a frozen copy whose reader
    /// has passed it (decision 0056); its cells must not be read again.
    mutating func releaseChunk(ofClass classIndex: Int, _ chunk: Int) {
        classes[classIndex].chunks[chunk] = []
    }

    /// Frees a blob's cell; `ref` must be live.
    mutating func release(_ ref: BlobRef) {
        precondition(!ref.isNone, "releasing an empty blob reference")
        let classIndex = Self.classIndex(ofLength: Int(ref.length))
        classes[classIndex].freeCells.append(ref.cell)
        classes[classIndex].liveCells -= 1
        precondition(classes[classIndex].liveCells >= 0, "blob class \(classIndex) released more than stored")
    }

    /// Calls `body` with exactly the blob's bytes.
    func withBytes<Result>(_ ref: BlobRef, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        precondition(!ref.isNone, "reading an empty blob reference")
        let classIndex = Self.classIndex(ofLength: Int(ref.length))
        let cellSize = classes[classIndex].cellSize
        let shift = classes[classIndex].chunkShift
        let start = (Int(ref.cell) & ((1 << shift) - 1)) * cellSize
        return classes[classIndex].chunks[Int(ref.cell) >> shift].withUnsafeBytes { buffer in
            body(UnsafeRawBufferPointer(rebasing: buffer[start..<start + Int(ref.length)]))
        }
    }

    /// Returns a copy of the blob's bytes.
    func bytes(_ ref: BlobRef) -> [UInt8] {
        withBytes(ref) { Array($0) }
    }

    /// Returns the blob as a String (blobs made from Strings are valid UTF-8).
    func string(_ ref: BlobRef) -> String {
        withBytes(ref) { String(decoding: $0, as: UTF8.self) }
    }

    /// Returns whether the blob holds exactly `bytes`.
    func equals(_ ref: BlobRef, _ other: [UInt8]) -> Bool {
        other.withUnsafeBytes { equals(ref, $0) }
    }

    /// Returns whether the blob holds exactly the UTF-8 bytes of `text`.
    func equals(_ ref: BlobRef, _ text: String) -> Bool {
        withUTF8Bytes(of: text) { equals(ref, $0) }
    }

    /// Returns whether the blob holds exactly `bytes`.
    func equals(_ ref: BlobRef, _ other: UnsafeRawBufferPointer) -> Bool {
        guard Int(ref.length) == other.count else { return false }
        return withBytes(ref) { $0.hasSameBytes(as: other) }
    }
}

extension UnsafeRawBufferPointer {
    /// Returns whether both buffers hold the same bytes, compared eight at a
    /// time: `elementsEqual` walked them through a generic iterator a byte at
    /// a time (0.7 % of a person read, in the person's name look-up).
    func hasSameBytes(as other: UnsafeRawBufferPointer) -> Bool {
        guard count == other.count else { return false }
        var offset = 0
        while offset + 8 <= count {
            guard
                loadUnaligned(fromByteOffset: offset, as: UInt64.self)
                    == other.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            else { return false }
            offset += 8
        }
        while offset < count {
            guard self[offset] == other[offset] else { return false }
            offset += 1
        }
        return true
    }
}

// MARK: The index image (decision 0056)

extension BlobStore {
    /// Size classes in use (`classCount - 1` is the largest blob's class).
    var classCount: Int { classes.count }

    /// Cells ever allocated in `classIndex`, live and free.
    func cellCount(ofClass classIndex: Int) -> Int { classes[classIndex].cellCount }

    /// Bytes of one cell of `classIndex`.
    static func cellSize(ofClass classIndex: Int) -> Int { (classIndex + 1) * granularity }

    /// Chunks of `classIndex` (each holds whole cells; the last may be partly filled).
    func chunkCount(ofClass classIndex: Int) -> Int { classes[classIndex].chunks.count }

    /// Calls `body` with the cells stored in chunk `chunk` of `classIndex`
    /// (free cells included, as they are) and the number of its first cell.
    func withChunk<Result>(
        ofClass classIndex: Int, _ chunk: Int, _ body: (_ firstCell: Int, _ cells: UnsafeRawBufferPointer) -> Result
    ) -> Result {
        classes[classIndex].chunks[chunk].withUnsafeBytes { body(chunk << classes[classIndex].chunkShift, $0) }
    }

    /// Appends whole cells to `classIndex` while an image loads: `bytes` holds
    /// `bytes.count / cellSize` cells, the first of them number `firstCell`,
    /// which must be the class's next. Classes below are created empty. The
    /// cells count as free until `adoptLoadedCells` says which are live.
    /// Returns false, changing nothing, when the cells do not follow on.
    mutating func appendLoadedCells(ofClass classIndex: Int, firstCell: Int, _ bytes: UnsafeRawBufferPointer) -> Bool {
        let cellSize = Self.cellSize(ofClass: classIndex)
        guard classIndex >= 0, cellSize <= Self.lengthMax + Self.granularity, bytes.count % cellSize == 0 else {
            return false
        }
        while classes.count <= classIndex { classes.append(SizeClass(cellSize: Self.cellSize(ofClass: classes.count))) }
        guard classes[classIndex].cellCount == firstCell, firstCell + bytes.count / cellSize <= Int(UInt32.max) else {
            return false
        }
        let shift = classes[classIndex].chunkShift
        var offset = 0
        while offset < bytes.count {
            classes[classIndex].addChunkIfFull()
            let cellCount = classes[classIndex].cellCount
            let room = ((1 << shift) - (cellCount & ((1 << shift) - 1))) * cellSize
            let taken = min(room, bytes.count - offset)
            classes[classIndex].chunks[cellCount >> shift].append(
                contentsOf: UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + taken]))
            classes[classIndex].cellCount += taken / cellSize
            offset += taken
        }
        return true
    }

    /// Whether `ref` names a whole cell that exists (any length its class holds).
    func holds(_ ref: BlobRef) -> Bool {
        guard !ref.isNone else { return false }
        let classIndex = Self.classIndex(ofLength: Int(ref.length))
        return classIndex < classes.count && Int(ref.cell) < classes[classIndex].cellCount
    }

    /// After an image loaded: `isLive(class, cell)` says which cells the
    /// store refers to; the others become the classes' free cells.
    mutating func adoptLoadedCells(isLive: (_ classIndex: Int, _ cell: Int) -> Bool) {
        for classIndex in classes.indices {
            var free: [UInt32] = []
            var live = 0
            for cell in 0..<classes[classIndex].cellCount {
                if isLive(classIndex, cell) { live += 1 } else { free.append(UInt32(cell)) }
            }
            free.reverse()  // `store` pops from the end: reuse low cells first
            classes[classIndex].freeCells = free
            classes[classIndex].liveCells = live
        }
    }
}
