/// What the cluster checker can find wrong (docs/crash-testing.md, "roost-bench cluster").
enum ClusterViolationKind: String, CaseIterable, Sendable {
    /// An acknowledged write missing from a node's final state (or an
    /// acknowledged deletion undone), or a read at or after an acknowledged
    /// write's position that did not show it.
    case lostWrite = "lost write"
    /// A token on two devices, a device twice, or an idempotent retry
    /// answered with another device.
    case duplicate = "duplicate"
    /// A device in the final state that no writer ever sent.
    case inventedWrite = "invented write"
    /// Acknowledged writes of one epoch answered by two nodes, or an epoch
    /// two nodes' logs say they won.
    case twoWritersInOneEpoch = "two writers in one epoch"
    /// An acknowledged position whose content moved or changed: a write held
    /// in the final log after the position its answer named, a later
    /// epoch's write before an earlier one's, a cursor that named other content.
    case positionReused = "position reused"
    /// A read that showed what the final log never held.
    case dirtyRead = "dirty read"
    /// Nodes whose exports or feeds differ at the end.
    case divergentNodes = "nodes diverge"
    /// A feed follower that skipped a change, went back, or had its cursor refused on another node.
    case feedGap = "feed gap"
    /// An answer a correct server does not give (status, or missing headers).
    case unexpectedAnswer = "unexpected answer"
}

/// One violation and the operations (history indexes) that show it.
struct ClusterViolation: Sendable {
    var kind: ClusterViolationKind
    var message: String
    var operations: [Int]
}

/// What the checker found: the violations and the figures of the history.
struct ClusterCheckReport: Sendable {
    var violations: [ClusterViolation] = []
    var operations = 0
    var acknowledgedRegistrations = 0
    var acknowledgedDeletions = 0
    var replays = 0
    var writeAttempts = 0
    var readsAnswered = 0
    var feedPages = 0
    var changesFollowed = 0
    var finalDevices = 0
    var epochsWithWrites = 0

    var passed: Bool { violations.isEmpty }

    func count(_ kind: ClusterViolationKind) -> Int { violations.filter { $0.kind == kind }.count }

    /// The report: one line of figures, one per kind, the first violations of each with their operations.
    func lines(_ history: ClusterHistory) -> [String] {
        var lines = [
            "checked \(operations) operations: \(writeAttempts) write attempts, acknowledged \(acknowledgedRegistrations) "
                + "registrations and \(acknowledgedDeletions) deletions (\(replays) idempotent replays), "
                + "\(readsAnswered) reads answered, \(feedPages) feed pages (\(changesFollowed) changes followed), "
                + "\(epochsWithWrites) epochs with writes, \(finalDevices) devices at the end",
            "violations: "
                + ClusterViolationKind.allCases.map { "\($0.rawValue) \(count($0))" }.joined(separator: ", "),
        ]
        for kind in ClusterViolationKind.allCases {
            for violation in violations.filter({ $0.kind == kind }).prefix(ClusterChecker.violationsListedPerKindMax) {
                lines.append("  VIOLATION (\(kind.rawValue)): \(violation.message)")
                for index in violation.operations.prefix(ClusterChecker.operationsListedPerViolationMax)
                where index < history.operations.count {
                    lines.append("    \(history.operations[index].summary)")
                }
            }
        }
        return lines
    }
}

/// The pure checker of `roost-bench cluster`: a recorded history and the
/// final state of every node in, the violations out. No I/O, so that
/// `selftest-cluster` can prove it on synthetic histories.
enum ClusterChecker {
    /// Violations printed per kind (all are counted).
    static let violationsListedPerKindMax = 10
    /// Operations printed per violation.
    static let operationsListedPerViolationMax = 4

    /// What the final state says of every device, from the reference node's feed.
    struct FinalLog {
        var byCursor: [ClusterPosition: ClusterChange] = [:]
        /// Each device's latest change.
        var latestByID: [String: ClusterChange] = [:]
        var feed: [ClusterChange] = []

        init(_ feed: [ClusterChange]) {
            self.feed = feed
            for change in feed {
                byCursor[change.cursor] = change
                if let known = latestByID[change.deviceID], known.cursor > change.cursor { continue }
                latestByID[change.deviceID] = change
            }
        }

