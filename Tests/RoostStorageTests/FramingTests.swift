import RoostTesting
import Testing

@testable import RoostStorage

@Suite("WAL framing")
struct FramingTests {
    @Test("records of random sizes round-trip through framing and scanning, 8-byte aligned")
    func roundTrip() {
        let seed = testSeed(0x5EED_0001)
        var random = SeededRandom(seed: seed)
        let payloads = randomPayloads(200, maxBytes: 300, &random)
        var bytes = SegmentFormat.encodeHeader(firstLSN: LogSequenceNumber(42), segmentBytes: 1 << 16)
        for (index, payload) in payloads.enumerated() {
            #expect(bytes.count % 8 == 0, "seed \(seed)")
            SegmentFormat.appendRecord(
                kind: .mutation, lsn: LogSequenceNumber(42 + UInt64(index)), payload: payload, to: &bytes)
        }
        let end = bytes.count
        bytes.append(contentsOf: repeatElement(0, count: 1000))
        var read: [LogRecord] = []
        let scan = SegmentFormat.scan(
            bytes: bytes, path: "x", fileName: SegmentFormat.fileName(firstLSN: LogSequenceNumber(42)),
            payloadBytesMax: 1024
        ) { read.append($0) }
        #expect(scan.header == .valid(firstLSN: LogSequenceNumber(42)), "seed \(seed)")
        #expect(scan.end == .clean, "seed \(seed)")
        #expect(scan.endOffset == end, "seed \(seed)")
        #expect(read.map(\.payload) == payloads, "seed \(seed)")
        #expect(read.map(\.lsn.rawValue) == Array(42..<242), "seed \(seed)")
    }

    @Test("segment file names carry the first LSN in 20 digits and parse back")
    func names() {
        #expect(SegmentFormat.fileName(firstLSN: LogSequenceNumber(1)) == "00000000000000000001.seg")
        #expect(SegmentFormat.firstLSN(fileName: "00000000000000000077.seg") == LogSequenceNumber(77))
        #expect(SegmentFormat.firstLSN(fileName: "77.seg") == nil)
        #expect(SegmentFormat.firstLSN(fileName: "00000000000000000077.seg.tmp") == nil)
    }

    @Test("a nonzero byte in the zero space after the last record is damage, not the end")
    func strayByteAfterEnd() {
        var bytes = SegmentFormat.encodeHeader(firstLSN: .first, segmentBytes: 256)
        SegmentFormat.appendRecord(kind: .mutation, lsn: .first, payload: [1, 2, 3], to: &bytes)
        bytes.append(contentsOf: repeatElement(0, count: 200))
        bytes[150] = 1
        let scan = SegmentFormat.scan(
            bytes: bytes, path: "x", fileName: SegmentFormat.fileName(firstLSN: .first), payloadBytesMax: 64)
        #expect(scan.recordCount == 1)
        guard case .damaged(let damage, _) = scan.end else {
            Issue.record("expected damage, got \(scan.end)")
            return
        }
        #expect(damage.offset == 150)
    }

    @Test("a record whose LSN skips one is reported as an LSN gap")
    func lsnGapInsideSegment() {
        var bytes = SegmentFormat.encodeHeader(firstLSN: .first, segmentBytes: 256)
        SegmentFormat.appendRecord(kind: .mutation, lsn: .first, payload: [1], to: &bytes)
        let secondOffset = bytes.count
        SegmentFormat.appendRecord(kind: .mutation, lsn: LogSequenceNumber(3), payload: [2], to: &bytes)
        let scan = SegmentFormat.scan(
            bytes: bytes, path: "x", fileName: SegmentFormat.fileName(firstLSN: .first), payloadBytesMax: 64)
        guard case .damaged(let damage, _) = scan.end else {
            Issue.record("expected damage, got \(scan.end)")
            return
        }
        #expect(damage.offset == secondOffset)
        #expect(damage.reason.contains("LSN gap"))
    }

    @Test("a record larger than the payload limit is refused by append")
    func tooLarge() {
        var machine = GroupCommit<Int>(
            policy: .always, nextLSN: .first, segmentOffset: 32, segmentBytesMax: 4096, payloadBytesMax: 100,
            syncIntervalNanoseconds: 1)
        let result = machine.append([[UInt8](repeating: 1, count: 101)], waiter: 0)
        #expect(throws: StorageError.recordTooLarge(bytes: 101, limit: 100)) { try result.get() }
    }
}
