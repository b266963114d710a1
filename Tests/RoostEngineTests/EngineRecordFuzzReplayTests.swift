import RoostTesting
import Testing

@testable import RoostEngine

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
}
