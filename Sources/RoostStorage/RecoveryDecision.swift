/// What recovery read from disk, before deciding anything.
package struct RecoveryInput: Sendable, Equatable {
    /// The two checkpoint slots, in slot order (checkpoint.0, checkpoint.1).
    package var checkpoints: [CheckpointRead]
    /// The verification of each snapshot a valid checkpoint refers to, by start LSN.
    package var snapshots: [LogSequenceNumber: SnapshotCheck]
    /// Every segment file, sorted by name (so by first LSN).
    package var segments: [SegmentScan]
    /// The `log-end` file: how far the log had certainly reached.
    package var logEnd: LogEndRead

    package init(
        checkpoints: [CheckpointRead], snapshots: [LogSequenceNumber: SnapshotCheck], segments: [SegmentScan],
        logEnd: LogEndRead = .missing(path: "/d/" + LogEndFormat.fileName)
    ) {
        self.checkpoints = checkpoints
        self.snapshots = snapshots
        self.segments = segments
        self.logEnd = logEnd
    }
}

/// The outcome of verifying one snapshot file.
package enum SnapshotCheck: Sendable, Equatable {
    case valid(SnapshotSummary)
    case damaged(Damage)
    case missing(path: String)
}

/// What recovery will do: start from a snapshot (or from empty), replay
/// these segments, repair a torn tail, then append at `nextLSN`.
package struct RecoveryPlan: Sendable, Equatable {
    /// The checkpoint used, or nil to start from an empty state at LSN 1.
    package var checkpoint: Checkpoint?
    /// The slot of `checkpoint`, or nil.
    package var checkpointSlot: Int?
    /// The older valid checkpoint, kept (with its snapshot and segments) as a fallback.
    package var olderCheckpoint: Checkpoint?
    /// Records with LSN >= this are replayed.
    package var replayFrom: LogSequenceNumber
    /// Segment file names to read, in order, with the last LSN to take from each.
    package var replay: [(fileName: String, lastLSN: LogSequenceNumber)]
    /// The LSN the next appended record gets.
    package var nextLSN: LogSequenceNumber
    /// The segment to keep appending to (name, offset of the next record), or
    /// nil to create a new segment at `nextLSN`.
    package var appendTo: (fileName: String, offset: Int)?
    /// A torn tail to cut: zero `path` from `offset` to its end, then fdatasync.
    package var cutTail: (path: String, offset: Int, fileBytes: Int)?
    /// Segment files whose creation never finished (header not written): removed.
    package var removeSegments: [String]
    /// What happened, one line each, for the log.
    package var notes: [String]

    package static func == (lhs: RecoveryPlan, rhs: RecoveryPlan) -> Bool {
        lhs.checkpoint == rhs.checkpoint && lhs.checkpointSlot == rhs.checkpointSlot
            && lhs.olderCheckpoint == rhs.olderCheckpoint && lhs.replayFrom == rhs.replayFrom
            && lhs.replay.map(\.fileName) == rhs.replay.map(\.fileName)
            && lhs.replay.map(\.lastLSN) == rhs.replay.map(\.lastLSN) && lhs.nextLSN == rhs.nextLSN
            && lhs.appendTo?.fileName == rhs.appendTo?.fileName && lhs.appendTo?.offset == rhs.appendTo?.offset
            && lhs.cutTail?.path == rhs.cutTail?.path && lhs.cutTail?.offset == rhs.cutTail?.offset
            && lhs.removeSegments == rhs.removeSegments
    }
}

/// Recover, or refuse with the damage that stops start-up.
package enum RecoveryDecision: Sendable, Equatable {
    case recover(RecoveryPlan)
    case refuse(Damage)
}

