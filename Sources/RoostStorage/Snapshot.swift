import CZstd
import Glibc
import RoostPlatform

/// Sizes the engine announces when a snapshot begins, so that recovery can
/// reserve capacity before reading. Hints only: a fuzzy snapshot may hold a
/// few more or fewer records. Opaque to storage.
package struct SnapshotCounts: Sendable, Equatable {
    /// About how many records will follow.
    package var records: UInt64
    /// About how many groups (e.g. apps or shard indexes) they fall into.
    package var groups: UInt64

    package init(records: UInt64, groups: UInt64) {
        self.records = records
        self.groups = groups
    }
}

/// The byte layout of snapshot files (docs/storage.md has the tables):
/// a 48-byte header, one zstd frame (level 1, content checksum on) holding
/// records as `u32 length, bytes`, and a 24-byte trailer whose last field is
/// the CRC-32C of every byte before it.
package enum SnapshotFormat {
    package static let magic: [UInt8] = Array("ROOSTSNP".utf8)
    package static let trailerMagic: [UInt8] = Array("SEND".utf8)
    package static let version: UInt32 = 1
    package static let headerBytes = 48
    package static let trailerBytes = 24
    package static let directoryName = "snapshots"
    package static let fileExtension = ".snap"
    /// The largest record a snapshot holds.
    package static let recordBytesMax = 16 << 20

    /// Returns the file name of the snapshot whose replay starts at `startLSN`.
    package static func fileName(startLSN: LogSequenceNumber) -> String {
        let digits = String(startLSN.rawValue)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits + fileExtension
    }

    /// Returns the 48-byte header.
    package static func encodeHeader(startLSN: LogSequenceNumber, counts: SnapshotCounts) -> [UInt8] {
        var bytes = magic
        Bytes.append(version, to: &bytes)
        Bytes.append(UInt32(0), to: &bytes)
        Bytes.append(startLSN.rawValue, to: &bytes)
        Bytes.append(counts.records, to: &bytes)
        Bytes.append(counts.groups, to: &bytes)
        Bytes.append(CRC32C.checksum(bytes), to: &bytes)
        Bytes.append(UInt32(0), to: &bytes)
        precondition(bytes.count == headerBytes, "snapshot header is \(bytes.count) bytes")
        return bytes
    }

    /// Returns the header's start LSN and counts, or the damage.
    package static func decodeHeader(_ bytes: [UInt8], path: String) -> Result<
        (startLSN: LogSequenceNumber, counts: SnapshotCounts), Damage
    > {
        func damaged(_ offset: Int, _ reason: String) -> Result<
            (startLSN: LogSequenceNumber, counts: SnapshotCounts), Damage
        > {
            .failure(Damage(file: path, offset: offset, reason: reason))
        }
        if bytes.count < headerBytes { return damaged(0, "snapshot shorter than its header") }
        if Array(bytes[0..<8]) != magic { return damaged(0, "bad snapshot magic") }
        if Bytes.read(UInt32.self, bytes, at: 40) != CRC32C.checksum(bytes[0..<40]) {
            return damaged(40, "snapshot header CRC mismatch")
        }
        let version = Bytes.read(UInt32.self, bytes, at: 8)
        if version != self.version { return damaged(8, "unsupported snapshot version \(version)") }
        if Bytes.read(UInt32.self, bytes, at: 12) != 0 || Bytes.read(UInt32.self, bytes, at: 44) != 0 {
            return damaged(12, "nonzero reserved bytes in snapshot header")
        }
        let startLSN = Bytes.read(UInt64.self, bytes, at: 16)
        if startLSN == 0 { return damaged(16, "snapshot start LSN 0") }
        let counts = SnapshotCounts(
            records: Bytes.read(UInt64.self, bytes, at: 24), groups: Bytes.read(UInt64.self, bytes, at: 32))
        return .success((LogSequenceNumber(startLSN), counts))
    }
}

/// What a verified snapshot file holds, as a checkpoint refers to it.
package struct SnapshotSummary: Sendable, Equatable {
    package var path: String
    package var startLSN: LogSequenceNumber
    package var counts: SnapshotCounts
    package var recordCount: UInt64
    package var fileBytes: UInt64
    /// The trailer CRC: the CRC-32C of every byte before it.
    package var checksum: UInt32
}

