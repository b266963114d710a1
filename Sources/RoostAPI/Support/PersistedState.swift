import RoostPlatform
import Synchronization

/// A small value kept in memory and in one file (the catalog, the identity
/// keys). A change is made on a copy, the copy is written with
/// `DurableFile.replace` (temp, fsync, rename, fsync dir), and only then
/// published; a failed write answers 503 and changes nothing. Changes are
/// serialised so that the file and the published value advance in the same
/// order; readers never wait for the disk. Without a path (tests) nothing is
/// written.
package final class PersistedState<Value: Sendable>: Sendable {
    private let value: Mutex<Value>
    private let writerLock = Mutex(())
    private let path: String?
    /// What the value is, for the 503 message ("the catalog").
    private let what: String
    private let encode: @Sendable (Value) -> [UInt8]

    package init(_ value: Value, path: String?, what: String, encode: @escaping @Sendable (Value) -> [UInt8]) {
        self.value = Mutex(value)
        self.path = path
        self.what = what
        self.encode = encode
    }

    /// Returns what `body` reads from the published value.
    package func read<Result: Sendable>(_ body: (Value) -> Result) -> Result {
        value.withLock { body($0) }
    }

    /// Runs `body` on a copy; when it succeeds, writes the copy durably and
    /// then publishes it.
    package func change<Result>(_ body: (inout Value) throws(APIError) -> Result) throws(APIError) -> Result {
        try writerLock.withLock { _ throws(APIError) -> Result in
            var next = value.withLock { $0 }
            let result = try body(&next)
            if let path {
                do {
                    try DurableFile.replace(path: path, with: encode(next))
                } catch {
                    throw APIError.unavailable("\(what) could not be written to disk: \(error)")
                }
            }
            value.withLock { $0 = next }
            return result
        }
    }
}
