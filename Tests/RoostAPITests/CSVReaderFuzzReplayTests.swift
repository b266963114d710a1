import RoostTesting
import Testing

@testable import RoostAPI

@Suite("CSV reader fuzz inputs")
struct CSVReaderFuzzCheckReplayTests {
    static let root = FuzzInputs.repositoryRoot(testFile: "\(#filePath)")

    @Test("every seed of Fuzz/CSVReaderFuzz/seeds and every committed input keeps the properties")
    func replayCommittedInputs() {
        let seeds = FuzzInputs.files(in: "Fuzz/CSVReaderFuzz/seeds", root: Self.root)
        let corpus = FuzzInputs.files(in: "Tests/RoostAPITests/FuzzCorpus/csv", root: Self.root)
        #expect(!seeds.isEmpty, "no seeds under \(Self.root)/Fuzz/CSVReaderFuzz/seeds")
        for (name, bytes) in seeds + corpus {
            let problem = CSVReaderFuzzCheck.violation(in: bytes)
            #expect(problem == nil, "\(name): \(problem ?? "")")
        }
    }
}
