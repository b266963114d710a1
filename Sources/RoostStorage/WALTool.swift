/// The result of `WALTool.verify`: every finding with file and offset, and a verdict.
package struct VerificationReport: Sendable, Equatable {
    /// How bad it is, from the operator's point of view.
    package enum Verdict: Sendable, Equatable {
        /// Nothing damaged.
        case ok
        /// Damage that recovery repairs or works around (a torn tail, a torn
        /// checkpoint slot, an unused damaged file); start-up will succeed.
        case recoverable
        /// Start-up will refuse: an operator must act.
        case unrecoverable
    }

    package var verdict: Verdict
    /// Each damage found, with file and offset.
    package var damages: [Damage]
    /// What recovery would do (or why it refuses), one line each.
    package var lines: [String]

    /// 0 for ok, 1 for recoverable, 2 for unrecoverable.
    package var exitCode: Int32 {
        switch verdict {
        case .ok: 0
        case .recoverable: 1
        case .unrecoverable: 2
        }
    }
}

/// `roost wal verify` and `roost wal dump`, as functions the executable calls.
package enum WALTool {
    /// Checks every checkpoint slot, every snapshot (whole-file CRC and a full
    /// decompression with the zstd checksum) and every segment under
    /// `directory`, and says what recovery would do. Never changes a file.
    /// The storage half of `roost wal verify`: the engine replays what
    /// `verifyAndRecover` returns as start-up does (`DurableEngine.verify`).
    package static func verify(
        directory: String, options: StorageOptions = StorageOptions()
    ) throws(StorageError) -> VerificationReport {
        try verifyAndRecover(directory: directory, options: options).report
    }

    /// As `verify`, and when recovery would start, what it would replay:
    /// the snapshot and the log records after it, read-only (no torn tail is
    /// cut; replay stops where the plan's last record is). Nil when
    /// recovery would refuse.
    package static func verifyAndRecover(
        directory: String, options: StorageOptions = StorageOptions()
    ) throws(StorageError) -> (report: VerificationReport, recovered: RecoveredState?) {
        let layout = StorageLayout(directory: directory, fileSystem: options.fileSystem)
        let input = try layout.readRecoveryInput(options: options)
        var damages: [Damage] = []
        var lines: [String] = []
        for case .damaged(let damage) in input.checkpoints { damages.append(damage) }
        switch input.logEnd {
        case .missing(let path):
            lines.append("log-end \(path): missing (a directory an older release wrote has none until its next start)")
        case .damaged(let damage):
            damages.append(damage)
        case .valid(let end, let path, let torn):
            if let torn { damages.append(torn) }
            lines.append(
                "log-end \(path): the log reached LSN \(end.endLSN) durably, open segment"
                    + " \(SegmentFormat.fileName(firstLSN: end.openSegment))"
                    + (end.cleanShutdown ? ", clean shutdown" : ", not shut down cleanly since"))
        }
        let snapshotNames = try layout.snapshotDirectoryNames().filter { $0.hasSuffix(SnapshotFormat.fileExtension) }
        for name in snapshotNames {
            let path = options.fileSystem.join(layout.snapshotDirectory, name)
            do {
                let reader = try SnapshotReader(fileSystem: options.fileSystem, path: path)
                var count = 0
                while try reader.next() != nil { count += 1 }
                lines.append("snapshot \(path): start LSN \(reader.startLSN), \(count) records, OK")
            } catch {
                guard case .damaged(let damage) = error else { throw error }
                damages.append(damage)
            }
        }
        for scan in input.segments {
            switch scan.header {
            case .damaged(let damage): damages.append(damage)
            case .unwritten: lines.append("segment \(scan.path): never written")
            case .valid(let first):
                if let damage = scan.sizeDamage { damages.append(damage) }
                if case .damaged(let damage, _) = scan.end { damages.append(damage) }
                lines.append(
                    "segment \(scan.path): LSN \(first) to \(scan.lastLSN ?? first), \(scan.recordCount) records")
            }
        }
        let verdict: VerificationReport.Verdict
        var recovered: RecoveredState?
        switch decideRecovery(input) {
        case .refuse(let damage):
            if !damages.contains(damage) { damages.append(damage) }
            lines.append("recovery would refuse to start: \(damage)")
            verdict = .unrecoverable
        case .recover(let plan):
            let snapshot = try plan.checkpoint.map { checkpoint throws(StorageError) in
                try SnapshotReader(fileSystem: options.fileSystem, path: layout.snapshotPath(checkpoint.snapshotLSN))
            }
            recovered = RecoveredState(snapshot: snapshot, plan: plan, layout: layout, options: options)
            lines.append(
                "recovery would start from "
                    + (plan.checkpoint.map { "the snapshot at LSN \($0.snapshotLSN)" } ?? "an empty state")
                    + ", replay from LSN \(plan.replayFrom), continue at LSN \(plan.nextLSN)")
            lines.append(contentsOf: plan.notes)
            verdict = damages.isEmpty && plan.notes.isEmpty ? .ok : .recoverable
        }
        return (VerificationReport(verdict: verdict, damages: damages, lines: lines), recovered)
    }

    /// Calls `line` once per record of every segment: LSN, kind, length, CRC
    /// and at most the first 16 payload bytes in hex, then `…` (payloads hold
    /// push tokens, so a whole payload is never printed). Stops a segment at
    /// its first damage and says so.
    package static func dump(
        directory: String, options: StorageOptions = StorageOptions(), line: (String) -> Void
    ) throws(StorageError) {
        let layout = StorageLayout(directory: directory, fileSystem: options.fileSystem)
        for name in try layout.segmentNames() {
            line("# segment \(layout.segmentPath(name))")
            let scan = try layout.scanSegment(name, options: options) { record in
                line(describe(record))
            }
            if case .damaged(let damage, _) = scan.end { line("# stop: \(damage)") }
            if case .damaged(let damage) = scan.header { line("# stop: \(damage)") }
        }
    }

    /// Returns the dump line of one record.
    package static func describe(_ record: LogRecord) -> String {
        var framed: [UInt8] = []
        SegmentFormat.appendRecord(kind: record.kind, lsn: record.lsn, payload: record.payload, to: &framed)
        let crc = Bytes.read(UInt32.self, framed, at: 16)
        let shown = record.payload.prefix(16).map(hex).joined()
        let more = record.payload.count > 16 ? "…" : ""
        return
            "lsn=\(record.lsn) kind=\(record.kind) length=\(record.payload.count) crc=\(hex32(crc)) payload=\(shown)\(more)"
    }

    static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789abcdef")
        return String([digits[Int(byte >> 4)], digits[Int(byte & 0xF)]])
    }

    static func hex32(_ value: UInt32) -> String {
        (0..<4).reversed().map { hex(UInt8(truncatingIfNeeded: value >> (8 * $0))) }.joined()
    }
}
