import Glibc

/// The byte layout of WAL segments and records (docs/storage.md has the tables).
///
/// A segment is `wal/<first LSN, 20 decimal digits>.seg`: a 32-byte header,
/// then records back to back, each starting at a multiple of 8, then zero
/// space up to the preallocated size. All-zero bytes never form a valid record
/// (kind 0 is invalid), so the end of the records is the first all-zero header.
package enum SegmentFormat {
    /// "ROOSTWAL".
    package static let magic: [UInt8] = Array("ROOSTWAL".utf8)
    /// The version this release writes. Version 2 records the segment's
    /// preallocated size in the header (bytes 12..<16), so that a segment
    /// shorter than it was created is damage, not an end of log. Version 1
    /// (an older release: those bytes are zero) is still read; the log never
    /// appends to a version-1 segment again (open rolls to a new one).
    package static let version: UInt32 = 2
    package static let headerBytes = 32
    package static let recordHeaderBytes = 24
    /// The directory, under the storage directory, that holds segments.
    package static let directoryName = "wal"
    package static let fileExtension = ".seg"
    /// A segment being created by a roll without a prepared file: written
    /// whole (header, preallocation, fdatasync), then renamed to its name.
    package static let temporaryName = "segment.tmp"

    /// Returns the file name of the segment whose first record is `firstLSN`.
    package static func fileName(firstLSN: LogSequenceNumber) -> String {
        let digits = String(firstLSN.rawValue)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits + fileExtension
    }

    /// Returns the first LSN a segment file name announces, or nil for other names.
    package static func firstLSN(fileName: String) -> LogSequenceNumber? {
        guard fileName.hasSuffix(fileExtension), fileName.utf8.count == 20 + fileExtension.utf8.count else {
            return nil
        }
        guard let value = UInt64(fileName.dropLast(fileExtension.utf8.count)) else { return nil }
        return LogSequenceNumber(value)
    }

    /// Returns the 32-byte (version 2) header of a segment starting at
    /// `firstLSN` that is `segmentBytes` long from its creation.
    package static func encodeHeader(firstLSN: LogSequenceNumber, segmentBytes: Int) -> [UInt8] {
        precondition(
            segmentBytes >= headerBytes && segmentBytes % 8 == 0 && segmentBytes <= Int(UInt32.max),
            "segment size \(segmentBytes) out of range")
        return encodeHeader(firstLSN: firstLSN, version: version, sizeField: UInt32(segmentBytes))
    }

    /// Returns a version-1 header (an older release's; bytes 12..<16 zero).
    /// For compatibility tests and fixtures: this release never writes one.
    package static func encodeVersion1Header(firstLSN: LogSequenceNumber) -> [UInt8] {
        encodeHeader(firstLSN: firstLSN, version: 1, sizeField: 0)
    }

    static func encodeHeader(firstLSN: LogSequenceNumber, version: UInt32, sizeField: UInt32) -> [UInt8] {
        var bytes = magic
        Bytes.append(version, to: &bytes)
        Bytes.append(sizeField, to: &bytes)
        Bytes.append(firstLSN.rawValue, to: &bytes)
        Bytes.append(CRC32C.checksum(bytes), to: &bytes)
        Bytes.append(UInt32(0), to: &bytes)
        precondition(bytes.count == headerBytes, "segment header is \(bytes.count) bytes")
        return bytes
    }

    /// Returns the number of bytes a record with `payloadBytes` occupies, padding included.
    package static func recordBytes(payloadBytes: Int) -> Int {
        recordHeaderBytes + Bytes.aligned8(payloadBytes)
    }

    /// Appends one framed record (header, payload, zero padding to 8) to `buffer`.
    package static func appendRecord(
        kind: RecordKind, lsn: LogSequenceNumber, payload: [UInt8], to buffer: inout [UInt8]
    ) {
        precondition(buffer.count % 8 == 0, "record would start at unaligned offset \(buffer.count)")
        let total = recordBytes(payloadBytes: payload.count)
        // Written in place, in one pass: the header's fields stored into
        // zeroed room, the payload copied, one checksum over the whole span
        // (its CRC field is still zero, as `recordChecksum` takes it). An
        // `append` a field, array literals for the zeros and slices for the
        // checksum cost ~880 instructions a record (`GroupCommit.append`, two
        // records a registration: 2,427 → 664; issue 25). `GoldenTests` pin the bytes.
        buffer.append(addingCapacity: total) { span in
            span.withUnsafeMutableBufferPointer { room, initialized in
                let record = UnsafeMutableRawBufferPointer(UnsafeMutableBufferPointer(rebasing: room[0..<total]))
                memset(record.baseAddress!, 0, total)
                record.storeBytes(of: UInt32(payload.count).littleEndian, toByteOffset: 0, as: UInt32.self)
                record.storeBytes(of: kind.rawValue, toByteOffset: 4, as: UInt8.self)
                record.storeBytes(of: lsn.rawValue.littleEndian, toByteOffset: 8, as: UInt64.self)
                payload.withUnsafeBytes { bytes in
                    guard let source = bytes.baseAddress else { return }
                    (record.baseAddress! + recordHeaderBytes).copyMemory(from: source, byteCount: bytes.count)
                }
                let crc = CRC32C.checksum(UnsafeRawBufferPointer(record))
                record.storeBytes(of: crc.littleEndian, toByteOffset: 16, as: UInt32.self)
                initialized = total
            }
        }
    }

    /// Returns the CRC-32C of a whole record span (header, payload, padding)
    /// with the CRC field (bytes 16..<20) taken as zero.
    package static func recordChecksum(_ record: ArraySlice<UInt8>) -> UInt32 {
        let base = record.startIndex
        var crc = CRC32C.checksum(record[base..<(base + 16)])
        crc = CRC32C.checksum([0, 0, 0, 0], continuing: crc)
        return CRC32C.checksum(record[(base + 20)...], continuing: crc)
    }
}

