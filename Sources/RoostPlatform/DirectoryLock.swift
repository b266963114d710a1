import Glibc

/// An exclusive lock on a data directory, held for the life of the process:
/// `DIR/lock`, locked with `flock(LOCK_EX | LOCK_NB)`. A second process on
/// the same directory cannot take it and must refuse to start (spec §11);
/// the kernel drops the lock when the process ends, however it ends, so a
/// crash never leaves a stale lock behind.
public final class DirectoryLock: Sendable {
    /// The lock file's name inside the directory.
    public static let fileName = "lock"

    /// Why the lock could not be taken.
    public enum Failure: Error, CustomStringConvertible {
        /// Another process holds it.
        case heldByAnotherProcess(directory: String)
        /// The lock file could not be opened or locked.
        case system(SystemCallError)

        public var description: String {
            switch self {
            case .heldByAnotherProcess(let directory):
                "the data directory \(directory) is in use by another roost process "
                    + "(\(directory)/\(DirectoryLock.fileName) is locked); stop it or choose another --data"
            case .system(let error):
                "cannot lock the data directory: \(error)"
            }
        }
    }

    private let descriptor: Int32

    /// Takes the lock on `directory` (which must exist), or throws at once.
    public init(directory: String) throws(Failure) {
        let path = directory + "/" + DirectoryLock.fileName
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .system(SystemCallError(call: "open", subject: path, errno: errno)) }
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            if code == EINTR { continue }
            close(fd)
            if code == EWOULDBLOCK { throw .heldByAnotherProcess(directory: directory) }
            throw .system(SystemCallError(call: "flock", subject: path, errno: code))
        }
        descriptor = fd
    }

    deinit {
        close(descriptor)
    }
}
