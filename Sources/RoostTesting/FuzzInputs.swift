import RoostPlatform
import RoostStorage

/// The committed inputs of the libFuzzer targets, for the tests that replay
/// them through each target's check (docs/testing.md): a target's seeds in
/// `Fuzz/<Target>/seeds/` and the inputs that once broke a property, kept in
/// the test target's `FuzzCorpus` directory.
package enum FuzzInputs {
    /// The repository root, from the path of a test file two levels below it
    /// (`Tests/<Target>/<File>.swift`; pass `#filePath`).
    package static func repositoryRoot(testFile: String) -> String {
        var path = Substring(testFile)
        for _ in 0..<3 {
            guard let slash = path.lastIndex(of: "/") else { return "." }
            path = path[..<slash]
        }
        return path.isEmpty ? "/" : String(path)
    }

    /// Returns every file in `directory` (relative to the root) except
    /// README.md and hidden files, with its bytes, sorted by name; empty when
    /// the directory is missing. A file over `fileBytesMax` is a test failure
    /// waiting to happen, so it is refused loudly.
    package static func files(in directory: String, root: String) -> [(name: String, bytes: [UInt8])] {
        let path = root + "/" + directory
        let fileSystem = PosixFileSystem()
        guard let names = try? fileSystem.list(path) else { return [] }
        var files: [(name: String, bytes: [UInt8])] = []
        for name in names where !name.hasPrefix(".") && name != "README.md" {
            do {
                guard let bytes = try fileSystem.readWhole(path + "/" + name, limitBytes: fileBytesMax) else {
                    continue
                }
                files.append((name, bytes))
            } catch {
                // A directory (EISDIR) is not an input; anything else is.
                precondition(error.errno == 21, "cannot read fuzz input \(path)/\(name): \(error)")
            }
        }
        return files.sorted { $0.name < $1.name }
    }

    /// The largest committed input: the targets run with `-max_len` of at most 8 KiB.
    package static let fileBytesMax = 64 * 1024
}
