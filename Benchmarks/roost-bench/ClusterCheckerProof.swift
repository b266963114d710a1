/// The live negative check of `roost-bench cluster`: once a run is checked,
/// the checker is run again on that run's own history with the final state
/// damaged in two known ways, and must name each. `selftest-cluster` proves
/// the checker on synthetic histories; this proves it on what a live run
/// recorded (real exports, real positions and epochs), so that a run whose
/// check passed could not have passed vacuously — a final state the checker
/// does not read, or a history it filters to nothing, fails here.
enum ClusterCheckerProof {
    /// One damage done to a run's final state, and what the checker must say.
    struct Damage {
        var name: String
        var final: ClusterFinalState
        var expected: ClusterViolationKind
        /// The history index the violation must name, when one does.
        var operation: Int?
    }

    /// The damages this run's history and final state allow: an
    /// acknowledged registration removed from every node's export (a lost
    /// write), and one export line removed from one node only (nodes that
    /// diverge). Empty when the run acknowledged no registration that is
    /// still in the final export (nothing to damage).
    static func damages(_ history: ClusterHistory, _ final: ClusterFinalState) -> [Damage] {
        guard let first = final.nodes.first, let exported = try? CrashModel.parseExport(first.exportBody) else {
            return []
        }
        let exportedTokens = Set(exported.map(\.token))
        let deleted = Set(history.operations.filter { $0.kind == .delete }.compactMap(\.deviceID))
        guard
            let write = history.operations.first(where: { operation in
                operation.kind == .register && operation.acknowledged && !operation.replayed
                    && operation.token.map(exportedTokens.contains) == true
                    && operation.deviceID.map(deleted.contains) != true
            }), let token = write.token
        else { return [] }
        var lost = final
        for node in lost.nodes.indices {
            lost.nodes[node].exportBody = withoutLines(lost.nodes[node].exportBody) { $0.contains(token) }
        }
        var diverged = final
        let last = diverged.nodes.count - 1
        let otherToken = exported.map(\.token).first { $0 != token } ?? token
        diverged.nodes[last].exportBody = withoutLines(diverged.nodes[last].exportBody) { $0.contains(otherToken) }
        var damages = [
            Damage(
                name: "acknowledged registration of …\(token.suffix(8)) removed from every export", final: lost,
                expected: .lostWrite, operation: write.index)
        ]
        if final.nodes.count > 1 {
            damages.append(
                Damage(
                    name: "one export line removed on \(diverged.nodes[last].node.rawValue) only", final: diverged,
                    expected: .divergentNodes, operation: nil))
        }
        return damages
    }

    /// Checks every damage; returns one line per damage and whether the checker named each.
    static func run(_ history: ClusterHistory, _ final: ClusterFinalState) -> (lines: [String], passed: Bool) {
        let damages = damages(history, final)
        guard !damages.isEmpty else {
            return (["checker proof: FAIL, the run left no acknowledged registration to damage"], false)
        }
        var lines: [String] = []
        var passed = true
        for damage in damages {
            let report = ClusterChecker.check(history, damage.final)
            let named = report.violations.contains { violation in
                violation.kind == damage.expected
                    && (damage.operation.map { violation.operations.contains($0) } ?? true)
            }
            passed = passed && named
            lines.append(
                "checker proof: \(damage.name): \(named ? "found" : "MISSED") (\(damage.expected.rawValue); "
                    + "\(report.violations.count) violations in all)")
        }
        return (lines, passed)
    }

    /// `body` without the lines (LF-terminated) whose text satisfies `drop`.
    static func withoutLines(_ body: [UInt8], drop: (String) -> Bool) -> [UInt8] {
        var kept: [UInt8] = []
        kept.reserveCapacity(body.count)
        for line in body.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true)
        where !drop(String(decoding: line, as: UTF8.self)) {
            kept += line
            kept.append(UInt8(ascii: "\n"))
        }
        return kept
    }
}
