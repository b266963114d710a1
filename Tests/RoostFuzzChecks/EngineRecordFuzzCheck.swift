import RoostEngine
import RoostModel

/// The engine record decoder's properties checked on arbitrary bytes: shared
/// by the libFuzzer target (Fuzz/EngineRecordFuzz) and the test that replays
/// committed inputs (docs/testing.md). The input is a log's records, each a
/// little-endian `u16` length and that many bytes.
///
/// Checks, per record: a decoded record encodes to bytes that decode to it
/// again and encode the same (a fixed point); the framing read without
/// decoding agrees with the decoder. Over the sequence, as recovery replays
/// it: one index table takes replay's fast path wherever it applies
/// (`IndexTable.upsert(in:)`, `replayUpsert`), the other decodes every record;
/// both accept and refuse the same records and, while every record applies
/// (recovery stops at the first it cannot apply), end with the same indexes
/// and state (`snapshotMutations`) and no broken index invariant (but one,
/// which only a log the engine never writes breaks: `tokenTakenViolation`).
package enum EngineRecordFuzzCheck {
    /// The largest index-size hint replayed (a hint reserves room for that many devices).
    static let hintMax: UInt64 = 4096

    /// The one device invariant an arbitrary log may leave broken (see `stateProblem`).
    static let tokenTakenViolation = "a device without token must be invalidated"

    /// Returns a description of the first broken property for `input`, or nil.
    /// O(records × index size) for the final comparison.
    package static func violation(in input: [UInt8]) -> String? {
        var fast = IndexTable()
        var general = IndexTable()
        var offset = 0
        var index = 0
        while offset + 2 <= input.count {
            let length = Int(input[offset]) | Int(input[offset + 1]) << 8
            let record = Array(input[(offset + 2)..<min(offset + 2 + length, input.count)])
            offset += 2 + length
            defer { index += 1 }
            let decoded = Result { () throws(EngineRecordError) in try EngineRecord.decode(record) }
            if let problem = codecProblem(record, decoded) { return "record \(index): \(problem)" }
            let fastOutcome = replayFast(record, decoded, into: &fast)
            let generalOutcome = replayGeneral(decoded, into: &general)
            if fastOutcome.applied != generalOutcome.applied {
                return
                    "record \(index): the fast path \(fastOutcome.description), decoding \(generalOutcome.description)"
            }
            // Recovery stops at the first record it cannot apply (and keeps no
            // state), so the tables are compared only while records apply.
            if !generalOutcome.applied { return nil }
        }
        return stateProblem(fast, general)
    }

    /// What replaying one record did.
    private struct Outcome {
        var applied: Bool
        var description: String
    }

    private static func codecProblem(_ record: [UInt8], _ decoded: Result<EngineRecord, EngineRecordError>) -> String? {
        let framed = record.withUnsafeBytes { EngineRecord.framedMutation(in: $0)?.key }
        guard case .success(let value) = decoded else { return nil }
        if case .mutation(let key, _) = value, framed != key {
            return "decodes as a mutation of \(key), the framing says \(String(describing: framed))"
        }
        if case .mutation = value {} else if framed != nil { return "framed as a mutation but decodes as \(value)" }
        let encoded = value.encoded()
        guard let again = try? EngineRecord.decode(encoded) else { return "\(value) encodes to bytes it cannot read" }
        if again != value { return "\(value) encodes and decodes as \(again)" }
        if again.encoded() != encoded { return "\(value) encodes differently the second time" }
        return nil
    }

    private static func replayFast(
        _ record: [UInt8], _ decoded: Result<EngineRecord, EngineRecordError>, into table: inout IndexTable
    ) -> Outcome {
        let tookFastPath = record.withUnsafeBytes { raw in
            guard let upsert = IndexTable.upsert(in: raw) else { return false }
            return table.replayUpsert(upsert.key, encoded: upsert.mutation)
        }
        if tookFastPath { return Outcome(applied: true, description: "applied it") }
        return replayGeneral(decoded, into: &table)
    }

    private static func replayGeneral(
        _ decoded: Result<EngineRecord, EngineRecordError>, into table: inout IndexTable
    ) -> Outcome {
        switch decoded {
        case .failure(let error):
            return Outcome(applied: false, description: "refused it: \(error)")
        case .success(var record):
            // Size hints reserve memory; keep them small (real ones match the snapshot).
            if case .indexSize(let key, let devices, let people) = record {
                record = .indexSize(key, devices: min(devices, hintMax), people: min(people, hintMax))
            }
            do throws(ReplayError) {
                try table.replay(record)
                return Outcome(applied: true, description: "applied \(record)")
            } catch {
                return Outcome(applied: false, description: "could not apply it: \(error)")
            }
        }
    }

    private static func stateProblem(_ fast: IndexTable, _ general: IndexTable) -> String? {
        guard fast.sortedKeys == general.sortedKeys else {
            return "the fast path holds indexes \(fast.sortedKeys), decoding \(general.sortedKeys)"
        }
        for key in fast.sortedKeys {
            guard let left = fast.indexes[key], let right = general.indexes[key] else { continue }
            // Replay takes a token from the device holding it, trusting that
            // device's own after-image to follow in the log (a fuzzy
            // snapshot); a log without it leaves that device tokenless and not
            // invalidated. Every other invariant holds for any log.
            let violations = (left.invariantViolations() + right.invariantViolations()).filter {
                !$0.hasSuffix(": \(tokenTakenViolation)")
            }
            if !violations.isEmpty { return "index \(key) broke its invariants: \(violations)" }
            let leftState = left.snapshotMutations()
            let rightState = right.snapshotMutations()
            if leftState != rightState {
                let differing = zip(leftState, rightState).first { $0 != $1 }
                return "index \(key): the fast path holds \(leftState.count) mutations, decoding \(rightState.count); "
                    + "first difference \(String(describing: differing))"
            }
        }
        return nil
    }
}
