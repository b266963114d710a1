import RoostPlatform
import RoostStorage
import RoostTelemetry
import RoostTesting

/// The readers' properties checked on arbitrary bytes: WAL segments (header
/// and records), checkpoint slots and snapshots. Shared by the libFuzzer
/// target (Fuzz/StorageFuzz) and the test that replays committed inputs
/// (docs/testing.md). The first byte picks what the rest is (`byte % 4`) and,
/// in its bit 2, whether the check first writes valid CRCs over the bytes
/// (so that arbitrary input gets past the CRC checks to the checks behind them):
///
/// - 0, a segment file: `scan` never reads out of bounds; its records are
///   the file's bytes (re-framed they give back `bytes[headerBytes..<endOffset]`),
///   numbered from the header's first LSN; replay's unchecked reader gives
///   the same records; a clean end has only zeros behind it; every prefix
///   of the file scans to the records that fit in it;
/// - 1, a checkpoint slot: a valid slot is the encoding of what it decodes to;
/// - 2, records for a snapshot, written with `SnapshotWriter`, then maybe one
///   byte changed or the file cut (CRCs rewritten or not): the reader gives
///   back exactly the records written, or reports damage;
/// - 3, a snapshot file: `verify` and the reader report damage or yield
///   records, within `snapshotPlainBytesMax`;
/// - bits 4 and 5 both set, a data directory (see `recoveryProblem`).
package enum StorageFuzzCheck {
    /// The payload limit segments are scanned with (small, so it is reachable).
    static let payloadBytesMax = 1024
    /// Decompressed bytes read from one snapshot before the check stops
    /// (a zstd frame can expand a thousandfold).
    static let snapshotPlainBytesMax = 8 << 20
    /// Record bytes one input may ask the snapshot writer for.
    static let writtenSnapshotBytesMax = 256 << 10

    /// Returns a description of the first broken property for `input`, or nil.
    package static func violation(in input: [UInt8]) -> String? {
        guard let selector = input.first else { return nil }
        var bytes = Array(input.dropFirst())
        let fixChecksums = selector & 4 != 0
        if selector & 0x30 == 0x30 { return recoveryProblem(bytes, fixChecksums: fixChecksums) }
        switch selector % 4 {
        case 0:
            if fixChecksums { writeSegmentChecksums(&bytes) }
            return segmentProblem(bytes, namedAfterHeader: selector & 8 != 0)
        case 1:
            if fixChecksums && bytes.count >= 48 {
                Bytes.store(CRC32C.checksum(bytes[0..<44]), into: &bytes, at: 44)
            }
            return checkpointProblem(bytes)
        case 2:
            return writtenSnapshotProblem(bytes)
        default:
            if fixChecksums { writeSnapshotChecksums(&bytes) }
            return snapshotFileProblem(bytes)
        }
    }

    // MARK: - Segments

    /// Rewrites the header CRC and, record by record while the framing
    /// holds, each record's CRC.
    static func writeSegmentChecksums(_ bytes: inout [UInt8]) {
        guard bytes.count >= SegmentFormat.headerBytes else { return }
        Bytes.store(CRC32C.checksum(bytes[0..<24]), into: &bytes, at: 24)
        var offset = SegmentFormat.headerBytes
        while offset + SegmentFormat.recordHeaderBytes <= bytes.count {
            if Bytes.allZero(bytes[offset..<(offset + SegmentFormat.recordHeaderBytes)]) { return }
            let length = Int(Bytes.read(UInt32.self, bytes, at: offset))
            guard length <= payloadBytesMax else { return }
            let span = SegmentFormat.recordBytes(payloadBytes: length)
            guard offset + span <= bytes.count else { return }
            Bytes.store(SegmentFormat.recordChecksum(bytes[offset..<(offset + span)]), into: &bytes, at: offset + 16)
            offset += span
        }
    }

    static func segmentProblem(_ bytes: [UInt8], namedAfterHeader: Bool) -> String? {
        let path = "wal/fuzz.seg"
        var fileName = "fuzz"
        if namedAfterHeader, bytes.count >= 24 {
            fileName = SegmentFormat.fileName(firstLSN: LogSequenceNumber(Bytes.read(UInt64.self, bytes, at: 16)))
        }
        var records: [LogRecord] = []
        let scan = SegmentFormat.scan(
            bytes: bytes, path: path, fileName: fileName, payloadBytesMax: payloadBytesMax, reportsRecords: true
        ) { records.append($0) }
        let quiet = SegmentFormat.scan(
            bytes: bytes, path: path, fileName: fileName, payloadBytesMax: payloadBytesMax, reportsRecords: false)
        if quiet != scan { return "scan without records gives \(quiet), with records \(scan)" }
        if scan.fileBytes != bytes.count { return "fileBytes \(scan.fileBytes) for \(bytes.count) bytes" }
        let first: LogSequenceNumber
        switch scan.header {
        case .unwritten:
            if !Bytes.allZero(bytes[...]) { return "unwritten header but nonzero bytes" }
            return records.isEmpty ? nil : "records from an unwritten segment"
        case .damaged(let damage):
            guard damage.offset >= 0, damage.offset <= bytes.count else { return "header damage \(damage) outside" }
            return records.isEmpty && scan.recordCount == 0 ? nil : "records from a damaged header"
        case .valid(let firstLSN):
            first = firstLSN
        }
        guard scan.endOffset % 8 == 0, scan.endOffset >= SegmentFormat.headerBytes, scan.endOffset <= bytes.count
        else { return "endOffset \(scan.endOffset) of \(bytes.count) bytes" }
        guard records.count == scan.recordCount else {
            return "\(records.count) records, recordCount \(scan.recordCount)"
        }
        var reframed: [UInt8] = []
        var ends: [Int] = []
        for (index, record) in records.enumerated() {
            guard record.lsn.rawValue == first.rawValue &+ UInt64(index) else {
                return "record \(index) has LSN \(record.lsn), the header's first is \(first)"
            }
            guard record.payload.count <= payloadBytesMax else { return "payload of \(record.payload.count) bytes" }
            SegmentFormat.appendRecord(kind: record.kind, lsn: record.lsn, payload: record.payload, to: &reframed)
            ends.append(SegmentFormat.headerBytes + reframed.count)
        }
        if reframed[...] != bytes[SegmentFormat.headerBytes..<scan.endOffset] {
            return "the records re-framed differ from bytes \(SegmentFormat.headerBytes)..<\(scan.endOffset)"
        }
        var replayed: [LogRecord] = []
        SegmentFormat.forEachCheckedRecord(in: bytes, recordCount: scan.recordCount) { replayed.append($0) }
        if replayed != records { return "replay's reader gives other records than scan" }
        switch scan.end {
        case .clean:
            if !Bytes.allZero(bytes[scan.endOffset...]) { return "clean end at \(scan.endOffset) before nonzero bytes" }
        case .damaged(let damage, _):
            guard damage.offset >= scan.endOffset, damage.offset <= bytes.count else {
                return "damage \(damage) outside \(scan.endOffset)...\(bytes.count)"
            }
        }
        // Prefixes: cut at the end of the records and at a few other places.
        var cuts = [scan.endOffset, bytes.count - 1, SegmentFormat.headerBytes + (bytes.count - scan.endOffset) / 2]
        cuts += ends.map { $0 - 1 }.prefix(4)
        for cut in cuts where cut >= SegmentFormat.headerBytes && cut <= bytes.count {
            let prefix = SegmentFormat.scan(
                bytes: Array(bytes[0..<cut]), path: path, fileName: fileName, payloadBytesMax: payloadBytesMax,
                reportsRecords: false)
            let fitting = ends.count(where: { $0 <= cut })
            guard prefix.recordCount == fitting, prefix.header == scan.header else {
                return "the prefix of \(cut) bytes scans to \(prefix.recordCount) records, \(fitting) fit in it"
            }
            if cut == scan.endOffset && prefix.end != .clean {
                return "the prefix up to the last record ends \(prefix.end)"
            }
        }
        return nil
    }

    // MARK: - Checkpoints

    static func checkpointProblem(_ bytes: [UInt8]) -> String? {
        switch CheckpointFormat.decode(bytes, path: "checkpoint.0") {
        case .missing:
            return "present bytes decode as missing"
        case .damaged(let damage):
            return damage.offset >= 0 && damage.offset <= bytes.count ? nil : "damage \(damage) outside"
        case .valid(let checkpoint):
            let encoded = CheckpointFormat.encode(checkpoint)
            return encoded == bytes ? nil : "\(checkpoint) encodes to other bytes than it was read from"
        }
    }

    // MARK: - Snapshots

    /// Rewrites the header CRC, the trailer's body length and magic, and the
    /// whole-file CRC, when the bytes hold a header and a trailer.
    static func writeSnapshotChecksums(_ bytes: inout [UInt8]) {
        let minimum = SnapshotFormat.headerBytes + SnapshotFormat.trailerBytes
        guard bytes.count >= minimum else { return }
        Bytes.store(CRC32C.checksum(bytes[0..<40]), into: &bytes, at: 40)
        let trailer = bytes.count - SnapshotFormat.trailerBytes
        Bytes.store(UInt64(trailer - SnapshotFormat.headerBytes), into: &bytes, at: trailer + 8)
        bytes.replaceSubrange((trailer + 16)..<(trailer + 20), with: SnapshotFormat.trailerMagic)
        Bytes.store(CRC32C.checksum(bytes[0..<(trailer + 20)]), into: &bytes, at: trailer + 20)
    }

    /// Input: 8 bytes of edit (what to change, where, to what; counts), then
    /// records as a length byte and that many bytes.
    static func writtenSnapshotProblem(_ bytes: [UInt8]) -> String? {
        guard bytes.count >= 8 else { return nil }
        let edit = bytes[0]
        let editAt = Int(bytes[1]) | Int(bytes[2]) << 8
        let editXor = bytes[3]
        var records: [[UInt8]] = []
        var offset = 8
        var total = 0
        while offset < bytes.count && total < writtenSnapshotBytesMax {
            var length = Int(bytes[offset])
            // Lengths from 240 up stand for larger records of a repeated byte (more than one zstd block).
            let repeated = length >= 240
            if repeated { length = (length - 239) * 10_000 }
            offset += 1
            if repeated {
                records.append(Array(repeating: offset < bytes.count ? bytes[offset] : 0, count: length))
                offset += 1
            } else {
                records.append(Array(bytes[min(offset, bytes.count)..<min(offset + length, bytes.count)]))
                offset += length
            }
            total += records[records.count - 1].count
        }
        let fileSystem = memoryFileSystem(directories: ["snapshots"])
        let counts = SnapshotCounts(records: UInt64(bytes[4]), groups: UInt64(bytes[5]))
        let startLSN = LogSequenceNumber(UInt64(bytes[6]) + 1)
        let summary: SnapshotSummary
        do {
            let writer = try SnapshotWriter(
                fileSystem: fileSystem, directory: "snapshots", startLSN: startLSN, counts: counts)
            for record in records { try writer.append(record) }
            summary = try writer.finish()
        } catch {
            return "writing a snapshot to memory failed: \(error)"
        }
        guard var file = fileSystem.contents(summary.path) else { return "no file at \(summary.path)" }
        let edited = edit & 1 != 0 && !file.isEmpty
        if edited {
            let position = editAt % file.count
            if edit & 2 != 0 {
                file.removeLast(file.count - position)
            } else {
                file[position] ^= editXor == 0 ? 1 : editXor
            }
            if edit & 4 != 0 { writeSnapshotChecksums(&file) }
            fileSystem.overwrite(summary.path, with: file)
        }
        switch readSnapshot(fileSystem: fileSystem, path: summary.path) {
        case .failed(let problem):
            return problem
        case .damaged:
            return edited ? nil : "an unchanged snapshot reads as damaged"
        case .stopped:
            return "a snapshot of \(records.count) records read past \(snapshotPlainBytesMax) bytes"
        case .records(let read, let verified):
            if read != records {
                return "read \(read.count) records (edited \(edited)), \(records.count) were written and differ"
            }
            if !edited && verified != summary { return "verify gives \(verified), the writer said \(summary)" }
            return nil
        }
    }

    static func snapshotFileProblem(_ bytes: [UInt8]) -> String? {
        let fileSystem = memoryFileSystem(directories: ["snapshots"])
        let path = "snapshots/" + SnapshotFormat.fileName(startLSN: 1)
        fileSystem.overwrite(path, with: bytes)
        switch readSnapshot(fileSystem: fileSystem, path: path) {
        case .damaged, .stopped: return nil
        case .failed(let problem): return problem
        case .records(let records, let summary):
            return UInt64(records.count) == summary.recordCount
                ? nil : "\(records.count) records read, the trailer says \(summary.recordCount)"
        }
    }

    /// Returns an empty in-memory file system (RoostTesting's, without
    /// faults) holding `directories`.
    static func memoryFileSystem(directories: [String]) -> FaultInjectingFileSystem {
        let fileSystem = FaultInjectingFileSystem()
        for directory in directories {
            // The in-memory file system creates directories without failing.
            try? fileSystem.createDirectory(directory)
        }
        return fileSystem
    }

    enum SnapshotRead {
        case records([[UInt8]], SnapshotSummary)
        case damaged(Damage)
        case stopped
        /// An error other than damage: a broken property.
        case failed(String)
    }

    /// Verifies and reads every record.
    static func readSnapshot(fileSystem: FaultInjectingFileSystem, path: String) -> SnapshotRead {
        do throws(StorageError) {
            let summary = try SnapshotReader.verify(fileSystem: fileSystem, path: path)
            let reader = try SnapshotReader(fileSystem: fileSystem, path: path)
            var records: [[UInt8]] = []
            var plainBytes = 0
            while let record = try reader.next() {
                records.append(record)
                plainBytes += 4 + record.count
                if plainBytes > snapshotPlainBytesMax { return .stopped }
            }
            return .records(records, summary)
        } catch {
            guard case .damaged(let damage) = error else { return .failed("reading a snapshot failed: \(error)") }
            return .damaged(damage)
        }
    }
}