        /// Where the final log holds the effect of an acknowledged write, if it still does.
        func cursor(of operation: ClusterOperation) -> ClusterPosition? {
            guard let id = operation.deviceID, let latest = latestByID[id] else { return nil }
            switch operation.kind {
            case .register: return !latest.deleted && latest.token == operation.token ? latest.cursor : nil
            case .delete: return latest.deleted ? latest.cursor : nil
            case .readDevice, .readPerson, .readFeed: return nil
            }
        }
    }

    /// Checks `history` against `final`. O(operations + devices × nodes).
    static func check(_ history: ClusterHistory, _ final: ClusterFinalState) -> ClusterCheckReport {
        precondition(!final.nodes.isEmpty, "a final state without nodes")
        var report = ClusterCheckReport()
        let operations = history.operations
        report.operations = operations.count
        report.writeAttempts = operations.filter { $0.kind == .register || $0.kind == .delete }.count
        report.acknowledgedRegistrations =
            Set(
                operations.filter { $0.kind == .register && $0.acknowledged }.compactMap(\.token)
            ).count
        report.acknowledgedDeletions =
            Set(
                operations.filter { $0.kind == .delete && $0.acknowledged }.compactMap(\.deviceID)
            ).count
        report.replays = operations.filter { $0.acknowledged && $0.replayed }.count
        report.readsAnswered =
            operations.filter { ($0.kind == .readDevice || $0.kind == .readPerson) && $0.succeeded }
            .count
        report.feedPages = operations.filter { $0.kind == .readFeed && $0.succeeded }.count
        report.changesFollowed = operations.filter { $0.kind == .readFeed }.reduce(0) { $0 + $1.changes.count }
        report.epochsWithWrites = Set(operations.filter(\.acknowledged).compactMap(\.epoch)).count
        let log = FinalLog(final.nodes[0].feed)
        report.finalDevices = log.latestByID.values.filter { !$0.deleted }.count
        var found: [ClusterViolation] = []
        checkAnswers(operations, into: &found)
        let exports = parseExports(final, into: &found)
        checkLost(operations, exports: exports, into: &found)
        checkDuplicates(operations, exports: exports, final: final, into: &found)
        checkEpochs(operations, final: final, into: &found)
        checkPositions(operations, log: log, into: &found)
        checkReads(operations, log: log, into: &found)
        checkConvergence(final, into: &found)
        checkFeedContinuity(operations, log: log, into: &found)
        report.violations = found
        return report
    }

    // MARK: Answers

    /// Statuses each kind of request may get from a correct cluster, and the
    /// headers an acknowledged write must carry (spec §13.2).
    static func checkAnswers(_ operations: [ClusterOperation], into found: inout [ClusterViolation]) {
        for operation in operations {
            guard let status = operation.status else { continue }
            let allowed: Bool
            switch operation.kind {
            case .register, .delete:
                allowed =
                    status == 200 || status == 201 || status == 503
                    || (status == 409 && operation.errorCode == "idempotency_key_in_use")
            case .readDevice:
                allowed = status == 200 || status == 404 || status == 503
            case .readPerson:
                allowed = status == 200 || status == 404 || status == 503
            case .readFeed:
                // 410 and 400 on a feed read are gaps (checkFeedContinuity).
                allowed = status == 200 || status == 503 || status == 410 || status == 400
            }
            if !allowed {
                found.append(
                    ClusterViolation(
                        kind: .unexpectedAnswer,
                        message: "\(operation.kind.rawValue) answered \(status) \(operation.errorCode ?? "")",
                        operations: [operation.index]))
            }
            if operation.acknowledged && (operation.node == nil || operation.epoch == nil || operation.position == nil)
            {
                found.append(
                    ClusterViolation(
                        kind: .unexpectedAnswer,
                        message: "an acknowledged write without Roost-Node, Roost-Epoch or Roost-Position",
                        operations: [operation.index]))
            }
            if operation.acknowledged && operation.kind == .register && operation.deviceID == nil {
                found.append(
                    ClusterViolation(
                        kind: .unexpectedAnswer, message: "an acknowledged registration without a device id",
                        operations: [operation.index]))
            }
        }
    }

    // MARK: Lost, duplicated, invented

    /// Each node's export, parsed; a node whose export is not NDJSON is a violation.
    static func parseExports(_ final: ClusterFinalState, into found: inout [ClusterViolation]) -> [(
        node: ClusterNodeName, devices: [ExportedDevice]
    )] {
        var exports: [(node: ClusterNodeName, devices: [ExportedDevice])] = []
        for node in final.nodes {
            do {
                exports.append((node.node, try CrashModel.parseExport(node.exportBody)))
            } catch {
                found.append(
                    ClusterViolation(
                        kind: .unexpectedAnswer, message: "the export of \(node.node) does not parse: \(error)",
                        operations: []))
                exports.append((node.node, []))
            }
        }
        return exports
    }

