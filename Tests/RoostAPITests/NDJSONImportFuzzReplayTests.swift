import RoostFuzzChecks
import RoostTesting
import Testing

@testable import RoostAPI

@Suite("NDJSON import fuzz inputs")
struct NDJSONImportFuzzReplayTests {
    static let root = FuzzInputs.repositoryRoot(testFile: "\(#filePath)")

    @Test("every seed of Fuzz/NDJSONImportFuzz/seeds and every committed input keeps the properties")
    func replayCommittedInputs() {
        let seeds = FuzzInputs.files(in: "Fuzz/NDJSONImportFuzz/seeds", root: Self.root)
        let corpus = FuzzInputs.files(in: "Tests/RoostAPITests/FuzzCorpus/ndjson", root: Self.root)
        #expect(seeds.count >= 3, "no seeds under \(Self.root)/Fuzz/NDJSONImportFuzz/seeds")
        for (name, bytes) in seeds + corpus {
            let problem = NDJSONImportFuzzCheck.violation(in: bytes)
            #expect(problem == nil, "\(name): \(problem ?? "")")
        }
    }

    @Test("the seeds hold export lines that parse to devices (the fixpoint property is exercised)")
    func seedsParse() {
        let seeds = FuzzInputs.files(in: "Fuzz/NDJSONImportFuzz/seeds", root: Self.root)
        var parsed = 0
        for (_, bytes) in seeds {
            var reader = NDJSONReader(bytes)
            while let line = reader.next() {
                if case .success = ExportedDevice.parse(line.bytes) { parsed += 1 }
            }
        }
        #expect(parsed >= 3)
    }
}
