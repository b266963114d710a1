import Glibc

/// Writes raw bytes to fd 2; errors are ignored (nowhere left to report them).
func writeStandardError(_ pointer: UnsafeRawPointer?, _ count: Int) -> Int {
    Glibc.write(2, pointer, count)
}
