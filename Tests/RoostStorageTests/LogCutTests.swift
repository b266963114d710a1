import RoostTesting
import Testing

@testable import RoostStorage

/// `LogCut` (spec §13.2, decision 0080): a closed log loses every record
/// after an LSN, and recovery then reads the shorter log as whole.
@Suite("Cutting the end of a closed log")
struct LogCutTests {
    /// Writes `count` records over several segments, closes, and returns their payloads.
    static func writeLog(_ options: StorageOptions, count: Int) async throws -> [[UInt8]] {
        var random = SeededRandom(seed: 7)
        let payloads = randomPayloads(count, maxBytes: 120, &random)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        for chunk in stride(from: 0, to: payloads.count, by: 5) {
            _ = try await appendAndWait(log, Array(payloads[chunk..<min(chunk + 5, payloads.count)])).get()
        }
        log.close()
        return payloads
    }

    @Test(
        "after a cut in the middle of a segment, and at each segment's edge, recovery reads exactly the records before it and the log goes on from there"
    )
    func cutAnywhere() async throws {
        for cutAfter in [0, 1, 17, 33, 59, 60] {
            let fileSystem = FaultInjectingFileSystem()
            let options = testOptions(fileSystem, segmentBytesMax: 1024, payloadBytesMax: 256)
            let payloads = try await Self.writeLog(options, count: 60)
            let segmentsBefore = try StorageLayout(directory: dataDirectory, fileSystem: fileSystem).segmentNames()
                .count
            #expect(segmentsBefore > 3, "the test needs several segments")
            let report = try LogCut.cut(
                directory: dataDirectory, after: LogSequenceNumber(UInt64(cutAfter)), options: options)
            #expect(report.recordsCut == UInt64(60 - cutAfter), "cut after \(cutAfter)")
            #expect(
                try WALTool.verify(directory: dataDirectory, options: options).verdict == .ok, "cut after \(cutAfter)")
            let (log, state) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
            let recovered = try recoveredRecords(state)
            #expect(recovered.log.map(\.payload) == Array(payloads.prefix(cutAfter)), "cut after \(cutAfter)")
            // The next record takes the LSN after the cut.
            let next = try await appendAndWait(log, [[42]]).get()
            #expect(next == LogSequenceNumber(UInt64(cutAfter + 1)))
            log.close()
            #expect(try reopenAndRead(options).log.map(\.payload) == Array(payloads.prefix(cutAfter)) + [[42]])
        }
    }

    @Test("a cut before a checkpointed snapshot's start is refused and changes nothing")
    func refusedBeforeASnapshot() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 1024, payloadBytesMax: 256)
        let payloads = try await Self.writeLog(options, count: 20)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        let writer = try log.beginSnapshot(counts: SnapshotCounts(records: 1, groups: 1))
        try writer.append([1, 2, 3])
        try log.checkpoint(try writer.finish())
        log.close()
        let layout = StorageLayout(directory: dataDirectory, fileSystem: fileSystem)
        let paths = try layout.segmentNames().map(layout.segmentPath) + [layout.logEndPath]
        let before = paths.map { fileSystem.contents($0) }
        #expect(throws: StorageError.self) {
            _ = try LogCut.cut(directory: dataDirectory, after: LogSequenceNumber(5), options: options)
        }
        #expect(paths.map { fileSystem.contents($0) } == before)
        #expect(payloads.count == 20)
    }

    @Test("records are read back by LSN range across segments, as recovery reads them")
    func readByRange() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 1024, payloadBytesMax: 256)
        let payloads = try await Self.writeLog(options, count: 60)
        for (low, high) in [(1, 60), (1, 1), (17, 44), (59, 70), (61, 80)] {
            let read = try LogRead.records(
                in: LogSequenceNumber(UInt64(low))...LogSequenceNumber(UInt64(high)), directory: dataDirectory,
                options: options)
            let expected = Array(payloads[min(low - 1, 60)..<min(high, 60)])
            #expect(read.map(\.payload) == expected, "\(low)...\(high)")
            #expect(read.map(\.lsn.rawValue) == Array(UInt64(low)..<UInt64(low + expected.count)), "\(low)...\(high)")
        }
    }

    @Test("ranges read one after another, moving forward, read each segment once; the newest again only when it grew")
    func rangeReaderKeepsItsSegment() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 1024, payloadBytesMax: 256)
        let payloads = try await Self.writeLog(options, count: 60)
        let layout = StorageLayout(directory: dataDirectory, fileSystem: fileSystem)
        let segments = try layout.segmentNames().count
        #expect(segments >= 3, "the log spans several segments")
        var reader = LogRangeReader(directory: dataDirectory, options: options)
        let readsBefore = fileSystem.count(.readWhole)
        var read: [[UInt8]] = []
        for low in stride(from: 1, through: 60, by: 3) {
            let page = try reader.records(
                in: LogSequenceNumber(UInt64(low))...LogSequenceNumber(UInt64(min(low + 2, 60))))
            read += page.map(\.payload)
        }
        #expect(read == payloads, "the pages, in order, are the log")
        // Each segment once (before: once per page that touched it).
        #expect(fileSystem.count(.readWhole) - readsBefore == segments)
        // A range past the newest segment's end reads it again (it may have grown).
        _ = try reader.records(in: LogSequenceNumber(60)...LogSequenceNumber(61))
        #expect(fileSystem.count(.readWhole) - readsBefore == segments + 1)
    }
}
