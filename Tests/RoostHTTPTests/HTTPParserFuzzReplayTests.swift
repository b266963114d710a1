import RoostFuzzChecks
import RoostTesting
import Testing

@testable import RoostHTTP

@Suite("HTTP parser fuzz inputs")
struct HTTPParserFuzzReplayTests {
    static let root = FuzzInputs.repositoryRoot(testFile: "\(#filePath)")

    @Test("every committed fuzz input and seed keeps the parser's invariants")
    func replayCommittedInputs() {
        let corpus = FuzzInputs.files(in: "Tests/RoostHTTPTests/FuzzCorpus", root: Self.root)
        let seeds = FuzzInputs.files(in: "Fuzz/HTTPParserFuzz/seeds", root: Self.root)
        #expect(!corpus.isEmpty, "no inputs under \(Self.root)/Tests/RoostHTTPTests/FuzzCorpus")
        #expect(!seeds.isEmpty, "no seeds found")
        for (name, bytes) in corpus + seeds {
            let problem = HTTPParserFuzzCheck.violation(in: bytes)
            #expect(problem == nil, "\(name): \(problem ?? "")")
        }
    }

    @Test("the invariant check itself catches events that differ by split")
    func checkerIsNotVacuous() {
        // A valid request is accepted; an input whose parse fails has one failure at the end.
        let valid = [UInt8(7)] + Array("GET / HTTP/1.1\r\nHost: a\r\n\r\n".utf8)
        #expect(HTTPParserFuzzCheck.violation(in: valid) == nil)
        let refused = [UInt8(3)] + Array("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\nGET / HTTP/1.1\r\n\r\n".utf8)
        #expect(HTTPParserFuzzCheck.violation(in: refused) == nil)
    }
}
