import Glibc
import RoostPlatform
import RoostTesting
import Synchronization
import Testing

@testable import RoostStorage

@Suite("Write-ahead log")
struct WriteAheadLogTests {
    @Test("appended records come back in LSN order after a reopen, across segment rolls")
    func appendReopen() async throws {
        let seed = testSeed(0x5EED_0101)
        var random = SeededRandom(seed: seed)
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 1024, payloadBytesMax: 200)
        let (log, state) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        #expect(state.nextLSN == 1)
        var written: [[UInt8]] = []
        for _ in 0..<40 {
            let batch = randomPayloads(Int(random.next() % 3) + 1, maxBytes: 200, &random)
            written += batch
            let result = await appendAndWait(log, batch)
            #expect(try result.get().rawValue == UInt64(written.count), "seed \(seed)")
        }
        #expect(log.segmentFirstLSNs.count > 3, "seed \(seed)")
        log.close()
        let read = try reopenAndRead(options)
        #expect(read.log.map(\.payload) == written, "seed \(seed)")
        #expect(read.log.map(\.lsn.rawValue) == Array(1...UInt64(written.count)), "seed \(seed)")
    }

    @Test(
        "a torn tail of any length up to a whole record recovers the whole records, then 10 more give n + 10; cut off, refused"
    )
    func tornTails() async throws {
        let fileSystem = FaultInjectingFileSystem()
        var options = testOptions(fileSystem)
        // Only open, rolls and close record the end: the records below were
        // synced but not yet recorded when the power went (a torn tail can
        // only be such a record; a clean close would prove it whole).
        options.logEndIntervalMilliseconds = 3_600_000
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        let n = 6
        // 24-byte payloads: no padding, so every cut removes bytes that matter.
        for index in 0..<n { _ = try await appendAndWait(log, [[UInt8](repeating: UInt8(index + 1), count: 24)]).get() }
        fileSystem.simulateCrash(.dropUnsynced)
        log.close()
        let path = segmentPath(1)
        let pristine = try #require(fileSystem.contents(path))
        let endPath = "\(dataDirectory)/\(LogEndFormat.fileName)"
        let pristineEnd = try #require(fileSystem.contents(endPath))
        let span = SegmentFormat.recordBytes(payloadBytes: 24)
        let end = SegmentFormat.headerBytes + n * span
        for truncateFile in [false, true] {
            for cut in 1...span {
                // The last record lost its final `cut` bytes: zero (preallocated) or cut off.
                var torn = pristine
                if truncateFile {
                    torn.removeLast(torn.count - (end - cut))
                } else {
                    for index in (end - cut)..<end { torn[index] = 0 }
                }
                fileSystem.overwrite(path, with: torn)
                if truncateFile {
                    // A segment is created at its full size before its name
                    // exists, so a crash never shortens one: a short file was cut.
                    #expect(throws: StorageError.self, "cut \(cut)") {
                        _ = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
                    }
                    fileSystem.overwrite(path, with: pristine)
                    continue
                }
                let (reopened, state) = try WriteAheadLog.open(
                    directory: dataDirectory, policy: .always, options: options)
                var count = 0
                try state.replay { _ in count += 1 }
                #expect(count == n - 1, "cut \(cut) truncate \(truncateFile)")
                for extra in 0..<10 { _ = try await appendAndWait(reopened, [[UInt8(extra)]]).get() }
                reopened.close()
                let read = try reopenAndRead(options)
                #expect(read.log.count == n - 1 + 10, "cut \(cut) truncate \(truncateFile)")
                #expect(read.log.last?.lsn.rawValue == UInt64(n - 1 + 10))
                fileSystem.overwrite(path, with: pristine)
                fileSystem.overwrite(endPath, with: pristineEnd)
            }
        }
    }

    @Test("every single-bit flip in a sealed segment is refused with file and offset, or leaves the state identical")
    func bitFlipsInSealedSegment() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 256, payloadBytesMax: 64)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        for index in 0..<8 { _ = try await appendAndWait(log, [[UInt8](repeating: UInt8(index + 1), count: 40)]).get() }
        log.close()
        let expected = try reopenAndRead(options).log
        #expect(log.segmentFirstLSNs.count >= 2)
        let sealed = segmentPath(1)
        let pristine = try #require(fileSystem.contents(sealed))
        var refused = 0
        for bit in 0..<(pristine.count * 8) {
            var flipped = pristine
            flipped[bit / 8] ^= UInt8(1 << (bit % 8))
            fileSystem.overwrite(sealed, with: flipped)
            do {
                let read = try reopenAndRead(options)
                #expect(read.log == expected, "bit \(bit) silently changed the log")
            } catch StorageError.damaged(let damage) {
                refused += 1
                #expect(damage.file == sealed, "bit \(bit)")
                #expect(damage.offset <= bit / 8 || damage.offset < pristine.count, "bit \(bit)")
            }
        }
        fileSystem.overwrite(sealed, with: pristine)
        #expect(refused == pristine.count * 8)
    }

    @Test("a missing middle segment is an LSN gap that stops start-up")
    func lsnGap() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem, segmentBytesMax: 256, payloadBytesMax: 64)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        for _ in 0..<12 { _ = try await appendAndWait(log, [[UInt8](repeating: 9, count: 40)]).get() }
        let segments = log.segmentFirstLSNs
        log.close()
        #expect(segments.count >= 3)
        try fileSystem.remove(segmentPath(segments[1].rawValue))
        #expect {
            _ = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        } throws: { error in
            guard case StorageError.damaged(let damage) = error else { return false }
            return damage.reason.contains("LSN gap") && damage.file == segmentPath(segments[2].rawValue)
        }
    }

    @Test("64 concurrent writers under always: fdatasyncs are at most 20% of acknowledgements")
    func groupCommit() async throws {
        let fileSystem = FaultInjectingFileSystem(syncDelayMicroseconds: 300)
        let options = testOptions(fileSystem, segmentBytesMax: 1 << 20)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        let syncsBefore = fileSystem.count(.syncData)
        let perWriter = 40
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<64 {
                group.addTask {
                    for index in 0..<perWriter {
                        _ = try await appendAndWait(log, [[UInt8(writer), UInt8(index)]]).get()
                    }
                }
            }
            try await group.waitForAll()
        }
        let syncs = fileSystem.count(.syncData) - syncsBefore
        let acknowledgements = 64 * perWriter
        #expect(syncs * 5 <= acknowledgements, "\(syncs) syncs for \(acknowledgements) acknowledgements")
        log.close()
        #expect(try reopenAndRead(options).log.count == acknowledgements)
    }

    @Test("always: after a simulated power loss every completed append is recovered")
    func alwaysLosesNothingCompleted() async throws {
        for seed in [testSeed(1), 2, 3] {
            let fileSystem = FaultInjectingFileSystem(syncDelayMicroseconds: 100)
            let lines = LogLines()
            let options = testOptions(fileSystem, segmentBytesMax: 2048, log: lines)
            let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
            let completed = Shared<Set<UInt64>>([])
            let stop = Shared(false)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<8 {
                    group.addTask {
                        var index = 0
                        while !stop.value {
                            let payload = [UInt8(writer), UInt8(truncatingIfNeeded: index)]
                            if case .success(let lsn) = await appendAndWait(log, [payload]) {
                                completed.update { _ = $0.insert(lsn.rawValue) }
                            }
                            index += 1
                        }
                    }
                }
                // Crash in the middle of the load, once some appends have completed.
                _ = await ConditionWait.until { () async -> Bool in completed.value.count >= 200 }
                fileSystem.simulateCrash(.keepUnsyncedPrefix(seed: seed))
                stop.update { $0 = true }
                try await group.waitForAll()
            }
            log.close()
            let recovered = Set(try reopenAndRead(options).log.map(\.lsn.rawValue))
            let done = completed.value
            #expect(!done.isEmpty, "seed \(seed)")
            #expect(
                done.isSubset(of: recovered), "seed \(seed): lost \(done.subtracting(recovered).sorted().prefix(5))")
        }
    }

    @Test("EIO on the Nth fdatasync: that append and every later one fail, no success after the failed sync")
    func eioOnSync() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let lines = LogLines()
        var options = testOptions(fileSystem, log: lines)
        // No log-end mark of an idle log between the appends: its fdatasync
        // would take the injected failure's turn on a slow machine (it failed a loaded run).
        options.logEndIntervalMilliseconds = 3_600_000
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        fileSystem.inject(.init(operation: .syncData, nth: 3, errno: EIO))
        var outcomes: [Bool] = []
        for index in 0..<6 {
            let result = await appendAndWait(log, [[UInt8(index)]])
            outcomes.append((try? result.get()) != nil)
        }
        #expect(outcomes == [true, true, false, false, false, false])
        let syncsAfterFailure = fileSystem.count(.syncData)
        #expect(throws: StorageError.self) { try log.sync() }
        log.close()
        #expect(fileSystem.count(.syncData) == syncsAfterFailure, "a failed fdatasync must never be retried")
        #expect(lines.all.contains { $0.contains(#""wal.error":"syncData""#) && $0.contains(#""wal.errno":5"#) })
        #expect(log.failure != nil)
        fileSystem.clearFaults()
        let read = try reopenAndRead(options)
        #expect(read.log.prefix(2).map(\.payload) == [[0], [1]])
    }

    @Test("ENOSPC on write fails the append and the log stays failed")
    func enospcOnWrite() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        _ = try await appendAndWait(log, [[1]]).get()
        fileSystem.inject(.init(operation: .write, nth: 1, errno: ENOSPC, pathContains: "/wal/"))
        let failed = await appendAndWait(log, [[2]])
        #expect(throws: StorageError.self) { try failed.get() }
        guard case .failure(.logFailed(let cause)) = failed else {
            Issue.record("expected logFailed, got \(failed)")
            return
        }
        #expect(cause.errno == ENOSPC)
        #expect(throws: StorageError.logFailed(cause)) { try log.append([[3]]) { _ in } }
        log.close()
    }

    @Test(
        "held appends: under never and everysec the appender writes them itself when only writes are due (acknowledged on return), else the I/O thread does; all come back in order"
    )
    func heldAppends() async throws {
        let seed = testSeed(0x5EED_0195)
        for policy in [FsyncPolicy.never, .everysec] {
            var random = SeededRandom(seed: seed)
            let fileSystem = FaultInjectingFileSystem()
            let options = testOptions(fileSystem, segmentBytesMax: 1024, payloadBytesMax: 200)
            let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: policy, options: options)
            var written: [[UInt8]] = []
            var wroteHere = 0
            for _ in 0..<120 {
                let batch = randomPayloads(Int(random.next() % 3) + 1, maxBytes: 200, &random)
                written += batch
                let lsns = try log.appendHeld(batch)
                #expect(lsns.upperBound.rawValue == UInt64(written.count))
                if log.writeHeld() {
                    wroteHere += 1
                    #expect(log.acknowledgedLSN == lsns.upperBound, "\(policy), seed \(seed)")
                }
            }
            // Rolls go to the I/O thread (about one in four appends fills the 1 KiB segment).
            #expect(wroteHere > 0 && wroteHere < 120, "\(policy): \(wroteHere) of 120 written by the appender")
            #expect(log.ioStatistics.writesOnAppender == UInt64(wroteHere))
            #expect(try log.sync().rawValue == UInt64(written.count))
            #expect(log.acknowledgedLSN.rawValue == UInt64(written.count))
            log.close()
            let read = try reopenAndRead(options, policy: policy)
            #expect(read.log.map(\.payload) == written, "\(policy), seed \(seed)")
        }
        // always: the write and its fdatasync stay on the I/O thread.
        let options = testOptions(FaultInjectingFileSystem())
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        let lsns = try log.appendHeld([[1], [2]])
        #expect(!log.writeHeld())
        #expect(try log.sync() == lsns.upperBound)
        #expect(log.acknowledgedLSN == lsns.upperBound)
        #expect(log.ioStatistics.writesOnAppender == 0)
        log.close()
    }

    @Test(
        "everysec: after a group an appender wrote, the I/O thread still syncs it within the interval, told by no one else"
    )
    func heldAppendEverysecSync() throws {
        var options = testOptions(FaultInjectingFileSystem())
        options.syncIntervalMilliseconds = 20
        options.logEndIntervalMilliseconds = 3_600_000
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .everysec, options: options)
        // The I/O thread asleep with no deadline first: then only the
        // appender's report can tell it of the sync the write makes due.
        #expect(log.waitForIOThreadToSleep(timeout: .seconds(10)))
        try log.appendHeld([[1]])
        #expect(log.writeHeld())
        #expect(log.groupCommitCounts.syncs == 0)
        #expect(log.waitForSyncs(1, timeout: .seconds(10)), "the written group was never synced")
        log.close()
    }

    @Test("a held append whose write fails on the appender fails the log: nothing acknowledged, later appends refused")
    func heldAppendWriteFails() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let lines = LogLines()
        let options = testOptions(fileSystem, log: lines)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .never, options: options)
        // Each time with the I/O thread asleep: a plan of its own in flight
        // (it is woken after an appender's write) would make the appender hand
        // the group over instead of writing it (`nextWriteOnAppender`).
        #expect(log.waitForIOThreadToSleep(timeout: .seconds(10)))
        try log.appendHeld([[1]])
        #expect(log.writeHeld())
        #expect(log.acknowledgedLSN == LogSequenceNumber(1))
        fileSystem.inject(.init(operation: .write, nth: 1, errno: ENOSPC, pathContains: "/wal/"))
        #expect(log.waitForIOThreadToSleep(timeout: .seconds(10)))
        try log.appendHeld([[2]])
        #expect(log.writeHeld())
        #expect(log.hasFailed)
        #expect(log.acknowledgedLSN == LogSequenceNumber(1))
        guard case .logFailed(let cause) = log.failure else {
            Issue.record("expected logFailed, got \(String(describing: log.failure))")
            return
        }
        #expect(cause.errno == ENOSPC)
        #expect(throws: StorageError.logFailed(cause)) { try log.appendHeld([[3]]) }
        #expect(lines.all.contains { $0.contains(#""wal.state":"failed""#) })
        log.close()
        fileSystem.clearFaults()
        #expect(try reopenAndRead(options, policy: .never).log.map(\.payload) == [[1]])
    }

    @Test("everysec: a simulated power loss loses only records completed in the last interval (manual clock)")
    func everysecPowerLoss() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let clock = ManualMonotonicClock()
        var options = testOptions(fileSystem, segmentBytesMax: 1 << 20)
        options.syncIntervalMilliseconds = 400
        options.clock = clock
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .everysec, options: options)
        // 1.3 s of the log's time, an append every 10 ms of it: the I/O thread
        // sees each step, as it runs for each append.
        let step: Duration = .milliseconds(10)
        var completedAt: [UInt64: UInt64] = [:]
        let start = clock.monotonicNanoseconds()
        while clock.monotonicNanoseconds() - start < 1_300_000_000 {
            let lsn = try await appendAndWait(log, [[7]]).get()
            completedAt[lsn.rawValue] = clock.monotonicNanoseconds()
            clock.advance(by: step)
            log.clockMoved()
        }
        let crashAt = clock.monotonicNanoseconds()
        fileSystem.simulateCrash(.dropUnsynced)
        log.close()
        let recovered = Set(try reopenAndRead(options).log.map(\.lsn.rawValue))
        let lost = completedAt.filter { !recovered.contains($0.key) }
        let oldestLost = lost.values.min() ?? crashAt
        #expect(!recovered.isEmpty)
        // Everything completed a full interval before the crash was synced;
        // at most one step late, when the I/O thread next looked at the clock.
        #expect(!lost.isEmpty, "nothing was lost: the sync did not wait for its interval")
        #expect(
            crashAt - oldestLost <= 400_000_000 + UInt64(step.wholeNanoseconds),
            "lost a record completed \((crashAt - oldestLost) / 1_000_000) ms before the crash")
    }

    @Test("zero-filled segments: the first is written at open, later ones are prepared ahead and renamed in")
    func zeroFilledSegments() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let lines = LogLines()
        var options = testOptions(fileSystem, segmentBytesMax: 1024, payloadBytesMax: 200, log: lines)
        options.zeroFillSegments = true
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        let wal = "\(dataDirectory)/wal"
        // The log-end file (created whole, renamed in), then the first segment:
        // zeros written and synced, then header, rename, directory sync.
        #expect(try fileSystem.list(wal) == [SegmentFormat.fileName(firstLSN: .first)])
        #expect(fileSystem.count(.preallocate) == 0)
        #expect(fileSystem.count(.rename) == 2)
        #expect(fileSystem.contents(segmentPath(1))?.count == 1024)
        // 100-byte payloads take 128 bytes: 7 fill a segment, the 4th passes half.
        var written: [[UInt8]] = []
        let preparer = try #require(log.preparer)
        for segment in 0..<3 {
            // The first segment starts empty, later ones with the record that rolled.
            for _ in 0..<(segment == 0 ? 7 : 6) {
                let payload = [UInt8](repeating: UInt8(written.count + 1), count: 100)
                written.append(payload)
                _ = try await appendAndWait(log, [payload]).get()
            }
            // The preparer was asked at half; wait until its file is ready.
            _ = await ConditionWait.until { () async -> Bool in preparer.state.withLock { $0.ready != nil } }
            #expect(preparer.state.withLock { $0.ready != nil }, "\(lines.all)")
            #expect(try fileSystem.list(wal).contains(SegmentPreparer.fileName))
            // The next record does not fit: the roll takes the prepared file.
            let payload = [UInt8](repeating: 0xEE, count: 100)
            written.append(payload)
            _ = try await appendAndWait(log, [payload]).get()
            #expect(fileSystem.count(.rename) == 3 + segment)
            #expect(fileSystem.count(.preallocate) == 0, "every segment was zero-filled, none preallocated")
            #expect(!(try fileSystem.list(wal).contains(SegmentPreparer.fileName)))
        }
        log.close()
        #expect(!(try fileSystem.list(wal).contains(SegmentPreparer.fileName)), "close removes an unused file")
        for name in try fileSystem.list(wal) {
            #expect(fileSystem.contents("\(wal)/\(name)")?.count == 1024, "\(name)")
        }
        let read = try reopenAndRead(options)
        #expect(read.log.map(\.payload) == written)
    }

    @Test("a prepared file left by a crash is removed at open and never read as a segment")
    func leftoverPreparedFile() async throws {
        let fileSystem = FaultInjectingFileSystem()
        let options = testOptions(fileSystem)
        let (log, _) = try WriteAheadLog.open(directory: dataDirectory, policy: .always, options: options)
        for index in 0..<3 { _ = try await appendAndWait(log, [[UInt8(index)]]).get() }
        log.close()
        let leftover = "\(dataDirectory)/wal/\(SegmentPreparer.fileName)"
        // A half-prepared file with a valid-looking header: still not part of the log.
        fileSystem.overwrite(
            leftover, with: SegmentFormat.encodeHeader(firstLSN: LogSequenceNumber(4), segmentBytes: 4096) + [1, 2, 3])
        let read = try reopenAndRead(options)
        #expect(read.log.map(\.payload) == [[0], [1], [2]])
        #expect(fileSystem.contents(leftover) == nil)
    }

    @Test("completions run in LSN order, whether the I/O thread or the completion thread calls them")
    func completionOrder() async throws {
        let fileSystem = FaultInjectingFileSystem(syncDelayMicroseconds: 50)
        let (log, _) = try WriteAheadLog.open(
            directory: dataDirectory, policy: .always, options: testOptions(fileSystem, segmentBytesMax: 1 << 20))
        let order = Shared<[UInt64]>([])
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<16 {
                group.addTask {
                    for index in 0..<50 {
                        let lsn: LogSequenceNumber = try await withCheckedThrowingContinuation { continuation in
                            do throws(StorageError) {
                                try log.append([[UInt8(writer), UInt8(index)]]) { result in
                                    if case .success(let lsn) = result { order.update { $0.append(lsn.rawValue) } }
                                    continuation.resume(with: result)
                                }
                            } catch {
                                continuation.resume(throwing: error)
                            }
                        }
                        _ = lsn
                    }
                }
            }
            try await group.waitForAll()
        }
        log.close()
        #expect(order.value == Array(1...800))
        let statistics = log.ioStatistics
        #expect(statistics.syncs >= 1 && statistics.syncs <= statistics.plans)
    }

    @Test("the real file system: append, close, reopen through PosixFileSystem")
    func realFileSystem() async throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-storage")
        defer { TemporaryDirectory.remove(directory) }
        var options = StorageOptions()
        options.segmentBytesMax = 64 << 10
        options.recordPayloadBytesMax = 4096
        options.logger = LogLines().logger
        let (log, _) = try WriteAheadLog.open(directory: directory + "/store", policy: .always, options: options)
        for index in 0..<100 { _ = try await appendAndWait(log, [[UInt8](repeating: UInt8(index), count: 1000)]).get() }
        log.close()
        let (again, state) = try WriteAheadLog.open(directory: directory + "/store", policy: .always, options: options)
        var count = 0
        try state.replay { _ in count += 1 }
        again.close()
        #expect(count == 100)
        #expect(try WALTool.verify(directory: directory + "/store", options: options).verdict == .ok)
    }
}