/// The recovery decision as a pure function of what was read (docs/recovery.md
/// has the table). Rules:
/// - Candidates, newest first: each valid checkpoint by sequence, then "empty
///   state, replay from LSN 1". A candidate whose snapshot is missing, damaged
///   or does not match its checkpoint is skipped (noted); so is a damaged slot.
/// - The log from the candidate's LSN must be contiguous: the segment that
///   holds it and every later one, with no gap between files.
/// - Damage in a segment that is not the last, a damaged header, an LSN gap,
///   or damage in the last segment followed by a valid record: refuse.
/// - Damage in the last segment with nothing valid after it: a torn tail, cut.
/// - A last segment whose header was never written (and is all zero): removed,
///   unless the log-end file exists (this release creates segments whole, so
///   such a segment was zeroed or cut: refuse).
/// - The log must reach what the rest of the directory proves: the log-end
///   file's end LSN and open segment, and each checkpoint's snapshot LSN - 1
///   (the log is synced before a checkpoint is written). Anything less is a
///   cut, zeroed or deleted log: refuse (docs/decisions/0009-wal-damage-log-end.md).
/// - If no candidate works: refuse with the first reason met, newest first.
package func decideRecovery(_ input: RecoveryInput) -> RecoveryDecision {
    var notes: [String] = []
    var firstRefusal: Damage?
    var candidates: [(checkpoint: Checkpoint, slot: Int)] = []
    for (slot, read) in input.checkpoints.enumerated() {
        switch read {
        case .missing: break
        case .damaged(let damage):
            notes.append("checkpoint slot damaged, ignored: \(damage)")
            if firstRefusal == nil { firstRefusal = damage }
        case .valid(let checkpoint): candidates.append((checkpoint, slot))
        }
    }
    candidates.sort { $0.checkpoint.sequence > $1.checkpoint.sequence }
    if !candidates.isEmpty {
        // A damaged slot next to a valid one is a torn checkpoint write; the valid one decides.
        firstRefusal = nil
    }
    let evidence: LogEvidence
    switch LogEvidence.gather(input) {
    case .failure(let damage): return .refuse(damage)
    case .success(let gathered): evidence = gathered
    }
    notes += evidence.notes
    var segments = input.segments
    var removeSegments: [String] = []
    if let last = segments.last, case .unwritten = last.header {
        if let path = evidence.logEndPath {
            return .refuse(
                Damage(
                    file: last.path, offset: 0,
                    reason: "segment header is zero (\(last.fileBytes) bytes) although \(path) exists: this release"
                        + " creates a segment whole before naming it, so this one was zeroed or cut"))
        }
        removeSegments.append(last.path)
        notes.append("segment \(last.path) was created but never written; removed")
        segments.removeLast()
    }
    var choices: [(checkpoint: Checkpoint?, slot: Int?)] = candidates.map { ($0.checkpoint, $0.slot) }
    choices.append((nil, nil))
    for (index, choice) in choices.enumerated() {
        if let checkpoint = choice.checkpoint {
            if let damage = snapshotProblem(checkpoint, input.snapshots[checkpoint.snapshotLSN]) {
                notes.append("snapshot unusable, trying an older start: \(damage)")
                if firstRefusal == nil { firstRefusal = damage }
                continue
            }
        }
        let replayFrom = choice.checkpoint?.snapshotLSN ?? .first
        switch planLog(segments, from: replayFrom) {
        case .failure(let damage):
            if firstRefusal == nil { firstRefusal = damage }
            // Log damage at or after this start also breaks every older start.
            return .refuse(firstRefusal ?? damage)
        case .success(var plan):
            if let damage = evidence.refusal(plan: plan, segments: segments) { return .refuse(damage) }
            plan.checkpoint = choice.checkpoint
            plan.checkpointSlot = choice.slot
            let older = choices[(index + 1)...].first { $0.checkpoint != nil }
            plan.olderCheckpoint = older?.checkpoint ?? nil
            plan.removeSegments = removeSegments
            plan.notes = notes + plan.notes
            return .recover(plan)
        }
    }
    preconditionFailure("the empty-state candidate always returns")
}