extension StorageFuzzCheck {
    /// The directory the recovery mode builds.
    static let directory = "data"

    /// Input: files, each a tag byte, a `u16` length and that many bytes. Tag
    /// % 4: 0 a checkpoint slot (slot = bit 2), 1 a segment (named after its
    /// header's first LSN, or 1000 × (tag >> 2) + 1 without one), 2 a snapshot
    /// file (named after its start LSN), 3
    /// records for a snapshot the writer makes (start LSN = tag >> 2, plus 1).
    /// With `fixChecksums`, CRCs are rewritten and a checkpoint is made to
    /// match the snapshot it names, so that valid directories are common.
    ///
    /// Checks: start-up's reading (which skips the records of segments below
    /// the snapshot) decides as `roost wal verify`'s full reading does; a
    /// recovery replays exactly the LSNs from `replayFrom` to `nextLSN`, the
    /// same from the bytes start-up kept as re-read; after the plan's repair
    /// (`repairAndOpenSegment`), a second recovery needs no repair and
    /// continues at the same LSN.
    static func recoveryProblem(_ bytes: [UInt8], fixChecksums: Bool) -> String? {
        let fileSystem = memoryFileSystem(directories: [])
        let layout = StorageLayout(directory: directory, fileSystem: fileSystem)
        for path in [layout.walDirectory, layout.snapshotDirectory] {
            // The in-memory file system creates directories without failing.
            try? fileSystem.createDirectory(path)
        }
        var checkpointsToMatch: [String] = []
        var offset = 0
        while offset + 3 <= bytes.count {
            let tag = bytes[offset]
            let length = Int(bytes[offset + 1]) | Int(bytes[offset + 2]) << 8
            var file = Array(bytes[(offset + 3)..<min(offset + 3 + length, bytes.count)])
            offset += 3 + length
            switch tag % 4 {
            case 0:
                let path = layout.checkpointPath(slot: Int(tag >> 2 & 1))
                if fixChecksums && file.count >= CheckpointFormat.slotBytes { checkpointsToMatch.append(path) }
                fileSystem.overwrite(path, with: file)
            case 1:
                if fixChecksums { writeSegmentChecksums(&file) }
                // A header without a first LSN (one never written) is named from the tag.
                var first = file.count >= 24 ? Bytes.read(UInt64.self, file, at: 16) : 0
                if first == 0 { first = UInt64(tag >> 2) &* 1000 &+ 1 }
                fileSystem.overwrite(
                    layout.segmentPath(SegmentFormat.fileName(firstLSN: LogSequenceNumber(first))), with: file)
            case 2:
                if fixChecksums { writeSnapshotChecksums(&file) }
                let start = file.count >= 24 ? Bytes.read(UInt64.self, file, at: 16) : 1
                fileSystem.overwrite(layout.snapshotPath(LogSequenceNumber(start)), with: file)
            default:
                let records = file.split(separator: 0, omittingEmptySubsequences: false).map { Array($0) }
                do {
                    let writer = try SnapshotWriter(
                        fileSystem: fileSystem, directory: layout.snapshotDirectory,
                        startLSN: LogSequenceNumber(UInt64(tag >> 2) + 1),
                        counts: SnapshotCounts(records: UInt64(records.count), groups: 1))
                    for record in records { try writer.append(record) }
                    _ = try writer.finish()
                } catch {
                    return "writing a snapshot to memory failed: \(error)"
                }
            }
        }
        for path in checkpointsToMatch { matchCheckpoint(path, layout: layout, fileSystem: fileSystem) }
        var options = StorageOptions()
        options.fileSystem = fileSystem
        options.recordPayloadBytesMax = payloadBytesMax
        options.segmentBytesMax = 4096
        options.zeroFillSegments = false
        options.logger = Logger(output: .memory)
        return recoverTwice(layout: layout, options: options)
    }

