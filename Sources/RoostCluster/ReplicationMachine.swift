import RoostStorage

/// The replication of one node (spec §13, decision 0077) as a sans-I/O state
/// machine: it performs no I/O, starts no thread and reads no clock. It is
/// told events with the time (`handle(_:now:)`, milliseconds of any monotonic
/// clock) and returns actions (etcd requests, watches, local log writes,
/// applies, acknowledgements) that the node's loop performs. The
/// deterministic simulation (Tests/RoostClusterTests) drives it against
/// `FakeEtcd`.
///
/// - Follower: reads the leader key and the group log, watches the group's
///   keys, appends each batch to its local log at the same LSNs (checking
///   CRC, epoch order and continuity; duplicates ignored, a gap re-read) and
///   applies what it appended (all of it committed).
/// - Candidate: when the leader key is gone, waits a delay that grows with
///   how far behind it is, then grants a lease and creates the leader key
///   (compare create revision 0). Its create revision is the new epoch.
/// - Leader: reads the group log to its end, appends its epoch record, then
///   takes writes: one append transaction in flight at a time (compare the
///   leader key's create revision and the batch key's version 0), writes
///   submitted meanwhile go in the next batch. It acknowledges an LSN only
///   once committed in etcd and durable locally. It renews its lease every
///   third of the TTL and confirms the leader key after each renewal; a
///   lease not confirmed before its deadline, a lost lease or a failed
///   compare deposes it for good.
/// - Start: the local log after the node's checkpoint (applied, hence
///   committed) is compared with the group log; a suffix etcd does not hold
///   is cut (it was never acknowledged). When etcd no longer holds the
///   batches after the checkpoint, the node re-seeds.
package struct ReplicationMachine {
    /// What an etcd request in flight is for (its answer goes there).
    private enum Purpose {
        /// A read of the group log from this LSN, a page of at most `limit` batches.
        case read(from: LogSequenceNumber, limit: Int)
        case grantLease(sentAt: Int64)
        case campaign(EtcdLeaseID, grantSentAt: Int64, ttlSeconds: Int64)
        case append
        case keepAlive(sentAt: Int64)
        case confirmLease(keepAliveSentAt: Int64, ttlSeconds: Int64)
        case revoke
        case memberLease
        case memberKeepAlive
        case memberPut(MemberRecord)
    }

    private struct Pending {
        var purpose: Purpose
        var sentAt: Int64
    }

    /// The leader's batch in etcd's hands.
    private struct AppendInFlight {
        var batch: ReplicationBatch
        var encoded: [UInt8]
        var key: [UInt8]
        var firstSentAt: Int64
        var retryAt: Int64?
    }

    /// A read that waits for the local log's comparison (start).
    private struct ReadAwaitingVerification {
        var revision: EtcdRevision
        var leader: EtcdKeyValue?
        var batches: [ReplicationBatch]
        /// The read stopped at its page limit: etcd holds more after it.
        var more: Bool
    }

    /// The fewest batches a read asks for: eight of the largest batch a
    /// leader writes (`ReplicationBatch.encodedBytesMax`, 1.4 MB) stay within
    /// the etcd client's answer limit (16 MiB, base64 included), so a page
    /// of this many always fits. The first read asks for this many, and so
    /// does the read after an answer that did not fit.
    package static let readBatchesMin = 8
    /// The most batches a read asks for (a page of small batches).
    package static let readBatchesMax = 1_024
    /// The batch bytes a page is sized for: what `readBatchesMin` batches of
    /// the largest size hold. The next page asks for as many batches of the
    /// largest size the last page held as fit in this, at most twice the
    /// last page's limit: a node catching up on small batches (a leader
    /// under a light, steady load writes one per write) reads hundreds a
    /// round trip instead of eight, and so catches up faster than such a
    /// leader writes (a restarted follower in `make cluster-soak` read 8
    /// batches of ~500 bytes a round trip and never served).
    package static let readPageBytesBudget = readBatchesMin * ReplicationBatch.encodedBytesMax
    /// The most records a node catching up hands to its log (`appendLocal`)
    /// ahead of what the log made durable before it reads the next page:
    /// what waits for the apply task stays bounded (a node that reads faster
    /// than it applies holds at most this many records, plus one page).
    package static let readAheadRecordsMax: UInt64 = 100_000

    /// The most etcd requests in flight at once: one read, one keep-alive or
    /// confirm, one append, one grant or campaign, and lease revocations
    /// (best effort, each until answered or timed out).
    package static let requestsInFlightMax = 64

    package let configuration: ReplicationConfiguration

    package private(set) var role = ReplicationRole.follower
    /// The current leader as last seen (nil: none known).
    package private(set) var leader: LeaderRecord?
    /// The epoch of the current leader as last seen.
    package private(set) var epoch: ClusterEpoch?
    /// This node's epoch while it leads.
    package private(set) var ownEpoch: ClusterEpoch?
    /// This node's lease while it leads.
    package private(set) var lease: EtcdLeaseID?
    /// When the lease may have expired: the send time of the last confirmed keep-alive plus its TTL.
    package private(set) var leaseDeadline: Int64 = 0
    /// Whether the leader takes writes (its epoch record is committed).
    package private(set) var isTakingWrites = false

    /// The last LSN handed to the local log.
    package private(set) var localEnd = LogSequenceNumber(0)
    /// The last LSN fsynced in the local log.
    package private(set) var localDurable = LogSequenceNumber(0)
    /// The last LSN known to be committed in etcd (all before it too).
    package private(set) var committed = LogSequenceNumber(0)
    /// The last LSN applied.
    package private(set) var applied = LogSequenceNumber(0)
    /// The last LSN acknowledged (the leader, in its epoch).
    package private(set) var acknowledged = LogSequenceNumber(0)
    /// The largest LSN seen in etcd's group log.
    package private(set) var groupEnd = LogSequenceNumber(0)
    /// The highest revision whose watch events are taken into account.
    package private(set) var watchRevision = EtcdRevision(0)
    /// When the machine last learned the group log's end from etcd: the send
    /// time of the last read answered, or the arrival of the last watch
    /// events (a follower's lag is measured from it, spec §13.3).
    package private(set) var groupEndLearnedAt: Int64 = 0
    /// The first LSN etcd holds of the group log, as the last read found (nil: none read yet, or empty).
    package var groupLogFirstLSN: LogSequenceNumber? { groupLogStart }
    /// The encoded bytes of the group-log batches this node read, received
    /// or appended since it started (from its position at start on), less
    /// those a purge deleted (`noteGroupLogStart`).
    package private(set) var groupLogBytes = 0
    private var groupLogBytesCountedThrough = LogSequenceNumber(0)
    /// The batches counted in `groupLogBytes`, oldest first: their last LSN
    /// and bytes (16 bytes each; a purge drops the deleted ones).
    private var countedBatches: [(lastLSN: LogSequenceNumber, bytes: Int)] = []
    private var countedBatchesHead = 0

    private var now: Int64 = 0
    private var started = false
    private var reconciled = false
    /// The local records known committed at start (through the node's checkpoint).
    private var trustedEnd = LogSequenceNumber(0)
    private var awaitingVerification: ReadAwaitingVerification?
    /// At start, the first LSN whose local record is still to be compared with the group log.
    private var verifyFrom = LogSequenceNumber(1)
    /// The last read reached the group log's end (not a full page).
    private var readReachedEnd = false
    private var groupLogStart: LogSequenceNumber?
    private var lastBatchEpoch: ClusterEpoch?
    private var nextRequestID: UInt64 = 1
    private var pending: [EtcdRequestID: Pending] = [:]
    private var watch: WatchToken?
    private var nextWatchToken: UInt64 = 1
    /// A read is wanted, and must be one sent with this id or later (nil: none wanted).
    private var readWantedFrom: EtcdRequestID?
    private var readRetryAt: Int64 = 0
    /// The batches the next read asks for (`readBatchesMin`…`readBatchesMax`).
    package private(set) var readPageLimit = Self.readBatchesMin
    /// A full page was read while more than `readAheadRecordsMax` records
    /// were handed to the local log and not yet durable there: the next
    /// page is read once they are.
    private var nextPageAwaitsLocalLog = false
    private var nextPeriodicReadAt: Int64 = 0
    private var campaignAt: Int64?
    private var nextKeepAliveAt: Int64 = 0
    private var epochStartLSN: LogSequenceNumber?
    /// The next LSN a submit takes (leader).
    private var nextLSN = LogSequenceNumber(0)
    /// Records submitted, at `localEnd + 1`..., not in a batch yet.
    private var queue: [[UInt8]] = []
    private var inFlight: AppendInFlight?
    private var unconfirmedReportedThrough = LogSequenceNumber(0)
    /// The node's newest snapshot (published in its member record).
    private var checkpoint = LogSequenceNumber(0)
    /// The lease of the node's member record (its own, not the leader's).
    private var memberLease: EtcdLeaseID?
    private var nextMemberKeepAliveAt: Int64 = 0
    private var nextMemberPutAt: Int64 = 0
    private var memberGrantRetryAt: Int64 = 0
    /// The member record etcd holds, as last written (nil: none yet).
    private var publishedMember: MemberRecord?

    package init(configuration: ReplicationConfiguration) {
        configuration.validate()
        self.configuration = configuration
    }

    private var keys: ClusterKeys { configuration.keys }

    /// The local log was compared with the group log at start (and cut where
    /// etcd did not hold it): from now on all of it is committed.
    package var isReconciled: Bool { reconciled }

    /// The last read of the group log reached its end (not a full page): the
    /// group log's end is known (`groupEnd`, as of `groupEndLearnedAt`).
    package var hasReadToEnd: Bool { readReachedEnd }

    /// Records submitted that no append has taken yet.
    package var queuedRecordCount: Int { queue.count }

    /// Returns what to do about `event`, at time `now` (milliseconds, never decreasing).
    package mutating func handle(_ event: ReplicationEvent, now: Int64) -> [ReplicationAction] {
        precondition(now >= self.now, "time went back: \(now) < \(self.now)")
        self.now = now
        var actions: [ReplicationAction] = []
        guard role != .deposed, role != .seeding else { return actions }
        switch event {
        case .start(let localLogEnd, let checkpoint):
            precondition(!started, "\(configuration.node) started twice")
            precondition(checkpoint <= localLogEnd, "checkpoint \(checkpoint) beyond the log's end \(localLogEnd)")
            started = true
            localEnd = localLogEnd
            localDurable = localLogEnd
            trustedEnd = checkpoint
            verifyFrom = checkpoint.advanced(by: 1)
            self.checkpoint = checkpoint
            requestRead(&actions)
        case .tick:
            precondition(started, "tick before start")
            tick(&actions)
        case .etcdAnswered(let id, let response):
            guard let request = pending.removeValue(forKey: id) else { return actions }  // timed out earlier
            answered(id, request, response, &actions)
        case .watchDelivered(let token, let events):
            guard token == watch else { return actions }
            delivered(events, &actions)
        case .watchFailed(let token, _):
            guard token == watch else { return actions }
            watch = nil
            requestRead(&actions)
        case .localLogVerified(let firstDifference):
            verified(firstDifference, &actions)
        case .localDurable(let through):
            precondition(through <= localEnd, "durable through \(through) beyond the local end \(localEnd)")
            localDurable = max(localDurable, through)
            if nextPageAwaitsLocalLog {
                nextPageAwaitsLocalLog = false
                readNextPage(&actions)  // which waits again while the log is still too far behind
            }
        case .submit(let records):
            submit(records, &actions)
        case .stepDown:
            if role == .leader { depose(.steppedDown, &actions) }
        case .localLogFailed:
            if role == .leader { depose(.localLogFailed, &actions) }
        case .checkpointed(let through):
            precondition(through <= applied, "a checkpoint at \(through) beyond what is applied, \(applied)")
            checkpoint = max(checkpoint, through)
        }
        if role != .deposed, role != .seeding { progress(&actions) }
        return actions
    }

    // MARK: - Time

    private mutating func tick(_ actions: inout [ReplicationAction]) {
        let timeout = configuration.etcdTimeoutMilliseconds
        for (id, request) in pending.sorted(by: { $0.key < $1.key }) where now - request.sentAt >= timeout {
            pending[id] = nil
            answered(id, request, .failed(.unavailable), &actions)
            guard role != .deposed, role != .seeding else { return }
        }
        if readWantedFrom != nil, !isReadPending, now >= readRetryAt { sendRead(&actions) }
        switch role {
        case .follower, .candidate:
            if reconciled, now >= nextPeriodicReadAt { requestRead(&actions) }
            if role == .candidate, let at = campaignAt, now >= at, !isCampaignPending {
                campaignAt = nil
                send(.grantLease(ttlSeconds: configuration.leaseTTLSeconds), .grantLease(sentAt: now), &actions)
            }
        case .leader:
            if now >= leaseDeadline { return depose(.leaseNotConfirmed, &actions) }
            if now >= nextKeepAliveAt, !isKeepAlivePending, let lease {
                nextKeepAliveAt = now + configuration.keepAliveIntervalMilliseconds
                send(.keepAlive(lease), .keepAlive(sentAt: now), &actions)
            }
            if let append = inFlight {
                if let at = append.retryAt, now >= at { sendAppend(&actions) }
                let through = LogSequenceNumber(nextLSN.rawValue - 1)
                if now - append.firstSentAt >= timeout, through > unconfirmedReportedThrough {
                    unconfirmedReportedThrough = through
                    actions.append(.writesUnconfirmed(through: through))
                }
            }
        case .deposed, .seeding:
            preconditionFailure("tick handled in role \(role)")
        }
        publishMember(&actions)
    }

    /// Keeps the node's member record in etcd (`g0/members/<node>`, on the
    /// node's own lease): its URL, role, applied and checkpoint LSNs, written
    /// again when they change, at most every `memberUpdateMilliseconds`.
    private mutating func publishMember(_ actions: inout [ReplicationAction]) {
        guard reconciled, role != .deposed, role != .seeding else { return }
        let inFlight = pending.values.map(\.purpose)
        guard let lease = memberLease else {
            let granting = inFlight.contains { if case .memberLease = $0 { true } else { false } }
            if !granting, now >= memberGrantRetryAt {
                memberGrantRetryAt = now + configuration.memberUpdateMilliseconds
                send(.grantLease(ttlSeconds: configuration.leaseTTLSeconds), .memberLease, &actions)
            }
            return
        }
        if now >= nextMemberKeepAliveAt,
            !inFlight.contains(where: { if case .memberKeepAlive = $0 { true } else { false } })
        {
            nextMemberKeepAliveAt = now + configuration.keepAliveIntervalMilliseconds
            send(.keepAlive(lease), .memberKeepAlive, &actions)
        }
        let record = MemberRecord(
            url: configuration.advertiseURL, role: role, appliedLSN: applied, checkpointLSN: checkpoint)
        let writing = inFlight.contains { if case .memberPut = $0 { true } else { false } }
        guard record != publishedMember, now >= nextMemberPutAt, !writing else { return }
        nextMemberPutAt = now + configuration.memberUpdateMilliseconds
        let put = EtcdRequest.transaction(
            compares: [],
            success: [.put(key: keys.memberKey(configuration.node), value: record.encoded(), lease: lease)],
            failure: [])
        send(put, .memberPut(record), &actions)
    }

    /// Lets the member record go at once (deposed or re-seeding: the process starts again).
    private mutating func withdrawMember(_ actions: inout [ReplicationAction]) {
        if let memberLease { send(.revokeLease(memberLease), .revoke, &actions) }
        memberLease = nil
    }

    private var isReadPending: Bool {
        pending.values.contains { if case .read = $0.purpose { true } else { false } }
    }

    private var isCampaignPending: Bool {
        pending.values.contains {
            switch $0.purpose {
            case .grantLease, .campaign: true
            case .read, .append, .keepAlive, .confirmLease, .revoke, .memberLease, .memberKeepAlive, .memberPut: false
            }
        }
    }

    private var isKeepAlivePending: Bool {
        pending.values.contains {
            switch $0.purpose {
            case .keepAlive, .confirmLease: true
            case .read, .grantLease, .campaign, .append, .revoke, .memberLease, .memberKeepAlive, .memberPut: false
            }
        }
    }

    // MARK: - Requests

    private mutating func send(_ request: EtcdRequest, _ purpose: Purpose, _ actions: inout [ReplicationAction]) {
        precondition(pending.count < Self.requestsInFlightMax, "\(pending.count) etcd requests in flight")
        let id = EtcdRequestID(nextRequestID)
        nextRequestID += 1
        pending[id] = Pending(purpose: purpose, sentAt: now)
        actions.append(.sendEtcd(id, request))
    }

    /// Asks for a read sent from now on (one in flight may predate what the caller learnt).
    /// `fresh`: only a read sent from now satisfies it, even if an older want is open.
    private mutating func requestRead(_ actions: inout [ReplicationAction], fresh: Bool = false) {
        if readWantedFrom == nil || fresh { readWantedFrom = EtcdRequestID(nextRequestID) }
        if !isReadPending { sendRead(&actions) }
    }

    /// Reads, in one transaction at one revision: the leader key, the group
    /// log's first batch key (where it starts), the batch that holds the
    /// node's next LSN, and a page of the batches after it
    /// (`readPageLimit`). A full page asks for the next read at once.
    private mutating func sendRead(_ actions: inout [ReplicationAction]) {
        nextPeriodicReadAt = now + configuration.periodicReadMilliseconds
        let from = reconciled ? localEnd.advanced(by: 1) : verifyFrom
        let logEnd = EtcdGatewayJSON.rangeEnd(forPrefix: keys.logPrefix)
        let after = keys.logKey(firstLSN: from.advanced(by: 1))
        let read = EtcdRequest.transaction(
            compares: [],
            success: [
                .range(.key(keys.leader), limit: 0), .range(.prefix(keys.logPrefix), limit: 1),
                .rangeLast(.span(from: keys.logPrefix, to: after)),
                .range(.span(from: after, to: logEnd), limit: readPageLimit),
            ],
            failure: [])
        send(read, .read(from: from, limit: readPageLimit), &actions)
    }

    private mutating func answered(
        _ id: EtcdRequestID, _ request: Pending, _ response: EtcdResponse, _ actions: inout [ReplicationAction]
    ) {
        switch request.purpose {
        case .read(let from, let limit):
            readAnswered(response, id: id, sentAt: request.sentAt, from: from, limit: limit, &actions)
        case .grantLease(let sentAt):
            grantAnswered(response, sentAt: sentAt, &actions)
        case .campaign(let lease, let grantSentAt, let ttl):
            campaignAnswered(response, lease: lease, grantSentAt: grantSentAt, ttlSeconds: ttl, &actions)
        case .append:
            appendAnswered(response, &actions)
        case .keepAlive(let sentAt):
            keepAliveAnswered(response, sentAt: sentAt, &actions)
        case .confirmLease(let keepAliveSentAt, let ttl):
            confirmAnswered(response, keepAliveSentAt: keepAliveSentAt, ttlSeconds: ttl, &actions)
        case .revoke:
            break  // best effort: an unrevoked lease expires after its TTL
        case .memberLease:
            guard case .lease(let id, _) = response else { return }
            memberLease = id
            publishedMember = nil
            nextMemberKeepAliveAt = now + configuration.keepAliveIntervalMilliseconds
        case .memberKeepAlive:
            switch response {
            case .keptAlive(_, let ttl) where ttl > 0: break
            case .keptAlive, .failed(.leaseNotFound): memberLease = nil  // granted again at the next tick
            case .failed, .transaction, .lease, .revoked, .compacted: break
            }
        case .memberPut(let record):
            switch response {
            case .transaction(true, _, _): publishedMember = record
            case .failed(.leaseNotFound): memberLease = nil
            case .transaction, .failed, .lease, .keptAlive, .revoked, .compacted: break
            }
        }
    }

    // MARK: - Reading the group log

    private mutating func readAnswered(
        _ response: EtcdResponse, id: EtcdRequestID, sentAt: Int64, from: LogSequenceNumber, limit: Int,
        _ actions: inout [ReplicationAction]
    ) {
        guard case .transaction(_, let revision, let results) = response, results.count == 4,
            case .range(let leaderKeys) = results[0], case .range(let firstKeys) = results[1],
            case .range(let holding) = results[2], case .range(let page) = results[3]
        else {
            if response == .failed(.answerTooLarge) {
                // Larger batches than the last page's: the smallest page always fits; ask again at once.
                readPageLimit = Self.readBatchesMin
            } else {
                readRetryAt = now + configuration.retryMilliseconds
            }
            return
        }
        let found = holding + page
        sizeNextPage(after: found, limit: limit)
        // A read sent before the want was raised does not satisfy it (the
        // new leader's read to the log's end must follow its win).
        let satisfies = readWantedFrom.map { id >= $0 } ?? true
        if satisfies { readWantedFrom = nil }
        defer { if !satisfies, !isReadPending, role != .deposed, role != .seeding { sendRead(&actions) } }
        groupLogStart = firstKeys.first.flatMap { keys.firstLSN(ofLogKey: $0.key) }
        var batches: [ReplicationBatch] = []
        for keyValue in found {
            guard let batch = decodeBatch(keyValue, &actions) else { break }  // a hole: stop before it
            if batch.lastLSN < from {  // the batch before the node's position: nothing to take
                countBytes(of: batch, keyValue.value.count)
                continue
            }
            if let last = batches.last, batch.firstLSN != last.nextLSN { break }
            countBytes(of: batch, keyValue.value.count)
            batches.append(batch)
        }
        let more = page.count >= limit
        readReachedEnd = !more
        // Only a read that reached the end learnt where the group log ends.
        if !more { groupEndLearnedAt = max(groupEndLearnedAt, sentAt) }
        if let last = batches.last {
            groupEnd = max(groupEnd, last.lastLSN)
        }
        guard reconciled else { return reconcile(revision, leaderKeys.first, batches, more: more, &actions) }
        took(revision, leaderKeys.first, batches, &actions)
        if more { readNextPage(&actions) }
    }

    /// After a full page: reads the next at once, unless more than
    /// `readAheadRecordsMax` records handed to the local log are not yet
    /// durable there (then once they are: `localDurable`).
    private mutating func readNextPage(_ actions: inout [ReplicationAction]) {
        guard role != .deposed, role != .seeding else { return }
        guard localEnd.rawValue - localDurable.rawValue <= Self.readAheadRecordsMax else {
            nextPageAwaitsLocalLog = true
            return
        }
        requestRead(&actions, fresh: true)
    }

    /// Sizes the next read after a page read with `limit`: as many batches of
    /// the page's largest as fit `readPageBytesBudget`, at most twice
    /// `limit`, within `readBatchesMin`…`readBatchesMax`. An empty page
    /// changes nothing.
    private mutating func sizeNextPage(after page: [EtcdKeyValue], limit: Int) {
        guard let largest = page.lazy.map(\.value.count).max() else { return }
        let fitting = Self.readPageBytesBudget / max(largest, 1)
        readPageLimit = min(max(min(fitting, limit * 2), Self.readBatchesMin), Self.readBatchesMax)
    }

    /// At start: has the local log compared with what etcd holds, page by
    /// page from its checkpoint, or re-seeds.
    private mutating func reconcile(
        _ revision: EtcdRevision, _ leaderKey: EtcdKeyValue?, _ batches: [ReplicationBatch], more: Bool,
        _ actions: inout [ReplicationAction]
    ) {
        guard awaitingVerification == nil else { return }
        guard let start = groupLogStart else {
            // etcd holds no batch: nothing after the checkpoint was committed.
            truncateLocal(after: trustedEnd, &actions)
            markReconciled()
            return took(revision, leaderKey, batches, &actions)
        }
        // The records after the checkpoint are compared with etcd's; those
        // etcd no longer holds cannot be, nor can the log go on from them.
        if trustedEnd.rawValue + 1 < start.rawValue { return reseed(start, &actions) }
        guard localEnd >= verifyFrom else {
            markReconciled()
            took(revision, leaderKey, batches, &actions)
            if more { readNextPage(&actions) }
            return
        }
        awaitingVerification = ReadAwaitingVerification(
            revision: revision, leader: leaderKey, batches: batches, more: more)
        actions.append(
            .verifyLocalLog(against: batches.filter { $0.lastLSN >= verifyFrom && $0.firstLSN <= localEnd }))
    }

    private mutating func verified(_ firstDifference: LogSequenceNumber?, _ actions: inout [ReplicationAction]) {
        guard let read = awaitingVerification else { preconditionFailure("a verification nobody asked for") }
        awaitingVerification = nil
        let pageEnd = read.batches.last?.lastLSN
        if firstDifference == nil, read.more, let pageEnd, pageEnd < localEnd {
            // The page matched and etcd holds more: compare the next page.
            verifyFrom = pageEnd.advanced(by: 1)
            return requestRead(&actions, fresh: true)
        }
        // What etcd held ends here: a local record after it was never committed.
        var keep = max(pageEnd ?? LogSequenceNumber(verifyFrom.rawValue - 1), trustedEnd)
        if let difference = firstDifference {
            precondition(
                difference > trustedEnd, "the local log differs at \(difference), before its checkpoint \(trustedEnd)")
            keep = min(keep, LogSequenceNumber(difference.rawValue - 1))
        }
        truncateLocal(after: keep, &actions)
        markReconciled()
        took(read.revision, read.leader, read.batches, &actions)
        if read.more { readNextPage(&actions) }
    }

    /// The local log is a prefix of the group log (as far as etcd holds it): all of it is committed.
    private mutating func markReconciled() {
        reconciled = true
        committed = max(committed, localEnd)
    }

    private mutating func truncateLocal(after lsn: LogSequenceNumber, _ actions: inout [ReplicationAction]) {
        guard lsn < localEnd else { return }
        precondition(lsn >= trustedEnd, "a cut after \(lsn) would drop checkpointed records (through \(trustedEnd))")
        actions.append(.truncateLocalLog(after: lsn))
        localEnd = lsn
        localDurable = min(localDurable, lsn)
    }

    /// Takes in what a read found: the leader key, the batches after the local log.
    private mutating func took(
        _ revision: EtcdRevision, _ leaderKey: EtcdKeyValue?, _ batches: [ReplicationBatch],
        _ actions: inout [ReplicationAction]
    ) {
        if let start = groupLogStart, start.rawValue > localEnd.rawValue + 1 {
            return reseed(start, &actions)
        }
        if revision >= watchRevision {
            // Older than what the watch said: the watch knows better.
            watchRevision = revision
            leaderSeen(leaderKey, &actions)
            guard role != .deposed else { return }
        }
        for batch in batches where batch.lastLSN > localEnd {
            received(batch, key: keys.logKey(firstLSN: batch.firstLSN), &actions)
            guard role != .deposed else { return }
        }
        if watch == nil {
            let token = WatchToken(nextWatchToken)
            nextWatchToken += 1
            watch = token
            // A leader watches its key only: no batch but its own can follow
            // its log (the fence), and its own need not come back to it, so
            // etcd streams each batch to the followers alone.
            let range: EtcdKeyRange = role == .leader ? .key(keys.leader) : .prefix(keys.group)
            actions.append(.startWatch(token, range, from: revision.next))
        }
        if role == .leader, !isTakingWrites, epochStartLSN == nil, readWantedFrom == nil, readReachedEnd {
            appendEpochRecord(&actions)
        }
    }

    private mutating func reseed(_ start: LogSequenceNumber, _ actions: inout [ReplicationAction]) {
        role = .seeding
        isTakingWrites = false
        if let watch { actions.append(.cancelWatch(watch)) }
        watch = nil
        if let lease { send(.revokeLease(lease), .revoke, &actions) }  // a leader too far behind lets go
        withdrawMember(&actions)
        actions.append(.reseedNeeded(groupLogStart: start))
    }

    private mutating func decodeBatch(_ keyValue: EtcdKeyValue, _ actions: inout [ReplicationAction])
        -> ReplicationBatch?
    {
        let batch: ReplicationBatch
        do {
            batch = try ReplicationBatch.decode(keyValue.value)
        } catch {
            actions.append(.refusedBatch(key: keyValue.key, .undecodable(error)))
            return nil
        }
        guard keys.firstLSN(ofLogKey: keyValue.key) == batch.firstLSN else {
            actions.append(.refusedBatch(key: keyValue.key, .keyMismatch))
            return nil
        }
        return batch
    }

    /// Takes one batch of the group log (from a read or the watch).
    private mutating func received(_ batch: ReplicationBatch, key: [UInt8], _ actions: inout [ReplicationAction]) {
        groupEnd = max(groupEnd, batch.lastLSN)
        guard batch.lastLSN > localEnd else { return }  // held already: a duplicate or a rewind
        guard batch.firstLSN.rawValue <= localEnd.rawValue + 1 else { return requestRead(&actions) }  // a gap
        if role == .leader, let ownEpoch {
            if batch.epoch > ownEpoch { return depose(.newerEpochSeen, &actions) }
            // Before its epoch record, a new leader catches up on older epochs;
            // after it, nothing but its own appends can follow its log (the fence).
            precondition(
                batch.epoch < ownEpoch,
                "\(configuration.node) leads \(ownEpoch) and found its own epoch at \(batch.firstLSN) after \(localEnd)"
            )
            precondition(
                !isTakingWrites,
                "\(configuration.node) takes writes in \(ownEpoch); \(batch.epoch) at \(batch.firstLSN) after \(localEnd)"
            )
        }
        if let last = lastBatchEpoch, batch.epoch < last {
            actions.append(.refusedBatch(key: key, .olderEpoch(batch.epoch, after: last)))
            return
        }
        let skip = Int(localEnd.rawValue + 1 - batch.firstLSN.rawValue)
        let first = LogSequenceNumber(localEnd.rawValue + 1)
        actions.append(.appendLocal(firstLSN: first, records: Array(batch.records[skip...])))
        localEnd = batch.lastLSN
        committed = max(committed, batch.lastLSN)
        lastBatchEpoch = batch.epoch
    }

    // MARK: - The watch

    private mutating func delivered(_ events: [EtcdEvent], _ actions: inout [ReplicationAction]) {
        if !events.isEmpty { groupEndLearnedAt = now }
        let seenThrough = watchRevision
        var previous = seenThrough
        for event in events where event.revision > seenThrough {
            if event.revision.rawValue > previous.rawValue + 1 { requestRead(&actions) }  // a lost event
            previous = max(previous, event.revision)
            watchRevision = max(watchRevision, event.revision)
            let key = event.keyValue.key
            if key == keys.leader {
                switch event.kind {
                case .put: leaderSeen(event.keyValue, &actions)
                case .delete: leaderSeen(nil, &actions)
                }
            } else if keys.firstLSN(ofLogKey: key) != nil, event.kind == .put {
                guard let batch = decodeBatch(event.keyValue, &actions) else { continue }
                countBytes(of: batch, event.keyValue.value.count)
                received(batch, key: key, &actions)
            }
            guard role != .deposed, role != .seeding else { return }
        }
    }

    // MARK: - Leader key and campaigns

    /// The leader key as etcd holds it now (nil: absent).
    private mutating func leaderSeen(_ keyValue: EtcdKeyValue?, _ actions: inout [ReplicationAction]) {
        if role == .leader {
            guard let keyValue, let ownEpoch, keyValue.createRevision == ownEpoch.createRevision else {
                return depose(.leaderKeyLost, &actions)
            }
            return
        }
        guard let keyValue else {
            leader = nil
            if role == .follower, reconciled {
                role = .candidate
                campaignAt = now + candidateDelayMilliseconds
                actions.append(.becameCandidate)
            }
            return
        }
        let seen = ClusterEpoch(createRevision: keyValue.createRevision)
        let record = LeaderRecord.decode(keyValue.value)
        // This node's own campaign, seen (by the watch or a read) before its
        // answer: the answer decides (following itself would revoke the lease it just won).
        if role == .candidate, isCampaignPending, record?.node == configuration.node { return }
        let changed = role != .follower || record != leader || epoch != seen
        leader = record
        epoch = seen
        if role == .candidate {
            role = .follower
            campaignAt = nil
        }
        if changed { actions.append(.becameFollower(leader: record)) }
    }

    /// The wait of a candidate: longer the further its log is behind the
    /// group log's end, so that the most caught-up follower tries first.
    private var candidateDelayMilliseconds: Int64 {
        let behind = groupEnd.rawValue - min(groupEnd.rawValue, localEnd.rawValue)
        let perRecord = UInt64(configuration.candidateDelayPerRecordBehindMilliseconds)
        let lag = behind.multipliedReportingOverflow(by: perRecord)
        let cap = configuration.candidateDelayMaxMilliseconds
        guard !lag.overflow, lag.partialValue < UInt64(cap) else { return cap }
        return min(configuration.candidateDelayBaseMilliseconds + Int64(lag.partialValue), cap)
    }

    private mutating func grantAnswered(_ response: EtcdResponse, sentAt: Int64, _ actions: inout [ReplicationAction]) {
        guard case .lease(let id, let ttl) = response else {
            if role == .candidate { campaignAt = now + configuration.retryMilliseconds }
            return
        }
        guard role == .candidate else { return send(.revokeLease(id), .revoke, &actions) }
        let record = LeaderRecord(node: configuration.node, url: configuration.advertiseURL)
        let campaign = EtcdRequest.transaction(
            compares: [EtcdCompare(key: keys.leader, .equal, .createRevision(EtcdRevision(0)))],
            success: [.put(key: keys.leader, value: record.encoded(), lease: id)],
            failure: [.range(.key(keys.leader), limit: 1)])
        send(campaign, .campaign(id, grantSentAt: sentAt, ttlSeconds: ttl), &actions)
    }

    private mutating func campaignAnswered(
        _ response: EtcdResponse, lease id: EtcdLeaseID, grantSentAt: Int64, ttlSeconds: Int64,
        _ actions: inout [ReplicationAction]
    ) {
        switch response {
        case .transaction(true, let revision, _):
            guard role == .candidate else { return send(.revokeLease(id), .revoke, &actions) }
            let won = ClusterEpoch(createRevision: revision)
            if let last = lastBatchEpoch { precondition(won > last, "new epoch \(won) <= \(last) in the log") }
            role = .leader
            ownEpoch = won
            epoch = won
            lease = id
            leader = LeaderRecord(node: configuration.node, url: configuration.advertiseURL)
            leaseDeadline = grantSentAt + ttlSeconds * 1_000
            nextKeepAliveAt = now + configuration.keepAliveIntervalMilliseconds
            isTakingWrites = false
            epochStartLSN = nil
            // The next watch is the leader key's alone (`took`).
            if let watch { actions.append(.cancelWatch(watch)) }
            watch = nil
            requestRead(&actions, fresh: true)  // to the log's end, then the epoch record
        case .transaction(false, _, let results):
            send(.revokeLease(id), .revoke, &actions)
            if case .range(let found)? = results.first, let holder = found.first {
                leaderSeen(holder, &actions)
            } else if role == .candidate {
                campaignAt = now + configuration.retryMilliseconds
            }
        case .failed, .lease, .keptAlive, .revoked, .compacted:
            // Unknown outcome: revoking the lease deletes the key if it was taken.
            send(.revokeLease(id), .revoke, &actions)
            if role == .candidate { campaignAt = now + configuration.retryMilliseconds }
        }
    }

    // MARK: - Lease

    private mutating func keepAliveAnswered(
        _ response: EtcdResponse, sentAt: Int64, _ actions: inout [ReplicationAction]
    ) {
        guard role == .leader, let ownEpoch else { return }
        switch response {
        case .keptAlive(_, let ttl):
            guard ttl > 0 else { return depose(.leaseLost, &actions) }
            // A keep-alive can answer for a revoked lease (etcd 3.4.23): the
            // leader key tells whether the lease still holds it.
            let confirm = EtcdRequest.transaction(
                compares: [EtcdCompare(key: keys.leader, .equal, .createRevision(ownEpoch.createRevision))],
                success: [], failure: [])
            send(confirm, .confirmLease(keepAliveSentAt: sentAt, ttlSeconds: ttl), &actions)
        case .failed(.leaseNotFound):
            depose(.leaseLost, &actions)
        case .failed, .transaction, .lease, .revoked, .compacted:
            nextKeepAliveAt = now + configuration.retryMilliseconds
        }
    }

    private mutating func confirmAnswered(
        _ response: EtcdResponse, keepAliveSentAt: Int64, ttlSeconds: Int64, _ actions: inout [ReplicationAction]
    ) {
        guard role == .leader else { return }
        switch response {
        case .transaction(true, _, _):
            let ttl = min(ttlSeconds, configuration.leaseTTLSeconds)
            leaseDeadline = max(leaseDeadline, keepAliveSentAt + ttl * 1_000)
        case .transaction(false, _, _):
            depose(.leaderKeyLost, &actions)
        case .failed, .lease, .keptAlive, .revoked, .compacted:
            nextKeepAliveAt = now + configuration.retryMilliseconds
        }
    }

    private mutating func depose(_ reason: DeposedReason, _ actions: inout [ReplicationAction]) {
        role = .deposed
        isTakingWrites = false
        if let watch { actions.append(.cancelWatch(watch)) }
        watch = nil
        if let lease { send(.revokeLease(lease), .revoke, &actions) }
        withdrawMember(&actions)
        actions.append(.deposed(reason))
    }

    // MARK: - Writes

    private mutating func submit(_ records: [[UInt8]], _ actions: inout [ReplicationAction]) {
        guard role == .leader, isTakingWrites else {
            return actions.append(.writesRefused(count: records.count, .notLeader))
        }
        guard queue.count + records.count <= configuration.queuedRecordsMax else {
            return actions.append(.writesRefused(count: records.count, .queueFull))
        }
        guard !records.isEmpty else { return }
        actions.append(.writesAccepted(firstLSN: nextLSN, count: records.count))
        queue.append(contentsOf: records)
        nextLSN = nextLSN.advanced(by: UInt64(records.count))
    }

    private mutating func appendEpochRecord(_ actions: inout [ReplicationAction]) {
        guard let ownEpoch else { preconditionFailure("an epoch record without an epoch") }
        precondition(queue.isEmpty && inFlight == nil, "writes before the epoch record")
        precondition(localEnd >= groupEnd, "the leader appends at \(localEnd) before the log's end \(groupEnd)")
        let start = LogSequenceNumber(localEnd.rawValue + 1)
        epochStartLSN = start
        acknowledged = localEnd
        unconfirmedReportedThrough = localEnd
        queue = [ReplicationBatch.epochRecord(epoch: ownEpoch, node: configuration.node)]
        nextLSN = start.advanced(by: 1)
    }

    /// Starts the next append when none is in flight: the queued records
    /// (group commit), at most one batch's worth.
    private mutating func startAppendIfIdle(_ actions: inout [ReplicationAction]) {
        guard role == .leader, inFlight == nil, !queue.isEmpty, let ownEpoch else { return }
        let first = LogSequenceNumber(localEnd.rawValue + 1)
        guard let batch = ReplicationBatch.split(records: queue, epoch: ownEpoch, firstLSN: first).first else { return }
        queue.removeFirst(batch.records.count)
        actions.append(.appendLocal(firstLSN: batch.firstLSN, records: batch.records))
        localEnd = batch.lastLSN
        inFlight = AppendInFlight(
            batch: batch, encoded: batch.encoded(), key: keys.logKey(firstLSN: batch.firstLSN), firstSentAt: now)
        sendAppend(&actions)
    }

    /// One transaction: the leader key still ours, the batch key still free; then the batch.
    private mutating func sendAppend(_ actions: inout [ReplicationAction]) {
        guard var append = inFlight, let ownEpoch else { preconditionFailure("no append to send") }
        append.retryAt = nil
        inFlight = append
        let request = EtcdRequest.transaction(
            compares: [
                EtcdCompare(key: keys.leader, .equal, .createRevision(ownEpoch.createRevision)),
                EtcdCompare(key: append.key, .equal, .version(0)),
            ],
            success: [.put(key: append.key, value: append.encoded, lease: nil)],
            failure: [.range(.key(keys.leader), limit: 1), .range(.key(append.key), limit: 1)])
        send(request, .append, &actions)
    }

    private mutating func appendAnswered(_ response: EtcdResponse, _ actions: inout [ReplicationAction]) {
        guard role == .leader, let append = inFlight, let ownEpoch else { return }
        switch response {
        case .transaction(true, _, _):
            countBytes(of: append.batch, append.encoded.count)  // unless the watch counted it
            appendCommitted(append.batch, &actions)
        case .transaction(false, _, let results):
            guard case .range(let leaderKeys)? = results.first, let holder = leaderKeys.first,
                holder.createRevision == ownEpoch.createRevision
            else { return depose(.fenced, &actions) }
            // The leader key is ours: an earlier try of this append committed.
            guard results.count == 2, case .range(let batchKeys) = results[1], batchKeys.first?.value == append.encoded
            else {
                preconditionFailure("\(ownEpoch): LSN \(append.batch.firstLSN) taken by another batch of the epoch")
            }
            appendCommitted(append.batch, &actions)
        case .failed(.requestTooLarge):
            preconditionFailure("a batch of \(append.encoded.count) bytes refused as too large")
        case .failed, .lease, .keptAlive, .revoked, .compacted:
            inFlight?.retryAt = now + configuration.retryMilliseconds
        }
    }

    /// Counts a batch's bytes in `groupLogBytes` once (a read, the watch and
    /// the append may each see it).
    private mutating func countBytes(of batch: ReplicationBatch, _ bytes: Int) {
        guard batch.lastLSN > groupLogBytesCountedThrough else { return }
        groupLogBytes += bytes
        groupLogBytesCountedThrough = batch.lastLSN
        countedBatches.append((batch.lastLSN, bytes))
    }

    /// A purge left the group log starting at `first`: the batches before it
    /// leave `groupLogBytes`. O(batches dropped), amortised.
    package mutating func noteGroupLogStart(_ first: LogSequenceNumber) {
        while countedBatchesHead < countedBatches.count, countedBatches[countedBatchesHead].lastLSN < first {
            groupLogBytes -= countedBatches[countedBatchesHead].bytes
            countedBatchesHead += 1
        }
        if countedBatchesHead > 4_096, countedBatchesHead * 2 > countedBatches.count {
            countedBatches.removeFirst(countedBatchesHead)
            countedBatchesHead = 0
        }
        precondition(groupLogBytes >= 0, "group log bytes below zero after a purge at \(first)")
    }

    private mutating func appendCommitted(_ batch: ReplicationBatch, _ actions: inout [ReplicationAction]) {
        inFlight = nil
        committed = max(committed, batch.lastLSN)
        groupEnd = max(groupEnd, batch.lastLSN)
        lastBatchEpoch = batch.epoch
        if !isTakingWrites, let start = epochStartLSN, committed >= start, let ownEpoch {
            isTakingWrites = true
            actions.append(.becameLeader(ownEpoch))
        }
    }

    // MARK: - Progress

    /// Applies, acknowledges and starts the next append as far as the state allows.
    private mutating func progress(_ actions: inout [ReplicationAction]) {
        guard reconciled else { return }
        precondition(localDurable <= localEnd, "durable \(localDurable) beyond the end \(localEnd)")
        let applicable = min(committed, localEnd)
        if applicable > applied {
            applied = applicable
            actions.append(.apply(through: applicable))
        }
        if role == .leader, let ownEpoch, epochStartLSN != nil {
            let acknowledgeable = min(committed, localDurable)
            if acknowledgeable > acknowledged {
                acknowledged = acknowledgeable
                actions.append(.acknowledge(through: acknowledgeable, epoch: ownEpoch))
            }
            startAppendIfIdle(&actions)
        }
    }
}
