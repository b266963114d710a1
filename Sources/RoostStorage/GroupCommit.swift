/// When a record counts as done (spec §1, `--fsync`).
package enum FsyncPolicy: String, Sendable, CaseIterable {
    /// Completion only after the fdatasync that covers the record (group commit).
    case always
    /// Completion once the record is written to the OS; fdatasync at least once per interval.
    case everysec
    /// Completion once written to the OS; syncing is left to the OS (and to close/checkpoint).
    case never
}

/// The group-commit protocol as a sans-I/O state machine: appenders hand it
/// payloads, the I/O thread asks it what to do next (`nextIO`), performs the
/// plan and reports back (`ioSucceeded`/`ioFailed`), and gets the completions
/// to call. It never touches a file or a clock: time comes in as nanoseconds.
///
/// Invariants: LSNs are assigned in call order with no gaps; bytes are written
/// in LSN order; `syncedLSN <= writtenLSN < nextLSN`; after a failure nothing
/// is written or synced again (a failed fdatasync is never retried on the same
/// pages) and every waiter, present or future, fails.
package struct GroupCommit<Waiter> {
    /// One step of an I/O plan, performed in order; stop at the first failure.
    package enum Step: Equatable {
        /// fdatasync the open segment if anything was written to it since its
        /// last sync, then create the segment starting at `firstLSN` (header,
        /// preallocate, fdatasync, fsync the directory) and make it the open one.
        case roll(firstLSN: LogSequenceNumber)
        /// pwrite `bytes` at `offset` of the open segment.
        case write(bytes: [UInt8], offset: Int)
        /// fdatasync the open segment.
        case sync
        /// Record in the log-end file that every record through this LSN is
        /// durable (it was synced by an earlier plan), then fdatasync it.
        case markEnd(LogSequenceNumber)
    }

    /// The work the I/O thread performs between two calls into the machine.
    package struct Plan: Equatable {
        package var steps: [Step]
        /// The last LSN written once the steps are done.
        package var writtenThrough: LogSequenceNumber
        /// True when the plan ends with a sync that covers `writtenThrough`.
        package var syncs: Bool
    }

    /// A waiter's outcome: its last LSN, or why it failed.
    package typealias Completion = (waiter: Waiter, result: Result<LogSequenceNumber, StorageError>)

    struct Chunk {
        var rollTo: LogSequenceNumber?
        var offset: Int
        var bytes: [UInt8]
    }

    struct Pending {
        var lsn: LogSequenceNumber
        var needsSync: Bool
        var waiter: Waiter
    }

    package let policy: FsyncPolicy
    package let segmentBytesMax: Int
    package let payloadBytesMax: Int
    package let syncIntervalNanoseconds: UInt64
    /// A `markEnd` step follows newly synced records at most this often; nil: never.
    package let markIntervalNanoseconds: UInt64?

    package private(set) var nextLSN: LogSequenceNumber
    package private(set) var writtenLSN: LogSequenceNumber
    package private(set) var syncedLSN: LogSequenceNumber
    package private(set) var failure: StorageError?
    package private(set) var closing = false
    package private(set) var ioInFlight = false
    /// Records appended and fdatasyncs performed since open (group-commit figures).
    package private(set) var recordsAppended: UInt64 = 0
    package private(set) var syncsPerformed: UInt64 = 0
    /// Where the next encoded byte goes in the segment that will be open then.
    private var segmentOffset: Int
    private var chunks: [Chunk] = []
    /// A performed plan's memory, kept for the next group (`reclaim`): its
    /// largest chunk buffer, emptied, and its steps array. A group
    /// allocated both before (issue 25: two allocations per request when
    /// each request is a group of its own, as at low load).
    private var spareChunkBuffer: [UInt8] = []
    private var spareSteps: [Step] = []
    /// The largest chunk buffer kept (a batch import's group can be far
    /// larger). Computed: a generic type holds no static stored property.
    static var retainedChunkBytesMax: Int { 1 << 20 }
    private var waiters: [Pending] = []
    private var syncRequestedThrough: LogSequenceNumber
    /// When the oldest written-but-unsynced record was written (everysec).
    private var unsyncedSinceNanoseconds: UInt64?
    /// The last LSN a `markEnd` step recorded, and when.
    package private(set) var markedLSN: LogSequenceNumber
    private var markedAtNanoseconds: UInt64

    /// Starts with the open segment at `segmentOffset` and `nextLSN` the LSN
    /// of the next record; everything before it is durable (and recorded in
    /// the log-end file at `markedAtNanoseconds`). With `markIntervalNanoseconds`,
    /// plans carry a `markEnd` step for newly synced records at most that often.
    package init(
        policy: FsyncPolicy, nextLSN: LogSequenceNumber, segmentOffset: Int, segmentBytesMax: Int,
        payloadBytesMax: Int, syncIntervalNanoseconds: UInt64, markIntervalNanoseconds: UInt64? = nil,
        markedAtNanoseconds: UInt64 = 0
    ) {
        precondition(nextLSN.rawValue >= 1, "nextLSN \(nextLSN) must be at least 1")
        precondition(
            SegmentFormat.headerBytes + SegmentFormat.recordBytes(payloadBytes: payloadBytesMax) <= segmentBytesMax,
            "segmentBytesMax \(segmentBytesMax) cannot hold one record of payloadBytesMax \(payloadBytesMax)")
        precondition(segmentOffset >= SegmentFormat.headerBytes && segmentOffset % 8 == 0, "offset \(segmentOffset)")
        self.policy = policy
        self.nextLSN = nextLSN
        self.writtenLSN = LogSequenceNumber(nextLSN.rawValue - 1)
        self.syncedLSN = writtenLSN
        self.syncRequestedThrough = writtenLSN
        self.segmentOffset = segmentOffset
        self.segmentBytesMax = segmentBytesMax
        self.payloadBytesMax = payloadBytesMax
        self.syncIntervalNanoseconds = syncIntervalNanoseconds
        self.markIntervalNanoseconds = markIntervalNanoseconds
        self.markedLSN = writtenLSN
        self.markedAtNanoseconds = markedAtNanoseconds
    }

    /// Assigns the next LSNs to `payloads`, frames them into the pending
    /// buffer and registers `waiter` for the last one. Returns the LSNs, or
    /// the reason nothing was accepted. O(total payload bytes).
    package mutating func append(_ payloads: [[UInt8]], waiter: Waiter) -> Result<
        ClosedRange<LogSequenceNumber>, StorageError
    > {
        let result = append(payloads)
        if case .success(let lsns) = result {
            waiters.append(Pending(lsn: lsns.upperBound, needsSync: policy == .always, waiter: waiter))
        }
        return result
    }

    /// Assigns the next LSNs to `payloads` and frames them, with no waiter:
    /// the appender watches `acknowledgedLSN` instead (the request path).
    /// O(total payload bytes).
    package mutating func append(_ payloads: [[UInt8]]) -> Result<ClosedRange<LogSequenceNumber>, StorageError> {
        precondition(!payloads.isEmpty, "append of zero records")
        if let failure { return .failure(failure) }
        if closing { return .failure(.closed) }
        for payload in payloads where payload.count > payloadBytesMax {
            return .failure(.recordTooLarge(bytes: payload.count, limit: payloadBytesMax))
        }
        let first = nextLSN
        // What this append frames: a chunk started here gets room for all of it.
        let appendBytes = payloads.reduce(0) { $0 + SegmentFormat.recordBytes(payloadBytes: $1.count) }
        // By position: `for payload in payloads` retained each payload and released it again.
        for index in payloads.indices {
            let span = SegmentFormat.recordBytes(payloadBytes: payloads[index].count)
            if segmentOffset + span > segmentBytesMax {
                chunks.append(
                    Chunk(rollTo: nextLSN, offset: SegmentFormat.headerBytes, bytes: takeBuffer(for: appendBytes)))
                segmentOffset = SegmentFormat.headerBytes
            } else if chunks.isEmpty {
                chunks.append(Chunk(rollTo: nil, offset: segmentOffset, bytes: takeBuffer(for: appendBytes)))
            }
            SegmentFormat.appendRecord(
                kind: .mutation, lsn: nextLSN, payload: payloads[index], to: &chunks[chunks.count - 1].bytes)
            segmentOffset += span
            nextLSN = nextLSN.advanced(by: 1)
        }
        let last = LogSequenceNumber(nextLSN.rawValue - 1)
        recordsAppended += UInt64(payloads.count)
        return .success(first...last)
    }

    /// The last LSN an append may be acknowledged through under the policy:
    /// synced under `always`, written under `everysec` and `never`.
    package var acknowledgedLSN: LogSequenceNumber {
        policy == .always ? syncedLSN : writtenLSN
    }

    /// Registers `waiter` to complete once every record appended so far is as
    /// durable as the policy makes an append (synced under `always`, written
    /// otherwise), without forcing a sync: a read uses it so that it never
    /// shows a write that is not yet acknowledged.
    package mutating func barrier(waiter: Waiter) -> Result<BarrierState, StorageError> {
        if let failure { return .failure(failure) }
        let through = LogSequenceNumber(nextLSN.rawValue - 1)
        let needsSync = policy == .always
        // Already as durable as asked: the caller completes at once, without
        // a trip through the I/O and completion threads.
        if through <= (needsSync ? syncedLSN : writtenLSN) { return .success(.satisfied(through)) }
        waiters.append(Pending(lsn: through, needsSync: needsSync, waiter: waiter))
        return .success(.pending)
    }

    /// Registers `waiter` to complete once every record appended so far is
    /// durable, whatever the policy (checkpoints and shutdown use it).
    package mutating func requestSync(waiter: Waiter) -> Result<LogSequenceNumber, StorageError> {
        if let failure { return .failure(failure) }
        let through = LogSequenceNumber(nextLSN.rawValue - 1)
        syncRequestedThrough = max(syncRequestedThrough, through)
        waiters.append(Pending(lsn: through, needsSync: true, waiter: waiter))
        return .success(through)
    }

    /// Refuses further appends; what is pending is still written and synced.
    package mutating func close() {
        closing = true
    }

    /// True when records wait to be written or a requested sync is not done:
    /// the I/O thread has another plan to perform at once.
    package var hasWorkNow: Bool {
        failure == nil && (!chunks.isEmpty || syncRequestedThrough > syncedLSN)
    }

    /// An empty chunk buffer with room for the append that starts it
    /// (`bytes`, framing included): one allocation for the records of one
    /// shard turn instead of one per growth step while they are framed
    /// (issue 25's allocation budget); later appends to the same chunk grow
    /// it as any array grows.
    private mutating func takeBuffer(for bytes: Int) -> [UInt8] {
        var buffer: [UInt8] = []
        if spareChunkBuffer.capacity >= bytes { swap(&buffer, &spareChunkBuffer) }
        buffer.reserveCapacity(bytes)
        return buffer
    }

    /// True once closing and nothing is left to write, sync or complete.
    package var isDrained: Bool {
        closing && !ioInFlight && chunks.isEmpty && waiters.isEmpty && (failure != nil || syncedLSN == writtenLSN)
    }

    /// Returns the next plan for the I/O thread, or nil when there is nothing
    /// to do now (see `wakeDeadline`). At most one plan is in flight.
    package mutating func nextIO(nowNanoseconds: UInt64) -> Plan? {
        if failure != nil || ioInFlight { return nil }
        var steps: [Step] = []
        swap(&steps, &spareSteps)
        // First, before this plan writes anything: a failure then fails only
        // records not yet written, as any write failure does.
        if markDue(nowNanoseconds: nowNanoseconds) { steps.append(.markEnd(syncedLSN)) }
        var writtenThrough = writtenLSN
        appendChunkSteps(to: &steps)
        if !chunks.isEmpty { writtenThrough = LogSequenceNumber(nextLSN.rawValue - 1) }
        let unsynced = writtenThrough > syncedLSN
        let syncDue: Bool
        switch policy {
        case .always:
            syncDue = unsynced
        case .everysec:
            syncDue = unsynced && intervalSyncDue(nowNanoseconds: nowNanoseconds)
        case .never:
            syncDue = false
        }
        let syncs = unsynced && (syncDue || syncRequestedThrough > syncedLSN || closing)
        if syncs { steps.append(.sync) }
        let completable = waiters.contains { $0.lsn <= ($0.needsSync ? syncedLSN : writtenLSN) }
        if steps.isEmpty && !completable {
            spareSteps = steps
            return nil
        }
        chunks.removeAll(keepingCapacity: true)
        ioInFlight = true
        return Plan(steps: steps, writtenThrough: writtenThrough, syncs: syncs)
    }

    /// Returns a plan the appender may perform on its own thread, or nil
    /// when the I/O thread must do the work (`nextIO`): only writes, under a
    /// policy that acknowledges on the write (`everysec`, `never`), with no
    /// plan in flight, no waiter with a completion, no roll (it fdatasyncs
    /// and creates a file), no sync due or requested, no log-end mark due and
    /// the log not closing. The plan is in flight until `ioSucceeded` or
    /// `ioFailed`, as one from `nextIO` is. O(chunks).
    package mutating func nextWriteOnAppender(nowNanoseconds: UInt64) -> Plan? {
        guard policy != .always, failure == nil, !ioInFlight, !closing, waiters.isEmpty, !chunks.isEmpty,
            syncRequestedThrough <= syncedLSN, !markDue(nowNanoseconds: nowNanoseconds)
        else { return nil }
        if policy == .everysec && unsyncedSinceNanoseconds != nil && intervalSyncDue(nowNanoseconds: nowNanoseconds) {
            return nil
        }
        for chunk in chunks where chunk.rollTo != nil { return nil }
        var steps: [Step] = []
        swap(&steps, &spareSteps)
        appendChunkSteps(to: &steps)  // writes only: no chunk rolls
        chunks.removeAll(keepingCapacity: true)
        ioInFlight = true
        return Plan(steps: steps, writtenThrough: LogSequenceNumber(nextLSN.rawValue - 1), syncs: false)
    }

    /// True when, after an appender reported its plan (`nextWriteOnAppender`),
    /// the I/O thread must be woken: records or a requested sync wait, a
    /// waiter waits, the log closes or failed, or its wake deadline moved
    /// from `deadlineBefore` (`wakeDeadline()` when the plan was taken: the
    /// first unsynced write under `everysec` sets one). Otherwise the thread
    /// sleeps on as it would have with nothing new.
    package func needsIOThread(deadlineBefore: UInt64?) -> Bool {
        hasWorkNow || !waiters.isEmpty || closing || failure != nil || wakeDeadline() != deadlineBefore
    }

    /// Appends the steps of the pending chunks, in order: a roll before a
    /// chunk that starts a segment, then its write. `nextIO` and
    /// `nextWriteOnAppender` both take the chunks this way.
    private func appendChunkSteps(to steps: inout [Step]) {
        for chunk in chunks {
            if let rollTo = chunk.rollTo { steps.append(.roll(firstLSN: rollTo)) }
            if !chunk.bytes.isEmpty { steps.append(.write(bytes: chunk.bytes, offset: chunk.offset)) }
        }
    }

    /// Under `everysec`: true once the oldest written-but-unsynced record is
    /// an interval old (with none written yet, the interval starts now).
    private func intervalSyncDue(nowNanoseconds: UInt64) -> Bool {
        nowNanoseconds >= (unsyncedSinceNanoseconds ?? nowNanoseconds) &+ syncIntervalNanoseconds
    }

    /// Returns when the I/O thread must wake without being signalled (the
    /// everysec sync), or nil to wait for a signal.
    package func wakeDeadline() -> UInt64? {
        guard failure == nil else { return nil }
        var deadline: UInt64?
        if policy == .everysec, let since = unsyncedSinceNanoseconds { deadline = since &+ syncIntervalNanoseconds }
        if let interval = markIntervalNanoseconds, syncedLSN > markedLSN {
            let markAt = markedAtNanoseconds &+ interval
            deadline = min(deadline ?? markAt, markAt)
        }
        return deadline
    }

    /// True when newly synced records are due to be recorded in the log-end file.
    private func markDue(nowNanoseconds: UInt64) -> Bool {
        guard let interval = markIntervalNanoseconds, syncedLSN > markedLSN else { return false }
        return nowNanoseconds >= markedAtNanoseconds &+ interval
    }

    /// Records that `plan` was performed and returns the waiters now done.
    package mutating func ioSucceeded(_ plan: Plan, nowNanoseconds: UInt64) -> [Completion] {
        precondition(ioInFlight, "ioSucceeded without a plan in flight")
        precondition(plan.writtenThrough >= writtenLSN, "written LSN went back: \(plan.writtenThrough) < \(writtenLSN)")
        ioInFlight = false
        writtenLSN = plan.writtenThrough
        for case .markEnd(let lsn) in plan.steps {
            markedLSN = lsn
            markedAtNanoseconds = nowNanoseconds
        }
        if plan.syncs {
            syncsPerformed += 1
            syncedLSN = plan.writtenThrough
            unsyncedSinceNanoseconds = nil
        } else if writtenLSN > syncedLSN && unsyncedSinceNanoseconds == nil {
            unsyncedSinceNanoseconds = nowNanoseconds
        }
        var done: [Completion] = []
        var remaining: [Pending] = []
        for pending in waiters {
            if pending.lsn <= (pending.needsSync ? syncedLSN : writtenLSN) {
                done.append((pending.waiter, .success(pending.lsn)))
            } else {
                remaining.append(pending)
            }
        }
        waiters = remaining
        return done
    }

    /// Keeps the memory of `plan`, performed and reported (`ioSucceeded`),
    /// for the next groups: its steps array and its largest chunk buffer up
    /// to `retainedChunkBytesMax`, emptied. Takes `plan`'s steps (it is left
    /// with none): a buffer nothing else holds is reused in place.
    package mutating func reclaim(_ plan: inout Plan) {
        precondition(!ioInFlight, "reclaim of a plan still in flight")
        var steps: [Step] = []
        swap(&steps, &plan.steps)
        while let step = steps.popLast() {
            guard case .write(var bytes, _) = step, bytes.capacity > spareChunkBuffer.capacity,
                bytes.capacity <= Self.retainedChunkBytesMax
            else { continue }
            bytes.removeAll(keepingCapacity: true)
            spareChunkBuffer = bytes
        }
        if steps.capacity > spareSteps.capacity { spareSteps = steps }
    }

    /// Enters the failed state after a write, roll or sync failed, and returns
    /// every waiter with that failure. Nothing is written or synced afterwards.
    package mutating func ioFailed(_ error: StorageError) -> [Completion] {
        precondition(ioInFlight, "ioFailed without a plan in flight")
        ioInFlight = false
        let failure: StorageError
        switch error {
        case .io(let cause): failure = .logFailed(cause)
        case .logFailed, .damaged, .closed, .recordTooLarge, .invalidUse: failure = error
        }
        self.failure = failure
        chunks.removeAll()
        let failed = waiters.map {
            (waiter: $0.waiter, result: Result<LogSequenceNumber, StorageError>.failure(failure))
        }
        waiters.removeAll()
        return failed
    }
}

/// What a barrier found: every earlier record already as durable as asked, or
/// a waiter queued behind them.
package enum BarrierState: Equatable, Sendable {
    case satisfied(LogSequenceNumber)
    case pending
}
