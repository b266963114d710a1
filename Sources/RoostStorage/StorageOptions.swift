import RoostPlatform
import RoostTelemetry

/// Limits and knobs of the storage layer, all in one place.
package struct StorageOptions: Sendable {
    /// Segments are preallocated to this size and rolled when the next record does not fit.
    package var segmentBytesMax: Int = 64 << 20
    /// The largest record payload accepted by `append`.
    package var recordPayloadBytesMax: Int = 1 << 20
    /// The everysec policy syncs data written this long ago at the latest.
    package var syncIntervalMilliseconds: Int = 1000
    /// After a group commit's fdatasync, the log-end file records the durable
    /// end at most once per this interval (and at every roll, open and clean
    /// close). Records synced within it before a crash are the only ones whose
    /// later loss (a zeroed tail) cannot be told from "never written"
    /// (docs/decisions/0009-wal-damage-log-end.md).
    package var logEndIntervalMilliseconds: Int = 1000
    /// A failed log says so on stderr at most once per this interval.
    package var errorLogIntervalMilliseconds: Int = 10_000
    /// The largest segment file recovery reads (segments written with a larger
    /// `segmentBytesMax` earlier must still load).
    package var segmentReadBytesMax: Int = 1 << 30
    /// Whether segments are really written with zeros before records go into
    /// them (docs/storage.md "Segment preparation"); nil: as the file system
    /// prefers (`prefersZeroFilledSegments`: yes for the real one).
    package var zeroFillSegments: Bool?
    /// Where file I/O goes: the real file system, or a fault-injecting one in tests.
    package var fileSystem: any StorageFileSystem = PosixFileSystem()
    /// Where log lines go: by default the process's logger, one JSON object a
    /// line on stderr (a memory logger in tests and tools that keep them).
    package var logger: Logger = .standard
    /// The time the log's I/O thread schedules by (the everysec sync, the
    /// log-end mark, the error-log interval): the machine's monotonic clock,
    /// or a test's manual one (moved with `WriteAheadLog.clockMoved()`).
    /// Durations it measures for statistics (waits, fdatasync) stay real.
    package var clock: any MonotonicClock = SystemMonotonicClock()

    package init() {}

    /// Whether segments are zero-filled, `zeroFillSegments` or the file system's preference.
    var zeroFillsSegments: Bool { zeroFillSegments ?? fileSystem.prefersZeroFilledSegments }

    /// Checks the relations between limits; called once by `WriteAheadLog.open`.
    func validate() throws(StorageError) {
        let smallest = SegmentFormat.headerBytes + SegmentFormat.recordBytes(payloadBytes: recordPayloadBytesMax)
        guard segmentBytesMax >= smallest, segmentBytesMax % 8 == 0, segmentBytesMax <= Int(UInt32.max) else {
            throw .invalidUse(
                "segmentBytesMax \(segmentBytesMax) must be a multiple of 8, at least \(smallest) and at most 2^32 - 1"
                    + " (the segment header holds it in 32 bits)")
        }
        guard recordPayloadBytesMax >= 0, recordPayloadBytesMax <= Int(UInt32.max) else {
            throw .invalidUse("recordPayloadBytesMax \(recordPayloadBytesMax) out of range")
        }
        guard syncIntervalMilliseconds > 0 else { throw .invalidUse("syncIntervalMilliseconds must be positive") }
        guard logEndIntervalMilliseconds > 0 else { throw .invalidUse("logEndIntervalMilliseconds must be positive") }
        guard segmentReadBytesMax >= segmentBytesMax else {
            throw .invalidUse("segmentReadBytesMax must be at least segmentBytesMax")
        }
    }
}
