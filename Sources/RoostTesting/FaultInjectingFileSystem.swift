import Glibc
import RoostPlatform
import RoostStorage
import Synchronization

/// An in-memory `StorageFileSystem` for tests that fails chosen calls and
/// simulates power loss, in the manner of SQLite's crash VFS and LevelDB's
/// fault-injection env.
///
/// Per file it keeps what a reader sees now (`current`), what is on the disk
/// (`durable`) and the writes not yet synced. `syncData` moves the unsynced
/// writes to the disk; a failed `syncData` drops them for good (the kernel
/// may have marked the pages clean: PostgreSQL 2018), so a later successful
/// sync does not bring them back. Names are durable only after
/// `syncDirectory`. `simulateCrash` replaces every file by what the disk
/// holds (optionally with a torn prefix of the unsynced writes), forgets
/// unsynced names, and makes every handle opened before it fail with EIO.
/// Directories themselves are always durable.
package final class FaultInjectingFileSystem: StorageFileSystem {
    /// The calls that can be counted and failed.
    package enum Operation: String, Sendable, Hashable, CaseIterable {
        case open, write, syncData, syncDirectory, rename, remove, preallocate, truncate
        /// `readWhole`: a whole file read at once (segments, snapshots, small files).
        case readWhole
    }

    /// What survives of the writes that were not synced when the power went.
    package enum CrashMode: Sendable {
        /// Nothing unsynced survives.
        case dropUnsynced
        /// Per file, a random prefix of the unsynced writes survives in order,
        /// the last one possibly torn at any byte.
        case keepUnsyncedPrefix(seed: UInt64)
    }

    /// Fail the `nth` call (1-based, counted from when the fault is added) of
    /// `operation` on a path containing `pathContains` with `errno`, and when
    /// `sticky`, every later one as well.
    package struct Fault: Sendable {
        package var operation: Operation
        package var nth: Int
        package var errno: Int32
        package var pathContains: String
        package var sticky: Bool
        var seen = 0

        package init(operation: Operation, nth: Int, errno: Int32, pathContains: String = "", sticky: Bool = false) {
            self.operation = operation
            self.nth = nth
            self.errno = errno
            self.pathContains = pathContains
            self.sticky = sticky
        }
    }

    enum Change {
        case write(offset: Int, bytes: [UInt8])
        case resize(Int)

        func apply(to bytes: inout [UInt8]) {
            switch self {
            case .write(let offset, let data):
                if bytes.count < offset + data.count {
                    bytes += [UInt8](repeating: 0, count: offset + data.count - bytes.count)
                }
                bytes.replaceSubrange(offset..<(offset + data.count), with: data)
            case .resize(let size):
                if size < bytes.count {
                    bytes.removeLast(bytes.count - size)
                } else {
                    bytes += [UInt8](repeating: 0, count: size - bytes.count)
                }
            }
        }
    }

    /// One file's contents. Only touched with the file system's mutex held.
    final class Node: @unchecked Sendable {
        var current: [UInt8] = []
        var durable: [UInt8] = []
        var unsynced: [Change] = []
    }

    struct State {
        var files: [String: Node] = [:]
        var durableFiles: [String: Node] = [:]
        var directories: Set<String> = ["/"]
        var counts: [Operation: Int] = [:]
        var faults: [Fault] = []
        var generation = 0
    }

    let state = Mutex(State())
    /// Added to every `syncData`, so that group commit batches as on a real disk.
    package let syncDelayMicroseconds: UInt32

    package init(syncDelayMicroseconds: UInt32 = 0) {
        self.syncDelayMicroseconds = syncDelayMicroseconds
    }

    /// Adds a fault rule.
    package func inject(_ fault: Fault) {
        state.withLock { $0.faults.append(fault) }
    }

    /// Removes every fault rule.
    package func clearFaults() {
        state.withLock { $0.faults.removeAll() }
    }

    /// Returns how many calls of `operation` were made (failed ones included).
    package func count(_ operation: Operation) -> Int {
        state.withLock { $0.counts[operation] ?? 0 }
    }

    /// Power loss: see the type's summary. Handles opened before fail afterwards.
    package func simulateCrash(_ mode: CrashMode) {
        state.withLock { state in
            var random = SeededRandom(
                seed: {
                    if case .keepUnsyncedPrefix(let seed) = mode { return seed }
                    return 0
                }())
            state.generation += 1
            var survivors: [String: Node] = [:]
            for (path, node) in state.durableFiles.sorted(by: { $0.key < $1.key }) {
                var contents = node.durable
                if case .keepUnsyncedPrefix = mode, !node.unsynced.isEmpty {
                    let kept = Int(random.next() % UInt64(node.unsynced.count + 1))
                    for change in node.unsynced.prefix(kept) { change.apply(to: &contents) }
                    if kept < node.unsynced.count, case .write(let offset, let bytes) = node.unsynced[kept] {
                        let torn = Int(random.next() % UInt64(bytes.count + 1))
                        Change.write(offset: offset, bytes: Array(bytes.prefix(torn))).apply(to: &contents)
                    }
                }
                let survivor = Node()
                survivor.current = contents
                survivor.durable = contents
                survivors[path] = survivor
            }
            state.files = survivors
            state.durableFiles = survivors
        }
    }

    /// Returns the bytes a reader sees now, or nil.
    package func contents(_ path: String) -> [UInt8]? {
        state.withLock { $0.files[path]?.current }
    }

    /// Replaces a file's contents as if written and synced (to plant damage).
    package func overwrite(_ path: String, with bytes: [UInt8]) {
        state.withLock { state in
            let node = state.files[path] ?? Node()
            node.current = bytes
            node.durable = bytes
            node.unsynced = []
            state.files[path] = node
            state.durableFiles[path] = node
        }
    }

    /// Counts the call and throws when a fault rule matches. Lock held.
    static func check(_ state: inout State, _ operation: Operation, _ path: String) throws(SystemCallError) {
        state.counts[operation, default: 0] += 1
        for index in state.faults.indices where state.faults[index].operation == operation {
            let fault = state.faults[index]
            guard fault.pathContains.isEmpty || path.contains(fault.pathContains) else { continue }
            state.faults[index].seen += 1
            let seen = state.faults[index].seen
            if seen == fault.nth || (fault.sticky && seen > fault.nth) {
                throw SystemCallError(call: operation.rawValue, subject: path, errno: fault.errno)
            }
        }
    }

    static func parent(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    package func open(_ path: String, create: Bool) throws(SystemCallError) -> any StorageFile {
        try state.withLock { state throws(SystemCallError) -> any StorageFile in
            try Self.check(&state, .open, path)
            if let node = state.files[path] {
                return FaultFile(fileSystem: self, node: node, path: path, generation: state.generation)
            }
            guard create else { throw SystemCallError(call: "open", subject: path, errno: ENOENT) }
            guard state.directories.contains(Self.parent(path)) else {
                throw SystemCallError(call: "open", subject: path, errno: ENOENT)
            }
            let node = Node()
            state.files[path] = node
            return FaultFile(fileSystem: self, node: node, path: path, generation: state.generation)
        }
    }

    package func readWhole(_ path: String, limitBytes: Int) throws(SystemCallError) -> [UInt8]? {
        try state.withLock { state throws(SystemCallError) -> [UInt8]? in
            try Self.check(&state, .readWhole, path)
            guard let node = state.files[path] else { return nil }
            if node.current.count > limitBytes { throw SystemCallError(call: "read", subject: path, errno: EFBIG) }
            return node.current
        }
    }

    package func list(_ directory: String) throws(SystemCallError) -> [String] {
        try state.withLock { state throws(SystemCallError) -> [String] in
            guard state.directories.contains(directory) else {
                throw SystemCallError(call: "opendir", subject: directory, errno: ENOENT)
            }
            let names = (Array(state.files.keys) + Array(state.directories))
                .filter { $0 != directory && Self.parent($0) == directory }
                .map { String($0[$0.index(after: $0.lastIndex(of: "/")!)...]) }
            return names.sorted()
        }
    }

    package func createDirectory(_ directory: String) throws(SystemCallError) {
        state.withLock { state in
            var path = directory
            while path != "/" && path != "." && !state.directories.contains(path) {
                state.directories.insert(path)
                path = Self.parent(path)
            }
        }
    }

    package func rename(_ source: String, to destination: String) throws(SystemCallError) {
        try state.withLock { state throws(SystemCallError) in
            try Self.check(&state, .rename, destination)
            guard let node = state.files.removeValue(forKey: source) else {
                throw SystemCallError(call: "rename", subject: source, errno: ENOENT)
            }
            state.files[destination] = node
        }
    }

    package func remove(_ path: String) throws(SystemCallError) {
        try state.withLock { state throws(SystemCallError) in
            try Self.check(&state, .remove, path)
            guard state.files.removeValue(forKey: path) != nil else {
                throw SystemCallError(call: "unlink", subject: path, errno: ENOENT)
            }
        }
    }

    package func syncDirectory(_ directory: String) throws(SystemCallError) {
        try state.withLock { state throws(SystemCallError) in
            try Self.check(&state, .syncDirectory, directory)
            for path in state.durableFiles.keys where Self.parent(path) == directory {
                state.durableFiles[path] = nil
            }
            for (path, node) in state.files where Self.parent(path) == directory {
                state.durableFiles[path] = node
            }
        }
    }

    /// Runs `body` on `node` with the lock held, after the fault check,
    /// failing with EIO when the handle predates a simulated crash.
    func withNode<Result>(
        _ file: FaultFile, _ operation: Operation?, _ body: (Node) throws(SystemCallError) -> Result
    ) throws(SystemCallError) -> Result {
        try state.withLock { state throws(SystemCallError) -> Result in
            guard file.generation == state.generation else {
                throw SystemCallError(call: operation?.rawValue ?? "read", subject: file.path, errno: EIO)
            }
            if let operation { try Self.check(&state, operation, file.path) }
            return try body(file.node)
        }
    }
}

/// A handle on a `FaultInjectingFileSystem` file.
final class FaultFile: StorageFile {
    let fileSystem: FaultInjectingFileSystem
    let node: FaultInjectingFileSystem.Node
    let path: String
    let generation: Int

    init(fileSystem: FaultInjectingFileSystem, node: FaultInjectingFileSystem.Node, path: String, generation: Int) {
        self.fileSystem = fileSystem
        self.node = node
        self.path = path
        self.generation = generation
    }

    func write(_ bytes: ArraySlice<UInt8>, at offset: Int) throws(SystemCallError) {
        try fileSystem.withNode(self, .write) { node in
            let change = FaultInjectingFileSystem.Change.write(offset: offset, bytes: Array(bytes))
            change.apply(to: &node.current)
            node.unsynced.append(change)
        }
    }

    func read(at offset: Int, count: Int) throws(SystemCallError) -> [UInt8] {
        try fileSystem.withNode(self, nil) { node in
            guard offset < node.current.count else { return [] }
            return Array(node.current[offset..<min(node.current.count, offset + count)])
        }
    }

    func syncData() throws(SystemCallError) {
        if fileSystem.syncDelayMicroseconds > 0 { usleep(fileSystem.syncDelayMicroseconds) }
        do {
            try fileSystem.withNode(self, .syncData) { node in
                for change in node.unsynced { change.apply(to: &node.durable) }
                node.unsynced.removeAll()
            }
        } catch {
            // The kernel may have dropped the dirty pages: these writes never reach the disk.
            try? fileSystem.withNode(self, nil) { node in node.unsynced.removeAll() }
            throw error
        }
    }

    func preallocate(size: Int) throws(SystemCallError) {
        try fileSystem.withNode(self, .preallocate) { node in
            guard node.current.count < size else { return }
            let change = FaultInjectingFileSystem.Change.resize(size)
            change.apply(to: &node.current)
            node.unsynced.append(change)
        }
    }

    func truncate(size: Int) throws(SystemCallError) {
        try fileSystem.withNode(self, .truncate) { node in
            let change = FaultInjectingFileSystem.Change.resize(size)
            change.apply(to: &node.current)
            node.unsynced.append(change)
        }
    }

    func size() throws(SystemCallError) -> Int {
        try fileSystem.withNode(self, nil) { node in node.current.count }
    }

    func close() {}
}
