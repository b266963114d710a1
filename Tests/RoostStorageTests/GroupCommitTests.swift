import RoostPlatform
import Testing

@testable import RoostStorage

@Suite("Group commit state machine")
struct GroupCommitTests {
    typealias Machine = GroupCommit<String>

    static func machine(_ policy: FsyncPolicy, segmentBytesMax: Int = 4096) -> Machine {
        Machine(
            policy: policy, nextLSN: .first, segmentOffset: SegmentFormat.headerBytes,
            segmentBytesMax: segmentBytesMax, payloadBytesMax: 100, syncIntervalNanoseconds: 1_000_000_000)
    }

    static func next(_ machine: inout Machine, _ now: UInt64) throws -> Machine.Plan {
        let plan = machine.nextIO(nowNanoseconds: now)
        return try #require(plan)
    }

    static func writeOnAppender(_ machine: inout Machine, _ now: UInt64) throws -> Machine.Plan {
        let plan = machine.nextWriteOnAppender(nowNanoseconds: now)
        return try #require(plan)
    }

    static func names(_ completions: [Machine.Completion]) -> [String] {
        completions.map(\.waiter)
    }

    @Test(
        "after a reclaim, the next groups' plans are the ones a fresh machine makes (the memory reused, not the bytes)")
    func reclaimedMemoryIsReused() throws {
        // Whether the buffer is reused is the allocation budget's to check (a
        // release build); here, that reusing it changes no byte of any plan.
        var machine = Self.machine(.always)
        var fresh = Self.machine(.always)
        for (round, payloads) in [[[1, 2, 3], [4]], [[5]], [[6, 7, 8, 9, 10, 11, 12, 13], [14]], [[15]]].enumerated() {
            _ = try machine.append(payloads.map { $0.map(UInt8.init) }, waiter: "m\(round)").get()
            _ = try fresh.append(payloads.map { $0.map(UInt8.init) }, waiter: "f\(round)").get()
            var plan = try Self.next(&machine, UInt64(round))
            let freshPlan = try Self.next(&fresh, UInt64(round))
            #expect(plan == freshPlan, "round \(round)")
            _ = machine.ioSucceeded(plan, nowNanoseconds: UInt64(round))
            _ = fresh.ioSucceeded(freshPlan, nowNanoseconds: UInt64(round))
            machine.reclaim(&plan)
            #expect(plan.steps.isEmpty, "the reclaim takes the plan's steps")
        }
    }

    @Test("always: one plan writes and syncs a whole batch, completions come only after it")
    func alwaysBatches() throws {
        var machine = Self.machine(.always)
        #expect(try machine.append([[1], [2]], waiter: "a").get() == LogSequenceNumber(1)...LogSequenceNumber(2))
        #expect(try machine.append([[3]], waiter: "b").get() == LogSequenceNumber(3)...LogSequenceNumber(3))
        let plan = try Self.next(&machine, 0)
        #expect(plan.syncs)
        #expect(plan.writtenThrough == LogSequenceNumber(3))
        #expect(plan.steps.count == 2)
        guard case .write(let bytes, let offset) = plan.steps[0] else {
            Issue.record("first step \(plan.steps[0])")
            return
        }
        #expect(offset == SegmentFormat.headerBytes)
        #expect(bytes.count == 3 * SegmentFormat.recordBytes(payloadBytes: 1))
        #expect(plan.steps[1] == .sync)
        // Appends while the plan is in flight wait for the next plan.
        _ = machine.append([[4]], waiter: "c")
        #expect(machine.nextIO(nowNanoseconds: 0) == nil)
        let done = machine.ioSucceeded(plan, nowNanoseconds: 0)
        #expect(Self.names(done) == ["a", "b"])
        #expect(done.map { try? $0.result.get() } == [LogSequenceNumber(2), LogSequenceNumber(3)])
        #expect(machine.syncedLSN == LogSequenceNumber(3))
        let next = try Self.next(&machine, 0)
        #expect(next.writtenThrough == LogSequenceNumber(4))
        #expect(Self.names(machine.ioSucceeded(next, nowNanoseconds: 0)) == ["c"])
    }

