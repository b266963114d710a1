import RoostPlatform

/// `roost-bench selftest-cluster`: proves the cluster checker
/// (`ClusterChecker.check`) on synthetic histories, no processes: a clean
/// history with a failover, a retry across it, a replay, a deletion and a
/// feed follower moving between nodes passes; each kind of damage — a lost
/// acknowledgement, a duplicate, two writers in one epoch, a reused
/// position, a dirty read, diverging exports, a feed gap, an unexpected
/// answer — is found, and only it.
enum ClusterSelfTest {
    /// A small cluster history: n1 leads epoch 5, n2 epoch 7, n3 follows.
    struct Synthetic {
        var operations: [ClusterOperation] = []
        /// Each node's export lines (`id`, `token`) and feed.
        var exports: [[(id: String, token: String)]] = []
        var exportCursor = ClusterPosition(6)
        var feeds: [[ClusterChange]] = []
        var elected: [[ClusterEpoch]] = [[ClusterEpoch(5)], [ClusterEpoch(7)], []]
        private var clock: Int64 = 0

        static let nodes = [ClusterNodeName("n1"), ClusterNodeName("n2"), ClusterNodeName("n3")]

        static func token(_ number: Int) -> String {
            let digits = String(number, radix: 16)
            return String(repeating: "d", count: 56) + String(repeating: "0", count: 8 - digits.count) + digits
        }

        /// Appends an operation answered by `node` (nil: no answer), 1 ms after the previous one.
        mutating func add(
            _ kind: ClusterOperation.Kind, client: String = "w0", to target: Int, status: Int?, epoch: Int64? = nil,
            position: UInt64? = nil, key: String? = nil, token: Int? = nil, device: Int? = nil,
            replayed: Bool = false, error: String? = nil, deleted: Bool? = nil, minimum: UInt64? = nil,
            seen: [ClusterSeenDevice] = [], after: UInt64? = nil, changes: [ClusterChange] = [], next: UInt64? = nil
        ) {
            clock += 1_000
            operations.append(
                ClusterOperation(
                    client: client, kind: kind, target: Self.nodes[target],
                    node: status == nil ? nil : Self.nodes[target], status: status, errorCode: error,
                    epoch: epoch.map(ClusterEpoch.init), position: position.map(ClusterPosition.init),
                    replayed: replayed, startMicroseconds: clock, endMicroseconds: clock + 500, idempotencyKey: key,
                    token: token.map(Self.token), deviceID: device.map { "dev_\($0)" }, deletedAnswer: deleted,
                    minPosition: minimum.map(ClusterPosition.init), seen: seen, after: after.map(ClusterPosition.init),
                    changes: changes, next: next.map(ClusterPosition.init)))
        }

        static func upsert(_ device: Int, at cursor: UInt64, token: Int? = nil) -> ClusterChange {
            ClusterChange(
                cursor: ClusterPosition(cursor), deleted: false, deviceID: "dev_\(device)",
                token: Self.token(token ?? device))
        }

        static func delete(_ device: Int, at cursor: UInt64) -> ClusterChange {
            ClusterChange(cursor: ClusterPosition(cursor), deleted: true, deviceID: "dev_\(device)", token: nil)
        }

        /// Puts device `device` (token `token`) into every node's export and feed at `cursor`.
        mutating func hold(_ device: Int, token: Int? = nil, at cursor: UInt64) {
            for node in exports.indices {
                exports[node].append(("dev_\(device)", Self.token(token ?? device)))
                feeds[node].append(Self.upsert(device, at: cursor, token: token))
            }
            exportCursor = max(exportCursor, ClusterPosition(cursor))
        }