/// Returns why `checkpoint`'s snapshot cannot be used, or nil.
func snapshotProblem(_ checkpoint: Checkpoint, _ check: SnapshotCheck?) -> Damage? {
    switch check {
    case .none:
        return Damage(
            file: SnapshotFormat.fileName(startLSN: checkpoint.snapshotLSN), offset: 0, reason: "not verified")
    case .missing(let path):
        return Damage(file: path, offset: 0, reason: "snapshot named by checkpoint \(checkpoint.sequence) is missing")
    case .damaged(let damage):
        return damage
    case .valid(let summary):
        if summary.startLSN != checkpoint.snapshotLSN || summary.fileBytes != checkpoint.snapshotBytes
            || summary.checksum != checkpoint.snapshotChecksum
        {
            return Damage(
                file: summary.path, offset: 0,
                reason: "snapshot does not match checkpoint \(checkpoint.sequence) (size or checksum differ)")
        }
        return nil
    }
}

/// Plans replay of `segments` from `replayFrom`, or returns the damage that forbids it.
func planLog(_ segments: [SegmentScan], from replayFrom: LogSequenceNumber) -> Result<RecoveryPlan, Damage> {
    var plan = RecoveryPlan(
        checkpoint: nil, checkpointSlot: nil, olderCheckpoint: nil, replayFrom: replayFrom, replay: [],
        nextLSN: replayFrom, appendTo: nil, cutTail: nil, removeSegments: [], notes: [])
    var firstLSNs: [LogSequenceNumber] = []
    for segment in segments {
        switch segment.header {
        case .valid(let first): firstLSNs.append(first)
        case .damaged(let damage): return .failure(damage)
        case .unwritten:
            return .failure(
                Damage(
                    file: segment.path, offset: 0, reason: "segment header missing in a segment that is not the last"))
        }
    }
    guard !segments.isEmpty else { return .success(plan) }
    guard let start = firstLSNs.lastIndex(where: { $0 <= replayFrom }) else {
        return .failure(
            Damage(
                file: segments[0].path, offset: 16,
                reason: "LSN gap: replay starts at \(replayFrom) but the oldest segment starts at \(firstLSNs[0])"))
    }
    var previousLast: LogSequenceNumber?
    for index in start..<segments.count {
        let segment = segments[index]
        let isLast = index == segments.count - 1
        if let previousLast, firstLSNs[index] != previousLast.advanced(by: 1) {
            return .failure(
                Damage(
                    file: segment.path, offset: 16,
                    reason: "LSN gap: previous segment ends at \(previousLast), this one starts at \(firstLSNs[index])")
            )
        }
        // A segment not the size it was created with was cut (never a torn tail).
        if let damage = segment.sizeDamage { return .failure(damage) }
        switch segment.end {
        case .clean: break
        case .damaged(let damage, let laterRecordFound):
            if !isLast { return .failure(damage) }
            if laterRecordFound {
                var refused = damage
                refused.reason += " (valid records follow, so this is not a torn tail)"
                return .failure(refused)
            }
            plan.cutTail = (segment.path, segment.endOffset, segment.fileBytes)
            plan.notes.append(
                "torn tail cut: wal.segment=\(segment.path) wal.offset=\(segment.endOffset) wal.reason=\(damage.reason)"
            )
        }
        guard let lastLSN = segment.lastLSN else { preconditionFailure("valid header without last LSN") }
        if lastLSN >= replayFrom { plan.replay.append((segment.fileName, lastLSN)) }
        previousLast = lastLSN
    }
    let logEnd = previousLast ?? LogSequenceNumber(replayFrom.rawValue - 1)
    plan.nextLSN = max(logEnd.advanced(by: 1), replayFrom)
    if plan.nextLSN == logEnd.advanced(by: 1), let last = segments.last {
        plan.appendTo = (last.fileName, last.endOffset)
    }
    return .success(plan)
}

