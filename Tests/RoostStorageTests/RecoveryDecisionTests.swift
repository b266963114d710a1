import Testing

@testable import RoostStorage

/// Table-driven tests of the pure recovery decision (docs/recovery.md).
@Suite("Recovery decision")
struct RecoveryDecisionTests {
    static func segment(
        _ first: UInt64, records: Int, end: SegmentEnd = .clean, header: SegmentHeaderState? = nil,
        version: UInt32 = 1, fileBytes: Int = 4096
    ) -> SegmentScan {
        let name = SegmentFormat.fileName(firstLSN: LogSequenceNumber(first))
        var scan = SegmentScan(
            path: "/d/wal/" + name, fileName: name, fileBytes: fileBytes,
            header: header ?? .valid(firstLSN: LogSequenceNumber(first)), recordCount: records,
            endOffset: 32 + 32 * records, end: end)
        if case .valid = scan.header {
            scan.version = version
            scan.declaredBytes = version == 2 ? 4096 : nil
            scan.sizeDamage = SegmentFormat.sizeDamage(
                path: scan.path, fileBytes: fileBytes, declaredBytes: scan.declaredBytes)
        }
        return scan
    }

    /// A log-end file that proves the log reached `end` with `open` the open segment.
    static func logEnd(_ end: UInt64, open: UInt64, clean: Bool = false, torn: Bool = false) -> LogEndRead {
        .valid(
            LogEnd(
                sequence: 4, endLSN: LogSequenceNumber(end), openSegment: LogSequenceNumber(open), cleanShutdown: clean),
            path: "/d/log-end", tornSlot: torn ? Damage(file: "/d/log-end", offset: 4096, reason: "torn") : nil)
    }

    static func damage(_ file: UInt64, _ offset: Int) -> Damage {
        Damage(file: "/d/wal/" + SegmentFormat.fileName(firstLSN: LogSequenceNumber(file)), offset: offset, reason: "x")
    }

    static func checkpoint(_ sequence: UInt64, _ lsn: UInt64) -> Checkpoint {
        Checkpoint(sequence: sequence, snapshotLSN: LogSequenceNumber(lsn), snapshotBytes: 100, snapshotChecksum: 7)
    }

