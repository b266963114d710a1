import RoostCluster
import RoostStorage
import RoostTesting
import Testing

/// The group-log batch codec (decision 0077): round trips, compression only
/// when it pays, and every damaged input refused with a typed error.
@Suite("ReplicationBatch: the group log's batch codec")
struct ReplicationBatchTests {
    static let epoch = ClusterEpoch(42)

    static func records(_ count: Int, bytes: Int, random: inout SeededRandom) -> [[UInt8]] {
        (0..<count).map { _ in (0..<bytes).map { _ in UInt8(truncatingIfNeeded: random.next()) } }
    }

    /// Recomputes the CRC after a deliberate change, so that the field check is reached.
    static func resealed(_ bytes: [UInt8]) -> [UInt8] {
        var body = Array(bytes.dropLast(4))
        Bytes.append(CRC32C.checksum(body), to: &body)
        return body
    }

    @Test("a batch decodes to the same epoch, first LSN and records; compressible payloads are compressed")
    func roundTrip() throws {
        let text = Array(String(repeating: "device registered for app ", count: 40).utf8)
        let compressible = ReplicationBatch(epoch: Self.epoch, firstLSN: 7, records: [text, [], text])
        let encoded = compressible.encoded()
        #expect(encoded[5] & 1 == 1, "the zstd flag")
        #expect(encoded.count < text.count)
        #expect(try ReplicationBatch.decode(encoded) == compressible)
        #expect(compressible.lastLSN == 9)

        var random = SeededRandom(seed: 5)
        let noise = ReplicationBatch(
            epoch: Self.epoch, firstLSN: 1, records: Self.records(3, bytes: 900, random: &random))
        #expect(noise.encoded()[5] == 0, "random bytes do not compress by 10 %: stored plain")
        #expect(try ReplicationBatch.decode(noise.encoded()) == noise)

        let small = ReplicationBatch(epoch: Self.epoch, firstLSN: 1, records: [Array("aaaaaaaaaaaaaaaa".utf8)])
        #expect(small.encoded()[5] == 0, "under compressionPlainBytesMin: plain")
    }

    @Test("every single bit flipped, in a plain and a compressed batch, is refused")
    func bitFlips() {
        let text = Array(String(repeating: "abcdefgh", count: 100).utf8)
        for batch in [
            ReplicationBatch(epoch: Self.epoch, firstLSN: 3, records: [Array("one".utf8), Array("two".utf8)]),
            ReplicationBatch(epoch: Self.epoch, firstLSN: 3, records: [text, text]),
        ] {
            let encoded = batch.encoded()
            var accepted: [(index: Int, bit: Int)] = []
            for index in encoded.indices {
                for bit in 0..<8 {
                    var damaged = encoded
                    damaged[index] ^= UInt8(1) << bit
                    if Self.error(damaged) == nil { accepted.append((index, bit)) }
                }
            }
            #expect(accepted.isEmpty, "flips accepted (byte, bit): \(accepted)")
        }
    }

    @Test("every truncation and an appended byte are refused")
    func truncations() {
        let encoded = ReplicationBatch(epoch: Self.epoch, firstLSN: 1, records: [Array("record".utf8)]).encoded()
        let accepted = (0..<encoded.count).filter { Self.error(Array(encoded.prefix($0))) == nil }
        #expect(accepted.isEmpty, "truncations accepted: \(accepted)")
        #expect(throws: ReplicationBatchError.self) { try ReplicationBatch.decode(encoded + [0]) }
        #expect(throws: ReplicationBatchError.truncated(bytes: 3)) { try ReplicationBatch.decode([1, 2, 3]) }
    }