        /// The clean history: registrations, a failover with a retry across
        /// it, a replay, a deletion, reads, and a feed follower moving across nodes.
        static func clean() -> Synthetic {
            var history = Synthetic()
            history.add(.register, to: 0, status: 201, epoch: 5, position: 1, key: "k1", token: 1, device: 1)
            history.add(.register, to: 0, status: 201, epoch: 5, position: 2, key: "k2", token: 2, device: 2)
            history.add(.readPerson, client: "r0", to: 2, status: 200, seen: [ClusterSeenDevice(deviceID: "dev_2")])
            // n1 is killed with k3 in flight; n3 refuses it; n2 leads epoch 7 and applies it.
            history.add(.register, to: 0, status: nil, key: "k3", token: 3)
            history.add(.register, to: 2, status: 503, epoch: 5, key: "k3", token: 3, error: "no_leader")
            history.add(.register, to: 1, status: 201, epoch: 7, position: 4, key: "k3", token: 3, device: 3)
            history.add(.register, to: 1, status: 201, epoch: 7, position: 5, key: "k4", token: 4, device: 4)
            history.add(
                .register, to: 1, status: 200, epoch: 7, position: 5, key: "k2", token: 2, device: 2, replayed: true)
            history.add(
                .readDevice, client: "r0", to: 2, status: 200, device: 4, minimum: 5,
                seen: [ClusterSeenDevice(deviceID: "dev_4", token: token(4))])
            history.add(
                .delete, to: 1, status: 200, epoch: 7, position: 6, key: "k5", token: 1, device: 1, deleted: true)
            history.add(
                .readFeed, client: "f0", to: 0, status: 200, after: 0, changes: [upsert(1, at: 1), upsert(2, at: 2)],
                next: 2)
            history.add(.readFeed, client: "f0", to: 2, status: 503, error: "stale_replica", after: 2)
            history.add(
                .readFeed, client: "f0", to: 1, status: 200, after: 2, changes: [upsert(3, at: 4), upsert(4, at: 5)],
                next: 5)
            history.add(.readFeed, client: "f0", to: 2, status: 200, after: 5, changes: [delete(1, at: 6)], next: 6)
            let feed = [upsert(2, at: 2), upsert(3, at: 4), upsert(4, at: 5), delete(1, at: 6)]
            let export = [2, 3, 4].map { (id: "dev_\($0)", token: token($0)) }
            history.exports = Array(repeating: export, count: nodes.count)
            history.feeds = Array(repeating: feed, count: nodes.count)
            return history
        }

        func check() -> ClusterCheckReport {
            ClusterChecker.check(ClusterHistory(operations), final())
        }

        /// Every node's final state: its export as NDJSON, its feed and epochs.
        func final() -> ClusterFinalState {
            var nodes: [ClusterFinalNode] = []
            for (index, name) in Self.nodes.enumerated() {
                let body = exports[index].map { #"{"id":"\#($0.id)","token":"\#($0.token)","platform":"ios"}"# + "\n" }
                    .joined()
                nodes.append(
                    ClusterFinalNode(
                        node: name, exportBody: Array(body.utf8), exportCursor: exportCursor, feed: feeds[index],
                        electedEpochs: elected[index]))
            }
            return ClusterFinalState(nodes: nodes)
        }
    }