    /// Every acknowledged registration is in every node's export, unless a
    /// deletion of its device was sent; every acknowledged deletion holds.
    /// A read that waited for an acknowledged write's position shows it.
    static func checkLost(
        _ operations: [ClusterOperation], exports: [(node: ClusterNodeName, devices: [ExportedDevice])],
        into found: inout [ClusterViolation]
    ) {
        let deletionsSent = Dictionary(
            operations.filter { $0.kind == .delete }.compactMap { operation in
                operation.deviceID.map { ($0, operation.startMicroseconds) }
            }, uniquingKeysWith: min)
        let tokensByNode = exports.map { export in (export.node, Set(export.devices.map(\.token))) }
        let idsByNode = exports.map { export in (export.node, Set(export.devices.map(\.id))) }
        var firstAcknowledgement: [String: ClusterOperation] = [:]
        for operation in operations where operation.kind == .register && operation.acknowledged {
            guard let token = operation.token, firstAcknowledgement[token] == nil else { continue }
            firstAcknowledgement[token] = operation
        }
        for operation in firstAcknowledgement.values.sorted(by: { $0.index < $1.index }) {
            if let id = operation.deviceID, deletionsSent[id] != nil { continue }
            let missing = tokensByNode.filter { !$0.1.contains(operation.token ?? "") }.map(\.0)
            guard !missing.isEmpty else { continue }
            found.append(
                ClusterViolation(
                    kind: .lostWrite,
                    message: "acknowledged registration of token …\((operation.token ?? "").suffix(8)) "
                        + "(\(operation.deviceID ?? "no id")) is missing from the export of "
                        + missing.map(\.rawValue).joined(separator: ", "),
                    operations: [operation.index]))
        }
        var deletionsReported: Set<String> = []
        for operation in operations where operation.kind == .delete && operation.acknowledged {
            guard let id = operation.deviceID, operation.deletedAnswer == true || operation.replayed,
                deletionsReported.insert(id).inserted
            else { continue }
            let present = idsByNode.filter { $0.1.contains(id) }.map(\.0)
            guard !present.isEmpty else { continue }
            found.append(
                ClusterViolation(
                    kind: .lostWrite,
                    message: "acknowledged deletion of \(id) is undone: still in the export of "
                        + present.map(\.rawValue).joined(separator: ", "),
                    operations: [operation.index]))
        }
        for operation in operations where operation.kind == .readDevice && operation.status == 404 {
            // Only a read that asked for the write's position may not miss it.
            guard let id = operation.deviceID, let minimum = operation.minPosition else { continue }
            if let deleted = deletionsSent[id], deleted <= operation.endMicroseconds { continue }
            let write = firstAcknowledgement.values.first { $0.deviceID == id }
            found.append(
                ClusterViolation(
                    kind: .lostWrite,
                    message: "a read of \(id) with Roost-Min-Position \(minimum) answered 404 on "
                        + "\(operation.node?.rawValue ?? operation.target.rawValue)",
                    operations: [write?.index, operation.index].compactMap { $0 }))
        }
    }

