import RoostPlatform
import RoostTelemetry
import Synchronization

/// Prepares the next segment file ahead of need: `wal/prepared.tmp`, really
/// written with zeros up to `segmentBytesMax` and fdatasynced, on a thread of
/// its own. An fdatasync after a write into a preallocated (`posix_fallocate`)
/// region must also commit the conversion of the unwritten extents to the
/// file system journal; into blocks that already hold written zeros it only
/// flushes the data (about 100 µs instead of 155 µs here, and no wait for the
/// journal thread, which matters when the cores are busy).
///
/// The file is only ever a candidate: nothing refers to it until the I/O
/// thread rolls into it (header, fdatasync, rename to `<LSN>.seg`, fsync of
/// `wal/`), recovery reads only `.seg` names, and `WriteAheadLog.open`
/// removes a leftover. A failure here only costs speed: it is logged once and
/// segments are preallocated as before; the log's own writes and syncs, on
/// their own descriptor, still report every error of their file.
final class SegmentPreparer: Sendable {
    /// The name of the prepared file in `wal/`; never a segment name.
    static let fileName = "prepared.tmp"
    /// Zeros are written in pieces of this size, and synced every `syncEveryBytes`,
    /// so that one preparation never queues a long flush in front of the log's.
    static let writeBytes = 1 << 20
    static let syncEveryBytes = 8 << 20

    struct State {
        /// A prepared, synced file nobody has taken yet.
        var ready: (any StorageFile)?
        var wanted = false
        var stopping = false
        var failed = false
    }

    let path: String
    let fileSystem: any StorageFileSystem
    let segmentBytes: Int
    let logger: Logger
    let state = ConditionLock(State())
    let thread = Mutex<PlatformThread?>(nil)

    init(layout: StorageLayout, options: StorageOptions) {
        path = layout.fileSystem.join(layout.walDirectory, SegmentPreparer.fileName)
        fileSystem = layout.fileSystem
        segmentBytes = options.segmentBytesMax
        logger = options.logger
        let started = startThread(name: "roost-wal-prep") { [self] in self.run() }
        thread.withLock { $0 = started }
    }

    /// Writes `bytes` zero bytes to a new file at `path` (replacing any) and
    /// syncs it; returns the open file, or nil when `stop` said to give up.
    static func prepare(
        path: String, fileSystem: any StorageFileSystem, bytes: Int, stop: () -> Bool = { false }
    ) throws(SystemCallError) -> (any StorageFile)? {
        let file = try fileSystem.open(path, create: true)
        do {
            try file.truncate(size: 0)
            let zeros = [UInt8](repeating: 0, count: min(writeBytes, bytes))
            var offset = 0
            var unsynced = 0
            while offset < bytes {
                if stop() {
                    file.close()
                    return nil
                }
                let count = min(zeros.count, bytes - offset)
                try file.write(zeros[0..<count], at: offset)
                offset += count
                unsynced += count
                if unsynced >= syncEveryBytes {
                    try file.syncData()
                    unsynced = 0
                }
            }
            try file.syncData()
            return file
        } catch {
            file.close()
            throw error
        }
    }

    /// Asks for a file to be prepared (the I/O thread calls it once the open
    /// segment is half full). Cheap when one is ready or on its way.
    func request() {
        state.withLockSignalling { $0.wanted = true }
    }

    /// Returns the prepared file, if one is ready, and forgets it.
    func take() -> (any StorageFile)? {
        state.withLock { state in
            defer { state.ready = nil }
            return state.ready
        }
    }

    /// Stops the thread (abandoning a preparation in progress) and removes
    /// the file. Idempotent.
    func stop() {
        state.withLockSignalling { $0.stopping = true }
        let running = thread.withLock { current -> PlatformThread? in
            defer { current = nil }
            return current
        }
        running?.join()
        take()?.close()
        // Unused or abandoned: remove it (a leftover is also removed at open).
        if (try? fileSystem.list(StorageLayout.parent(of: path)).contains(SegmentPreparer.fileName)) == true {
            try? fileSystem.remove(path)
        }
    }

    func run() {
        while true {
            let proceed = state.waitFor { state -> (result: Bool?, deadline: UInt64?) in
                if state.stopping { return (false, nil) }
                if state.wanted && state.ready == nil && !state.failed { return (true, nil) }
                return (nil, nil)
            }
            if !proceed { return }
            do {
                let prepared = try SegmentPreparer.prepare(
                    path: path, fileSystem: fileSystem, bytes: segmentBytes,
                    stop: { state.withLock { $0.stopping } })
                state.withLockSignalling { state in
                    state.ready = prepared
                    state.wanted = false
                }
            } catch {
                logger.warning("wal.warning") { line in
                    line.field("wal.warning", "segment-prepare")
                    line.field("wal.detail", "\(error)")
                    line.field("wal.fallback", "preallocate")
                }
                state.withLock { $0.failed = true }
                try? fileSystem.remove(path)
            }
        }
    }
}
