import Glibc
import RoostPlatform
import RoostTesting
import Testing

@testable import RoostStorage

@Suite("Snapshots and checkpoints")
struct SnapshotTests {
    /// Writes `count` log records of one byte each.
    static func fill(_ log: WriteAheadLog, _ count: Int, from start: Int = 0) async throws {
        for index in start..<(start + count) {
            _ = try await appendAndWait(log, [[UInt8(truncatingIfNeeded: index)]]).get()
        }
    }

    /// Writes a snapshot of `records` in slices and checkpoints it.
    static func snapshot(_ log: WriteAheadLog, _ records: [[UInt8]]) throws -> SnapshotSummary {
        let writer = try log.beginSnapshot(counts: SnapshotCounts(records: UInt64(records.count), groups: 1))
        for record in records { try writer.append(record) }
        let summary = try writer.finish()
        try log.checkpoint(summary)
        return summary
    }

    /// Returns the damage `body` throws, or nil when it throws nothing or something else.
    static func damage(_ body: () throws(StorageError) -> Void) -> Damage? {
        switch Result(catching: body) {
        case .success: return nil
        case .failure(let error):
            guard case .damaged(let damage) = error else { return nil }
            return damage
        }
    }

    @Test("a snapshot round-trips its records and recovery replays only the log after its start LSN")
    func roundTrip() async throws {
        let seed = testSeed(0x5EED_0201)
        var random = SeededRandom(seed: seed)
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 512, payloadBytesMax: 64)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        try await Self.fill(log, 30)
        let records = randomPayloads(500, maxBytes: 300, &random)
        let summary = try Self.snapshot(log, records)
        #expect(summary.startLSN == 31, "seed \(seed)")
        #expect(summary.recordCount == 500, "seed \(seed)")
        try await Self.fill(log, 5, from: 100)
        log.close()
        let (reopened, state) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        defer { reopened.close() }
        #expect(state.snapshot?.counts == SnapshotCounts(records: 500, groups: 1), "seed \(seed)")
        let read = try recoveredRecords(state)
        #expect(read.snapshot == records, "seed \(seed)")
        #expect(read.log.map(\.lsn.rawValue) == Array(31...35), "seed \(seed)")
        #expect(read.log.map(\.payload) == (100..<105).map { [UInt8($0)] }, "seed \(seed)")
    }

    @Test(
        "borrowed reading (withNextRecord) yields the same records as next(), across buffer refills and large records")
    func borrowedReading() async throws {
        var random = SeededRandom(seed: testSeed(0x5EED_0202))
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 512, payloadBytesMax: 64)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        var records = randomPayloads(3_000, maxBytes: 700, &random)
        records.insert((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) }, at: 1_000)
        records.insert([], at: 2_000)
        records.append((0..<((1 << 20) + 5)).map { UInt8(truncatingIfNeeded: $0 &* 13) })
        _ = try Self.snapshot(log, records)
        log.close()
        for borrowed in [false, true] {
            let (reopened, state) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
            defer { reopened.close() }
            let reader = try #require(state.snapshot)
            #expect(reader.recordCount == UInt64(records.count))
            var read: [[UInt8]] = []
            if borrowed {
                while let record = try reader.withNextRecord({ Array($0) }) { read.append(record) }
            } else {
                while let record = try reader.next() { read.append(record) }
            }
            #expect(read == records, "borrowed \(borrowed)")
        }
    }

    @Test("checkpoints keep the older checkpoint's snapshot and segments, and delete what neither needs")
    func retention() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 256, payloadBytesMax: 64)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        try await Self.fill(log, 20)
        _ = try Self.snapshot(log, [[1]])
        #expect(log.segmentFirstLSNs.first == 1, "the first checkpoint keeps the log from LSN 1")
        try await Self.fill(log, 20)
        _ = try Self.snapshot(log, [[2]])
        #expect(log.segmentFirstLSNs.first! <= 21)
        #expect(log.segmentFirstLSNs.first! > 1)
        try await Self.fill(log, 20)
        _ = try Self.snapshot(log, [[3]])
        #expect(log.segmentFirstLSNs.first! <= 41)
        #expect(log.segmentFirstLSNs.first! > 21)
        let snapshots = try fileSystem.list(dataDirectory + "/snapshots")
        #expect(snapshots == [SnapshotFormat.fileName(startLSN: 41), SnapshotFormat.fileName(startLSN: 61)])
        #expect(throws: StorageError.self) { _ = try log.beginSnapshot(counts: SnapshotCounts(records: 0, groups: 0)) }
        log.close()
        #expect(try WALTool.verify(directory: dataDirectory, options: options).verdict == .ok)
    }

    @Test("a damaged newest checkpoint slot falls back to the other slot and gives the same state")
    func slotCorruption() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 256, payloadBytesMax: 64)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        try await Self.fill(log, 10)
        _ = try Self.snapshot(log, (0..<10).map { [UInt8($0)] })
        try await Self.fill(log, 10, from: 10)
        _ = try Self.snapshot(log, (0..<20).map { [UInt8($0)] })
        try await Self.fill(log, 3, from: 20)
        log.close()
        // Newest is in slot 1 (slot 0 took the first checkpoint).
        let newest = dataDirectory + "/checkpoint.1"
        var slot = try #require(fileSystem.contents(newest))
        slot[20] ^= 0x04
        fileSystem.overwrite(newest, with: slot)
        let (reopened, state) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        reopened.close()
        #expect(state.replayFrom == 11)
        let read = try recoveredRecords(state)
        // Older snapshot (records 0..<10) + the longer replay (LSN 11...23) rebuild the same state.
        #expect(read.snapshot == (0..<10).map { [UInt8($0)] })
        #expect(read.log.map(\.payload) == (10..<23).map { [UInt8($0)] })
        let report = try WALTool.verify(directory: dataDirectory, options: options)
        #expect(report.verdict == .recoverable)
        #expect(report.damages.map(\.file) == [newest])
    }

    @Test("every single-bit flip in a small snapshot is refused with file and offset; recovery falls back to the log")
    func bitFlipsInSnapshot() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 1024, payloadBytesMax: 64)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        try await Self.fill(log, 4)
        let summary = try Self.snapshot(log, [[0], [1], [2], [3]])
        try await Self.fill(log, 2, from: 4)
        log.close()
        let pristine = try #require(fileSystem.contents(summary.path))
        for bit in 0..<(pristine.count * 8) {
            var flipped = pristine
            flipped[bit / 8] ^= UInt8(1 << (bit % 8))
            fileSystem.overwrite(summary.path, with: flipped)
            let damage = Self.damage { () throws(StorageError) in
                _ = try SnapshotReader.verify(fileSystem: fileSystem, path: summary.path)
            }
            #expect(damage?.file == summary.path, "bit \(bit)")
            #expect((0..<pristine.count).contains(damage?.offset ?? -1), "bit \(bit)")
            // The first checkpoint keeps the whole log, so the state is rebuilt exactly from it.
            let read = try reopenAndRead(options)
            #expect(read.snapshot.isEmpty, "bit \(bit)")
            #expect(read.log.map(\.payload) == (0..<6).map { [UInt8($0)] }, "bit \(bit)")
        }
        fileSystem.overwrite(summary.path, with: pristine)
    }

    @Test("a snapshot that never finished is ignored and its temporary file removed at open")
    func unfinishedSnapshot() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        try await Self.fill(log, 3)
        let writer = try log.beginSnapshot(counts: SnapshotCounts(records: 1, groups: 1))
        try writer.append([9])
        log.close()
        fileSystem.simulateCrash(.dropUnsynced)
        let read = try reopenAndRead(options)
        #expect(read.snapshot.isEmpty)
        #expect(read.log.count == 3)
        #expect(try fileSystem.list(dataDirectory + "/snapshots").isEmpty)
    }

    @Test("a checkpoint is refused once the log has failed, so a snapshot never makes a failed write durable")
    func checkpointRefusedAfterFailure() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        try await Self.fill(log, 2)
        fileSystem.inject(.init(operation: .syncData, nth: 1, errno: EIO, pathContains: "/wal/"))
        let failed = await appendAndWait(log, [[3]])
        #expect(throws: StorageError.self) { try failed.get() }
        let writer = try log.beginSnapshot(counts: SnapshotCounts(records: 3, groups: 1))
        for record in [[UInt8(1)], [2], [3]] { try writer.append(record) }
        let summary = try writer.finish()
        #expect(throws: StorageError.self) { try log.checkpoint(summary) }
        log.close()
        fileSystem.clearFaults()
        // Without a power loss the page cache may still hold the failed group,
        // so its outcome is unknown (docs/storage.md); after one it is gone.
        fileSystem.simulateCrash(.dropUnsynced)
        #expect(fileSystem.contents(dataDirectory + "/checkpoint.0") == nil)
        #expect(fileSystem.contents(dataDirectory + "/checkpoint.1") == nil)
        let read = try reopenAndRead(options)
        #expect(read.snapshot.isEmpty)
        #expect(read.log.map(\.payload) == [[0], [1]])
    }

    @Test("dump prints one line per record with the payload cut to 16 bytes")
    func dump() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        _ = try await appendAndWait(log, [[UInt8](repeating: 0xAB, count: 40), [1, 2]]).get()
        log.close()
        var lines: [String] = []
        try WALTool.dump(directory: dataDirectory, options: options) { lines.append($0) }
        #expect(lines.count == 3)
        #expect(lines[1].hasPrefix("lsn=1 kind=mutation length=40 crc="))
        #expect(lines[1].hasSuffix("payload=" + String(repeating: "ab", count: 16) + "…"))
        #expect(lines[2].hasSuffix("length=2 crc=" + lines[2].split(separator: "=")[4].prefix(8) + " payload=0102"))
    }

    @Test("verify names a mid-log CRC mismatch with file and offset and an exit code of 2")
    func verifyDamage() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        try await Self.fill(log, 5)
        log.close()
        let path = segmentPath(1)
        var bytes = try #require(fileSystem.contents(path))
        let second = SegmentFormat.headerBytes + SegmentFormat.recordBytes(payloadBytes: 1)
        bytes[second + SegmentFormat.recordHeaderBytes] ^= 0xFF
        fileSystem.overwrite(path, with: bytes)
        let report = try WALTool.verify(directory: dataDirectory, options: options)
        #expect(report.exitCode == 2)
        #expect(report.damages.first?.file == path)
        #expect(report.damages.first?.offset == second)
        #expect(throws: StorageError.self) { _ = try reopenAndRead(options) }
    }
}