    static func snapshot(_ lsn: UInt64) -> SnapshotCheck {
        .valid(
            SnapshotSummary(
                path: "/d/snapshots/\(lsn)", startLSN: LogSequenceNumber(lsn),
                counts: SnapshotCounts(records: 0, groups: 0),
                recordCount: 0, fileBytes: 100, checksum: 7))
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var input: RecoveryInput
        /// nil: refuse; else (checkpoint LSN or nil, replay from, next LSN, cut offset or nil)
        var expected: (snapshotLSN: UInt64?, replayFrom: UInt64, nextLSN: UInt64, cut: Int?)?
        var refusedFile: String?
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(
            name: "empty directory starts empty at LSN 1",
            input: RecoveryInput(checkpoints: [.missing, .missing], snapshots: [:], segments: []),
            expected: (nil, 1, 1, nil)),
        Case(
            name: "clean log replays everything",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:],
                segments: [segment(1, records: 5), segment(6, records: 3)]),
            expected: (nil, 1, 9, nil)),
        Case(
            name: "torn tail in the last segment is cut",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:],
                segments: [
                    segment(1, records: 5),
                    segment(6, records: 3, end: .damaged(damage(6, 128), laterRecordFound: false)),
                ]),
            expected: (nil, 1, 9, 32 + 32 * 3)),
        Case(
            name: "damage in the last segment followed by a valid record refuses",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:],
                segments: [segment(1, records: 3, end: .damaged(damage(1, 64), laterRecordFound: true))]),
            expected: nil, refusedFile: damage(1, 0).file),
        Case(
            name: "damage in a sealed segment refuses",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:],
                segments: [
                    segment(1, records: 3, end: .damaged(damage(1, 64), laterRecordFound: false)),
                    segment(4, records: 1),
                ]),
            expected: nil, refusedFile: damage(1, 0).file),
        Case(
            name: "a gap between segments refuses",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:],
                segments: [segment(1, records: 3), segment(5, records: 1)]),
            expected: nil, refusedFile: damage(5, 0).file),
        Case(
            name: "a log that does not start at 1 without a checkpoint refuses",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:], segments: [segment(10, records: 3)]),
            expected: nil, refusedFile: damage(10, 0).file),
        Case(
            name: "a damaged segment header refuses",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:],
                segments: [segment(1, records: 0, header: .damaged(damage(1, 24)))]),
            expected: nil, refusedFile: damage(1, 0).file),
        Case(
            name: "a never-written last segment is removed",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:],
                segments: [segment(1, records: 4), segment(5, records: 0, header: .unwritten)]),
            expected: (nil, 1, 5, nil)),
        Case(
            name: "the newest checkpoint's snapshot starts replay",
            input: RecoveryInput(
                checkpoints: [.valid(checkpoint(1, 4)), .valid(checkpoint(2, 8))],
                snapshots: [4: snapshot(4), 8: snapshot(8)],
                segments: [segment(4, records: 3), segment(7, records: 5)]),
            expected: (8, 8, 12, nil)),
        Case(
            name: "a damaged newest snapshot falls back to the older checkpoint and a longer replay",
            input: RecoveryInput(
                checkpoints: [.valid(checkpoint(1, 4)), .valid(checkpoint(2, 8))],
                snapshots: [4: snapshot(4), 8: .damaged(Damage(file: "s8", offset: 40, reason: "crc"))],
                segments: [segment(4, records: 3), segment(7, records: 5)]),
            expected: (4, 4, 12, nil)),
        Case(
            name: "a damaged checkpoint slot falls back to the other slot",
            input: RecoveryInput(
                checkpoints: [
                    .damaged(Damage(file: "checkpoint.0", offset: 44, reason: "crc")), .valid(checkpoint(1, 4)),
                ],
                snapshots: [4: snapshot(4)], segments: [segment(4, records: 3)]),
            expected: (4, 4, 7, nil)),
        Case(
            name: "both slots damaged but the whole log kept: replay from LSN 1",
            input: RecoveryInput(
                checkpoints: [.damaged(Damage(file: "checkpoint.0", offset: 44, reason: "crc")), .missing],
                snapshots: [:], segments: [segment(1, records: 3)]),
            expected: (nil, 1, 4, nil)),
        Case(
            name: "both slots damaged and the log starts later refuses naming the slot",
            input: RecoveryInput(
                checkpoints: [.damaged(Damage(file: "checkpoint.0", offset: 44, reason: "crc")), .missing],
                snapshots: [:], segments: [segment(4, records: 3)]),
            expected: nil, refusedFile: "checkpoint.0"),
        Case(
            name: "a snapshot that does not match its checkpoint is not used",
            input: RecoveryInput(
                checkpoints: [
                    .valid(
                        Checkpoint(
                            sequence: 1, snapshotLSN: LogSequenceNumber(4), snapshotBytes: 99, snapshotChecksum: 7)),
                    .missing,
                ],
                snapshots: [4: snapshot(4)], segments: [segment(4, records: 3)]),
            expected: nil, refusedFile: "/d/snapshots/4"),
        Case(
            name: "a snapshot newer than the end of the log refuses: the log is synced through it before a checkpoint",
            input: RecoveryInput(
                checkpoints: [.valid(checkpoint(1, 10)), .missing], snapshots: [10: snapshot(10)],
                segments: [segment(1, records: 5)]),
            expected: nil, refusedFile: damage(1, 0).file),
        Case(
            name: "a snapshot whose LSN is one past the end of the log continues there",
            input: RecoveryInput(
                checkpoints: [.valid(checkpoint(1, 6)), .missing], snapshots: [6: snapshot(6)],
                segments: [segment(1, records: 5)]),
            expected: (6, 6, 6, nil)),
        Case(
            name: "every segment deleted beside a snapshot refuses",
            input: RecoveryInput(
                checkpoints: [.valid(checkpoint(1, 6)), .missing], snapshots: [6: snapshot(6)], segments: []),
            expected: nil, refusedFile: "/d/wal"),
        Case(
            name: "the log reaching what the log-end file proves recovers",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:],
                segments: [segment(1, records: 5, version: 2)], logEnd: logEnd(5, open: 1, clean: true)),
            expected: (nil, 1, 6, nil)),
        Case(
            name: "a log shorter than the log-end file proves (cut or zeroed at a record boundary) refuses",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:],
                segments: [segment(1, records: 5, version: 2)], logEnd: logEnd(8, open: 1)),
            expected: nil, refusedFile: damage(1, 0).file),
        Case(
            name: "a torn tail that would cut below the log-end file's LSN refuses (after a clean shutdown)",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:],
                segments: [
                    segment(1, records: 4, end: .damaged(damage(1, 160), laterRecordFound: false), version: 2)
                ],
                logEnd: logEnd(5, open: 1, clean: true)),
            expected: nil, refusedFile: damage(1, 0).file),
        Case(
            name: "a torn tail above the log-end file's LSN is cut (records synced since the last mark)",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:],
                segments: [
                    segment(1, records: 4, end: .damaged(damage(1, 160), laterRecordFound: false), version: 2)
                ],
                logEnd: logEnd(3, open: 1)),
            expected: (nil, 1, 5, 32 + 32 * 4)),
        Case(
            name: "the last segment deleted (the log-end file names a later open segment) refuses",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:],
                segments: [segment(1, records: 5, version: 2)], logEnd: logEnd(5, open: 6)),
            expected: nil, refusedFile: damage(6, 0).file),
        Case(
            name: "a segment shorter than its header says refuses, even cut at a record boundary",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:],
                segments: [segment(1, records: 5, version: 2, fileBytes: 32 + 32 * 5)],
                logEnd: logEnd(2, open: 1)),
            expected: nil, refusedFile: damage(1, 0).file),
        Case(
            name: "a zero last segment beside a log-end file refuses (this release never leaves one)",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:],
                segments: [segment(1, records: 5, version: 2), segment(6, records: 0, header: .unwritten)],
                logEnd: logEnd(5, open: 1)),
            expected: nil, refusedFile: damage(6, 0).file),
        Case(
            name: "a missing log-end file beside a segment this release wrote refuses",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:], segments: [segment(1, records: 5, version: 2)]),
            expected: nil, refusedFile: "/d/log-end"),
        Case(
            name: "a missing log-end file beside an older release's segments recovers (it is written at open)",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:], segments: [segment(1, records: 5, version: 1)]),
            expected: (nil, 1, 6, nil)),
        Case(
            name: "a log-end file with no valid slot refuses",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:], segments: [segment(1, records: 5, version: 2)],
                logEnd: .damaged(Damage(file: "/d/log-end", offset: 40, reason: "log-end slot CRC mismatch"))),
            expected: nil, refusedFile: "/d/log-end"),
        Case(
            name: "a torn log-end slot beside a valid one recovers from the valid one",
            input: RecoveryInput(
                checkpoints: [.missing, .missing], snapshots: [:], segments: [segment(1, records: 5, version: 2)],
                logEnd: logEnd(5, open: 1, torn: true)),
            expected: (nil, 1, 6, nil)),
    ]

    @Test("each kind of damage leads to the documented decision", arguments: cases)
    func decision(_ testCase: Case) {
        let decision = decideRecovery(testCase.input)
        switch (decision, testCase.expected) {
        case (.recover(let plan), .some(let expected)):
            #expect(plan.checkpoint?.snapshotLSN.rawValue == expected.snapshotLSN)
            #expect(plan.replayFrom.rawValue == expected.replayFrom)
            #expect(plan.nextLSN.rawValue == expected.nextLSN)
            #expect(plan.cutTail?.offset == expected.cut)
        case (.refuse(let damage), .none):
            #expect(damage.file == testCase.refusedFile)
            #expect(damage.description.contains("roost wal verify"))
        case (.recover(let plan), .none):
            Issue.record("expected a refusal, got \(plan)")
        case (.refuse(let damage), .some):
            Issue.record("expected recovery, got refusal \(damage)")
        }
    }

    @Test("a never-written last segment is listed for removal and the log appends to the one before")
    func unwrittenRemoved() throws {
        let input = RecoveryInput(
            checkpoints: [.missing, .missing], snapshots: [:],
            segments: [Self.segment(1, records: 4), Self.segment(5, records: 0, header: .unwritten)])
        guard case .recover(let plan) = decideRecovery(input) else {
            Issue.record("refused")
            return
        }
        #expect(plan.removeSegments == ["/d/wal/00000000000000000005.seg"])
        #expect(plan.appendTo?.fileName == "00000000000000000001.seg")
    }
}