/// Writes one snapshot in slices: `init` (start LSN and counts), `append`
/// many times (while writers go on), `finish`. The file is `NAME.tmp` until
/// `finish` has synced it, renamed it and synced the directory; only then may
/// a checkpoint refer to it. Not thread-safe: one owner at a time.
package final class SnapshotWriter {
    package let startLSN: LogSequenceNumber
    package let path: String
    let temporaryPath: String
    let fileSystem: any StorageFileSystem
    let directory: String
    var file: (any StorageFile)?
    var context: OpaquePointer?
    var offset = 0
    var crc: UInt32 = 0
    var recordCount: UInt64 = 0
    let counts: SnapshotCounts
    var input: [UInt8] = []
    var output: [UInt8]
    /// Plain bytes gathered before each compression call.
    static let inputBufferBytes = 256 << 10

    /// Creates `directory/<startLSN>.snap.tmp` and writes the header.
    package init(
        fileSystem: any StorageFileSystem, directory: String, startLSN: LogSequenceNumber, counts: SnapshotCounts
    ) throws(StorageError) {
        self.fileSystem = fileSystem
        self.directory = directory
        self.startLSN = startLSN
        self.counts = counts
        self.path = fileSystem.join(directory, SnapshotFormat.fileName(startLSN: startLSN))
        self.temporaryPath = path + ".tmp"
        self.output = [UInt8](repeating: 0, count: ZSTD_CStreamOutSize())
        guard let context = ZSTD_createCCtx() else { preconditionFailure("ZSTD_createCCtx returned nil") }
        self.context = context
        Self.check(ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, 1), "compressionLevel")
        Self.check(ZSTD_CCtx_setParameter(context, ZSTD_c_checksumFlag, 1), "checksumFlag")
        do {
            let file = try fileSystem.open(temporaryPath, create: true)
            self.file = file
            try file.truncate(size: 0)
            try emit(SnapshotFormat.encodeHeader(startLSN: startLSN, counts: counts)[...])
        } catch {
            abandon()
            throw StorageError.io(error)
        }
    }

    deinit {
        if let context { ZSTD_freeCCtx(context) }
        file?.close()
    }

    static func check(_ code: Int, _ what: String) {
        precondition(ZSTD_isError(code) == 0, "zstd \(what): \(String(cString: ZSTD_getErrorName(code)))")
    }

    /// Appends one record (opaque bytes from the engine). O(record bytes).
    package func append(_ record: [UInt8]) throws(StorageError) {
        precondition(file != nil, "append after finish or abandon")
        guard record.count <= SnapshotFormat.recordBytesMax else {
            throw .recordTooLarge(bytes: record.count, limit: SnapshotFormat.recordBytesMax)
        }
        Bytes.append(UInt32(record.count), to: &input)
        input.append(contentsOf: record)
        recordCount += 1
        if input.count >= Self.inputBufferBytes { try compress(end: false) }
    }

    /// Ends the frame, writes the trailer, fdatasyncs, renames over the final
    /// name and fsyncs the directory. Returns what a checkpoint records.
    package func finish() throws(StorageError) -> SnapshotSummary {
        guard let file else { preconditionFailure("finish after finish or abandon") }
        try compress(end: true)
        var trailer: [UInt8] = []
        Bytes.append(recordCount, to: &trailer)
        Bytes.append(UInt64(offset - SnapshotFormat.headerBytes), to: &trailer)
        trailer.append(contentsOf: SnapshotFormat.trailerMagic)
        let checksum = CRC32C.checksum(trailer, continuing: crc)
        Bytes.append(checksum, to: &trailer)
        do {
            try emit(trailer[...])
            // Durability order: data, then the name, then the directory entry.
            try file.syncData()
            file.close()
            self.file = nil
            try fileSystem.rename(temporaryPath, to: path)
            try fileSystem.syncDirectory(directory)
        } catch {
            abandon()
            throw .io(error)
        }
        return SnapshotSummary(
            path: path, startLSN: startLSN, counts: counts, recordCount: recordCount, fileBytes: UInt64(offset),
            checksum: checksum)
    }

    /// Closes and removes the temporary file (after an error, or when the engine gives up).
    package func abandon() {
        file?.close()
        file = nil
        try? fileSystem.remove(temporaryPath)
    }

    func compress(end: Bool) throws(StorageError) {
        guard let context else { preconditionFailure("no zstd context") }
        var consumed = 0
        let inputCount = input.count
        while true {
            var produced = 0
            let remaining: Int = input.withUnsafeBytes { source in
                output.withUnsafeMutableBytes { target in
                    var inBuffer = ZSTD_inBuffer(src: source.baseAddress, size: inputCount, pos: consumed)
                    var outBuffer = ZSTD_outBuffer(dst: target.baseAddress, size: target.count, pos: 0)
                    let code = ZSTD_compressStream2(context, &outBuffer, &inBuffer, end ? ZSTD_e_end : ZSTD_e_continue)
                    Self.check(code, "compressStream2")
                    consumed = inBuffer.pos
                    produced = outBuffer.pos
                    return code
                }
            }
            if produced > 0 {
                do { try emit(output[0..<produced]) } catch { throw .io(error) }
            }
            if end ? remaining == 0 : consumed == inputCount { break }
        }
        input.removeAll(keepingCapacity: true)
    }

    func emit(_ bytes: ArraySlice<UInt8>) throws(SystemCallError) {
        guard let file else { preconditionFailure("write after close") }
        try file.write(bytes, at: offset)
        crc = CRC32C.checksum(bytes, continuing: crc)
        offset += bytes.count
    }
}

