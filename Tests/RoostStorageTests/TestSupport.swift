import Glibc
import RoostPlatform
import RoostTelemetry
import RoostTesting
import Synchronization
import Testing

@testable import RoostStorage

/// Log lines collected from a log under test (JSON, one object a line).
final class LogLines: Sendable {
    let logger = Logger(output: .memory)

    var all: [String] { logger.lines }

}

/// Options on an in-memory file system with small segments.
func testOptions(
    _ fileSystem: any StorageFileSystem, segmentBytesMax: Int = 4096, payloadBytesMax: Int = 512,
    log: LogLines = LogLines()
) -> StorageOptions {
    var options = StorageOptions()
    options.fileSystem = fileSystem
    options.segmentBytesMax = segmentBytesMax
    options.recordPayloadBytesMax = payloadBytesMax
    options.logger = log.logger
    return options
}

let dataDirectory = "/data"

/// Appends and waits for the completion.
@discardableResult
func appendAndWait(_ log: WriteAheadLog, _ payloads: [[UInt8]]) async -> Result<LogSequenceNumber, StorageError> {
    await withCheckedContinuation { continuation in
        do throws(StorageError) {
            try log.append(payloads) { result in continuation.resume(returning: result) }
        } catch {
            continuation.resume(returning: .failure(error))
        }
    }
}

/// Returns `count` payloads of random length (0...maxBytes) from `random`.
func randomPayloads(_ count: Int, maxBytes: Int = 100, _ random: inout SeededRandom) -> [[UInt8]] {
    (0..<count).map { _ in
        let length = Int(random.next() % UInt64(maxBytes + 1))
        return (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }
}

/// Returns every record recovery yields: snapshot records and replayed log records.
func recoveredRecords(_ state: RecoveredState) throws -> (snapshot: [[UInt8]], log: [LogRecord]) {
    var snapshot: [[UInt8]] = []
    if let reader = state.snapshot {
        while let record = try reader.next() { snapshot.append(record) }
    }
    var log: [LogRecord] = []
    try state.replay { log.append($0) }
    return (snapshot, log)
}

/// Opens, reads everything back, closes.
func reopenAndRead(
    _ options: StorageOptions, policy: FsyncPolicy = .always
) throws -> (snapshot: [[UInt8]], log: [LogRecord]) {
    let (log, state) = try WriteAheadLog.open(directory: dataDirectory, policy: policy, options: options)
    defer { log.close() }
    return try recoveredRecords(state)
}

/// A seed from the environment (ROOST_TEST_SEED) or a fixed default; tests print it on failure.
func testSeed(_ fallback: UInt64) -> UInt64 {
    if let text = getenv("ROOST_TEST_SEED"), let value = UInt64(String(cString: text)) { return value }
    return fallback
}

/// Returns the path of the segment holding `lsn` under the test directory.
func segmentPath(_ first: UInt64) -> String {
    "\(dataDirectory)/wal/" + SegmentFormat.fileName(firstLSN: LogSequenceNumber(first))
}

/// A value shared between test tasks, behind a lock.
final class Shared<Value: Sendable>: Sendable {
    let storage: Mutex<Value>

    init(_ value: Value) { storage = Mutex(value) }

    var value: Value { storage.withLock { $0 } }

    func update(_ body: (inout Value) -> Void) { storage.withLock { body(&$0) } }
}