    @Test("hasWorkNow: true while records wait to be written or a requested sync is not done, false when idle")
    func hasWorkNow() throws {
        var machine = Self.machine(.always)
        #expect(!machine.hasWorkNow)
        _ = machine.append([[1]], waiter: "a")
        #expect(machine.hasWorkNow)
        let plan = try Self.next(&machine, 0)
        // In flight: nothing else is waiting, so the I/O thread may complete "a" itself.
        #expect(!machine.hasWorkNow)
        _ = machine.append([[2]], waiter: "b")
        #expect(machine.hasWorkNow, "an append during the sync is the next group")
        #expect(Self.names(machine.ioSucceeded(plan, nowNanoseconds: 0)) == ["a"])
        #expect(machine.hasWorkNow)
        let second = try Self.next(&machine, 0)
        _ = machine.ioSucceeded(second, nowNanoseconds: 0)
        #expect(!machine.hasWorkNow)

        var never = Self.machine(.never)
        _ = never.append([[1]], waiter: "w")
        let write = try Self.next(&never, 0)
        _ = never.ioSucceeded(write, nowNanoseconds: 0)
        #expect(!never.hasWorkNow, "never: written and unsynced is not work")
        _ = try never.requestSync(waiter: "sync").get()
        #expect(never.hasWorkNow)
    }

    @Test("a barrier is satisfied at once when nothing is pending, else completes with the sync that covers it")
    func barrier() throws {
        var machine = Self.machine(.always)
        #expect(try machine.barrier(waiter: "empty").get() == .satisfied(LogSequenceNumber(0)))
        _ = machine.append([[1]], waiter: "write")
        #expect(try machine.barrier(waiter: "read").get() == .pending)
        let plan = try Self.next(&machine, 0)
        #expect(plan.syncs)
        #expect(Self.names(machine.ioSucceeded(plan, nowNanoseconds: 0)) == ["write", "read"])
        #expect(try machine.barrier(waiter: "later").get() == .satisfied(LogSequenceNumber(1)))
    }

    @Test("everysec: completion after the write, sync once the oldest unsynced write is an interval old")
    func everysec() throws {
        var machine = Self.machine(.everysec)
        _ = machine.append([[1]], waiter: "a")
        let write = try Self.next(&machine, 10)
        #expect(!write.syncs)
        #expect(Self.names(machine.ioSucceeded(write, nowNanoseconds: 10)) == ["a"])
        #expect(machine.syncedLSN == LogSequenceNumber(0))
        #expect(machine.wakeDeadline() == 1_000_000_010)
        #expect(machine.nextIO(nowNanoseconds: 999_999_999) == nil)
        let sync = try Self.next(&machine, 1_000_000_010)
        #expect(sync.steps == [.sync])
        _ = machine.ioSucceeded(sync, nowNanoseconds: 1_000_000_020)
        #expect(machine.syncedLSN == LogSequenceNumber(1))
        #expect(machine.wakeDeadline() == nil)
    }

    @Test("never: no sync unless one is requested, then the request completes after it")
    func never() throws {
        var machine = Self.machine(.never)
        _ = machine.append([[1]], waiter: "a")
        let write = try Self.next(&machine, 0)
        #expect(!write.syncs)
        #expect(Self.names(machine.ioSucceeded(write, nowNanoseconds: 0)) == ["a"])
        #expect(machine.nextIO(nowNanoseconds: 10_000_000_000) == nil)
        #expect(try machine.requestSync(waiter: "barrier").get() == LogSequenceNumber(1))
        let sync = try Self.next(&machine, 0)
        #expect(sync.steps == [.sync])
        #expect(Self.names(machine.ioSucceeded(sync, nowNanoseconds: 0)) == ["barrier"])
    }

    @Test("a failed I/O fails every waiter and every later append, and nothing is ever synced again")
    func failure() throws {
        var machine = Self.machine(.always)
        _ = machine.append([[1]], waiter: "a")
        let plan = try Self.next(&machine, 0)
        _ = machine.append([[2]], waiter: "b")
        let cause = RoostPlatformError.eio
        let failed = machine.ioFailed(.io(cause))
        #expect(Self.names(failed) == ["a", "b"])
        #expect(failed.allSatisfy { (try? $0.result.get()) == nil })
        #expect(machine.nextIO(nowNanoseconds: 0) == nil)
        #expect(throws: StorageError.logFailed(cause)) { try machine.append([[3]], waiter: "c").get() }
        #expect(throws: StorageError.logFailed(cause)) { try machine.requestSync(waiter: "d").get() }
        _ = plan
    }

