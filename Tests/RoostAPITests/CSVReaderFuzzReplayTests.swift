import RoostFuzzChecks
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

    @Test("a lone CR at the start of a line is data, as it is elsewhere in a line (found by fuzzing)")
    func loneCarriageReturnAtLineStart() {
        var reader = CSVReader(Array("a\n\rb,c\r\nd".utf8))
        let records = [reader.next(), reader.next(), reader.next(), reader.next()]
        #expect(records[0]?.fields == ["a"] && records[0]?.line == 1)
        #expect(records[1]?.fields == ["\rb", "c"] && records[1]?.line == 2)
        #expect(records[2]?.fields == ["d"] && records[2]?.line == 3)
        #expect(records[3] == nil)
    }
}
