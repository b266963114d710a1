import CZstd
import RoostStorage

/// One batch of the group log (spec §13, decision 0077): the records one
/// group commit of the leader appended, at consecutive LSNs, with the epoch
/// of that leader. It is the value of one etcd key, `g0/log/<first LSN>`.
///
/// Encoding (little-endian):
///
///     magic "RGLB" (4) | format version (1) | flags (1, bit 0: zstd) | reserved 0 (2)
///     epoch (8) | first LSN (8) | record count (4) | plain payload bytes (4) | stored payload bytes (4)
///     payload (stored payload bytes) | CRC-32C of everything before it (4)
///
/// The plain payload is each record as a 4-byte length and its bytes. It is
/// stored zstd-compressed (level 1) only when it has at least
/// `compressionPlainBytesMin` bytes and that saves at least
/// `compressionSavingsPercentMin` percent. `decode` checks every field and
/// bound and throws a `ReplicationBatchError` naming what is wrong; it never
/// traps on bad bytes.
package struct ReplicationBatch: Hashable, Sendable {
    /// The largest encoded batch: under etcd's 1.5 MiB `--max-request-bytes`
    /// with room for the key and the transaction around it.
    package static let encodedBytesMax = 1_400_000
    /// The most records in one batch.
    package static let recordsPerBatchMax = 65_536
    /// Compression is kept only when it saves at least this share of the payload.
    package static let compressionSavingsPercentMin = 10
    /// A smaller payload is stored plain: zstd's frame and context cost more than it could save.
    package static let compressionPlainBytesMin = 512
    /// The zstd level: fast, as the snapshot writer's.
    static let compressionLevel: Int32 = 1

    static let magic: [UInt8] = Array("RGLB".utf8)
    static let formatVersion: UInt8 = 1
    static let flagZstd: UInt8 = 1
    static let headerBytes = 36
    static let trailerBytes = 4
    static let recordLengthBytes = 4
    /// The largest plain payload: what fits when it is stored uncompressed.
    package static let plainPayloadBytesMax = encodedBytesMax - headerBytes - trailerBytes
    /// The largest record: alone in a batch, uncompressed.
    package static let recordBytesMax = plainPayloadBytesMax - recordLengthBytes

    /// The epoch of the leader that appended the batch.
    package let epoch: ClusterEpoch
    /// The LSN of the first record.
    package let firstLSN: LogSequenceNumber
    /// The records, opaque, at `firstLSN`, `firstLSN + 1`, ...
    package let records: [[UInt8]]

    package init(epoch: ClusterEpoch, firstLSN: LogSequenceNumber, records: [[UInt8]]) {
        precondition(firstLSN >= LogSequenceNumber.first, "a batch starts at LSN 1 or later: \(firstLSN)")
        precondition(!records.isEmpty, "a batch holds at least one record")
        precondition(
            records.count <= Self.recordsPerBatchMax, "\(records.count) records > \(Self.recordsPerBatchMax)")
        precondition(
            Self.plainPayloadBytes(records) <= Self.plainPayloadBytesMax,
            "records of \(Self.plainPayloadBytes(records)) bytes > \(Self.plainPayloadBytesMax): split them")
        self.epoch = epoch
        self.firstLSN = firstLSN
        self.records = records
    }

    /// The LSN of the last record.
    package var lastLSN: LogSequenceNumber { firstLSN.advanced(by: UInt64(records.count - 1)) }

    /// The LSN after the last record.
    package var nextLSN: LogSequenceNumber { firstLSN.advanced(by: UInt64(records.count)) }

    /// Returns the bytes of the plain payload of `records`. O(records).
    static func plainPayloadBytes(_ records: [[UInt8]]) -> Int {
        records.reduce(0) { $0 + recordLengthBytes + $1.count }
    }

    // MARK: - Splitting

    /// Returns `records` as consecutive batches from `firstLSN`, each under
    /// `encodedBytesMax` and `recordsPerBatchMax` whatever compression does.
    /// Every record must be at most `recordBytesMax` (the engine's record
    /// limit is far below). O(records).
    package static func split(records: [[UInt8]], epoch: ClusterEpoch, firstLSN: LogSequenceNumber)
        -> [ReplicationBatch]
    {
        var batches: [ReplicationBatch] = []
        var pending: [[UInt8]] = []
        var pendingBytes = 0
        var next = firstLSN
        for record in records {
            precondition(record.count <= recordBytesMax, "a record of \(record.count) bytes > \(recordBytesMax)")
            let bytes = recordLengthBytes + record.count
            if !pending.isEmpty, pendingBytes + bytes > plainPayloadBytesMax || pending.count == recordsPerBatchMax {
                let batch = ReplicationBatch(epoch: epoch, firstLSN: next, records: pending)
                batches.append(batch)
                next = batch.nextLSN
                pending = []
                pendingBytes = 0
            }
            pending.append(record)
            pendingBytes += bytes
        }
        if !pending.isEmpty { batches.append(ReplicationBatch(epoch: epoch, firstLSN: next, records: pending)) }
        return batches
    }

    // MARK: - Encoding

    /// Returns the batch's bytes (at most `encodedBytesMax`). O(payload).
    package func encoded() -> [UInt8] {
        var plain: [UInt8] = []
        plain.reserveCapacity(Self.plainPayloadBytes(records))
        for record in records {
            Bytes.append(UInt32(record.count), to: &plain)
            plain.append(contentsOf: record)
        }
        var flags: UInt8 = 0
        var stored = plain
        if let compressed = Self.compress(plain),
            compressed.count * 100 <= plain.count * (100 - Self.compressionSavingsPercentMin)
        {
            flags |= Self.flagZstd
            stored = compressed
        }
        var bytes = Self.magic
        bytes.reserveCapacity(Self.headerBytes + stored.count + Self.trailerBytes)
        bytes.append(Self.formatVersion)
        bytes.append(flags)
        Bytes.append(UInt16(0), to: &bytes)
        Bytes.append(UInt64(epoch.rawValue), to: &bytes)
        Bytes.append(firstLSN.rawValue, to: &bytes)
        Bytes.append(UInt32(records.count), to: &bytes)
        Bytes.append(UInt32(plain.count), to: &bytes)
        Bytes.append(UInt32(stored.count), to: &bytes)
        precondition(bytes.count == Self.headerBytes, "header of \(bytes.count) bytes")
        bytes.append(contentsOf: stored)
        Bytes.append(CRC32C.checksum(bytes), to: &bytes)
        precondition(bytes.count <= Self.encodedBytesMax, "batch of \(bytes.count) bytes > \(Self.encodedBytesMax)")
        return bytes
    }

    /// Returns `plain` zstd-compressed, or nil when zstd fails (it is then stored plain).
    private static func compress(_ plain: [UInt8]) -> [UInt8]? {
        guard plain.count >= compressionPlainBytesMin else { return nil }
        var output = [UInt8](repeating: 0, count: ZSTD_compressBound(plain.count))
        let written = output.withUnsafeMutableBytes { target in
            plain.withUnsafeBytes { source in
                ZSTD_compress(target.baseAddress, target.count, source.baseAddress, source.count, compressionLevel)
            }
        }
        guard ZSTD_isError(written) == 0 else { return nil }
        output.removeSubrange(written...)
        return output
    }

    // MARK: - Decoding

    /// Returns the batch `bytes` encode, or throws what is wrong with them. O(bytes).
    package static func decode(_ bytes: [UInt8]) throws(ReplicationBatchError) -> ReplicationBatch {
        guard bytes.count >= headerBytes + trailerBytes else { throw .truncated(bytes: bytes.count) }
        guard bytes.count <= encodedBytesMax else { throw .tooLarge(bytes: bytes.count) }
        guard bytes.starts(with: magic) else { throw .badMagic }
        let all = bytes[...]
        let storedCRC = Bytes.read(UInt32.self, all, at: bytes.count - trailerBytes)
        let computedCRC = CRC32C.checksum(all[..<(bytes.count - trailerBytes)])
        guard storedCRC == computedCRC else { throw .checksumMismatch(stored: storedCRC, computed: computedCRC) }
        guard bytes[4] == formatVersion else { throw .unsupportedVersion(bytes[4]) }
        let flags = bytes[5]
        guard flags & ~flagZstd == 0 else { throw .unknownFlags(flags) }
        guard Bytes.read(UInt16.self, all, at: 6) == 0 else { throw .reservedNotZero }
        let epochRaw = Bytes.read(UInt64.self, all, at: 8)
        guard epochRaw > 0, epochRaw <= UInt64(Int64.max) else { throw .epochOutOfRange(epochRaw) }
        let firstRaw = Bytes.read(UInt64.self, all, at: 16)
        let count = Int(Bytes.read(UInt32.self, all, at: 24))
        let plainCount = Int(Bytes.read(UInt32.self, all, at: 28))
        let storedCount = Int(Bytes.read(UInt32.self, all, at: 32))
        guard count >= 1, count <= recordsPerBatchMax else { throw .recordCountOutOfRange(count) }
        guard firstRaw >= 1, firstRaw <= UInt64.max - UInt64(count) else { throw .firstLSNOutOfRange(firstRaw) }
        guard storedCount == bytes.count - headerBytes - trailerBytes else {
            throw .payloadLengthMismatch(declared: storedCount, actual: bytes.count - headerBytes - trailerBytes)
        }
        guard plainCount <= plainPayloadBytesMax else { throw .plainPayloadTooLarge(bytes: plainCount) }
        let stored = all[headerBytes..<(headerBytes + storedCount)]
        let plain: ArraySlice<UInt8>
        if flags & flagZstd != 0 {
            plain = try decompress(stored, plainBytes: plainCount)[...]
        } else {
            guard plainCount == storedCount else {
                throw .payloadLengthMismatch(declared: plainCount, actual: storedCount)
            }
            plain = stored
        }
        var records: [[UInt8]] = []
        records.reserveCapacity(count)
        var offset = plain.startIndex
        while offset < plain.endIndex {
            guard records.count < count else { throw .recordCountMismatch(declared: count, found: records.count + 1) }
            guard plain.endIndex - offset >= recordLengthBytes else {
                throw .recordOverrunsPayload(index: records.count)
            }
            let length = Int(Bytes.read(UInt32.self, plain, at: offset))
            offset += recordLengthBytes
            guard length <= plain.endIndex - offset else { throw .recordOverrunsPayload(index: records.count) }
            records.append(Array(plain[offset..<(offset + length)]))
            offset += length
        }
        guard records.count == count else { throw .recordCountMismatch(declared: count, found: records.count) }
        return ReplicationBatch(
            epoch: ClusterEpoch(Int64(epochRaw)), firstLSN: LogSequenceNumber(firstRaw), records: records)
    }

    /// Returns the zstd frame `stored` decompressed to exactly `plainBytes` bytes.
    private static func decompress(_ stored: ArraySlice<UInt8>, plainBytes: Int) throws(ReplicationBatchError)
        -> [UInt8]
    {
        var output = [UInt8](repeating: 0, count: plainBytes)
        let written = output.withUnsafeMutableBytes { target in
            stored.withUnsafeBytes { source in
                ZSTD_decompress(target.baseAddress, target.count, source.baseAddress, source.count)
            }
        }
        guard ZSTD_isError(written) == 0 else {
            throw .decompressionFailed(String(cString: ZSTD_getErrorName(written)))
        }
        guard written == plainBytes else { throw .payloadLengthMismatch(declared: plainBytes, actual: written) }
        return output
    }

    // MARK: - Epoch records

    /// "REPO": the storage layer's `ClusterMark`, which recovery and a
    /// follower's applier pass over.
    static let epochRecordMagic: [UInt8] = ClusterMark.magic

    /// Returns the record a new leader appends first in its epoch (spec
    /// §13.5): "REPO", the epoch (8 bytes), the node id's length (1) and the node id.
    package static func epochRecord(epoch: ClusterEpoch, node: NodeID) -> [UInt8] {
        var bytes = epochRecordMagic
        Bytes.append(UInt64(epoch.rawValue), to: &bytes)
        let name = Array(node.rawValue.utf8)
        bytes.append(UInt8(name.count))
        bytes.append(contentsOf: name)
        return bytes
    }

    /// Returns the epoch and node of an epoch record, or nil when `record` is not one.
    package static func parseEpochRecord(_ record: [UInt8]) -> (epoch: ClusterEpoch, node: NodeID)? {
        let fixed = epochRecordMagic.count + 9
        guard record.count > fixed, record.starts(with: epochRecordMagic) else { return nil }
        let epochRaw = Bytes.read(UInt64.self, record[...], at: epochRecordMagic.count)
        guard epochRaw > 0, epochRaw <= UInt64(Int64.max), Int(record[fixed - 1]) == record.count - fixed,
            let node = NodeID(String(decoding: record[fixed...], as: UTF8.self))
        else { return nil }
        return (ClusterEpoch(Int64(epochRaw)), node)
    }
}