/// Reads a snapshot: `verify` checks the whole file (header, trailer, CRC)
/// without decompressing; an instance yields the records in order and checks
/// the zstd frame checksum and the record count at the end.
package final class SnapshotReader {
    package let path: String
    package let startLSN: LogSequenceNumber
    package let counts: SnapshotCounts
    let file: any StorageFile
    let bodyEnd: Int
    let expectedRecords: UInt64
    var readOffset = SnapshotFormat.headerBytes
    var context: OpaquePointer?
    var compressed: [UInt8] = []
    var compressedOffset = 0
    /// Decompressed bytes: `plain[plainOffset..<plainEnd]` are not yet read;
    /// the buffer is reused (the unread tail moves to the front before each
    /// decompression), so reading allocates nothing per record.
    var plain: [UInt8] = []
    var plainOffset = 0
    var plainEnd = 0
    var frameDone = false
    var recordsRead: UInt64 = 0
    static let chunkBytes = 1 << 20

    /// The number of records the trailer says the file holds (checked at the end).
    package var recordCount: UInt64 { expectedRecords }

    /// Checks header, trailer and the CRC-32C over the whole file. O(file bytes).
    package static func verify(fileSystem: any StorageFileSystem, path: String) throws(StorageError) -> SnapshotSummary
    {
        let file: any StorageFile
        do { file = try fileSystem.open(path, create: false) } catch { throw .io(error) }
        defer { file.close() }
        do {
            let size = try file.size()
            let header = try file.read(at: 0, count: SnapshotFormat.headerBytes)
            let decoded: (startLSN: LogSequenceNumber, counts: SnapshotCounts)
            switch SnapshotFormat.decodeHeader(header, path: path) {
            case .success(let value): decoded = value
            case .failure(let damage): throw StorageError.damaged(damage)
            }
            guard size >= SnapshotFormat.headerBytes + SnapshotFormat.trailerBytes else {
                throw StorageError.damaged(Damage(file: path, offset: size, reason: "snapshot has no trailer"))
            }
            let trailerOffset = size - SnapshotFormat.trailerBytes
            var crc: UInt32 = 0
            var offset = 0
            var chunk: [UInt8] = []
            while offset < trailerOffset + 20 {
                try file.read(at: offset, count: min(chunkBytes, trailerOffset + 20 - offset), into: &chunk)
                guard !chunk.isEmpty else { break }
                crc = CRC32C.checksum(chunk, continuing: crc)
                offset += chunk.count
            }
            let trailer = try file.read(at: trailerOffset, count: SnapshotFormat.trailerBytes)
            let stored = Bytes.read(UInt32.self, trailer, at: 20)
            guard stored == crc else {
                throw StorageError.damaged(
                    Damage(
                        file: path, offset: trailerOffset + 20,
                        reason: "snapshot checksum mismatch over bytes 0..<\(trailerOffset + 20)"))
            }
            guard Array(trailer[16..<20]) == SnapshotFormat.trailerMagic,
                Bytes.read(UInt64.self, trailer, at: 8) == UInt64(trailerOffset - SnapshotFormat.headerBytes)
            else {
                throw StorageError.damaged(Damage(file: path, offset: trailerOffset, reason: "bad snapshot trailer"))
            }
            return SnapshotSummary(
                path: path, startLSN: decoded.startLSN, counts: decoded.counts,
                recordCount: Bytes.read(UInt64.self, trailer, at: 0), fileBytes: UInt64(size), checksum: stored)
        } catch let error as StorageError {
            throw error
        } catch let error as SystemCallError {
            throw .io(error)
        } catch {
            preconditionFailure("unexpected error \(error)")
        }
    }

    /// Opens `path` and reads its header and trailer. Call `verify` first
    /// (recovery does) unless a damaged file may be reported late.
    package init(fileSystem: any StorageFileSystem, path: String) throws(StorageError) {
        let summary = try Self.verify(fileSystem: fileSystem, path: path)
        do { file = try fileSystem.open(path, create: false) } catch { throw .io(error) }
        self.path = path
        self.startLSN = summary.startLSN
        self.counts = summary.counts
        self.expectedRecords = summary.recordCount
        self.bodyEnd = Int(summary.fileBytes) - SnapshotFormat.trailerBytes
        guard let context = ZSTD_createDCtx() else { preconditionFailure("ZSTD_createDCtx returned nil") }
        self.context = context
    }

    deinit {
        if let context { ZSTD_freeDCtx(context) }
        file.close()
    }

    /// Returns the next record, or nil after the last one (having checked
    /// the frame's checksum and the record count).
    package func next() throws(StorageError) -> [UInt8]? {
        guard let range = try nextRange() else { return nil }
        return Array(plain[range])
    }

    /// Calls `body` with the next record's bytes, borrowed from the reader's
    /// buffer (valid only during the call; `body` must not call the reader),
    /// and returns its result; nil after the last record (having checked the
    /// frame's checksum and the record count). No copy, no allocation.
    package func withNextRecord<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) throws -> Result? {
        guard let range = try nextRange() else { return nil }
        return try plain.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[range])) }
    }

    /// Reads the next record's length and returns where its bytes are in `plain`.
    func nextRange() throws(StorageError) -> Range<Int>? {
        guard try fill(4) else {
            guard frameDone, readOffset == bodyEnd, compressedOffset == compressed.count else {
                throw damaged(readOffset, "snapshot body ends inside the zstd frame")
            }
            guard recordsRead == expectedRecords else {
                throw damaged(bodyEnd, "snapshot holds \(recordsRead) records, trailer says \(expectedRecords)")
            }
            return nil
        }
        let length = Int(Bytes.read(UInt32.self, plain[...], at: plainOffset))
        guard length <= SnapshotFormat.recordBytesMax else { throw damaged(readOffset, "snapshot record too long") }
        guard try fill(4 + length) else { throw damaged(readOffset, "snapshot record cut short") }
        let range = (plainOffset + 4)..<(plainOffset + 4 + length)
        plainOffset += 4 + length
        recordsRead += 1
        return range
    }

    func damaged(_ offset: Int, _ reason: String) -> StorageError {
        .damaged(Damage(file: path, offset: offset, reason: reason))
    }

    /// Decompresses until `count` plain bytes are available; false at end of frame.
    func fill(_ count: Int) throws(StorageError) -> Bool {
        guard let context else { preconditionFailure("no zstd context") }
        while plainEnd - plainOffset < count {
            if frameDone {
                if plainEnd == plainOffset { return false }
                throw damaged(readOffset, "snapshot record cut short at the end of the frame")
            }
            if compressedOffset == compressed.count {
                guard readOffset < bodyEnd else { return false }
                do {
                    try file.read(
                        at: readOffset, count: min(Self.chunkBytes, bodyEnd - readOffset), into: &compressed)
                } catch { throw .io(error) }
                guard !compressed.isEmpty else { throw damaged(readOffset, "snapshot shorter than its trailer says") }
                readOffset += compressed.count
                compressedOffset = 0
            }
            // Move the unread tail (less than one record) to the front, and
            // make room for at least one zstd output block after it.
            let unread = plainEnd - plainOffset
            if plainOffset > 0 {
                if unread > 0 {
                    let from = plainOffset
                    plain.withUnsafeMutableBytes { buffer in
                        _ = memmove(buffer.baseAddress!, buffer.baseAddress! + from, unread)
                    }
                }
                plainOffset = 0
                plainEnd = unread
            }
            let room = max(Self.plainBufferBytes, count + ZSTD_DStreamOutSize())
            if plain.count < room { plain += [UInt8](repeating: 0, count: room - plain.count) }
            var produced = 0
            let start = plainEnd
            let code: Int = compressed.withUnsafeBytes { source in
                plain.withUnsafeMutableBytes { target in
                    var inBuffer = ZSTD_inBuffer(src: source.baseAddress, size: source.count, pos: compressedOffset)
                    var outBuffer = ZSTD_outBuffer(
                        dst: target.baseAddress! + start, size: target.count - start, pos: 0)
                    let code = ZSTD_decompressStream(context, &outBuffer, &inBuffer)
                    compressedOffset = inBuffer.pos
                    produced = outBuffer.pos
                    return code
                }
            }
            if ZSTD_isError(code) != 0 {
                throw damaged(readOffset, "zstd: \(String(cString: ZSTD_getErrorName(code)))")
            }
            plainEnd += produced
            if code == 0 { frameDone = true }
        }
        return true
    }

    /// The decompression buffer's usual size (it grows for a larger record).
    static let plainBufferBytes = 1 << 20
}
