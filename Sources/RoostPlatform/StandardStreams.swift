import Glibc

/// Lines to stdout and stderr without stdio (whose globals are not
/// concurrency-safe in Swift 6): one `writeAll` per line, errors ignored —
/// there is nowhere left to report them.
public enum StandardStreams {
    /// Writes `text` and a newline to stdout.
    public static func out(_ text: String) { writeLine(1, text) }

    /// Writes `text` and a newline to stderr.
    public static func error(_ text: String) { writeLine(2, text) }

    private static func writeLine(_ fd: Int32, _ text: String) {
        var bytes = Array(text.utf8)
        bytes.append(UInt8(ascii: "\n"))
        try? DurableFile.writeAll(fd: fd, bytes: bytes, subject: fd == 1 ? "stdout" : "stderr")
    }
}