    /// One device per token and one line per device in every export and
    /// feed; nothing no writer sent; every acknowledged attempt of one
    /// `Idempotency-Key` answered with one device; a retried deletion
    /// answered as a replay.
    static func checkDuplicates(
        _ operations: [ClusterOperation], exports: [(node: ClusterNodeName, devices: [ExportedDevice])],
        final: ClusterFinalState, into found: inout [ClusterViolation]
    ) {
        let sent = Set(operations.filter { $0.kind == .register }.compactMap(\.token))
        for export in exports {
            var idsByToken: [String: [String]] = [:]
            var lines: [String: Int] = [:]
            for device in export.devices {
                idsByToken[device.token, default: []].append(device.id)
                lines[device.id, default: 0] += 1
            }
            for (token, ids) in idsByToken.sorted(by: { $0.key < $1.key }) {
                if ids.count > 1 {
                    let writes = operations.filter { $0.token == token && $0.acknowledged }.map(\.index)
                    found.append(
                        ClusterViolation(
                            kind: .duplicate,
                            message: "token …\(token.suffix(8)) is on \(ids.count) devices in the export of "
                                + "\(export.node): \(ids.joined(separator: ", "))",
                            operations: writes))
                }
                if !sent.contains(token) {
                    found.append(
                        ClusterViolation(
                            kind: .inventedWrite,
                            message: "token …\(token.suffix(8)) (\(ids.joined(separator: ", "))) is in the export "
                                + "of \(export.node) but no writer sent it",
                            operations: []))
                }
            }
            for (id, count) in lines.sorted(by: { $0.key < $1.key }) where count > 1 {
                found.append(
                    ClusterViolation(
                        kind: .duplicate, message: "\(id) is \(count) times in the export of \(export.node)",
                        operations: []))
            }
        }
        for node in final.nodes {
            var idsByToken: [String: Set<String>] = [:]
            for change in node.feed where !change.deleted {
                if let token = change.token { idsByToken[token, default: []].insert(change.deviceID) }
            }
            for (token, ids) in idsByToken.sorted(by: { $0.key < $1.key }) where ids.count > 1 {
                found.append(
                    ClusterViolation(
                        kind: .duplicate,
                        message: "token …\(token.suffix(8)) is on \(ids.count) devices in the feed of \(node.node): "
                            + ids.sorted().joined(separator: ", "),
                        operations: []))
            }
        }
        var byKey: [String: [ClusterOperation]] = [:]
        for operation in operations where operation.kind == .register || operation.kind == .delete {
            if let key = operation.idempotencyKey { byKey[key, default: []].append(operation) }
        }
        for (key, attempts) in byKey.sorted(by: { $0.key < $1.key }) {
            let acknowledged = attempts.filter(\.acknowledged)
            if attempts[0].kind == .register {
                let ids = Set(acknowledged.compactMap(\.deviceID))
                if ids.count > 1 {
                    found.append(
                        ClusterViolation(
                            kind: .duplicate,
                            message: "Idempotency-Key \(key) answered \(ids.count) devices: "
                                + ids.sorted().joined(separator: ", "),
                            operations: acknowledged.map(\.index)))
                }
            } else if let fresh = acknowledged.first(where: { $0.deletedAnswer == false && !$0.replayed }),
                attempts.contains(where: { $0.index < fresh.index })
            {
                found.append(
                    ClusterViolation(
                        kind: .duplicate,
                        message: "a retried deletion (Idempotency-Key \(key)) answered deleted:false, not the replay "
                            + "of its first attempt",
                        operations: attempts.map(\.index)))
            }
        }
    }

    // MARK: Epochs and positions

    /// All acknowledged writes of one epoch come from one node, which is the
    /// node whose log says it won that epoch; no epoch is won twice.
    static func checkEpochs(
        _ operations: [ClusterOperation], final: ClusterFinalState, into found: inout [ClusterViolation]
    ) {
        var winners: [ClusterEpoch: Set<ClusterNodeName>] = [:]
        for node in final.nodes {
            for epoch in node.electedEpochs { winners[epoch, default: []].insert(node.node) }
        }
        for (epoch, nodes) in winners.sorted(by: { $0.key < $1.key }) where nodes.count > 1 {
            found.append(
                ClusterViolation(
                    kind: .twoWritersInOneEpoch,
                    message: "\(epoch) was won by \(nodes.sorted().map(\.rawValue).joined(separator: " and ")) "
                        + "(cluster.elected)",
                    operations: []))
        }
        var writers: [ClusterEpoch: [ClusterNodeName: ClusterOperation]] = [:]
        for operation in operations where operation.acknowledged {
            guard let epoch = operation.epoch, let node = operation.node else { continue }
            if writers[epoch]?[node] == nil { writers[epoch, default: [:]][node] = operation }
        }
        for (epoch, byNode) in writers.sorted(by: { $0.key < $1.key }) {
            if byNode.count > 1 {
                found.append(
                    ClusterViolation(
                        kind: .twoWritersInOneEpoch,
                        message: "acknowledged writes of \(epoch) were answered by "
                            + byNode.keys.sorted().map(\.rawValue).joined(separator: " and "),
                        operations: byNode.values.map(\.index).sorted()))
            }
            if let won = winners[epoch], won.count == 1, let winner = won.first {
                for (node, operation) in byNode where node != winner {
                    found.append(
                        ClusterViolation(
                            kind: .twoWritersInOneEpoch,
                            message: "\(node) acknowledged a write in \(epoch), which \(winner) won (cluster.elected)",
                            operations: [operation.index]))
                }
            }
        }
    }