    static func run() -> [String] {
        var failures: [String] = []
        var cases = 0
        func expect(_ name: String, _ kinds: Set<ClusterViolationKind>, _ history: Synthetic) {
            cases += 1
            let report = history.check()
            let found = Set(report.violations.map(\.kind))
            if found != kinds {
                failures.append(
                    "\(name): found \(found.map(\.rawValue).sorted()), expected \(kinds.map(\.rawValue).sorted()): "
                        + report.violations.map(\.message).joined(separator: "; "))
            }
        }
        let clean = Synthetic.clean()
        expect("a clean history with a failover, a retry, a replay and a deletion", [], clean)
        // The live run's proof (`ClusterCheckerProof`) on the clean history: both damages found.
        cases += 1
        let proof = ClusterCheckerProof.run(ClusterHistory(clean.operations), clean.final())
        if !proof.passed || proof.lines.count != 2 {
            failures.append("the checker's proof on the clean history: \(proof.lines.joined(separator: "; "))")
        }
        // ... and refused on a history with nothing acknowledged to damage.
        cases += 1
        if ClusterCheckerProof.run(ClusterHistory([]), clean.final()).passed {
            failures.append("the checker's proof passed on a history that acknowledged nothing")
        }

        var lost = clean
        lost.add(.register, to: 1, status: 201, epoch: 7, position: 7, key: "k6", token: 6, device: 6)
        expect("an acknowledged registration in no final state", [.lostWrite], lost)
        // The deletion's record gone from every node: dev_1 stays at its registration's position.
        var undeleted = clean
        undeleted.operations.removeLast()  // the follower's page that showed the deletion
        for node in undeleted.exports.indices {
            undeleted.exports[node].insert((id: "dev_1", token: Synthetic.token(1)), at: 0)
            undeleted.feeds[node] = [Synthetic.upsert(1, at: 1)] + clean.feeds[node].filter { !$0.deleted }
        }
        undeleted.exportCursor = ClusterPosition(5)
        expect("an acknowledged deletion undone", [.lostWrite], undeleted)
        var unread = clean
        unread.add(.readDevice, client: "r0", to: 2, status: 404, device: 4, error: "device_not_found", minimum: 5)
        expect("a read at the write's position that misses it", [.lostWrite], unread)

        var duplicated = clean
        duplicated.hold(9, token: 2, at: 7)
        expect("a token on two devices", [.duplicate], duplicated)
        var replayedElsewhere = clean
        replayedElsewhere.add(
            .register, to: 1, status: 200, epoch: 7, position: 6, key: "k4", token: 4, device: 8, replayed: true)
        expect("an idempotent retry answered with another device", [.duplicate], replayedElsewhere)
        var invented = clean
        invented.hold(10, at: 7)
        expect("a device no writer sent", [.inventedWrite], invented)

        var twoWriters = clean
        twoWriters.add(.register, to: 2, status: 201, epoch: 7, position: 7, key: "k6", token: 6, device: 6)
        twoWriters.hold(6, at: 7)
        expect("two nodes acknowledging writes in one epoch", [.twoWritersInOneEpoch], twoWriters)
        var wonTwice = clean
        wonTwice.elected[2] = [ClusterEpoch(5)]
        expect("an epoch two nodes' logs say they won", [.twoWritersInOneEpoch], wonTwice)

        var outOfEpoch = clean
        outOfEpoch.add(.register, to: 0, status: 201, epoch: 5, position: 9, key: "k6", token: 6, device: 6)
        outOfEpoch.hold(6, at: 8)
        expect("a write of an earlier epoch after one of a later epoch", [.positionReused], outOfEpoch)
        var moved = clean
        moved.add(.register, to: 1, status: 201, epoch: 7, position: 7, key: "k6", token: 6, device: 6)
        moved.hold(6, at: 8)
        expect("a write held after the position its answer named", [.positionReused], moved)
        var renamed = clean
        renamed.add(
            .readFeed, client: "f1", to: 2, status: 200, after: 3, changes: [Synthetic.upsert(3, at: 4, token: 11)],
            next: 4)
        expect("a cursor that showed other content", [.positionReused], renamed)

        var dirty = clean
        dirty.add(.readPerson, client: "r0", to: 0, status: 200, seen: [ClusterSeenDevice(deviceID: "dev_77")])
        expect("a read that showed a device the final log never held", [.dirtyRead], dirty)
        var dirtyFeed = clean
        dirtyFeed.operations[12].changes.insert(Synthetic.upsert(77, at: 3), at: 0)
        expect("a feed page that showed a change the final log never held", [.dirtyRead], dirtyFeed)

        var diverging = clean
        diverging.exports[2].swapAt(0, 1)
        expect("exports that differ in their order", [.divergentNodes], diverging)
        var behind = clean
        behind.feeds[1].removeLast()
        expect("a feed that differs on one node", [.divergentNodes], behind)

        var gap = clean
        gap.operations[12].changes.removeFirst()
        expect("a feed follower never shown a change", [.feedGap], gap)
        var refused = clean
        refused.add(.readFeed, client: "f0", to: 0, status: 410, error: "cursor_expired", after: 6)
        expect("a cursor refused by another node", [.feedGap], refused)

        var unexpected = clean
        unexpected.add(.register, to: 1, status: 422, epoch: 7, key: "k2", token: 2, error: "idempotency_key_reused")
        expect("an answer a correct server does not give", [.unexpectedAnswer], unexpected)

        print(
            "selftest-cluster: the checker on \(cases) synthetic histories: "
                + (failures.isEmpty ? "ok" : "\(failures.count) failures"))
        for failure in failures { print("  \(failure)") }
        return failures
    }
}

extension ClusterSelfTest {
    static let usage = "usage: roost-bench selftest-cluster   (checks the cluster history checker; no processes)"

    /// `roost-bench selftest-cluster`: 0 when the checker finds every damage and passes the clean history.
    static func command(_ arguments: ArraySlice<String>) -> Int32 {
        if Arguments.wantsHelp(arguments) {
            print(usage)
            return 0
        }
        do {
            _ = try Arguments(arguments, valued: [])
        } catch {
            StandardStreams.error("roost-bench selftest-cluster: \(error)")
            StandardStreams.error(usage)
            return 2
        }
        return run().isEmpty ? 0 : 1
    }
}
