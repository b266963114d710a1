/// What recovery read from disk, before deciding anything.
package struct RecoveryInput: Sendable, Equatable {
    /// The two checkpoint slots, in slot order (checkpoint.0, checkpoint.1).
    package var checkpoints: [CheckpointRead]
    /// The verification of each snapshot a valid checkpoint refers to, by start LSN.
    package var snapshots: [LogSequenceNumber: SnapshotCheck]
    /// Every segment file, sorted by name (so by first LSN).
    package var segments: [SegmentScan]

    package init(
        checkpoints: [CheckpointRead], snapshots: [LogSequenceNumber: SnapshotCheck], segments: [SegmentScan]
    ) {
        self.checkpoints = checkpoints
        self.snapshots = snapshots
        self.segments = segments
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
/// - A last segment whose header was never written (and is all zero): removed.
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
    var segments = input.segments
    var removeSegments: [String] = []
    if let last = segments.last, case .unwritten = last.header {
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