    /// An acknowledged write sits in the final log at or before the
    /// position its answer named (the leader names its position at or after
    /// the write's last record, spec §13.2), and the writes of a later epoch
    /// after every write of an earlier one; a cursor a feed read showed
    /// names the same change in the final log.
    static func checkPositions(
        _ operations: [ClusterOperation], log: FinalLog, into found: inout [ClusterViolation]
    ) {
        var placed: [(epoch: ClusterEpoch, cursor: ClusterPosition, operation: ClusterOperation)] = []
        for operation in operations where operation.acknowledged && !operation.replayed {
            guard let cursor = log.cursor(of: operation), let epoch = operation.epoch else { continue }
            placed.append((epoch, cursor, operation))
            if let named = operation.position, cursor > named {
                found.append(
                    ClusterViolation(
                        kind: .positionReused,
                        message: "acknowledged at \(named) in \(epoch), but the final log holds it at \(cursor)",
                        operations: [operation.index]))
            }
        }
        placed.sort { ($0.epoch, $0.cursor) < ($1.epoch, $1.cursor) }
        // The latest-placed write of all earlier epochs must precede each write of a later one.
        var latestEarlier: (epoch: ClusterEpoch, cursor: ClusterPosition, operation: ClusterOperation)? = nil
        var latestOfEpoch: (epoch: ClusterEpoch, cursor: ClusterPosition, operation: ClusterOperation)? = nil
        for entry in placed {
            if let current = latestOfEpoch, current.epoch != entry.epoch {
                if latestEarlier == nil || current.cursor > latestEarlier!.cursor { latestEarlier = current }
                latestOfEpoch = nil
            }
            if let earlier = latestEarlier, earlier.cursor > entry.cursor {
                found.append(
                    ClusterViolation(
                        kind: .positionReused,
                        message: "a write of \(earlier.epoch) sits at \(earlier.cursor), after a write of "
                            + "\(entry.epoch) at \(entry.cursor)",
                        operations: [earlier.operation.index, entry.operation.index]))
            }
            if latestOfEpoch == nil || entry.cursor > latestOfEpoch!.cursor { latestOfEpoch = entry }
        }
        for operation in operations where operation.kind == .readFeed && operation.succeeded {
            for change in operation.changes {
                guard let held = log.byCursor[change.cursor] else { continue }
                if held != change {
                    found.append(
                        ClusterViolation(
                            kind: .positionReused,
                            message: "\(change.cursor) showed \(change) on "
                                + "\(operation.node?.rawValue ?? operation.target.rawValue); the final log holds \(held)",
                            operations: [operation.index]))
                }
            }
        }
    }

    // MARK: Reads

    /// Every device a read showed is one the final log holds (with the same
    /// token) or deleted; a feed change the final log no longer holds at its
    /// cursor was superseded by a later change of the same device.
    static func checkReads(_ operations: [ClusterOperation], log: FinalLog, into found: inout [ClusterViolation]) {
        for operation in operations where operation.succeeded {
            let node = operation.node?.rawValue ?? operation.target.rawValue
            switch operation.kind {
            case .readDevice, .readPerson:
                for device in operation.seen {
                    guard let latest = log.latestByID[device.deviceID] else {
                        found.append(
                            ClusterViolation(
                                kind: .dirtyRead,
                                message:
                                    "\(node) showed \(device.deviceID) (token …\((device.token ?? "?").suffix(8))), "
                                    + "which the final log never held",
                                operations: [operation.index]))
                        continue
                    }
                    if !latest.deleted, let token = device.token, latest.token != token {
                        found.append(
                            ClusterViolation(
                                kind: .dirtyRead,
                                message: "\(node) showed \(device.deviceID) with token …\(token.suffix(8)); the final "
                                    + "log holds token …\((latest.token ?? "").suffix(8))",
                                operations: [operation.index]))
                    }
                }
            case .readFeed:
                for change in operation.changes where log.byCursor[change.cursor] == nil {
                    if let latest = log.latestByID[change.deviceID], latest.cursor > change.cursor { continue }
                    found.append(
                        ClusterViolation(
                            kind: .dirtyRead,
                            message: "the feed on \(node) showed \(change), which the final log does not hold",
                            operations: [operation.index]))
                }
            case .register, .delete:
                break
            }
        }
    }

    // MARK: Convergence and the feed