    /// Points a checkpoint slot at the snapshot it names (size and CRC), when
    /// that snapshot exists, and rewrites the slot's CRC.
    static func matchCheckpoint(_ path: String, layout: StorageLayout, fileSystem: FaultInjectingFileSystem) {
        guard var slot = fileSystem.contents(path), slot.count >= CheckpointFormat.slotBytes else { return }
        let lsn = LogSequenceNumber(Bytes.read(UInt64.self, slot, at: 24))
        if let snapshot = fileSystem.contents(layout.snapshotPath(lsn)),
            snapshot.count >= SnapshotFormat.headerBytes + SnapshotFormat.trailerBytes
        {
            Bytes.store(UInt64(snapshot.count), into: &slot, at: 32)
            Bytes.store(Bytes.read(UInt32.self, snapshot, at: snapshot.count - 4), into: &slot, at: 40)
        }
        Bytes.store(CRC32C.checksum(slot[0..<44]), into: &slot, at: 44)
        fileSystem.overwrite(path, with: slot)
    }

    static func recoverTwice(layout: StorageLayout, options: StorageOptions) -> String? {
        let first: RecoveryPlan
        switch recoverOnce(layout: layout, options: options) {
        case .failure(let problem): return problem.text
        case .success(nil): return nil
        case .success(let plan?): first = plan
        }
        do throws(StorageError) {
            let input = try layout.readRecoveryInput(options: options)
            let open = try WriteAheadLog.repairAndOpenSegment(
                plan: first, input: input, layout: layout, options: options)
            open.file?.close()
        } catch {
            return "repairing \(first) failed: \(error)"
        }
        switch recoverOnce(layout: layout, options: options) {
        case .failure(let problem): return "after the repair: \(problem.text)"
        case .success(nil): return "refused after the repair of \(first)"
        case .success(let again?):
            guard again.cutTail == nil, again.removeSegments.isEmpty else {
                return "a second repair after \(first): \(again)"
            }
            guard again.nextLSN == first.nextLSN, again.replayFrom == first.replayFrom,
                again.checkpoint == first.checkpoint
            else { return "recovered as \(again) after the repair of \(first)" }
            return nil
        }
    }

