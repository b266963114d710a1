import Glibc

/// File operations in the order durability needs them: write everything,
/// fdatasync, rename, fsync the directory. Every call goes through
/// `retryingSyscall` and names itself and its path in the error.
public enum DurableFile {
    /// Replaces `path` atomically with `bytes`: write `path.tmp` (mode 0600),
    /// fsync it, rename it over `path`, fsync the directory. After a crash the
    /// file holds either the old or the new contents, never a mixture.
    public static func replace(path: String, with bytes: [UInt8]) throws(SystemCallError) {
        let temporary = path + ".tmp"
        let fd = try retryingSyscall("open", subject: temporary) {
            open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        }
        do {
            try writeAll(fd: fd, bytes: bytes, subject: temporary)
            _ = try retryingSyscall("fsync", subject: temporary) { fsync(fd) }
        } catch {
            close(fd)
            throw error
        }
        _ = try retryingSyscall("close", subject: temporary) { close(fd) }
        _ = try retryingSyscall("rename", subject: path) { Glibc.rename(temporary, path) }
        try syncDirectory(of: path)
    }

    /// Writes every byte, looping over short writes.
    public static func writeAll(fd: Int32, bytes: [UInt8], subject: String) throws(SystemCallError) {
        var offset = 0
        while offset < bytes.count {
            let written = try retryingSyscall("write", subject: subject) {
                bytes.withUnsafeBytes { buffer in write(fd, buffer.baseAddress! + offset, buffer.count - offset) }
            }
            precondition(written > 0, "write returned 0 for \(subject)")
            offset += written
        }
    }

    /// fsyncs the directory that holds `path`, so that a create or rename in it
    /// survives power loss.
    public static func syncDirectory(of path: String) throws(SystemCallError) {
        let directory: String
        if let slash = path.lastIndex(of: "/") {
            directory = slash == path.startIndex ? "/" : String(path[..<slash])
        } else {
            directory = "."
        }
        let fd = try retryingSyscall("open", subject: directory) { open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        defer { close(fd) }
        _ = try retryingSyscall("fsync", subject: directory) { fsync(fd) }
    }

    /// Returns the whole contents of `path`, or nil when it does not exist.
    /// Refuses files larger than `limitBytes`.
    public static func readIfExists(path: String, limitBytes: Int) throws(SystemCallError) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            let code = errno
            if code == ENOENT { return nil }
            throw SystemCallError(call: "open", subject: path, errno: code)
        }
        defer { close(fd) }
        var contents: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = try retryingSyscall("read", subject: path) {
                chunk.withUnsafeMutableBytes { buffer in read(fd, buffer.baseAddress, buffer.count) }
            }
            if count == 0 { break }
            contents.append(contentsOf: chunk[0..<count])
            if contents.count > limitBytes { throw SystemCallError(call: "read", subject: path, errno: EFBIG) }
        }
        return contents
    }

    /// Renames `path` to `newPath` (replacing it) and fsyncs the directory, so
    /// that the rename survives power loss.
    public static func rename(_ path: String, to newPath: String) throws(SystemCallError) {
        _ = try retryingSyscall("rename", subject: path) { Glibc.rename(path, newPath) }
        try syncDirectory(of: newPath)
    }

    /// Returns whether something exists at `path` (a dangling name counts).
    public static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    /// Returns the names in `directory` (not `.` and `..`), sorted: the one
    /// directory listing of the project.
    public static func names(in directory: String) throws(SystemCallError) -> [String] {
        guard let stream = opendir(directory) else {
            throw SystemCallError(call: "opendir", subject: directory, errno: errno)
        }
        defer { closedir(stream) }
        var names: [String] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// Creates a directory with mode 0700 unless it exists.
    public static func createDirectory(path: String) throws(SystemCallError) {
        if mkdir(path, 0o700) != 0 {
            let code = errno
            if code != EEXIST { throw SystemCallError(call: "mkdir", subject: path, errno: code) }
        }
    }
}
