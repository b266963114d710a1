import Glibc
import RoostPlatform

/// The file operations RoostStorage needs, as a protocol so that tests can
/// inject faults and simulate power loss (RoostTesting's FaultInjectingFileSystem).
/// Every error names the call and the path. Paths are absolute or relative
/// strings joined with "/".
package protocol StorageFileSystem: Sendable {
    /// Opens `path` for reading and writing at explicit offsets, creating it
    /// (mode 0600) when `create` is true. A new file's name is durable only
    /// after `syncDirectory` of its parent.
    func open(_ path: String, create: Bool) throws(SystemCallError) -> any StorageFile
    /// Returns the whole file, or nil when it does not exist. Refuses files over `limitBytes`.
    func readWhole(_ path: String, limitBytes: Int) throws(SystemCallError) -> [UInt8]?
    /// Reads the whole file into `buffer` (its count becomes the file's size,
    /// its storage is reused when large enough) and returns true, or returns
    /// false when the file does not exist. Refuses files over `limitBytes`.
    func readWhole(_ path: String, limitBytes: Int, into buffer: inout [UInt8]) throws(SystemCallError) -> Bool
    /// Returns the names (not paths) in `directory`, without "." and "..".
    func list(_ directory: String) throws(SystemCallError) -> [String]
    /// Creates `directory` (mode 0700) unless it exists.
    func createDirectory(_ directory: String) throws(SystemCallError)
    /// Renames atomically; durable after `syncDirectory`.
    func rename(_ source: String, to destination: String) throws(SystemCallError)
    /// Removes a file; durable after `syncDirectory`.
    func remove(_ path: String) throws(SystemCallError)
    /// fsyncs a directory so that creates, renames and removals in it survive power loss.
    func syncDirectory(_ directory: String) throws(SystemCallError)
    /// True when new segments should be really written with zeros (by a
    /// background thread, ahead of need) rather than only preallocated: on
    /// ext4 and XFS an fdatasync after a write into preallocated, unwritten
    /// extents also commits the extent conversion to the journal. False by
    /// default, so that fault-injecting test file systems see no background I/O.
    var prefersZeroFilledSegments: Bool { get }
}

/// An open file: positioned reads and writes, data sync, preallocation.
package protocol StorageFile: AnyObject, Sendable {
    /// The path it was opened with, for messages.
    var path: String { get }
    /// Writes all of `bytes` at `offset`, looping over short writes.
    func write(_ bytes: ArraySlice<UInt8>, at offset: Int) throws(SystemCallError)
    /// Reads up to `count` bytes at `offset`; fewer only at end of file.
    func read(at offset: Int, count: Int) throws(SystemCallError) -> [UInt8]
    /// Reads up to `count` bytes at `offset` into `buffer` (its count becomes
    /// the number read; its storage is reused when large enough); fewer only at end of file.
    func read(at offset: Int, count: Int, into buffer: inout [UInt8]) throws(SystemCallError)
    /// fdatasync: the written bytes and the size survive power loss once it returns.
    /// After a failure the data may be lost from the page cache: never call it
    /// again for the same writes as if nothing happened.
    func syncData() throws(SystemCallError)
    /// Makes the file at least `size` bytes, zero-filled (fallocate, or ftruncate
    /// where fallocate is unsupported).
    func preallocate(size: Int) throws(SystemCallError)
    /// Sets the size to `size` bytes.
    func truncate(size: Int) throws(SystemCallError)
    /// Returns the current size in bytes.
    func size() throws(SystemCallError) -> Int
    /// Closes the descriptor; later calls are invalid.
    func close()
}

extension StorageFileSystem {
    package var prefersZeroFilledSegments: Bool { false }

    /// The default: `readWhole` into a new array, then handed over.
    package func readWhole(
        _ path: String, limitBytes: Int, into buffer: inout [UInt8]
    ) throws(SystemCallError) -> Bool {
        guard let bytes = try readWhole(path, limitBytes: limitBytes) else { return false }
        buffer = bytes
        return true
    }
}

extension StorageFile {
    /// The default: `read(at:count:)` into a new array, then handed over.
    package func read(at offset: Int, count: Int, into buffer: inout [UInt8]) throws(SystemCallError) {
        buffer = try read(at: offset, count: count)
    }
}

/// Sets `buffer.count` to `count` before a read overwrites it: keeps the
/// storage when its capacity suffices, else allocates without zero-filling.
func resizeReadBuffer(_ buffer: inout [UInt8], to count: Int) {
    if buffer.count > count {
        buffer.removeLast(buffer.count - count)
    } else if buffer.count < count {
        if buffer.capacity >= count {
            buffer.append(contentsOf: repeatElement(0, count: count - buffer.count))
        } else {
            buffer = [UInt8](unsafeUninitializedCapacity: count) { _, initialized in initialized = count }
        }
    }
}