    /// A broken property, as a value for `Result`.
    struct Problem: Error {
        var text: String
    }

    /// Reads the directory both ways, decides, replays; returns the plan, nil
    /// for a refusal, or the broken property.
    static func recoverOnce(layout: StorageLayout, options: StorageOptions) -> Result<RecoveryPlan?, Problem> {
        let full: RecoveryInput
        let startUp: (input: RecoveryInput, retained: [String: RetainedSegment])
        do throws(StorageError) {
            full = try layout.readRecoveryInput(options: options)
            startUp = try layout.readRecoveryInput(options: options, forStartUp: true)
        } catch {
            return .failure(Problem(text: "reading the directory failed: \(error)"))
        }
        let decision = decideRecovery(full)
        guard decideRecovery(startUp.input) == decision else {
            return .failure(Problem(text: "start-up decides \(decideRecovery(startUp.input)), a full read \(decision)"))
        }
        guard case .recover(let plan) = decision else { return .success(nil) }
        for retained in [startUp.retained, [:]] {
            let state = RecoveredState(
                snapshot: nil, plan: plan, layout: layout, options: options, retained: retained)
            var expected = plan.replayFrom
            var problem: String?
            do throws(StorageError) {
                try state.replay { record in
                    if problem == nil && record.lsn != expected {
                        problem = "replay gave LSN \(record.lsn), expected \(expected)"
                    }
                    expected = LogSequenceNumber(expected.rawValue &+ 1)
                }
            } catch {
                return .failure(Problem(text: "replaying \(plan) failed: \(error)"))
            }
            if let problem { return .failure(Problem(text: problem)) }
            if expected != plan.nextLSN {
                return .failure(Problem(text: "replay ended before \(expected), the plan continues at \(plan.nextLSN)"))
            }
        }
        if let checkpoint = plan.checkpoint,
            case .failed(let problem) = readSnapshot(
                fileSystem: fileSystemOf(layout), path: layout.snapshotPath(checkpoint.snapshotLSN))
        {
            return .failure(Problem(text: problem))
        }
        return .success(plan)
    }

    private static func fileSystemOf(_ layout: StorageLayout) -> FaultInjectingFileSystem {
        guard let fileSystem = layout.fileSystem as? FaultInjectingFileSystem else {
            preconditionFailure("the recovery check runs on a FaultInjectingFileSystem")
        }
        return fileSystem
    }
}
