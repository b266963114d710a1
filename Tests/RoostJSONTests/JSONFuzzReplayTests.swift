import RoostFuzzChecks
import RoostTesting
import Testing

@testable import RoostJSON

@Suite("JSON reader fuzz inputs")
struct JSONFuzzCheckReplayTests {
    static let root = FuzzInputs.repositoryRoot(testFile: "\(#filePath)")

    @Test("every seed of Fuzz/JSONFuzz/seeds and every committed input keeps the properties")
    func replayCommittedInputs() {
        let seeds = FuzzInputs.files(in: "Fuzz/JSONFuzz/seeds", root: Self.root)
        let corpus = FuzzInputs.files(in: "Tests/RoostJSONTests/FuzzCorpus", root: Self.root)
        #expect(!seeds.isEmpty, "no seeds under \(Self.root)/Fuzz/JSONFuzz/seeds")
        for (name, bytes) in seeds + corpus {
            let problem = JSONFuzzCheck.violation(in: bytes)
            #expect(problem == nil, "\(name): \(problem ?? "")")
        }
    }
}
