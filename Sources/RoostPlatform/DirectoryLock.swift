import Glibc

/// An exclusive lock on a data directory, held for the life of the process:
/// `flock(LOCK_EX | LOCK_NB)` on the directory itself (a descriptor opened
/// `O_RDONLY | O_DIRECTORY`), and on `DIR/lock` as releases before decision
/// 0064 took it. A second process on the same directory cannot take it and
/// must refuse to start (spec §11); the kernel drops both when the process
/// ends, however it ends, so a crash never leaves a stale lock behind.
///
/// Why the directory: a lock on a file that can be unlinked is lost with its
/// name (`rm DIR/lock` while a server runs let a second one start, on a new
/// file of the same name). The directory cannot be unlinked while it holds
/// the data, so its lock lasts as long as the data it guards. The lock file
/// stays for a server of an older release on the same directory (during an
/// upgrade), which locks only the file; a missing one is made again.
/// docs/decisions/0064-lock-the-data-directory-itself.md.
public final class DirectoryLock: Sendable {
    /// The lock file's name inside the directory.
    public static let fileName = "lock"

    /// Why the lock could not be taken.
    public enum Failure: Error, CustomStringConvertible {
        /// Another process holds it.
        case heldByAnotherProcess(directory: String)
        /// The directory or the lock file could not be opened or locked.
        case system(SystemCallError)

        public var description: String {
            switch self {
            case .heldByAnotherProcess(let directory):
                "the data directory \(directory) is in use by another roost process "
                    + "(\(directory) or \(directory)/\(DirectoryLock.fileName) is locked); stop it or choose another --data"
            case .system(let error):
                "cannot lock the data directory: \(error)"
            }
        }
    }

    private let directoryDescriptor: Int32
    private let fileDescriptor: Int32

    /// Takes the lock on `directory` (which must exist), or throws at once.
    public init(directory: String) throws(Failure) {
        let directoryFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directoryFD >= 0 else {
            throw .system(SystemCallError(call: "open", subject: directory, errno: errno))
        }
        do {
            try DirectoryLock.lockExclusively(directoryFD, path: directory, directory: directory)
        } catch {
            close(directoryFD)
            throw error
        }
        let path = directory + "/" + DirectoryLock.fileName
        let fileFD = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fileFD >= 0 else {
            let code = errno
            close(directoryFD)
            throw .system(SystemCallError(call: "open", subject: path, errno: code))
        }
        do {
            try DirectoryLock.lockExclusively(fileFD, path: path, directory: directory)
        } catch {
            close(fileFD)
            close(directoryFD)
            throw error
        }
        directoryDescriptor = directoryFD
        fileDescriptor = fileFD
    }

    /// Takes `flock(LOCK_EX | LOCK_NB)` on `fd` (naming `path` in errors), retrying EINTR.
    private static func lockExclusively(_ fd: Int32, path: String, directory: String) throws(Failure) {
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            if code == EINTR { continue }
            if code == EWOULDBLOCK { throw .heldByAnotherProcess(directory: directory) }
            throw .system(SystemCallError(call: "flock", subject: path, errno: code))
        }
    }

    deinit {
        close(fileDescriptor)
        close(directoryDescriptor)
    }
}