    @Test("a record that does not fit rolls to a new segment starting at its LSN")
    func roll() throws {
        let span = SegmentFormat.recordBytes(payloadBytes: 100)
        var machine = Self.machine(.always, segmentBytesMax: SegmentFormat.headerBytes + 2 * span)
        _ = machine.append([[UInt8](repeating: 7, count: 100), [UInt8](repeating: 8, count: 100)], waiter: "a")
        _ = machine.append([[UInt8](repeating: 9, count: 100)], waiter: "b")
        let plan = try Self.next(&machine, 0)
        #expect(plan.steps.count == 4)
        #expect(plan.steps[1] == .roll(firstLSN: LogSequenceNumber(3)))
        guard case .write(_, let offset) = plan.steps[2] else {
            Issue.record("third step \(plan.steps[2])")
            return
        }
        #expect(offset == SegmentFormat.headerBytes)
    }

    @Test("close drains: pending records are written and synced whatever the policy")
    func closeDrains() throws {
        var machine = Self.machine(.never)
        _ = machine.append([[1]], waiter: "a")
        machine.close()
        #expect(!machine.isDrained)
        let plan = try Self.next(&machine, 0)
        #expect(plan.syncs)
        _ = machine.ioSucceeded(plan, nowNanoseconds: 0)
        #expect(machine.isDrained)
        #expect(throws: StorageError.closed) { try machine.append([[2]], waiter: "b").get() }
    }

    @Test(
        "an appender may write its records itself only when the policy acknowledges on the write and nothing but writes is due"
    )
    func writeOnAppender() throws {
        let second: UInt64 = 1_000_000_000
        // always: the fdatasync is the I/O thread's.
        var always = Self.machine(.always)
        _ = always.append([[1]])
        #expect(always.nextWriteOnAppender(nowNanoseconds: 0) == nil)

        for policy in [FsyncPolicy.never, .everysec] {
            var machine = Self.machine(policy)
            #expect(machine.nextWriteOnAppender(nowNanoseconds: 0) == nil, "\(policy): nothing appended")
            _ = machine.append([[1], [2]])
            _ = machine.append([[3]])
            let deadlineBefore = machine.wakeDeadline()
            let plan = try Self.writeOnAppender(&machine, 5)
            #expect(!plan.syncs, "\(policy)")
            #expect(plan.writtenThrough == LogSequenceNumber(3))
            #expect(plan.steps.count == 1 && plan.steps.allSatisfy { if case .write = $0 { true } else { false } })
            // In flight: neither the I/O thread nor another appender gets a plan.
            _ = machine.append([[4]])
            #expect(machine.nextWriteOnAppender(nowNanoseconds: 5) == nil)
            #expect(machine.nextIO(nowNanoseconds: 5) == nil)
            #expect(machine.ioSucceeded(plan, nowNanoseconds: 6).isEmpty)
            #expect(machine.acknowledgedLSN == LogSequenceNumber(3))
            // Record 4 waits: the I/O thread is needed for it.
            #expect(machine.needsIOThread(deadlineBefore: deadlineBefore))
            let rest = try Self.next(&machine, 6)
            _ = machine.ioSucceeded(rest, nowNanoseconds: 6)
            #expect(machine.acknowledgedLSN == LogSequenceNumber(4))
        }

        // everysec: the first unsynced write sets the I/O thread's deadline,
        // so it must be told; a later write within the interval need not.
        var everysec = Self.machine(.everysec)
        _ = everysec.append([[1]])
        var deadline = everysec.wakeDeadline()
        var plan = try Self.writeOnAppender(&everysec, 10)
        _ = everysec.ioSucceeded(plan, nowNanoseconds: 10)
        #expect(everysec.wakeDeadline() == second + 10)
        #expect(everysec.needsIOThread(deadlineBefore: deadline))
        _ = everysec.append([[2]])
        deadline = everysec.wakeDeadline()
        plan = try Self.writeOnAppender(&everysec, 20)
        _ = everysec.ioSucceeded(plan, nowNanoseconds: 20)
        #expect(!everysec.needsIOThread(deadlineBefore: deadline))
        // Once the sync is due, the next group goes to the I/O thread, which syncs it.
        _ = everysec.append([[3]])
        #expect(everysec.nextWriteOnAppender(nowNanoseconds: second + 10) == nil)
        #expect(try Self.next(&everysec, second + 10).syncs)

        // A waiter with a completion, a requested sync, a roll, a due mark or a
        // close: the I/O thread's work.
        var waiting = Self.machine(.never)
        _ = waiting.append([[1]], waiter: "tool")
        #expect(waiting.nextWriteOnAppender(nowNanoseconds: 0) == nil)
        var syncing = Self.machine(.never)
        _ = syncing.append([[1]])
        _ = syncing.requestSync(waiter: "sync")
        #expect(syncing.nextWriteOnAppender(nowNanoseconds: 0) == nil)
        let span = SegmentFormat.recordBytes(payloadBytes: 100)
        var rolling = Self.machine(.never, segmentBytesMax: SegmentFormat.headerBytes + span)
        _ = rolling.append([[UInt8](repeating: 7, count: 100)])
        let first = try Self.writeOnAppender(&rolling, 0)
        _ = rolling.ioSucceeded(first, nowNanoseconds: 0)
        _ = rolling.append([[UInt8](repeating: 8, count: 100)])
        #expect(rolling.nextWriteOnAppender(nowNanoseconds: 0) == nil, "the record rolls to a new segment")
        var marking = Machine(
            policy: .never, nextLSN: .first, segmentOffset: SegmentFormat.headerBytes, segmentBytesMax: 4096,
            payloadBytesMax: 100, syncIntervalNanoseconds: second, markIntervalNanoseconds: second)
        _ = marking.append([[1]])
        _ = marking.requestSync(waiter: "sync")
        _ = marking.ioSucceeded(try Self.next(&marking, 0), nowNanoseconds: 0)
        _ = marking.append([[2]])
        #expect(marking.nextWriteOnAppender(nowNanoseconds: 2 * second) == nil, "a log-end mark is due")
        #expect(marking.nextWriteOnAppender(nowNanoseconds: second - 1) != nil, "no mark due yet")
        var closing = Self.machine(.never)
        _ = closing.append([[1]])
        closing.close()
        #expect(closing.nextWriteOnAppender(nowNanoseconds: 0) == nil)
        #expect(closing.needsIOThread(deadlineBefore: nil))
    }