/// What the directory proves about the end of the log, outside the log's
/// own tail: the log-end file and the checkpoints.
struct LogEvidence {
    /// The log reached at least this LSN durably (0: nothing proven).
    var provenEnd = LogSequenceNumber(0)
    /// What proves `provenEnd`, in words.
    var source = ""
    /// A segment with this first LSN (or a later one) must exist (0: none).
    var requiredSegment = LogSequenceNumber(0)
    /// The log-end file's path when it exists (so this release wrote the log).
    var logEndPath: String?
    /// The storage directory's `wal/`, for naming a missing segment.
    var walDirectory: String
    var notes: [String] = []

    /// Reads the evidence, or returns the damage that stops start-up: a
    /// log-end file that is damaged, or missing beside a segment this
    /// release wrote (a version-1 directory has none until its first start).
    static func gather(_ input: RecoveryInput) -> Result<LogEvidence, Damage> {
        let path: String
        switch input.logEnd {
        case .missing(let missing): path = missing
        case .damaged(let damage): path = damage.file
        case .valid(_, let valid, _): path = valid
        }
        var evidence = LogEvidence(walDirectory: StorageLayout.parent(of: path) + "/" + SegmentFormat.directoryName)
        switch input.logEnd {
        case .missing:
            if let written = input.segments.first(where: { $0.version >= 2 }) {
                return .failure(
                    Damage(
                        file: path, offset: 0,
                        reason: "missing, but \(written.path) was written by this release, which keeps this file:"
                            + " the durable end of the log is unknown; restore it (or the whole directory) from a backup"
                    ))
            }
        case .damaged(let damage):
            return .failure(damage)
        case .valid(let end, _, let torn):
            evidence.logEndPath = path
            evidence.provenEnd = end.endLSN
            evidence.requiredSegment = end.openSegment
            evidence.source = path + (end.cleanShutdown ? " (written at a clean shutdown)" : "")
            if let torn { evidence.notes.append("log-end slot damaged (torn write), the other slot used: \(torn)") }
        }
        for case .valid(let checkpoint) in input.checkpoints
        where checkpoint.snapshotLSN.rawValue - 1 > evidence.provenEnd.rawValue {
            evidence.provenEnd = LogSequenceNumber(checkpoint.snapshotLSN.rawValue - 1)
            evidence.source =
                "checkpoint \(checkpoint.sequence) (its snapshot starts at LSN \(checkpoint.snapshotLSN), and the log"
                + " is synced before a checkpoint is written)"
        }
        return .success(evidence)
    }

    /// Returns why `plan` (over `segments`, the never-written one removed)
    /// loses records the evidence proves, or nil.
    func refusal(plan: RecoveryPlan, segments: [SegmentScan]) -> Damage? {
        let last = segments.last
        var lastFirst = LogSequenceNumber(0)
        if let last, case .valid(let first) = last.header { lastFirst = first }
        if requiredSegment.rawValue > 0 && lastFirst < requiredSegment {
            return Damage(
                file: walDirectory + "/" + SegmentFormat.fileName(firstLSN: requiredSegment), offset: 0,
                reason: "segment missing: \(logEndPath ?? "log-end") says the log went on in it (it starts at LSN"
                    + " \(requiredSegment)); it was deleted")
        }
        let end = last?.lastLSN ?? LogSequenceNumber(0)
        guard end < provenEnd else { return nil }
        let lost = "\(source) proves the log reached LSN \(provenEnd)"
        if let cut = plan.cutTail, let last, case .damaged(let damage, _) = last.end {
            return Damage(
                file: cut.path, offset: damage.offset,
                reason: "\(damage.reason) after LSN \(end), but \(lost): not a torn tail, records were lost")
        }
        guard let last else {
            return Damage(
                file: walDirectory, offset: 0, reason: "no segment left, but \(lost): segments were deleted")
        }
        return Damage(
            file: last.path, offset: last.endOffset,
            reason: "the log ends at LSN \(end), but \(lost): records were cut, zeroed or deleted")
    }
}
