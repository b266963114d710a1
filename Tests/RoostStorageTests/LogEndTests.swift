import Glibc
import RoostPlatform
import RoostTesting
import Testing

@testable import RoostStorage

/// The log-end file: what it proves after a crash, what it cannot, and how a
/// directory of an older release (none) is taken over.
@Suite("The log-end file")
struct LogEndTests {
    static let endPath = "\(dataDirectory)/\(LogEndFormat.fileName)"

    /// The log-end file as the in-memory file system holds it now.
    static func logEnd(_ fileSystem: FaultInjectingFileSystem) -> LogEnd? {
        guard case .valid(let end, _, _) = LogEndFormat.decode(fileSystem.contents(endPath), path: endPath) else {
            return nil
        }
        return end
    }

    static func payload(_ index: Int) -> [UInt8] { [UInt8](repeating: UInt8(index + 1), count: 40) }

    /// Zeroes the segment starting at `first` from just after its `keep`th record.
    static func zero(_ fileSystem: FaultInjectingFileSystem, segment first: UInt64, keep: Int) throws {
        var bytes = try #require(fileSystem.contents(segmentPath(first)))
        let boundary = SegmentFormat.headerBytes + keep * SegmentFormat.recordBytes(payloadBytes: 40)
        bytes.replaceSubrange(boundary..., with: repeatElement(0, count: bytes.count - boundary))
        fileSystem.overwrite(segmentPath(first), with: bytes)
    }

