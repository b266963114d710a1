import RoostTesting
import Testing

@testable import RoostStorage

@Suite("Storage reader fuzz inputs")
struct StorageFuzzCheckReplayTests {
    static let root = FuzzInputs.repositoryRoot(testFile: "\(#filePath)")

    @Test("every seed of Fuzz/StorageFuzz/seeds and every committed input keeps the properties")
    func replayCommittedInputs() {
        let seeds = FuzzInputs.files(in: "Fuzz/StorageFuzz/seeds", root: Self.root)
        let corpus = FuzzInputs.files(in: "Tests/RoostStorageTests/FuzzCorpus", root: Self.root)
        #expect(!seeds.isEmpty, "no seeds under \(Self.root)/Fuzz/StorageFuzz/seeds")
        for (name, bytes) in seeds + corpus {
            let problem = StorageFuzzCheck.violation(in: bytes)
            #expect(problem == nil, "\(name): \(problem ?? "")")
        }
    }
}
