import Glibc
import RoostPlatform
import RoostTesting
import Testing

@testable import RoostStorage

/// Roost issue 9, finding 4: a log shortened at a record boundary used to
/// start with older state, print nothing, and pass `roost wal verify`. Each
/// shape of damage, with and without a snapshot, must now stop start-up
/// naming the file and offset (docs/decisions/0009-wal-damage-log-end.md).
@Suite("Shortened, zeroed and deleted logs")
struct ShortenedLogTests {
    /// How the log was damaged while the server was stopped.
    enum Shape: String, CaseIterable, Sendable {
        /// The last segment truncated right after a whole record.
        case truncatedAtRecordBoundary
        /// The last segment zeroed from a record boundary to its end (looks like preallocated space).
        case zeroedFromRecordBoundary
        /// The last segment cut to its 32-byte header.
        case cutToHeader
        /// The last segment deleted.
        case lastSegmentDeleted
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var shape: Shape
        var snapshot: Bool
        /// Several segments (the damaged one is the last) or a single one.
        var segments: Bool
        var testDescription: String {
            "\(shape.rawValue)\(snapshot ? " with a snapshot" : "")\(segments ? ", several segments" : "")"
        }
    }

    static let cases: [Case] = Shape.allCases.flatMap { shape in
        [false, true].flatMap { snapshot in [false, true].map { Case(shape: shape, snapshot: snapshot, segments: $0) } }
    }

    static let payloadBytes = 40
    static let recordBytes = 64

    /// Writes 20 records (a snapshot after the 10th when asked) and closes
    /// the log cleanly; returns the options and the first LSN of each segment.
    static func write(_ testCase: Case) async throws -> (StorageOptions, [LogSequenceNumber]) {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: testCase.segments ? 512 : 4096, payloadBytesMax: 64)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        for index in 0..<20 {
            _ = try await appendAndWait(log, [[UInt8](repeating: UInt8(index + 1), count: payloadBytes)]).get()
            if testCase.snapshot && index == 9 {
                let writer = try log.beginSnapshot(counts: SnapshotCounts(records: 1, groups: 1))
                try writer.append([1, 2, 3])
                try log.checkpoint(try writer.finish())
            }
        }
        let segments = log.segmentFirstLSNs
        log.close()
        return (options, segments)
    }

    /// Applies `shape` to the last segment, keeping its first `keep` records.
    static func damage(
        _ shape: Shape, _ fileSystem: FaultInjectingFileSystem, lastSegment: LogSequenceNumber, keep: Int
    ) throws {
        let path = segmentPath(lastSegment.rawValue)
        var bytes = try #require(fileSystem.contents(path))
        let boundary = SegmentFormat.headerBytes + keep * recordBytes
        switch shape {
        case .truncatedAtRecordBoundary: bytes.removeLast(bytes.count - boundary)
        case .zeroedFromRecordBoundary:
            bytes.replaceSubrange(boundary..., with: repeatElement(0, count: bytes.count - boundary))
        case .cutToHeader: bytes.removeLast(bytes.count - SegmentFormat.headerBytes)
        case .lastSegmentDeleted:
            try fileSystem.remove(path)
            return
        }
        fileSystem.overwrite(path, with: bytes)
    }

    @Test(
        "each shape of shortened log stops start-up naming the file and offset, and verify exits non-zero",
        arguments: cases)
    func refused(_ testCase: Case) async throws {
        let (options, segments) = try await Self.write(testCase)
        let fileSystem = try #require(options.fileSystem as? FaultInjectingFileSystem)
        let last = try #require(segments.last)
        // Keep one record of the last segment (the 20th record's segment holds
        // it and maybe more): the cut always loses records after the snapshot.
        let recordsInLast = Int(21 - last.rawValue)
        try Self.damage(testCase.shape, fileSystem, lastSegment: last, keep: min(1, recordsInLast - 1))
        let report = try WALTool.verify(directory: dataDirectory, options: options)
        #expect(report.verdict == .unrecoverable, "\(report.lines)")
        let opened = Result { () throws(StorageError) -> Int in
            let (log, state) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
            defer { log.close() }
            var replayed = 0
            try state.replay { _ in replayed += 1 }
            return replayed
        }
        switch opened {
        case .success(let replayed):
            Issue.record("started with \(replayed) log records after \(testCase.testDescription)")
        case .failure(.damaged(let damage)):
            #expect(damage.file.hasPrefix(dataDirectory + "/wal"), "\(damage)")
            #expect(damage.description.contains("offset"))
            #expect(damage.description.contains("roost wal verify"))
        case .failure(let other):
            Issue.record("refused for another reason: \(other)")
        }
    }

    @Test(
        "a clean log with each shape's files intact starts and verifies clean (no false alarm)",
        arguments: [false, true])
    func intact(_ snapshot: Bool) async throws {
        let (options, _) = try await Self.write(Case(shape: .cutToHeader, snapshot: snapshot, segments: true))
        #expect(try WALTool.verify(directory: dataDirectory, options: options).verdict == .ok)
        let read = try reopenAndRead(options)
        #expect(read.log.last?.lsn == 20)
        // And again: the reopen and its clean close leave nothing to complain about.
        #expect(try reopenAndRead(options).log.last?.lsn == 20)
    }
}
