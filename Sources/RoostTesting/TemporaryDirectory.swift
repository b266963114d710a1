import Glibc
import RoostPlatform
import RoostStorage

/// The one way tests make and remove scratch directories on the real file
/// system (data directories for system and crash tests, WAL files).
package enum TemporaryDirectory {
    /// Returns a fresh directory `PARENT/PREFIX-XXXXXX` made with mkdtemp.
    package static func make(prefix: String = "roost-test", under parent: String = "/tmp") throws(SystemCallError)
        -> String
    {
        precondition(prefix.hasPrefix("roost-"), "test directories are named roost-…, got \(prefix)")
        var template = Array("\(parent)/\(prefix)-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        guard let made else { throw SystemCallError(call: "mkdtemp", errno: errno) }
        return String(cString: made)
    }

    /// Removes a tree made by `make` (refuses any other path).
    package static func remove(_ path: String) {
        precondition(path.contains("/roost-"), "refusing to remove \(path): not a test directory")
        removeTree(path, fileSystem: PosixFileSystem())
    }

    private static func removeTree(_ path: String, fileSystem: PosixFileSystem) {
        if let names = try? fileSystem.list(path) {
            for name in names {
                let child = path + "/" + name
                if (try? fileSystem.list(child)) != nil {
                    removeTree(child, fileSystem: fileSystem)
                } else {
                    unlink(child)
                }
            }
        }
        rmdir(path)
    }
}

/// Push tokens for tests, as the text a client sends: the one maker shared
/// by the API, engine and system tests (the model's tests build typed
/// `PushToken`s from the seeded generator instead).
package enum TestTokens {
    /// A valid APNs token (64 hex digits) unique for `n`.
    package static func apns(_ n: Int) -> String {
        let hex = String(n, radix: 16)
        return String(repeating: "0", count: 64 - hex.count) + hex
    }

    /// A valid FCM token unique for `n`.
    package static func fcm(_ n: Int) -> String {
        "fcm:" + String(repeating: "x", count: 40) + String(n)
    }
}
