import Glibc
import RoostPlatform
import RoostStorage

/// The limits of `roost backup` and `roost restore` (docs/limits.md).
enum BackupLimits {
    /// Attempts at choosing the files of one consistent state: a checkpoint
    /// that lands between reading the checkpoint slots and opening the files
    /// they need can remove one of them (two checkpoints must pass for that).
    static let pinAttemptsMax = 5
    /// Copies of the log's last segment when the copy caught a write in
    /// flight that looks like damage followed by a valid record (a page
    /// written after the reader passed the page before it). Real damage
    /// stays after this many copies and the backup fails.
    static let tailCopiesMax = 5
    /// Pause between two copies of the last segment, for the write in flight to end.
    static let tailCopyPauseMicroseconds: UInt32 = 20_000
    /// Bytes read and written per step of a file copy.
    static let copyChunkBytes = 1 << 20
    /// The largest `backup.manifest` that restore reads.
    static let manifestBytesMax = 1 << 20
    /// The largest `admin.key` copied (it holds one line).
    static let adminKeyBytesMax = 4096
    /// The largest checkpoint slot file read (a slot is 48 bytes; a longer
    /// file is damage that `CheckpointFormat.decode` names).
    static let checkpointSlotBytesMax = 4096
}

/// Why a backup or restore stopped: one line for the operator, naming the
/// file and what to do.
struct BackupError: Error, CustomStringConvertible {
    var description: String

    init(_ description: String) {
        self.description = description
    }
}

/// A file of the source directory, opened read-only and held open from the
/// moment the backup chose it: a checkpoint that removes it meanwhile cannot
/// take its bytes away (the inode lives while a descriptor does).
final class SourceFile {
    let path: String
    private let descriptor: Int32

    private init(path: String, descriptor: Int32) {
        self.path = path
        self.descriptor = descriptor
    }

    /// Opens `path` read-only; nil when it does not exist.
    static func open(_ path: String) throws(SystemCallError) -> SourceFile? {
        while true {
            let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
            if fd >= 0 { return SourceFile(path: path, descriptor: fd) }
            let code = errno
            if code == EINTR { continue }
            if code == ENOENT { return nil }
            throw SystemCallError(call: "open", subject: path, errno: code)
        }
    }

    /// Reads up to `buffer.count` bytes at `offset` into `buffer`; returns how
    /// many (0 at the end of the file).
    func read(at offset: Int, into buffer: inout [UInt8]) throws(SystemCallError) -> Int {
        let fd = descriptor
        return try retryingSyscall("pread", subject: path) {
            buffer.withUnsafeMutableBytes { raw in pread(fd, raw.baseAddress, raw.count, off_t(offset)) }
        }
    }

    deinit {
        Glibc.close(descriptor)
    }
}

/// A copied file's size and CRC-32C, as the manifest records them.
struct FileDigest: Equatable {
    var bytes: Int
    var checksum: UInt32
}

enum FileCopy {
    /// Copies `source` whole into a new file at `destination` (mode 0600,
    /// which must not exist), fsyncs it and returns the digest of the bytes
    /// written. The directory entry is durable after the caller fsyncs the
    /// directory. O(file size).
    static func copy(_ source: SourceFile, to destination: String) throws(SystemCallError) -> FileDigest {
        let fd = try retryingSyscall("open", subject: destination) {
            Glibc.open(destination, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        }
        defer { Glibc.close(fd) }
        var buffer = [UInt8](repeating: 0, count: BackupLimits.copyChunkBytes)
        var digest = FileDigest(bytes: 0, checksum: 0)
        while true {
            let count = try source.read(at: digest.bytes, into: &buffer)
            if count == 0 { break }
            let chunk = Array(buffer[0..<count])
            try DurableFile.writeAll(fd: fd, bytes: chunk, subject: destination)
            digest.checksum = CRC32C.checksum(chunk, continuing: digest.checksum)
            digest.bytes += count
        }
        _ = try retryingSyscall("fsync", subject: destination) { fsync(fd) }
        return digest
    }

    /// Returns the digest of the file at `path` as it is now. O(file size).
    static func digest(_ path: String) throws -> FileDigest {
        guard let file = try SourceFile.open(path) else { throw BackupError("\(path) is missing") }
        var buffer = [UInt8](repeating: 0, count: BackupLimits.copyChunkBytes)
        var digest = FileDigest(bytes: 0, checksum: 0)
        while true {
            let count = try file.read(at: digest.bytes, into: &buffer)
            if count == 0 { break }
            digest.checksum = CRC32C.checksum(buffer[0..<count], continuing: digest.checksum)
            digest.bytes += count
        }
        return digest
    }

    /// Returns the names in `directory` (nil when it does not exist), sorted.
    static func list(_ directory: String) throws(SystemCallError) -> [String]? {
        guard DurableFile.exists(directory) else { return nil }
        return try PosixFileSystem().list(directory)
    }

    /// fsyncs `directory` itself, so that the entries created in it survive power loss.
    static func syncDirectory(_ directory: String) throws(SystemCallError) {
        try PosixFileSystem().syncDirectory(directory)
    }

    /// Removes `path` and, when it is a directory, everything under it (a
    /// symbolic link is removed, never followed); a missing path is fine.
    /// O(entries under it).
    static func removeTree(_ path: String) throws(SystemCallError) {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            if errno == ENOENT { return }
            throw SystemCallError(call: "lstat", subject: path, errno: errno)
        }
        guard info.st_mode & S_IFMT == S_IFDIR else { return try removeIfPresent(path) }
        for name in try DurableFile.names(in: path) { try removeTree(path + "/" + name) }
        if rmdir(path) != 0 && errno != ENOENT { throw SystemCallError(call: "rmdir", subject: path, errno: errno) }
    }

    /// Removes the file at `path`; a missing file is fine.
    static func removeIfPresent(_ path: String) throws(SystemCallError) {
        if unlink(path) != 0 && errno != ENOENT {
            throw SystemCallError(call: "unlink", subject: path, errno: errno)
        }
    }
}
