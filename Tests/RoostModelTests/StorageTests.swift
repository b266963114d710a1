import Testing

@testable import RoostModel

@Suite("Storage building blocks")
struct StorageTests {
    @Test("a chunked array keeps every element across chunk boundaries and mutates in place")
    func chunkedArray() {
        var array = ChunkedArray<UInt64>(chunkBytes: 64)  // 8 elements a chunk
        for value in 0..<1_000 { array.append(UInt64(value)) }
        #expect(array.count == 1_000)
        #expect(array.capacity >= 1_000 && array.capacity < 1_008)
        for index in stride(from: 0, to: 1_000, by: 3) { array[index] += 10_000 }
        for (index, value) in array.enumerated() {
            #expect(value == UInt64(index) + (index % 3 == 0 ? 10_000 : 0))
        }
        var copy = array
        copy[7] = 0
        #expect(array[7] == 7, "copies do not share writes")
    }

    @Test("byte comparison finds a difference at any position and in any length, equal bytes are equal")
    func sameBytes() {
        for length in 0..<40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            for changed in -1..<length {
                var other = bytes
                if changed >= 0 { other[changed] ^= 0x40 }
                let same = bytes.withUnsafeBytes { a in other.withUnsafeBytes { b in a.hasSameBytes(as: b) } }
                #expect(same == (changed < 0), "length \(length), byte \(changed) changed")
            }
            let longer = bytes + [0]
            #expect(!bytes.withUnsafeBytes { a in longer.withUnsafeBytes { b in a.hasSameBytes(as: b) } })
        }
    }

    @Test("blobs in chunks read back exactly, and freed cells are reused")
    func blobStoreChunks() {
        var store = BlobStore()
        var refs: [BlobRef] = []
        var random = SplitMix64(seed: 42)
        var contents: [[UInt8]] = []
        for _ in 0..<200_000 {
            let length = Int(random.next() % 40) + 1
            let bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            refs.append(store.store(bytes))
            contents.append(bytes)
        }
        for (ref, bytes) in zip(refs, contents) { #expect(store.bytes(ref) == bytes) }
        store.release(refs[5])
        let reused = store.store(contents[5])
        #expect(reused == refs[5], "seed \(random.seed)")
        #expect(store.liveCount == 200_000)
    }

    @Test("slot hashes depend on every byte, the domain and the table's keys")
    func slotHashes() {
        let keys = SlotHashKeys()
        let other = SlotHashKeys()
        for length in [1, 7, 8, 15, 16, 17, 31, 32, 33, 200] {
            let bytes = [UInt8](repeating: 0xAB, count: length)
            let hash = bytes.withUnsafeBytes { keys.hash(domain: 1, bytes: $0) }
            #expect(hash == bytes.withUnsafeBytes { keys.hash(domain: 1, bytes: $0) })
            #expect(hash != bytes.withUnsafeBytes { keys.hash(domain: 2, bytes: $0) })
            #expect(hash != bytes.withUnsafeBytes { other.hash(domain: 1, bytes: $0) })
            for position in [0, length / 2, length - 1] {
                var changed = bytes
                changed[position] ^= 1
                #expect(hash != changed.withUnsafeBytes { keys.hash(domain: 1, bytes: $0) }, "length \(length)")
            }
        }
        let shorter = [UInt8](repeating: 0, count: 8)
        let longer = [UInt8](repeating: 0, count: 9)
        #expect(
            shorter.withUnsafeBytes { keys.hash(domain: 1, bytes: $0) }
                != longer.withUnsafeBytes { keys.hash(domain: 1, bytes: $0) })
    }
}
