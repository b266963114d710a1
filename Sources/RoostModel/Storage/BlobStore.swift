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
    private struct SizeClass: Sendable {
        var bytes: [UInt8] = []
        var freeCells: [UInt32] = []
        var liveCells = 0
    }

    static let granularity = 16
    static let lengthMax = Int(UInt16.max)

    private var classes: [SizeClass] = []

    /// Total bytes held by all classes (live and free cells).
    var reservedBytes: Int { classes.reduce(0) { $0 + $1.bytes.count + $1.freeCells.count * 4 } }
    /// Number of live blobs.
    var liveCount: Int { classes.reduce(0) { $0 + $1.liveCells } }

    /// Stores `source` (1 to 65,535 bytes) and returns where.
    mutating func store(_ source: UnsafeRawBufferPointer) -> BlobRef {
        precondition(source.count >= 1 && source.count <= Self.lengthMax, "blob length \(source.count) out of range")
        let classIndex = (source.count - 1) / Self.granularity
        let cellSize = (classIndex + 1) * Self.granularity
        while classes.count <= classIndex { classes.append(SizeClass()) }
        let cell: UInt32
        if let reused = classes[classIndex].freeCells.popLast() {
            cell = reused
        } else {
            let cellCount = classes[classIndex].bytes.count / cellSize
            precondition(cellCount < Int(UInt32.max), "blob class \(classIndex) full")
            cell = UInt32(cellCount)
            classes[classIndex].bytes.append(contentsOf: repeatElement(0, count: cellSize))
        }
        let start = Int(cell) * cellSize
        classes[classIndex].bytes.withUnsafeMutableBytes { buffer in
            buffer.baseAddress!.advanced(by: start).copyMemory(from: source.baseAddress!, byteCount: source.count)
        }
        classes[classIndex].liveCells += 1
        return BlobRef(cell: cell, length: UInt16(source.count))
    }

    /// Stores `bytes` (1 to 65,535 of them) and returns where.
    mutating func store(_ bytes: [UInt8]) -> BlobRef {
        bytes.withUnsafeBytes { store($0) }
    }

    /// Frees a blob's cell; `ref` must be live.
    mutating func release(_ ref: BlobRef) {
        precondition(!ref.isNone, "releasing an empty blob reference")
        let classIndex = (Int(ref.length) - 1) / Self.granularity
        classes[classIndex].freeCells.append(ref.cell)
        classes[classIndex].liveCells -= 1
        precondition(classes[classIndex].liveCells >= 0, "blob class \(classIndex) released more than stored")
    }

    /// Calls `body` with exactly the blob's bytes.
    func withBytes<Result>(_ ref: BlobRef, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        precondition(!ref.isNone, "reading an empty blob reference")
        let classIndex = (Int(ref.length) - 1) / Self.granularity
        let cellSize = (classIndex + 1) * Self.granularity
        return classes[classIndex].bytes.withUnsafeBytes { buffer in
            body(
                UnsafeRawBufferPointer(
                    rebasing: buffer[Int(ref.cell) * cellSize..<Int(ref.cell) * cellSize + Int(ref.length)]))
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
        return withBytes(ref) { $0.elementsEqual(other) }
    }
}