    @Test("after a crash, records the log-end file had recorded and that were then zeroed are refused")
    func crashThenZeroedMarkedRecords() async throws {
        let fileSystem = FaultInjectingFileSystem()
        var options = testOptions(fileSystem)
        options.logEndIntervalMilliseconds = 1
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        for index in 0..<10 { _ = try await appendAndWait(log, [Self.payload(index)]).get() }
        // The I/O thread records the end within about a millisecond of the last sync.
        _ = await ConditionWait.until(within: .seconds(2)) { () async -> Bool in
            (Self.logEnd(fileSystem)?.endLSN ?? 0) >= 10
        }
        #expect(Self.logEnd(fileSystem)?.endLSN == 10)
        #expect(Self.logEnd(fileSystem)?.cleanShutdown == false)
        fileSystem.simulateCrash(.dropUnsynced)
        log.close()
        #expect(Self.logEnd(fileSystem)?.cleanShutdown == false, "no clean close after the crash")
        try Self.zero(fileSystem, segment: 1, keep: 5)
        #expect {
            _ = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        } throws: { error in
            guard case StorageError.damaged(let damage) = error else { return false }
            return damage.file == segmentPath(1) && damage.offset == 32 + 5 * 64 && damage.reason.contains("LSN 10")
        }
        #expect(try WALTool.verify(directory: dataDirectory, options: options).verdict == .unrecoverable)
    }

    @Test("the known limit: records synced after the last log-end mark, zeroed after a crash, look never written")
    func crashThenZeroedUnmarkedRecords() async throws {
        let fileSystem = FaultInjectingFileSystem()
        var options = testOptions(fileSystem)
        options.logEndIntervalMilliseconds = 3_600_000
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        for index in 0..<3 { _ = try await appendAndWait(log, [Self.payload(index)]).get() }
        fileSystem.simulateCrash(.dropUnsynced)
        log.close()
        // Opening records the recovered end (3) before anything is appended.
        let (reopened, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        #expect(Self.logEnd(fileSystem)?.endLSN == 3)
        for index in 3..<10 { _ = try await appendAndWait(reopened, [Self.payload(index)]).get() }
        fileSystem.simulateCrash(.dropUnsynced)
        reopened.close()
        // Records 4…10 were synced but never recorded: zeroing them is not detectable.
        try Self.zero(fileSystem, segment: 1, keep: 3)
        #expect(try reopenAndRead(options).log.map(\.lsn.rawValue) == [1, 2, 3])
        // Zeroing into what the open recorded is.
        try Self.zero(fileSystem, segment: 1, keep: 2)
        #expect(throws: StorageError.self) { _ = try reopenAndRead(options) }
    }

    @Test("a clean close records the exact end; the reopen keeps appending to the same segment")
    func cleanClose() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        #expect(Self.logEnd(fileSystem) == LogEnd(sequence: 2, endLSN: 0, openSegment: 1, cleanShutdown: false))
        for index in 0..<4 { _ = try await appendAndWait(log, [Self.payload(index)]).get() }
        log.close()
        #expect(Self.logEnd(fileSystem)?.endLSN == 4)
        #expect(Self.logEnd(fileSystem)?.openSegment == 1)
        #expect(Self.logEnd(fileSystem)?.cleanShutdown == true)
        let (again, state) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        #expect(state.nextLSN == 5)
        #expect(again.segmentFirstLSNs == [1])
        again.close()
    }

    @Test("a roll records the new segment before any record goes into it")
    func rollRecordsTheSegment() async throws {
        let fileSystem = FaultInjectingFileSystem()
        var options = testOptions(fileSystem, segmentBytesMax: 256, payloadBytesMax: 64)
        options.logEndIntervalMilliseconds = 3_600_000
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        for index in 0..<4 { _ = try await appendAndWait(log, [Self.payload(index)]).get() }
        let segments = log.segmentFirstLSNs
        #expect(segments.count == 2)
        #expect(Self.logEnd(fileSystem)?.openSegment == segments[1])
        #expect(Self.logEnd(fileSystem)?.endLSN.rawValue == segments[1].rawValue - 1)
        fileSystem.simulateCrash(.dropUnsynced)
        log.close()
        // The new segment deleted after the crash: the loss of its records is seen.
        try fileSystem.remove(segmentPath(segments[1].rawValue))
        #expect {
            _ = try reopenAndRead(options)
        } throws: { error in
            guard case StorageError.damaged(let damage) = error else { return false }
            return damage.file == segmentPath(segments[1].rawValue) && damage.reason.contains("segment missing")
        }
    }

    @Test("the log-end file deleted beside segments this release wrote stops start-up")
    func logEndDeleted() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        _ = try await appendAndWait(log, [Self.payload(0)]).get()
        log.close()
        try fileSystem.remove(Self.endPath)
        #expect {
            _ = try reopenAndRead(options)
        } throws: { error in
            guard case StorageError.damaged(let damage) = error else { return false }
            return damage.file == Self.endPath
        }
        #expect(try WALTool.verify(directory: dataDirectory, options: options).verdict == .unrecoverable)
    }

    @Test("a torn log-end slot write falls back to the other slot; both damaged stops start-up")
    func tornSlot() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        _ = try await appendAndWait(log, [Self.payload(0)]).get()
        log.close()
        let pristine = try #require(fileSystem.contents(Self.endPath))
        let newest = try #require(Self.logEnd(fileSystem))
        var torn = pristine
        torn[LogEndFormat.slotOffsets[Int(newest.sequence % 2)] + 20] ^= 0x40
        fileSystem.overwrite(Self.endPath, with: torn)
        #expect(try WALTool.verify(directory: dataDirectory, options: options).verdict == .recoverable)
        #expect(try reopenAndRead(options).log.count == 1)
        // The open and close wrote both slots again.
        #expect(try WALTool.verify(directory: dataDirectory, options: options).verdict == .ok)
        var both = pristine
        for offset in LogEndFormat.slotOffsets { both[offset + 20] ^= 0x40 }
        fileSystem.overwrite(Self.endPath, with: both)
        #expect(throws: StorageError.self) { _ = try reopenAndRead(options) }
        fileSystem.overwrite(Self.endPath, with: Array(pristine.prefix(100)))
        #expect(throws: StorageError.self) { _ = try reopenAndRead(options) }
    }

    @Test("every single-bit flip in the log-end file is refused, falls back to the other slot, or changes nothing")
    func bitFlips() throws {
        var file = [UInt8](repeating: 0, count: LogEndFormat.fileBytes)
        let older = LogEndFormat.encode(LogEnd(sequence: 4, endLSN: 90, openSegment: 50, cleanShutdown: false))
        let newer = LogEndFormat.encode(LogEnd(sequence: 5, endLSN: 99, openSegment: 50, cleanShutdown: true))
        file.replaceSubrange(0..<48, with: older)
        file.replaceSubrange(4096..<(4096 + 48), with: newer)
        for slot in [0, 4096] {
            for bit in 0..<(48 * 8) {
                var flipped = file
                flipped[slot + bit / 8] ^= UInt8(1 << (bit % 8))
                switch LogEndFormat.decode(flipped, path: "e") {
                case .valid(let end, _, let torn):
                    #expect(torn != nil, "bit \(bit) of slot \(slot) went unnoticed")
                    #expect(end.sequence == (slot == 0 ? 5 : 4))
                case .damaged, .missing:
                    Issue.record("one flipped slot must leave the other")
                }
            }
        }
    }

    @Test("an older release's directory (version-1 segment, no log-end file) starts and goes on in a new segment")
    func olderRelease() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem)
        try fileSystem.createDirectory("\(dataDirectory)/wal")
        try fileSystem.createDirectory("\(dataDirectory)/snapshots")
        var bytes = SegmentFormat.encodeVersion1Header(firstLSN: 1)
        for index in 0..<5 {
            SegmentFormat.appendRecord(
                kind: .mutation, lsn: LogSequenceNumber(UInt64(index + 1)), payload: Self.payload(index), to: &bytes)
        }
        bytes.append(contentsOf: repeatElement(0, count: 4096 - bytes.count))
        fileSystem.overwrite(segmentPath(1), with: bytes)
        #expect(try WALTool.verify(directory: dataDirectory, options: options).verdict == .ok)
        let (log, state) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        var replayed: [UInt64] = []
        try state.replay { replayed.append($0.lsn.rawValue) }
        #expect(replayed == [1, 2, 3, 4, 5])
        // The older segment is left as it is; the log goes on in a version-2 one.
        #expect(log.segmentFirstLSNs == [1, 6])
        #expect(fileSystem.contents(segmentPath(1)) == bytes)
        #expect(Self.logEnd(fileSystem)?.openSegment == 6)
        _ = try await appendAndWait(log, [Self.payload(5)]).get()
        log.close()
        #expect(try reopenAndRead(options).log.map(\.lsn.rawValue) == [1, 2, 3, 4, 5, 6])
        #expect(try WALTool.verify(directory: dataDirectory, options: options).verdict == .ok)
        // From now on the older segment's records are proven too.
        var cut = bytes
        cut.replaceSubrange((32 + 3 * 64)..., with: repeatElement(0, count: bytes.count - 32 - 3 * 64))
        fileSystem.overwrite(segmentPath(1), with: cut)
        #expect(throws: StorageError.self) { _ = try reopenAndRead(options) }
    }

    @Test("a segment created with another segmentBytesMax is left as it is and the log goes on in a new one")
    func otherSegmentSize() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let (log, _) = try WriteAheadLog.open(
            directory: dataDirectory, policy: .always, options: testOptions(fileSystem, segmentBytesMax: 2048))
        _ = try await appendAndWait(log, [Self.payload(0)]).get()
        log.close()
        let options = testOptions(fileSystem, segmentBytesMax: 4096)
        let (again, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        #expect(again.segmentFirstLSNs == [1, 2])
        _ = try await appendAndWait(again, [Self.payload(1)]).get()
        again.close()
        #expect(fileSystem.contents(segmentPath(1))?.count == 2048)
        #expect(fileSystem.contents(segmentPath(2))?.count == 4096)
        #expect(try reopenAndRead(options).log.count == 2)
    }
}