    /// Every node's export at one cursor, byte for byte, and its whole feed, are the reference node's.
    static func checkConvergence(_ final: ClusterFinalState, into found: inout [ClusterViolation]) {
        let reference = final.nodes[0]
        for node in final.nodes.dropFirst() {
            if node.exportCursor != reference.exportCursor {
                found.append(
                    ClusterViolation(
                        kind: .divergentNodes,
                        message:
                            "the export of \(node.node) is at \(node.exportCursor.map(String.init(describing:)) ?? "no cursor"), "
                            + "that of \(reference.node) at \(reference.exportCursor.map(String.init(describing:)) ?? "no cursor")",
                        operations: []))
            }
            if node.exportBody != reference.exportBody {
                let mine = node.exportBody.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
                let theirs = reference.exportBody.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
                let line =
                    (0..<min(mine.count, theirs.count)).first { mine[$0] != theirs[$0] }
                    ?? min(mine.count, theirs.count)
                found.append(
                    ClusterViolation(
                        kind: .divergentNodes,
                        message: "the export of \(node.node) (\(node.exportBody.count) bytes, \(mine.count) lines) "
                            + "differs from that of \(reference.node) (\(reference.exportBody.count) bytes, "
                            + "\(theirs.count) lines) from line \(line + 1)",
                        operations: []))
            }
            if node.feed != reference.feed {
                let common = min(node.feed.count, reference.feed.count)
                let index = (0..<common).first { node.feed[$0] != reference.feed[$0] } ?? common
                found.append(
                    ClusterViolation(
                        kind: .divergentNodes,
                        message: "the feed of \(node.node) (\(node.feed.count) changes) differs from that of "
                            + "\(reference.node) (\(reference.feed.count)) at change \(index + 1)",
                        operations: []))
            }
        }
    }

    /// A feed follower moving between nodes with its cursor: every page
    /// starts where the previous one ended, its cursors strictly grow, no
    /// node refuses the cursor, and every change of the final feed in the
    /// range it read was shown to it at its cursor.
    static func checkFeedContinuity(
        _ operations: [ClusterOperation], log: FinalLog, into found: inout [ClusterViolation]
    ) {
        var byClient: [String: [ClusterOperation]] = [:]
        for operation in operations where operation.kind == .readFeed {
            byClient[operation.client, default: []].append(operation)
        }
        for (client, reads) in byClient.sorted(by: { $0.key < $1.key }) {
            var expected: ClusterPosition? = nil
            var start: ClusterPosition? = nil
            var shown: Set<ClusterPosition> = []
            var pages: [ClusterOperation] = []
            for read in reads {
                let node = read.node?.rawValue ?? read.target.rawValue
                if read.status == 410 || read.status == 400 {
                    found.append(
                        ClusterViolation(
                            kind: .feedGap,
                            message:
                                "\(client)'s cursor \(read.after.map(String.init(describing:)) ?? "-") was refused by "
                                + "\(node): \(read.status!) \(read.errorCode ?? "")",
                            operations: [read.index]))
                    continue
                }
                guard read.succeeded, let after = read.after, let next = read.next else { continue }
                if start == nil { start = after }
                if let expected, expected != after {
                    found.append(
                        ClusterViolation(
                            kind: .feedGap,
                            message:
                                "\(client) asked from \(after) on \(node), but its previous page ended at \(expected)",
                            operations: [read.index]))
                }
                var previous = after
                for change in read.changes {
                    if change.cursor <= previous {
                        found.append(
                            ClusterViolation(
                                kind: .feedGap,
                                message: "\(client) on \(node): \(change) does not come after \(previous)",
                                operations: [read.index]))
                    }
                    previous = max(previous, change.cursor)
                    shown.insert(change.cursor)
                }
                if next < previous {
                    found.append(
                        ClusterViolation(
                            kind: .feedGap,
                            message:
                                "\(client) on \(node): next_cursor \(next) is behind the page's last change \(previous)",
                            operations: [read.index]))
                }
                expected = next
                pages.append(read)
            }
            guard let start, let end = expected else { continue }
            for change in log.feed where change.cursor > start && change.cursor <= end && !shown.contains(change.cursor)
            {
                let page = pages.first { ($0.after ?? start) < change.cursor && change.cursor <= ($0.next ?? end) }
                found.append(
                    ClusterViolation(
                        kind: .feedGap,
                        message: "\(client) read from \(start) through \(end) but was never shown \(change)",
                        operations: page.map { [$0.index] } ?? []))
            }
        }
    }
}
