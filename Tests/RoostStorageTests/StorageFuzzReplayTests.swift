import RoostFuzzChecks
import RoostTesting
import Testing

@testable import RoostStorage

@Suite("Storage reader fuzz inputs")
struct StorageFuzzCheckReplayTests {
    static let root = FuzzInputs.repositoryRoot(testFile: "\(#filePath)")

    @Test("every seed of Fuzz/StorageFuzz/seeds and every committed input keeps the properties")
    func replayCommittedInputs() {
        let seeds = FuzzInputs.files(in: "Fuzz/StorageFuzz/seeds", root: Self.root)
        let corpus = FuzzInputs.files(in: "Tests/RoostStorageTests/FuzzCorpus", root: Self.root)
        #expect(!seeds.isEmpty, "no seeds under \(Self.root)/Fuzz/StorageFuzz/seeds")
        for (name, bytes) in seeds + corpus {
            let problem = StorageFuzzCheck.violation(in: bytes)
            #expect(problem == nil, "\(name): \(problem ?? "")")
        }
    }

    @Test("a record whose padding is not zero is damage, even under a valid CRC (found by fuzzing)")
    func nonzeroPaddingIsDamage() throws {
        var records: [UInt8] = []
        SegmentFormat.appendRecord(kind: .mutation, lsn: 1, payload: Array("abc".utf8), to: &records)
        records[records.count - 1] = 0x10
        Bytes.store(SegmentFormat.recordChecksum(records[...]), into: &records, at: 16)
        let bytes = SegmentFormat.encodeVersion1Header(firstLSN: 1) + records
        let scan = SegmentFormat.scan(bytes: bytes, path: "p.seg", fileName: "p.seg", payloadBytesMax: 1024)
        #expect(scan.recordCount == 0)
        guard case .damaged(let damage, let laterRecordFound) = scan.end else {
            Issue.record("a record with nonzero padding scanned as \(scan.end)")
            return
        }
        #expect(damage.offset == SegmentFormat.headerBytes)
        #expect(!laterRecordFound)
    }

    @Test("a record with LSN 2^64-1 is damage: it has no successor (found with the fuzz check)")
    func lastLSNIsDamage() {
        let first = LogSequenceNumber(UInt64.max - 1)
        var bytes = SegmentFormat.encodeVersion1Header(firstLSN: first)
        SegmentFormat.appendRecord(kind: .mutation, lsn: first, payload: [1], to: &bytes)
        let end = bytes.count
        SegmentFormat.appendRecord(kind: .mutation, lsn: LogSequenceNumber(UInt64.max), payload: [2], to: &bytes)
        let scan = SegmentFormat.scan(bytes: bytes, path: "p.seg", fileName: "p.seg", payloadBytesMax: 1024)
        #expect(scan.recordCount == 1)
        #expect(scan.endOffset == end)
        guard case .damaged(let damage, _) = scan.end else {
            Issue.record("a record with the last LSN scanned as \(scan.end)")
            return
        }
        #expect(damage.offset == end)
    }
}
