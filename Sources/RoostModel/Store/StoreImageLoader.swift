/// Reads an index image part by part (`StoreImage.swift` has the format)
/// into a new `DeviceStore`, then derives and checks everything the image
/// does not hold (`finish`). Each part is copied once, into the store's own
/// chunks; no key is looked up while parts arrive.
package struct StoreImageLoader: Sendable {
    /// The header's counts: what the sections must add up to.
    private struct Expected: Sendable {
        /// Elements of each of `StoreImageSection.counted`.
        var counts: [StoreImageSection: Int]
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
                var counts: [StoreImageSection: Int] = [:]
                for counted in StoreImageSection.counted { counts[counted] = Int(try reader.u32()) }
                let classCount = Int(try reader.u16())
                guard classCount <= BlobStore.lengthMax / BlobStore.granularity + 1 else {
                    throw StoreImageError("\(classCount) blob classes")
                }
                var cells: [Int] = []
                for _ in 0..<classCount { cells.append(Int(try reader.u32())) }
                guard reader.remaining == 0 else { throw StoreImageError("header of \(part.count) bytes") }
                let (devices, people) = (counts[.devices]!, counts[.people]!)
                guard devices <= Limits.devicesPerIndexMax, people <= Limits.devicesPerIndexMax else {
                    throw StoreImageError("\(devices) device slots, \(people) person slots")
                }
                expected = Expected(counts: counts, cellsPerClass: cells)
                strings.reserveCapacity(min(counts[.strings]!, 1 << 20))
            case .devices:
                let part = try elements(&reader)
                store.records.append(count: part.count) {
                    DeviceRecord(image: part.base + $0 * DeviceRecord.imageBytes)
                }
            case .people:
                let part = try elements(&reader)
                store.people.append(count: part.count) { PersonRecord(image: part.base + $0 * PersonRecord.imageBytes) }
            case .digests:
                let size = SecretDigest.byteCount
                let part = try elements(&reader)
                for index in 0..<part.count {
                    store.digests.append(
                        SecretDigest(
                            littleEndianBytes: UnsafeRawBufferPointer(start: part.base + index * size, count: size)))
                }
            case .order:
                let size = kind.elementBytes!
                let part = try elements(&reader)
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
                guard let expected, first == strings.count, count <= expected.counts[.strings]! - first else {
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
                let size = kind.elementBytes!
                let part = try elements(&reader)
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

    /// Elements of `section` read so far.
    private func loadedCount(_ section: StoreImageSection) -> Int {
        section == .strings ? strings.count : store.imageElementCount(section)
    }

    /// The `count` fixed-size elements of one part of the current section and
    /// where they start; they must start where the section has got to and
    /// stay within the header's count.
    private func elements(
        _ reader: inout LittleEndianReader
    ) throws(StoreImageError) -> (base: UnsafeRawPointer, count: Int) {
        let elementBytes = section.elementBytes!
        let have = loadedCount(section)
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
        guard let expected, first == have, count <= expected.counts[section]! - have else {
            throw StoreImageError("section \(section.rawValue): elements \(first) + \(count) after \(have)")
        }
        return (bytes.baseAddress!, count)
    }

    /// Throws unless `finished` (a section being left) holds all the header announced.
    private func checkComplete(_ finished: StoreImageSection) throws(StoreImageError) {
        guard let expected else { return }
        if let want = expected.counts[finished] {
            let have = loadedCount(finished)
            guard have == want else { throw StoreImageError("section \(finished.rawValue): \(have) of \(want)") }
        } else if finished == .blobCells {
            for (classIndex, cells) in expected.cellsPerClass.enumerated() {
                let held = classIndex < store.blobs.classCount ? store.blobs.cellCount(ofClass: classIndex) : 0
                guard held == cells else {
                    throw StoreImageError("blob class \(classIndex): \(held) of \(cells) cells")
                }
            }
        }
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
}

extension AppIndex {
    /// Replaces this index's devices and people with a store loaded from an
    /// image (decision 0056). Returns false, changing nothing, unless the
    /// index holds none yet (an image is the whole of its index's devices).
    package mutating func adoptLoadedStore(_ loaded: LoadedIndexImage) -> Bool {
        guard store.records.isEmpty, store.people.isEmpty, loaded.store.appID == appID, loaded.store.mode == mode
        else { return false }
        store = loaded.store
        return true
    }
}
