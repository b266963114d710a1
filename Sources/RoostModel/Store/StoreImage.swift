/// An index's devices and people as an image of the store's own arrays
/// (decision 0056): what a snapshot holds so that a restart loads them
/// without decoding a mutation, interning a string or growing a table per
/// device.
///
/// An image is a sequence of parts, each one snapshot record
/// (`EngineRecord.indexImage`), at most `partPayloadBytes` of elements.
/// Every part starts with its section (`u8`); all integers little-endian:
///
/// | section | after the section byte |
/// |---|---|
/// | 1 header | `u8` format version (1), `u64` next device sequence, `u32` device slots, person slots, digest slots, id-index entries, string ids, client sequences, `u16` blob classes, then `u32` cells per class |
/// | 2 devices | `u32` first slot, `u32` count, `DeviceRecord.imageBytes` each |
/// | 3 people | `u32` first slot, `u32` count, `PersonRecord.imageBytes` each |
/// | 4 digests | `u32` first slot, `u32` count, 32 bytes each |
/// | 5 id index | `u32` first entry, `u32` count, (`u64` sequence, `u32` slot) each |
/// | 6 blob cells | `u16` class, `u32` first cell, `u32` count, the cells' bytes (class × 16 each) |
/// | 7 strings | `u32` first id, `u32` count, (`u32` length + 1, 0 for a free id; UTF-8) each |
/// | 8 client sequences | `u32` first, `u32` count, (`u32` slot, `u64` sequence) each, slots ascending |
/// | 9 end | nothing |
/// | 10 abandoned | nothing: the writer gave up this image; drop what was read |
///
/// Sections come in this order; within one, parts follow on without gaps
/// (blob classes in ascending order, each class's cells in order). What an
/// image does not hold is derived when it is loaded (`StoreImageLoader`):
/// the hash tables, free lists, counts, interned tag sets and reference
/// counts, each from the records that use them; the derivation also checks
/// every reference, so an image that does not describe a consistent store is
/// refused rather than served. Free slots and cells are kept as they were
/// (their bytes too), so slot numbers mean the same after loading.
enum StoreImageSection: UInt8, Comparable {
    case header = 1
    case devices = 2
    case people = 3
    case digests = 4
    case order = 5
    case blobCells = 6
    case strings = 7
    case clientSequences = 8
    case end = 9
    case abandoned = 10

    static func < (left: Self, right: Self) -> Bool { left.rawValue < right.rawValue }

    /// The sections whose element counts the header announces, in the header's order.
    static let counted: [StoreImageSection] = [.devices, .people, .digests, .order, .strings, .clientSequences]

    /// Bytes of one element of a fixed-size section; nil for the others.
    var elementBytes: Int? {
        switch self {
        case .devices: DeviceRecord.imageBytes
        case .people: PersonRecord.imageBytes
        case .digests: SecretDigest.byteCount
        case .order, .clientSequences: 12  // u64 sequence + u32 slot; u32 slot + u64 client sequence
        default: nil
        }
    }
}

extension DeviceStore {
    /// How many elements `section` of this store's image holds (one of `StoreImageSection.counted`).
    func imageElementCount(_ section: StoreImageSection) -> Int {
        switch section {
        case .devices: records.count
        case .people: people.count
        case .digests: digests.count
        case .order: order.count
        case .strings: strings.idCount
        case .clientSequences: clientSequences.count
        default: preconditionFailure("section \(section) has no element count")
        }
    }
}

/// The image format's constants.
package enum StoreImageFormat {
    /// The version in an image's header.
    static let version: UInt8 = 1
    /// Most element bytes in one part (one snapshot record).
    package static let partPayloadBytes = 256 << 10
}

/// Why an image cannot be loaded (damage, or a writer's bug): start-up stops.
package struct StoreImageError: Error, CustomStringConvertible, Equatable {
    package var reason: String
    package var description: String { "index image: \(reason)" }
    init(_ reason: String) { self.reason = reason }
}