    @Test("the error names the field: magic, checksum, version, flags, count, epoch, first LSN, size")
    func namedErrors() {
        let encoded = ReplicationBatch(epoch: Self.epoch, firstLSN: 1, records: [Array("x".utf8)]).encoded()
        var magic = encoded
        magic[0] = 0x58
        #expect(throws: ReplicationBatchError.badMagic) { try ReplicationBatch.decode(magic) }
        var flipped = encoded
        flipped[40] ^= 1
        #expect(throws: ReplicationBatchError.self) { try ReplicationBatch.decode(flipped) }
        if case .checksumMismatch? = Self.error(flipped) {} else { Issue.record("a checksum error: \(flipped)") }
        var version = encoded
        version[4] = 9
        #expect(throws: ReplicationBatchError.unsupportedVersion(9)) {
            try ReplicationBatch.decode(Self.resealed(version))
        }
        var flags = encoded
        flags[5] = 0x80
        #expect(throws: ReplicationBatchError.unknownFlags(0x80)) { try ReplicationBatch.decode(Self.resealed(flags)) }
        var count = encoded
        count[24] = 2
        #expect(throws: ReplicationBatchError.recordCountMismatch(declared: 2, found: 1)) {
            try ReplicationBatch.decode(Self.resealed(count))
        }
        var zeroCount = encoded
        zeroCount[24] = 0
        #expect(throws: ReplicationBatchError.recordCountOutOfRange(0)) {
            try ReplicationBatch.decode(Self.resealed(zeroCount))
        }
        var epoch = encoded
        for index in 8..<16 { epoch[index] = 0 }
        #expect(throws: ReplicationBatchError.epochOutOfRange(0)) { try ReplicationBatch.decode(Self.resealed(epoch)) }
        var first = encoded
        for index in 16..<24 { first[index] = 0 }
        #expect(throws: ReplicationBatchError.firstLSNOutOfRange(0)) {
            try ReplicationBatch.decode(Self.resealed(first))
        }
        var length = encoded
        length[36] = 200  // the record's length overruns the payload
        #expect(throws: ReplicationBatchError.recordOverrunsPayload(index: 0)) {
            try ReplicationBatch.decode(Self.resealed(length))
        }
        let huge = [UInt8](repeating: 0, count: ReplicationBatch.encodedBytesMax + 1)
        #expect(throws: ReplicationBatchError.tooLarge(bytes: huge.count)) { try ReplicationBatch.decode(huge) }
    }

    static func error(_ bytes: [UInt8]) -> ReplicationBatchError? {
        do {
            _ = try ReplicationBatch.decode(bytes)
            return nil
        } catch {
            return error
        }
    }

    @Test("split keeps every batch under encodedBytesMax and recordsPerBatchMax, at consecutive LSNs")
    func split() throws {
        var random = SeededRandom(seed: 9)
        let big = Self.records(9, bytes: 400_000, random: &random)
        let batches = ReplicationBatch.split(records: big, epoch: Self.epoch, firstLSN: 100)
        #expect(batches.count == 3)
        var next = LogSequenceNumber(100)
        for batch in batches {
            #expect(batch.firstLSN == next)
            next = batch.nextLSN
            #expect(batch.encoded().count <= ReplicationBatch.encodedBytesMax)
        }
        #expect(batches.flatMap(\.records) == big)
        let one = [UInt8](repeating: 1, count: ReplicationBatch.recordBytesMax)
        let alone = ReplicationBatch.split(records: [one, [2]], epoch: Self.epoch, firstLSN: 1)
        #expect(alone.map(\.records.count) == [1, 1], "the largest record fills a batch alone")
        #expect(try ReplicationBatch.decode(alone[0].encoded()).records == [one])
        let many = [[UInt8]](repeating: [7], count: ReplicationBatch.recordsPerBatchMax + 1)
        #expect(
            ReplicationBatch.split(records: many, epoch: Self.epoch, firstLSN: 1).map(\.records.count) == [
                ReplicationBatch.recordsPerBatchMax, 1,
            ])
    }

    @Test("an epoch record names its epoch and node; other records are not epoch records")
    func epochRecords() throws {
        let node = try #require(NodeID("node-1"))
        let record = ReplicationBatch.epochRecord(epoch: Self.epoch, node: node)
        let parsed = try #require(ReplicationBatch.parseEpochRecord(record))
        #expect(parsed.epoch == Self.epoch)
        #expect(parsed.node == node)
        #expect(ReplicationBatch.parseEpochRecord(Array(record.dropLast())) == nil)
        #expect(ReplicationBatch.parseEpochRecord(Array("REPO".utf8)) == nil)
    }

    @Test("keys: log keys sort as their LSNs, parse back, and refuse what is not one; leader and member values")
    func keys() throws {
        let keys = ClusterKeys(cluster: try #require(ClusterName("prod")))
        #expect(keys.leader == Array("/roost/prod/g0/leader".utf8))
        #expect(keys.logKey(firstLSN: 42) == Array("/roost/prod/g0/log/00000000000000000042".utf8))
        let lsns: [UInt64] = [1, 9, 10, 99, 100, 12_345, UInt64.max]
        let sorted = lsns.map { keys.logKey(firstLSN: LogSequenceNumber($0)) }
        #expect(sorted == sorted.sorted { $0.lexicographicallyPrecedes($1) })
        for lsn in lsns {
            #expect(keys.firstLSN(ofLogKey: keys.logKey(firstLSN: LogSequenceNumber(lsn)))?.rawValue == lsn)
        }
        #expect(keys.firstLSN(ofLogKey: keys.leader) == nil)
        #expect(keys.firstLSN(ofLogKey: keys.logPrefix + Array("0000000000000000004x".utf8)) == nil)
        #expect(keys.firstLSN(ofLogKey: keys.logPrefix + Array("99999999999999999999".utf8)) == nil, "overflow")
        #expect(NodeID("Node") == nil)
        #expect(NodeID(String(repeating: "a", count: 33)) == nil)
        let leader = LeaderRecord(node: try #require(NodeID("n1")), url: "http://10.0.0.1:8080")
        #expect(LeaderRecord.decode(leader.encoded()) == leader)
        let member = MemberRecord(url: "http://10.0.0.2:8080", role: .follower, appliedLSN: 12, checkpointLSN: 10)
        #expect(MemberRecord.decode(member.encoded()) == member)
        #expect(MemberRecord.decode(Array("a b c".utf8)) == nil)
    }
}
