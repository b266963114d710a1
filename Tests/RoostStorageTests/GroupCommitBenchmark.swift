import Glibc
import RoostPlatform
import RoostTesting
import Synchronization
import Testing

@testable import RoostStorage

/// Counts fdatasyncs on the real file system.
final class CountingFileSystem: StorageFileSystem {
    let inner = PosixFileSystem()
    let syncs = Atomic<Int>(0)
    let syncNanoseconds = Atomic<Int>(0)

    func open(_ path: String, create: Bool) throws(SystemCallError) -> any StorageFile {
        CountingFile(inner: try inner.open(path, create: create), owner: self)
    }
    func readWhole(_ path: String, limitBytes: Int) throws(SystemCallError) -> [UInt8]? {
        try inner.readWhole(path, limitBytes: limitBytes)
    }
    func list(_ directory: String) throws(SystemCallError) -> [String] { try inner.list(directory) }
    func createDirectory(_ directory: String) throws(SystemCallError) { try inner.createDirectory(directory) }
    func rename(_ source: String, to destination: String) throws(SystemCallError) {
        try inner.rename(source, to: destination)
    }
    func remove(_ path: String) throws(SystemCallError) { try inner.remove(path) }
    func syncDirectory(_ directory: String) throws(SystemCallError) { try inner.syncDirectory(directory) }
}

final class CountingFile: StorageFile {
    let inner: any StorageFile
    let owner: CountingFileSystem
    init(inner: any StorageFile, owner: CountingFileSystem) {
        self.inner = inner
        self.owner = owner
    }
    var path: String { inner.path }
    func write(_ bytes: ArraySlice<UInt8>, at offset: Int) throws(SystemCallError) {
        try inner.write(bytes, at: offset)
    }
    func read(at offset: Int, count: Int) throws(SystemCallError) -> [UInt8] {
        try inner.read(at: offset, count: count)
    }
    func syncData() throws(SystemCallError) {
        owner.syncs.add(1, ordering: .relaxed)
        let start = monotonicNanoseconds()
        defer { owner.syncNanoseconds.add(Int(monotonicNanoseconds() - start), ordering: .relaxed) }
        try inner.syncData()
    }
    func preallocate(size: Int) throws(SystemCallError) { try inner.preallocate(size: size) }
    func truncate(size: Int) throws(SystemCallError) { try inner.truncate(size: size) }
    func size() throws(SystemCallError) -> Int { try inner.size() }
    func close() { inner.close() }
}

/// Group commit on this machine's disk: appends per second and records per
/// fdatasync with 1, 8 and 64 closed-loop writers (policy always, 120-byte
/// payloads). Run with ROOST_WAL_BENCH=1; figures go to decisions/0002.
@Test("benchmark: group commit throughput on the real disk", .enabled(if: getenv("ROOST_WAL_BENCH") != nil))
func groupCommitBenchmark() async throws {
    for writers in [1, 8, 64] {
        let directory = try TemporaryDirectory.make(prefix: "roost-wal-bench", under: "/var/tmp")
        defer { TemporaryDirectory.remove(directory) }
        let fileSystem = CountingFileSystem()
        var options = StorageOptions()
        options.fileSystem = fileSystem
        let (log, _) = try WriteAheadLog.open(directory: directory, policy: .always, options: options)
        let syncsBefore = fileSystem.syncs.load(ordering: .relaxed)
        let syncTimeBefore = fileSystem.syncNanoseconds.load(ordering: .relaxed)
        let start = monotonicNanoseconds()
        let deadline = start + 2_000_000_000
        let payload = [UInt8](repeating: 0x5A, count: 120)
        let acknowledged = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<writers {
                group.addTask {
                    var count = 0
                    while monotonicNanoseconds() < deadline {
                        _ = try await appendAndWait(log, [payload]).get()
                        count += 1
                    }
                    return count
                }
            }
            return try await group.reduce(0, +)
        }
        let seconds = Double(monotonicNanoseconds() - start) / 1e9
        let syncs = fileSystem.syncs.load(ordering: .relaxed) - syncsBefore
        log.close()
        print(
            "wal.bench writers=\(writers) appends_per_s=\(Int(Double(acknowledged) / seconds))"
                + " fsyncs=\(syncs) records_per_fsync=\(Double(acknowledged) / Double(max(syncs, 1)))"
                + " fsync_us=\((fileSystem.syncNanoseconds.load(ordering: .relaxed) - syncTimeBefore) / max(syncs, 1) / 1000)"
        )
    }
}