/// Writes the image of a frozen store part by part (on the snapshot thread:
/// every read is of the frozen view, which nothing else writes). It is the
/// view's only holder, and lets go of each chunk once it has written it, so
/// that a writer touching that chunk afterwards writes it in place instead of
/// copying it (the copies are what a snapshot costs writers, decision 0054).
package struct StoreImageEncoder: Sendable {
    private var store: DeviceStore
    private var section = StoreImageSection.header
    /// The next element of `section` (for blob cells: the next chunk of `blobClass`).
    private var next = 0
    private var blobClass = 0
    private let clientSequences: [(slot: UInt32, sequence: UInt64)]

    /// The devices whose history records follow the image, in id order.
    package let devicesWithHistory: [DeviceID]

    init(store: DeviceStore) {
        self.store = store
        clientSequences = store.clientSequences.sorted { $0.key < $1.key }.map { (slot: $0.key, sequence: $0.value) }
        devicesWithHistory = store.history.rings.keys.sorted().compactMap { sequence in
            store.slot(ofSequence: sequence).map {
                DeviceID(
                    appID: store.appID, mode: store.mode, platform: store.records[Int($0)].platform, sequence: sequence)
            }
        }
    }

    /// The history records of `id` (one of `devicesWithHistory`), as the view holds them.
    package func historyMutations(_ id: DeviceID) -> [Mutation] { store.historyMutations(id) }

    /// Whether the last part (end) has been written.
    package private(set) var isDone = false

    /// The part that abandons an image partly written (its loader drops what it read), after `prefix`.
    package static func abandonedPart(prefix: [UInt8]) -> [UInt8] {
        prefix + [StoreImageSection.abandoned.rawValue]
    }

    /// Returns the next part, after `prefix` (the record framing), or nil once the end was written.
    package mutating func nextPart(prefix: [UInt8]) -> [UInt8]? {
        while !isDone {
            var part = prefix
            switch section {
            case .header:
                part.reserveCapacity(prefix.count + 40 + store.blobs.classCount * 4)
                part.append(section.rawValue)
                part.append(StoreImageFormat.version)
                append(store.nextDeviceSequence, to: &part)
                for counted in StoreImageSection.counted {
                    append(UInt32(store.imageElementCount(counted)), to: &part)
                }
                append(UInt16(store.blobs.classCount), to: &part)
                for classIndex in 0..<store.blobs.classCount {
                    append(UInt32(store.blobs.cellCount(ofClass: classIndex)), to: &part)
                }
                advance()
                return part
            case .devices, .people, .digests, .order:
                if let part = fixedPart(prefix) { return part }
            case .blobCells:
                while blobClass < store.blobs.classCount && next >= store.blobs.chunkCount(ofClass: blobClass) {
                    blobClass += 1
                    next = 0
                }
                if blobClass < store.blobs.classCount {
                    store.blobs.withChunk(ofClass: blobClass, next) { firstCell, cells in
                        part.reserveCapacity(prefix.count + 11 + cells.count)
                        part.append(section.rawValue)
                        append(UInt16(blobClass), to: &part)
                        append(UInt32(firstCell), to: &part)
                        append(UInt32(cells.count / BlobStore.cellSize(ofClass: blobClass)), to: &part)
                        part.append(contentsOf: cells)
                    }
                    store.blobs.releaseChunk(ofClass: blobClass, next)
                    next += 1
                    return part
                }
            case .strings:
                if next < store.strings.idCount {
                    part.append(section.rawValue)
                    append(UInt32(next), to: &part)
                    let countOffset = part.count
                    append(UInt32(0), to: &part)
                    var count: UInt32 = 0
                    while next < store.strings.idCount && part.count - prefix.count < StoreImageFormat.partPayloadBytes
                    {
                        if let string = store.strings.storedString(next) {
                            let utf8 = Array(string.utf8)
                            append(UInt32(utf8.count + 1), to: &part)
                            part.append(contentsOf: utf8)
                        } else {
                            append(UInt32(0), to: &part)
                        }
                        next += 1
                        count += 1
                    }
                    overwrite(count, at: countOffset, in: &part)
                    return part
                }
            case .clientSequences:
                if let part = fixedPart(prefix) { return part }
            case .end:
                part.append(section.rawValue)
                isDone = true
                return part
            case .abandoned:
                preconditionFailure("an image encoder never reaches the abandoned section")
            }
            advance()
        }
        return nil
    }

    /// The part of a fixed-size section holding its next elements (at most
    /// `partPayloadBytes` of them); nil when the section has no more.
    private mutating func fixedPart(_ prefix: [UInt8]) -> [UInt8]? {
        guard let elementBytes = section.elementBytes else {
            preconditionFailure("section \(section) has no fixed-size elements")
        }
        let total = store.imageElementCount(section)
        guard next < total else { return nil }
        let count = min(total - next, StoreImageFormat.partPayloadBytes / elementBytes)
        let headerBytes = 9
        let first = next
        let section = self.section
        let part = [UInt8](unsafeUninitializedCapacity: prefix.count + headerBytes + count * elementBytes) {
            buffer, initialized in
            let base = UnsafeMutableRawPointer(buffer.baseAddress!)
            prefix.withUnsafeBytes { base.copyMemory(from: $0.baseAddress!, byteCount: prefix.count) }
            let start = base.advanced(by: prefix.count)
            start.storeBytes(of: section.rawValue, as: UInt8.self)
            start.storeBytes(of: UInt32(first).littleEndian, toByteOffset: 1, as: UInt32.self)
            start.storeBytes(of: UInt32(count).littleEndian, toByteOffset: 5, as: UInt32.self)
            for index in 0..<count {
                let target = start.advanced(by: headerBytes + index * elementBytes)
                let element = first + index
                switch section {
                case .devices: store.records[element].writeImage(to: target)
                case .people: store.people[element].writeImage(to: target)
                case .digests: store.digests[element].writeLittleEndian(to: target)
                case .order:
                    target.storeBytes(of: store.order[element].littleEndian, as: UInt64.self)
                    target.storeBytes(of: store.orderSlots[element].littleEndian, toByteOffset: 8, as: UInt32.self)
                default:
                    target.storeBytes(of: clientSequences[element].slot.littleEndian, as: UInt32.self)
                    target.storeBytes(
                        of: clientSequences[element].sequence.littleEndian, toByteOffset: 4, as: UInt64.self)
                }
            }
            initialized = buffer.count
        }
        next += count
        releaseWritten(from: first, to: next, of: total)
        return part
    }

    /// Lets go of the chunks of the current section that elements `first..<end` completed.
    private mutating func releaseWritten(from first: Int, to end: Int, of total: Int) {
        func completed<Element>(_ array: ChunkedArray<Element>) -> Range<Int> {
            array.chunk(of: first)..<(end == total ? array.chunk(of: end - 1) + 1 : array.chunk(of: end))
        }
        switch section {
        case .devices: store.records.releaseChunks(completed(store.records))
        case .people: store.people.releaseChunks(completed(store.people))
        case .digests: store.digests.releaseChunks(completed(store.digests))
        case .order:
            store.order.releaseChunks(completed(store.order))
            store.orderSlots.releaseChunks(completed(store.orderSlots))
        default: break
        }
    }

    private mutating func advance() {
        section = StoreImageSection(rawValue: section.rawValue + 1)!
        next = 0
    }

    private func append<Integer: FixedWidthInteger>(_ value: Integer, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    private func overwrite(_ value: UInt32, at offset: Int, in bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { raw in
            for index in 0..<4 { bytes[offset + index] = raw[index] }
        }
    }
}
