import Glibc
import RoostPlatform
import RoostTesting
import Testing

@testable import RoostStorage

@Suite("Background snapshot writer")
struct BackgroundSnapshotWriterTests {
    /// Offers every batch, waiting while the queue is full (the thread
    /// resumes the wait), then seals.
    static func write(_ writer: BackgroundSnapshotWriter, _ batches: [[[UInt8]]]) async throws(StorageError)
        -> SnapshotSummary
    {
        for batch in batches {
            while !writer.offer(batch) {
                if let failure = writer.failure {
                    // As DurableEngine does: stop the thread, remove the temporary file.
                    writer.close()
                    await writer.wait(for: .done)
                    writer.abandon()
                    throw failure
                }
                await writer.wait(for: .room)
            }
        }
        writer.close()
        await writer.wait(for: .done)
        #expect(writer.isDone)
        return try writer.finish()
    }

    @Test("records offered in batches through the low-priority thread read back in order, exactly")
    func roundTrip() async throws {
        var random = SeededRandom(seed: testSeed(0x5EED_0B61))
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 512, payloadBytesMax: 64)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        _ = try await appendAndWait(log, [[1]]).get()
        let records = randomPayloads(2_000, maxBytes: 300, &random)
        let batches = stride(from: 0, to: records.count, by: 37).map {
            Array(records[$0..<min(records.count, $0 + 37)])
        }
        let writer = BackgroundSnapshotWriter(
            try log.beginSnapshot(counts: SnapshotCounts(records: UInt64(records.count), groups: 1)))
        let summary = try await Self.write(writer, batches)
        #expect(summary.recordCount == UInt64(records.count))
        try log.checkpoint(summary)
        log.close()
        let (reopened, state) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        defer { reopened.close() }
        #expect(try recoveredRecords(state).snapshot == records)
    }

    /// A source of fixed batches that remembers how many it handed out.
    struct CountingSource: SnapshotRecordSource {
        var batches: [[[UInt8]]]
        var produced = 0
        mutating func nextBatch() -> [[UInt8]]? {
            guard produced < batches.count else { return nil }
            produced += 1
            return batches[produced - 1]
        }
    }

    @Test("a source drained on the snapshot thread lands between the batches around it, and comes back drained")
    func sourceInOrder() async throws {
        var random = SeededRandom(seed: testSeed(0x5EED_50C3))
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 512, payloadBytesMax: 64)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        _ = try await appendAndWait(log, [[1]]).get()
        let records = randomPayloads(900, maxBytes: 200, &random)
        let before = Array(records[0..<100])
        let fromSource = stride(from: 100, to: 800, by: 70).map { Array(records[$0..<$0 + 70]) }
        let after = Array(records[800...])
        let writer = BackgroundSnapshotWriter(
            try log.beginSnapshot(counts: SnapshotCounts(records: UInt64(records.count), groups: 1)))
        #expect(writer.offer(before), "an empty queue has room")
        #expect(writer.offer(source: CountingSource(batches: fromSource)), "and room for a second item")
        await writer.wait(for: .returnedSource)
        let drained = try #require(writer.takeReturnedSource() as? CountingSource)
        #expect(drained.produced == fromSource.count)
        #expect(writer.takeReturnedSource() == nil)
        let summary = try await Self.write(writer, [after])
        #expect(summary.recordCount == UInt64(records.count))
        try log.checkpoint(summary)
        log.close()
        let (reopened, state) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        defer { reopened.close() }
        #expect(try recoveredRecords(state).snapshot == records)
    }

    @Test("a failed write is reported, offers stop, and no snapshot file is left behind")
    func failedWrite() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 512, payloadBytesMax: 64)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        defer { log.close() }
        _ = try await appendAndWait(log, [[1]]).get()
        let writer = BackgroundSnapshotWriter(try log.beginSnapshot(counts: SnapshotCounts(records: 1, groups: 1)))
        fileSystem.inject(.init(operation: .write, nth: 1, errno: ENOSPC, pathContains: "snap", sticky: true))
        let big = [[UInt8]](repeating: [UInt8](repeating: 7, count: 60_000), count: 64)
        await #expect(throws: StorageError.self) { _ = try await Self.write(writer, [big, big, big, big]) }
        let snapshots = (try? fileSystem.list(dataDirectory + "/snapshots")) ?? []
        #expect(snapshots.isEmpty, "left behind: \(snapshots)")
    }
}