    @Test("log-end marks: synced records are recorded at most once per interval, first in a plan, and when idle")
    func logEndMarks() throws {
        let second: UInt64 = 1_000_000_000
        var machine = Machine(
            policy: .always, nextLSN: LogSequenceNumber(5), segmentOffset: SegmentFormat.headerBytes,
            segmentBytesMax: 4096, payloadBytesMax: 100, syncIntervalNanoseconds: second,
            markIntervalNanoseconds: second, markedAtNanoseconds: 10 * second)
        #expect(machine.markedLSN == LogSequenceNumber(4))
        #expect(machine.wakeDeadline() == nil, "nothing synced since the mark made at open")
        _ = machine.append([[1]], waiter: "a")
        var plan = try Self.next(&machine, 10 * second + 1)
        #expect(!plan.steps.contains { if case .markEnd = $0 { true } else { false } }, "within the interval")
        _ = machine.ioSucceeded(plan, nowNanoseconds: 10 * second + 2)
        #expect(machine.syncedLSN == LogSequenceNumber(5))
        // Idle: the I/O thread wakes when the interval is over, and the plan only records.
        #expect(machine.wakeDeadline() == 11 * second)
        #expect(machine.nextIO(nowNanoseconds: 11 * second - 1) == nil)
        plan = try Self.next(&machine, 11 * second)
        #expect(plan.steps == [.markEnd(LogSequenceNumber(5))])
        _ = machine.ioSucceeded(plan, nowNanoseconds: 11 * second)
        #expect(machine.markedLSN == LogSequenceNumber(5))
        #expect(machine.wakeDeadline() == nil)
        // Under load: the mark rides first in the next group's plan, before its write.
        _ = machine.append([[2]], waiter: "b")
        plan = try Self.next(&machine, 12 * second)
        _ = machine.ioSucceeded(plan, nowNanoseconds: 12 * second)
        _ = machine.append([[3]], waiter: "c")
        plan = try Self.next(&machine, 13 * second)
        #expect(plan.steps.first == .markEnd(LogSequenceNumber(6)))
        #expect(plan.steps.last == .sync)
        // A failure of that plan fails its group, as any write failure does.
        #expect(Self.names(machine.ioFailed(.io(SystemCallError(call: "fdatasync", subject: "e", errno: 5)))) == ["c"])
        #expect(machine.markedLSN == LogSequenceNumber(5))
        #expect(machine.nextIO(nowNanoseconds: 20 * second) == nil)
    }

}

enum RoostPlatformError {
    static let eio = SystemCallError(call: "fdatasync", subject: "seg", errno: 5)

}
