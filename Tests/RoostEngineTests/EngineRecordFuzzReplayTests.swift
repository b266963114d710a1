import RoostFuzzChecks
import RoostTesting
import Testing

@testable import RoostEngine
@testable import RoostModel

@Suite("Engine record fuzz inputs")
struct EngineRecordFuzzCheckReplayTests {
    static let root = FuzzInputs.repositoryRoot(testFile: "\(#filePath)")

    @Test("every seed of Fuzz/EngineRecordFuzz/seeds and every committed input keeps the properties")
    func replayCommittedInputs() {
        let seeds = FuzzInputs.files(in: "Fuzz/EngineRecordFuzz/seeds", root: Self.root)
        let corpus = FuzzInputs.files(in: "Tests/RoostEngineTests/FuzzCorpus", root: Self.root)
        #expect(!seeds.isEmpty, "no seeds under \(Self.root)/Fuzz/EngineRecordFuzz/seeds")
        for (name, bytes) in seeds + corpus {
            let problem = EngineRecordFuzzCheck.violation(in: bytes)
            #expect(problem == nil, "\(name): \(problem ?? "")")
        }
    }

    @Test("a device id or sequence floor of UInt64.max does not decode: it has no successor (found by fuzzing)")
    func lastSequenceDoesNotDecode() {
        let key = IndexKey(app: AppID(3), mode: .live)
        let id = DeviceID(appID: AppID(3), mode: .live, platform: .ios, sequence: .max)
        for mutation in [Mutation.deviceTombstone(id), .deviceSequenceFloor(.max)] {
            let bytes = EngineRecord.mutation(key, mutation).encoded()
            #expect(throws: EngineRecordError.self, "\(mutation)") { try EngineRecord.decode(bytes) }
        }
        let below = DeviceID(appID: AppID(3), mode: .live, platform: .ios, sequence: .max - 1)
        for mutation in [Mutation.deviceTombstone(below), .deviceSequenceFloor(.max - 1)] {
            let bytes = EngineRecord.mutation(key, mutation).encoded()
            #expect(throws: Never.self, "\(mutation)") { try EngineRecord.decode(bytes) }
        }
    }

    @Test("a record encoded into a reused buffer is the record's own bytes, longer or shorter than the buffer's last")
    func encodedIntoAReusedBuffer() {
        let key = IndexKey(app: AppID(3), mode: .test)
        var device = Device(
            id: DeviceID(appID: AppID(3), mode: .test, platform: .android, sequence: 9), environment: .production,
            token: nil, createdAt: Timestamp(millisecondsSinceEpoch: 1_790_000_000_000))
        // Past the 256 bytes a record's buffer is reserved for (the bytes, not a valid device, are the point).
        device.appVersion = String(repeating: "v", count: 300)
        let mutations: [Mutation] = [
            .deviceUpsert(device), .changeTime(Timestamp(millisecondsSinceEpoch: 7)),
            .deviceTombstone(device.id), .deviceUpsert(device), .deviceSequenceFloor(12),
        ]
        var buffer: [UInt8] = []
        for mutation in mutations {
            EngineRecord.encodeMutation(mutation, of: key, into: &buffer)
            #expect(buffer == EngineRecord.mutation(key, mutation).encoded(), "\(mutation)")
        }
    }
}