/// What is wrong with bytes that should be a `ReplicationBatch`.
package enum ReplicationBatchError: Error, Hashable, Sendable, CustomStringConvertible {
    case truncated(bytes: Int)
    case tooLarge(bytes: Int)
    case badMagic
    case checksumMismatch(stored: UInt32, computed: UInt32)
    case unsupportedVersion(UInt8)
    case unknownFlags(UInt8)
    case reservedNotZero
    case epochOutOfRange(UInt64)
    case firstLSNOutOfRange(UInt64)
    case recordCountOutOfRange(Int)
    case payloadLengthMismatch(declared: Int, actual: Int)
    case plainPayloadTooLarge(bytes: Int)
    case decompressionFailed(String)
    case recordOverrunsPayload(index: Int)
    case recordCountMismatch(declared: Int, found: Int)

    package var description: String {
        switch self {
        case .truncated(let bytes): "batch truncated: \(bytes) bytes, shorter than header and checksum"
        case .tooLarge(let bytes): "batch of \(bytes) bytes > \(ReplicationBatch.encodedBytesMax)"
        case .badMagic: "not a group-log batch (magic)"
        case .checksumMismatch(let stored, let computed): "batch checksum \(stored) != computed \(computed)"
        case .unsupportedVersion(let version): "batch format version \(version) unsupported"
        case .unknownFlags(let flags): "batch flags \(flags) unknown"
        case .reservedNotZero: "batch reserved field not zero"
        case .epochOutOfRange(let epoch): "batch epoch \(epoch) out of range"
        case .firstLSNOutOfRange(let lsn): "batch first LSN \(lsn) out of range"
        case .recordCountOutOfRange(let count):
            "batch record count \(count) out of 1...\(ReplicationBatch.recordsPerBatchMax)"
        case .payloadLengthMismatch(let declared, let actual): "batch payload of \(actual) bytes, declared \(declared)"
        case .plainPayloadTooLarge(let bytes): "batch plain payload of \(bytes) bytes too large"
        case .decompressionFailed(let reason): "batch payload: zstd: \(reason)"
        case .recordOverrunsPayload(let index): "batch record \(index) overruns the payload"
        case .recordCountMismatch(let declared, let found): "batch declares \(declared) records, holds \(found)"
        }
    }
}