/// What a record holds. Kind 0 is never valid, so zero space is not a record.
package enum RecordKind: UInt8, Sendable {
    /// An opaque payload from the engine (a logical after-image).
    case mutation = 1
}

/// One record read back from the log.
package struct LogRecord: Sendable, Equatable {
    package var lsn: LogSequenceNumber
    package var kind: RecordKind
    package var payload: [UInt8]

    package init(lsn: LogSequenceNumber, kind: RecordKind, payload: [UInt8]) {
        self.lsn = lsn
        self.kind = kind
        self.payload = payload
    }
}

/// What a segment's header says.
package enum SegmentHeaderState: Sendable, Equatable {
    case valid(firstLSN: LogSequenceNumber)
    /// Zero-length, or shorter than a header and all zero, or a header of all
    /// zero bytes followed by zeros: a segment whose creation did not finish.
    case unwritten
    case damaged(Damage)
}

/// How the records of a segment end.
package enum SegmentEnd: Sendable, Equatable {
    /// Zero space or end of file right after the last whole record.
    case clean
    /// Something at `damage.offset` is not a valid next record. `laterRecordFound`
    /// is true when a valid record with a higher LSN sits after it, which rules
    /// out a torn tail (a tail is torn only when nothing valid follows).
    case damaged(Damage, laterRecordFound: Bool)
}

/// The result of reading one segment file: header, the whole records, how it ends.
package struct SegmentScan: Sendable, Equatable {
    package var path: String
    package var fileName: String
    package var fileBytes: Int
    package var header: SegmentHeaderState
    package var recordCount: Int
    /// The offset just after the last whole record (where the next one goes).
    package var endOffset: Int
    package var end: SegmentEnd
    /// True when only the header was read (start-up skips the records of a
    /// segment wholly below the newest usable snapshot): `recordCount`,
    /// `endOffset` and `end` then say nothing about its records.
    package var recordsSkipped: Bool = false
    /// The header's version (0 when the header is not valid).
    package var version: UInt32 = 0
    /// The size a version-2 header says the segment was created with; nil for version 1.
    package var declaredBytes: Int?
    /// Set when the file is not the size its header says (a version-2
    /// segment cut short, or grown): damage that is never a torn tail.
    package var sizeDamage: Damage?

    /// The LSN of the last whole record, or firstLSN - 1 when there is none.
    package var lastLSN: LogSequenceNumber? {
        guard case .valid(let first) = header else { return nil }
        return LogSequenceNumber(first.rawValue &+ UInt64(recordCount) &- 1)
    }
}

extension SegmentFormat {
    /// Reads the segment `bytes` of file `path` and returns what it holds,
    /// calling `record` for each whole record in order. Stops at the first
    /// damage. O(n), plus a search for later records after damage.
    package static func scan(
        bytes: [UInt8], path: String, fileName: String, payloadBytesMax: Int,
        record: (LogRecord) -> Void = { _ in }
    ) -> SegmentScan {
        scan(
            bytes: bytes, path: path, fileName: fileName, payloadBytesMax: payloadBytesMax, reportsRecords: true, record
        )
    }

