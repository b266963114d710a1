import RoostTesting
import Testing

@testable import RoostAPI

@Suite("Identity token fuzz inputs")
struct IdentityTokenFuzzCheckReplayTests {
    static let root = FuzzInputs.repositoryRoot(testFile: "\(#filePath)")

    @Test("every seed of Fuzz/IdentityTokenFuzz/seeds and every committed input keeps the properties")
    func replayCommittedInputs() {
        let seeds = FuzzInputs.files(in: "Fuzz/IdentityTokenFuzz/seeds", root: Self.root)
        let corpus = FuzzInputs.files(in: "Tests/RoostAPITests/FuzzCorpus/identity", root: Self.root)
        #expect(!seeds.isEmpty, "no seeds under \(Self.root)/Fuzz/IdentityTokenFuzz/seeds")
        for (name, bytes) in seeds + corpus {
            let problem = IdentityTokenFuzzCheck.violation(in: bytes)
            #expect(problem == nil, "\(name): \(problem ?? "")")
        }
    }
}