extension StorageFileSystem {

    /// Returns `directory + "/" + name`.
    package func join(_ directory: String, _ name: String) -> String {
        directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }
}

/// The real file system, through RoostPlatform's `retryingSyscall`.
package struct PosixFileSystem: StorageFileSystem {
    package init() {}

    package var prefersZeroFilledSegments: Bool { true }

    package func open(_ path: String, create: Bool) throws(SystemCallError) -> any StorageFile {
        let flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0)
        let fd = try retryingSyscall("open", subject: path) { Glibc.open(path, flags, 0o600) }
        return PosixFile(fd: fd, path: path)
    }

    package func readWhole(_ path: String, limitBytes: Int) throws(SystemCallError) -> [UInt8]? {
        try DurableFile.readIfExists(path: path, limitBytes: limitBytes)
    }

    package func readWhole(
        _ path: String, limitBytes: Int, into buffer: inout [UInt8]
    ) throws(SystemCallError) -> Bool {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            let code = errno
            if code == ENOENT { return false }
            throw SystemCallError(call: "open", subject: path, errno: code)
        }
        let file = PosixFile(fd: fd, path: path)
        defer { file.close() }
        let size = try file.size()
        if size > limitBytes { throw SystemCallError(call: "read", subject: path, errno: EFBIG) }
        // One byte more than the size, so that a file that grew is noticed.
        try file.read(at: 0, count: size + 1, into: &buffer)
        if buffer.count > limitBytes { throw SystemCallError(call: "read", subject: path, errno: EFBIG) }
        return true
    }

    package func list(_ directory: String) throws(SystemCallError) -> [String] {
        try DurableFile.names(in: directory)
    }

    package func createDirectory(_ directory: String) throws(SystemCallError) {
        try DurableFile.createDirectory(path: directory)
    }

    package func rename(_ source: String, to destination: String) throws(SystemCallError) {
        _ = try retryingSyscall("rename", subject: destination) { Glibc.rename(source, destination) }
    }

    package func remove(_ path: String) throws(SystemCallError) {
        _ = try retryingSyscall("unlink", subject: path) { unlink(path) }
    }

    package func syncDirectory(_ directory: String) throws(SystemCallError) {
        let fd = try retryingSyscall("open", subject: directory) {
            Glibc.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        }
        defer { _ = Glibc.close(fd) }
        _ = try retryingSyscall("fsync", subject: directory) { fsync(fd) }
    }
}

/// A descriptor opened by `PosixFileSystem`. Immutable after init, so Sendable.
final class PosixFile: StorageFile {
    let fd: Int32
    let path: String

    init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    func write(_ bytes: ArraySlice<UInt8>, at offset: Int) throws(SystemCallError) {
        var done = 0
        while done < bytes.count {
            let written = try retryingSyscall("pwrite", subject: path) {
                bytes.withUnsafeBytes { buffer in
                    pwrite(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset + done))
                }
            }
            precondition(written > 0, "pwrite returned 0 for \(path) at \(offset + done)")
            done += written
        }
    }

    func read(at offset: Int, count: Int) throws(SystemCallError) -> [UInt8] {
        var buffer: [UInt8] = []
        try read(at: offset, count: count, into: &buffer)
        return buffer
    }

    func read(at offset: Int, count: Int, into buffer: inout [UInt8]) throws(SystemCallError) {
        resizeReadBuffer(&buffer, to: count)
        var done = 0
        while done < count {
            let got = try retryingSyscall("pread", subject: path) {
                buffer.withUnsafeMutableBytes { raw in
                    pread(fd, raw.baseAddress! + done, count - done, off_t(offset + done))
                }
            }
            if got == 0 { break }
            done += got
        }
        buffer.removeLast(count - done)
    }

    func syncData() throws(SystemCallError) {
        _ = try retryingSyscall("fdatasync", subject: path) { fdatasync(fd) }
    }

    func preallocate(size: Int) throws(SystemCallError) {
        // posix_fallocate returns the error number instead of setting errno;
        // glibc falls back to writing zeros where the file system lacks fallocate.
        while true {
            let code = posix_fallocate(fd, 0, off_t(size))
            if code == 0 { return }
            if code == EINTR { continue }
            throw SystemCallError(call: "posix_fallocate", subject: path, errno: code)
        }
    }

    func truncate(size: Int) throws(SystemCallError) {
        _ = try retryingSyscall("ftruncate", subject: path) { ftruncate(fd, off_t(size)) }
    }

    func size() throws(SystemCallError) -> Int {
        var status = stat()
        _ = try retryingSyscall("fstat", subject: path) { fstat(fd, &status) }
        return Int(status.st_size)
    }

    func close() {
        _ = Glibc.close(fd)
    }
}