    /// `scan`; when `reportsRecords` is false, `record` is never called and no
    /// payload is copied (recovery's first pass, `verify`).
    package static func scan(
        bytes: [UInt8], path: String, fileName: String, payloadBytesMax: Int, reportsRecords: Bool,
        _ record: (LogRecord) -> Void = { _ in }
    ) -> SegmentScan {
        var result = SegmentScan(
            path: path, fileName: fileName, fileBytes: bytes.count, header: .unwritten, recordCount: 0,
            endOffset: 0, end: .clean)
        let header = decodeHeader(bytes: bytes, path: path)
        result.header = header
        guard case .valid(let firstLSN) = header else {
            if case .unwritten = header, !Bytes.allZero(bytes[...]) {
                let offset = bytes.firstIndex(where: { $0 != 0 }) ?? 0
                result.header = .damaged(
                    Damage(file: path, offset: offset, reason: "segment header is zero but the segment is not"))
            }
            return result
        }
        if let nameLSN = SegmentFormat.firstLSN(fileName: fileName), nameLSN != firstLSN {
            result.header = .damaged(
                Damage(file: path, offset: 16, reason: "header first LSN \(firstLSN) does not match the file name"))
            return result
        }
        result.version = Bytes.read(UInt32.self, bytes, at: 8)
        result.declaredBytes = declaredBytes(header: bytes)
        result.sizeDamage = sizeDamage(path: path, fileBytes: bytes.count, declaredBytes: result.declaredBytes)
        var offset = headerBytes
        var expected = firstLSN
        while true {
            result.endOffset = offset
            switch decodeRecord(bytes: bytes, at: offset, expected: expected, payloadBytesMax: payloadBytesMax) {
            case .record(let lsn, let kind, let payload, let span):
                if reportsRecords { record(LogRecord(lsn: lsn, kind: kind, payload: Array(bytes[payload]))) }
                result.recordCount += 1
                expected = expected.advanced(by: 1)
                offset += span
            case .endOfRecords:
                if let stray = Bytes.firstNonZero(bytes[offset...]) {
                    let damage = Damage(
                        file: path, offset: stray, reason: "nonzero byte in the zero space after the last record")
                    result.end = .damaged(damage, laterRecordFound: laterRecordExists(bytes, after: offset, expected))
                }
                return result
            case .invalid(let reason):
                let damage = Damage(file: path, offset: offset, reason: reason)
                result.end = .damaged(damage, laterRecordFound: laterRecordExists(bytes, after: offset, expected))
                return result
            }
        }
    }

    /// Returns the header state of a segment's bytes.
    static func decodeHeader(bytes: [UInt8], path: String) -> SegmentHeaderState {
        if bytes.count < headerBytes || Bytes.allZero(bytes[0..<headerBytes]) {
            return .unwritten
        }
        func damaged(_ offset: Int, _ reason: String) -> SegmentHeaderState {
            .damaged(Damage(file: path, offset: offset, reason: reason))
        }
        if Array(bytes[0..<8]) != magic { return damaged(0, "bad segment magic") }
        let crc = Bytes.read(UInt32.self, bytes, at: 24)
        if crc != CRC32C.checksum(bytes[0..<24]) { return damaged(24, "segment header CRC mismatch") }
        let version = Bytes.read(UInt32.self, bytes, at: 8)
        if version != 1 && version != self.version { return damaged(8, "unsupported segment version \(version)") }
        if Bytes.read(UInt32.self, bytes, at: 28) != 0 || (version == 1 && Bytes.read(UInt32.self, bytes, at: 12) != 0)
        {
            return damaged(12, "nonzero reserved bytes in segment header")
        }
        if version == 2 {
            let size = Int(Bytes.read(UInt32.self, bytes, at: 12))
            if size < headerBytes || size % 8 != 0 {
                return damaged(12, "segment size \(size) in the header is invalid")
            }
        }
        let first = Bytes.read(UInt64.self, bytes, at: 16)
        if first == 0 { return damaged(16, "first LSN 0") }
        return .valid(firstLSN: LogSequenceNumber(first))
    }

    /// Returns the size a valid version-2 header declares, or nil (version 1).
    static func declaredBytes(header bytes: [UInt8]) -> Int? {
        Bytes.read(UInt32.self, bytes, at: 8) == 2 ? Int(Bytes.read(UInt32.self, bytes, at: 12)) : nil
    }

    /// Returns the damage of a segment whose file is not the size its header
    /// declares (nil for version 1, which declares none). Segments are created
    /// whole at their full size before their name exists, so a shorter file
    /// was cut: whatever it held past its end is lost, whether or not the
    /// cut fell on a record boundary.
    static func sizeDamage(path: String, fileBytes: Int, declaredBytes: Int?) -> Damage? {
        guard let declaredBytes, fileBytes != declaredBytes else { return nil }
        let what = fileBytes < declaredBytes ? "cut short" : "longer than created"
        return Damage(
            file: path, offset: min(fileBytes, declaredBytes),
            reason: "segment is \(fileBytes) bytes but was created with \(declaredBytes) (\(what))")
    }

