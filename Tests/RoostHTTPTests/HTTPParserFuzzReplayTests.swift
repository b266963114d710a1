import Glibc
import Testing

@testable import RoostHTTP

/// Returns the contents of every regular file in `directory` except README.md,
/// sorted by name.
func inputFiles(in directory: String) -> [(name: String, bytes: [UInt8])] {
    guard let dir = opendir(directory) else { return [] }
    defer { closedir(dir) }
    var files: [(String, [UInt8])] = []
    while let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        if name.hasPrefix(".") || name == "README.md" { continue }
        guard let file = fopen(directory + "/" + name, "rb") else { continue }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = fread(&buffer, 1, buffer.count, file)
            if count <= 0 { break }
            bytes += buffer[0..<count]
        }
        fclose(file)
        files.append((name, bytes))
    }
    return files.sorted { $0.0 < $1.0 }
}

@Suite("HTTP parser fuzz inputs")
struct HTTPParserFuzzReplayTests {
    /// This file's directory (Tests/RoostHTTPTests).
    static var testsDirectory: String {
        let path = "\(#filePath)"
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return String(path[..<slash])
    }

    @Test("every committed fuzz input and seed keeps the parser's invariants")
    func replayCommittedInputs() {
        let root = Self.testsDirectory
        let corpus = inputFiles(in: root + "/FuzzCorpus")
        let seeds = inputFiles(in: root + "/../../Fuzz/HTTPParserFuzz/seeds")
        #expect(!corpus.isEmpty, "no inputs under \(root)/FuzzCorpus")
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
