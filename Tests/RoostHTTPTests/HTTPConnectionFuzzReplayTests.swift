import RoostFuzzChecks
import RoostTesting
import Testing

@testable import RoostHTTP

@Suite("HTTP connection machine fuzz inputs")
struct HTTPConnectionFuzzCheckReplayTests {
    static let root = FuzzInputs.repositoryRoot(testFile: "\(#filePath)")

    @Test("every seed of Fuzz/HTTPConnectionFuzz/seeds and every committed input keeps the properties")
    func replayCommittedInputs() {
        let seeds = FuzzInputs.files(in: "Fuzz/HTTPConnectionFuzz/seeds", root: Self.root)
        let corpus = FuzzInputs.files(in: "Tests/RoostHTTPTests/ConnectionFuzzCorpus", root: Self.root)
        #expect(!seeds.isEmpty, "no seeds under \(Self.root)/Fuzz/HTTPConnectionFuzz/seeds")
        for (name, bytes) in seeds + corpus {
            let problem = HTTPConnectionFuzzCheck.violation(in: bytes)
            #expect(problem == nil, "\(name): \(problem ?? "")")
        }
    }
}