    enum DecodedRecord {
        /// A valid record: its LSN, kind, where its payload is in the bytes, its span.
        case record(lsn: LogSequenceNumber, kind: RecordKind, payload: Range<Int>, span: Int)
        case endOfRecords
        case invalid(String)
    }

    /// Decodes the record at `offset`, which must carry LSN `expected`.
    static func decodeRecord(
        bytes: [UInt8], at offset: Int, expected: LogSequenceNumber?, payloadBytesMax: Int
    ) -> DecodedRecord {
        precondition(offset % 8 == 0, "record offset \(offset) is not aligned")
        let remaining = bytes.count - offset
        if remaining == 0 { return .endOfRecords }
        if remaining < recordHeaderBytes {
            return Bytes.allZero(bytes[offset...]) ? .endOfRecords : .invalid("partial record header at end of file")
        }
        if Bytes.allZero(bytes[offset..<(offset + recordHeaderBytes)]) { return .endOfRecords }
        let length = Int(Bytes.read(UInt32.self, bytes, at: offset))
        guard let kind = RecordKind(rawValue: bytes[offset + 4]) else {
            return .invalid("unknown record kind \(bytes[offset + 4])")
        }
        if bytes[offset + 5] != 0 || bytes[offset + 6] != 0 || bytes[offset + 7] != 0
            || Bytes.read(UInt32.self, bytes, at: offset + 20) != 0
        {
            return .invalid("nonzero reserved bytes in record header")
        }
        if length > payloadBytesMax { return .invalid("record length \(length) over the limit \(payloadBytesMax)") }
        let span = recordBytes(payloadBytes: length)
        if span > remaining { return .invalid("record of \(span) bytes extends past the end of the file") }
        // The writer pads with zeros; anything else there was not written by it.
        if !Bytes.allZero(bytes[(offset + recordHeaderBytes + length)..<(offset + span)]) {
            return .invalid("nonzero padding after the record payload")
        }
        let stored = Bytes.read(UInt32.self, bytes, at: offset + 16)
        if stored != recordChecksum(bytes[offset..<(offset + span)]) { return .invalid("record CRC mismatch") }
        let lsn = LogSequenceNumber(Bytes.read(UInt64.self, bytes, at: offset + 8))
        if let expected, lsn != expected { return .invalid("LSN gap: expected \(expected), found \(lsn)") }
        // No record takes the last LSN, so that the one after a record always exists.
        if lsn.rawValue == .max { return .invalid("LSN \(lsn) is the largest; no record has it") }
        let payloadStart = offset + recordHeaderBytes
        return .record(lsn: lsn, kind: kind, payload: payloadStart..<(payloadStart + length), span: span)
    }

    /// Returns true when some aligned offset after `offset` holds a valid
    /// record whose LSN is at least `expected`. O(n) candidates; a CRC is
    /// computed only for headers that pass the cheap checks.
    static func laterRecordExists(_ bytes: [UInt8], after offset: Int, _ expected: LogSequenceNumber) -> Bool {
        var candidate = offset + 8
        while candidate + recordHeaderBytes <= bytes.count {
            defer { candidate += 8 }
            let lsn = Bytes.read(UInt64.self, bytes, at: candidate + 8)
            guard lsn >= expected.rawValue, RecordKind(rawValue: bytes[candidate + 4]) != nil else { continue }
            if case .record = decodeRecord(bytes: bytes, at: candidate, expected: nil, payloadBytesMax: Int(UInt32.max))
            {
                return true
            }
        }
        return false
    }
}

extension SegmentFormat {
    /// Calls `body` for the first `recordCount` records of `bytes`, a segment
    /// that `scan` has already checked (header, CRCs, LSNs): no check again.
    package static func forEachCheckedRecord(in bytes: [UInt8], recordCount: Int, _ body: (LogRecord) -> Void) {
        var offset = headerBytes
        for _ in 0..<recordCount {
            let length = Int(Bytes.read(UInt32.self, bytes, at: offset))
            let kind = RecordKind(rawValue: bytes[offset + 4]) ?? .mutation
            let lsn = LogSequenceNumber(Bytes.read(UInt64.self, bytes, at: offset + 8))
            let start = offset + recordHeaderBytes
            body(LogRecord(lsn: lsn, kind: kind, payload: Array(bytes[start..<(start + length)])))
            offset += recordBytes(payloadBytes: length)
        }
    }
}
