/// Reads an index image part by part (`StoreImage.swift` has the format)
/// into a new `DeviceStore`, then derives and checks everything the image
/// does not hold (`finish`). Each part is copied once, into the store's own
/// chunks; no key is looked up while parts arrive.
package struct StoreImageLoader: Sendable {
    /// The header's counts: what the sections must add up to.
    private struct Expected: Sendable {
        var deviceSlots: Int
        var personSlots: Int
        var digestSlots: Int
        var orderEntries: Int
        var stringIDs: Int
        var clientSequences: Int
        var cellsPerClass: [Int]
    }

    private var store: DeviceStore
    private var expected: Expected?
    private var section = StoreImageSection.header
    private var strings: [String?] = []
    private var blobClass = 0
    private var lastClientSequenceSlot: UInt32?
    /// Whether the end part has been read.
    package private(set) var isComplete = false

    /// A loader for the image of `appID`'s index in `mode`.
    package init(appID: AppID, mode: AppMode) {
        store = DeviceStore(appID: appID, mode: mode)
    }

    /// Whether `part` abandons the image (the writer gave it up; drop the loader).
    package static func isAbandoned(_ part: UnsafeRawBufferPointer) -> Bool {
        part.count == 1 && part[0] == StoreImageSection.abandoned.rawValue
    }

    /// Reads one part. Throws when it does not follow the parts before it.
    package mutating func add(_ part: UnsafeRawBufferPointer) throws(StoreImageError) {
        guard !isComplete else { throw StoreImageError("a part after the end") }
        guard let first = part.first, let kind = StoreImageSection(rawValue: first), kind != .abandoned else {
            throw StoreImageError("unknown section \(part.first.map(String.init) ?? "(empty part)")")
        }
        guard kind >= section, kind == .header || expected != nil else {
            throw StoreImageError("section \(kind.rawValue) after section \(section.rawValue)")
        }
        if kind != section {
            // Every section left (and any skipped, which must be empty) holds what the header announced.
            for skipped in section.rawValue..<kind.rawValue {
                try checkComplete(StoreImageSection(rawValue: skipped)!)
            }
            section = kind
        }
        var reader = LittleEndianReader(part, offset: 1)
        do {
            switch kind {
            case .header:
                guard expected == nil else { throw StoreImageError("a second header") }
                let version = try reader.u8()
                guard version == StoreImageFormat.version else { throw StoreImageError("image version \(version)") }
                store.nextDeviceSequence = try reader.u64()
                var counts: [Int] = []
                for _ in 0..<6 { counts.append(Int(try reader.u32())) }
                let classCount = Int(try reader.u16())
                guard classCount <= BlobStore.lengthMax / BlobStore.granularity + 1 else {
                    throw StoreImageError("\(classCount) blob classes")
                }
                var cells: [Int] = []
                for _ in 0..<classCount { cells.append(Int(try reader.u32())) }
                guard reader.remaining == 0 else { throw StoreImageError("header of \(part.count) bytes") }
                guard counts[0] <= Limits.devicesPerIndexMax, counts[1] <= Limits.devicesPerIndexMax else {
                    throw StoreImageError("\(counts[0]) device slots, \(counts[1]) person slots")
                }
                expected = Expected(
                    deviceSlots: counts[0], personSlots: counts[1], digestSlots: counts[2], orderEntries: counts[3],
                    stringIDs: counts[4], clientSequences: counts[5], cellsPerClass: cells)
                strings.reserveCapacity(min(counts[4], 1 << 20))
            case .devices:
                let part = try elements(&reader, have: store.records.count, of: \.deviceSlots, DeviceRecord.imageBytes)
                store.records.append(count: part.count) {
                    DeviceRecord(image: part.base + $0 * DeviceRecord.imageBytes)
                }
            case .people:
                let part = try elements(&reader, have: store.people.count, of: \.personSlots, PersonRecord.imageBytes)
                store.people.append(count: part.count) { PersonRecord(image: part.base + $0 * PersonRecord.imageBytes) }
            case .digests:
                let size = StoreImageFormat.digestBytes
                let part = try elements(&reader, have: store.digests.count, of: \.digestSlots, size)
                for index in 0..<part.count {
                    store.digests.append(
                        SecretDigest(
                            littleEndianBytes: UnsafeRawBufferPointer(start: part.base + index * size, count: size)))
                }
            case .order:
                let size = StoreImageFormat.orderEntryBytes
                let part = try elements(&reader, have: store.order.count, of: \.orderEntries, size)
                store.order.append(count: part.count) {
                    UInt64(littleEndian: part.base.loadUnaligned(fromByteOffset: $0 * size, as: UInt64.self))
                }
                store.orderSlots.append(count: part.count) {
                    UInt32(littleEndian: part.base.loadUnaligned(fromByteOffset: $0 * size + 8, as: UInt32.self))
                }
            case .blobCells:
                let classIndex = Int(try reader.u16())
                let firstCell = Int(try reader.u32())
                let count = Int(try reader.u32())
                guard let expected, classIndex < expected.cellsPerClass.count, classIndex >= blobClass else {
                    throw StoreImageError("blob class \(classIndex) out of order")
                }
                let cellSize = BlobStore.cellSize(ofClass: classIndex)
                guard reader.remaining == count * cellSize,
                    firstCell + count <= expected.cellsPerClass[classIndex],
                    store.blobs.appendLoadedCells(
                        ofClass: classIndex, firstCell: firstCell, try reader.raw(count * cellSize))
                else {
                    throw StoreImageError("blob cells \(firstCell)..<\(firstCell + count) of class \(classIndex)")
                }
                blobClass = classIndex
            case .strings:
                let first = Int(try reader.u32())
                let count = Int(try reader.u32())
                guard let expected, first == strings.count, count <= expected.stringIDs - first else {
                    throw StoreImageError("strings \(first) + \(count) after \(strings.count)")
                }
                for _ in 0..<count {
                    let length = Int(try reader.u32())
                    if length == 0 {
                        strings.append(nil)
                        continue
                    }
                    guard let string = String(validating: try reader.raw(length - 1), as: UTF8.self) else {
                        throw StoreImageError("string \(strings.count) is not UTF-8")
                    }
                    strings.append(string)
                }
                guard reader.remaining == 0 else { throw StoreImageError("strings part of \(part.count) bytes") }
            case .clientSequences:
                let size = StoreImageFormat.clientSequenceBytes
                let part = try elements(&reader, have: store.clientSequences.count, of: \.clientSequences, size)
                for index in 0..<part.count {
                    let base = part.base + index * size
                    let slot = UInt32(littleEndian: base.loadUnaligned(as: UInt32.self))
                    if let previous = lastClientSequenceSlot, slot <= previous {
                        throw StoreImageError("client sequences not in slot order")
                    }
                    lastClientSequenceSlot = slot
                    store.clientSequences[slot] = UInt64(
                        littleEndian: base.loadUnaligned(fromByteOffset: 4, as: UInt64.self))
                }
            case .end:
                guard part.count == 1 else { throw StoreImageError("end part of \(part.count) bytes") }
                isComplete = true
            case .abandoned:
                preconditionFailure("abandoned parts are refused above")
            }
        } catch let error as StoreImageError {
            throw error
        } catch {
            throw StoreImageError("section \(kind.rawValue): \(error)")
        }
    }

    /// The `count` fixed-size elements of one part and where they start; they
    /// must start where the section has got to (`have`) and stay within the
    /// header's count.
    private func elements(
        _ reader: inout LittleEndianReader, have: Int, of total: KeyPath<Expected, Int>, _ elementBytes: Int
    ) throws(StoreImageError) -> (base: UnsafeRawPointer, count: Int) {
        let first: Int
        let count: Int
        let bytes: UnsafeRawBufferPointer
        do {
            first = Int(try reader.u32())
            count = Int(try reader.u32())
            guard count > 0, reader.remaining == count * elementBytes else {
                throw StoreImageError("a part of \(count) elements holds \(reader.remaining) bytes")
            }
            bytes = try reader.raw(count * elementBytes)
        } catch let error as StoreImageError {
            throw error
        } catch {
            throw StoreImageError("section \(section.rawValue): \(error)")
        }
        guard let expected, first == have, count <= expected[keyPath: total] - have else {
            throw StoreImageError("section \(section.rawValue): elements \(first) + \(count) after \(have)")
        }
        return (bytes.baseAddress!, count)
    }

    /// Throws unless `finished` (a section being left) holds all the header announced.
    private func checkComplete(_ finished: StoreImageSection) throws(StoreImageError) {
        guard let expected else { return }
        let (have, want): (Int, Int)
        switch finished {
        case .devices: (have, want) = (store.records.count, expected.deviceSlots)
        case .people: (have, want) = (store.people.count, expected.personSlots)
        case .digests: (have, want) = (store.digests.count, expected.digestSlots)
        case .order: (have, want) = (store.order.count, expected.orderEntries)
        case .strings: (have, want) = (strings.count, expected.stringIDs)
        case .clientSequences: (have, want) = (store.clientSequences.count, expected.clientSequences)
        case .blobCells:
            for (classIndex, cells) in expected.cellsPerClass.enumerated() {
                let held = classIndex < store.blobs.classCount ? store.blobs.cellCount(ofClass: classIndex) : 0
                guard held == cells else {
                    throw StoreImageError("blob class \(classIndex): \(held) of \(cells) cells")
                }
            }
            return
        case .header, .end, .abandoned: return
        }
        guard have == want else { throw StoreImageError("section \(finished.rawValue): \(have) of \(want)") }
    }

    /// The loaded store, with its tables, free lists and counts derived and
    /// every reference checked (`DeviceStore.completeLoadedImage`). Throws
    /// unless the end part was read and the image is consistent.
    package func finish() throws(StoreImageError) -> LoadedIndexImage {
        guard isComplete else { throw StoreImageError("the image ends before its end part") }
        var loaded = store
        try loaded.completeLoadedImage(strings: strings)
        return LoadedIndexImage(store: loaded)
    }
}

/// A store loaded from an image and checked, for `AppIndex.adoptLoadedStore`.
package struct LoadedIndexImage: Sendable {
    let store: DeviceStore

    /// Live devices and people it holds.
    package var deviceCount: Int { store.deviceCount }
    package var personCount: Int { store.personCount }
}
