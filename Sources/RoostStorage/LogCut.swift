/// Cutting the end of a closed log (cluster mode, spec §13.2): "a node's own
/// log never keeps a record that the group log does not hold". A leader
/// writes its records to its own log while etcd commits them (decision
/// 0080), so a leader that crashed or was deposed may hold a suffix the
/// group log does not: it was never acknowledged, and a restart cuts it.
///
/// Records after the cut are zeroed where they lie (the end of the records
/// is the first all-zero header, `SegmentFormat`), later segments are
/// removed, and `log-end` is written back to the cut, so that recovery reads
/// the shorter log as whole rather than as lost records. A checkpointed
/// snapshot never holds a record the group log does not (decision 0080); one
/// whose start is past the cut is refused as damage, and nothing is changed.
package enum LogCut {
    /// What a cut did.
    package struct Report: Sendable, Equatable {
        /// Records removed (every record after the cut).
        package var recordsCut: UInt64
        /// Segments removed whole.
        package var segmentsRemoved: Int
    }

    /// Cuts every record after `lsn` from the log in `directory`, which no
    /// process may have open (the caller holds the directory's lock or runs
    /// before the log opens). Durable when it returns: zeroed bytes and
    /// `log-end` fdatasynced, the directory fsynced.
    package static func cut(
        directory: String, after lsn: LogSequenceNumber, options: StorageOptions = StorageOptions()
    ) throws(StorageError) -> Report {
        let layout = StorageLayout(directory: directory, fileSystem: options.fileSystem)
        let fileSystem = options.fileSystem
        let firstCut = lsn.rawValue + 1
        try refuseCheckpointsAfter(firstCut, layout: layout)
        var report = Report(recordsCut: 0, segmentsRemoved: 0)
        var lastKept: LogSequenceNumber?
        for name in try layout.segmentNames() {
            guard let first = SegmentFormat.firstLSN(fileName: name) else { continue }
            var offset = SegmentFormat.headerBytes
            var cutAt: Int?
            var count: UInt64 = 0
            _ = try layout.scanSegment(name, options: options) { record in
                if record.lsn.rawValue >= firstCut {
                    if cutAt == nil { cutAt = offset }
                    count += 1
                }
                offset += SegmentFormat.recordHeaderBytes + Bytes.aligned8(record.payload.count)
            }
            report.recordsCut += count
            let path = layout.segmentPath(name)
            if first.rawValue > firstCut {
                do {
                    try fileSystem.remove(path)
                } catch {
                    throw .io(error)
                }
                report.segmentsRemoved += 1
                continue
            }
            lastKept = first
            guard let cutAt, offset > cutAt else { continue }
            do {
                let file = try fileSystem.open(path, create: false)
                defer { file.close() }
                try file.write([UInt8](repeating: 0, count: offset - cutAt)[...], at: cutAt)
                try file.syncData()
            } catch {
                throw .io(error)
            }
        }
        try writeLogEnd(cutTo: lsn, openSegment: lastKept, layout: layout)
        do {
            try fileSystem.syncDirectory(layout.walDirectory)
            try fileSystem.syncDirectory(layout.directory)
        } catch {
            throw .io(error)
        }
        return report
    }

    /// Throws, changing nothing, when a valid checkpoint names a snapshot
    /// that starts after `firstCut`: it may hold what the cut removes.
    private static func refuseCheckpointsAfter(_ firstCut: UInt64, layout: StorageLayout) throws(StorageError) {
        for slot in CheckpointFormat.slotNames.indices {
            let path = layout.checkpointPath(slot: slot)
            let bytes: [UInt8]?
            do {
                bytes = try layout.fileSystem.readWhole(path, limitBytes: 4096)
            } catch {
                throw .io(error)
            }
            guard case .valid(let checkpoint) = CheckpointFormat.decode(bytes, path: path) else { continue }
            if checkpoint.snapshotLSN.rawValue > firstCut {
                throw .damaged(
                    Damage(
                        file: path, offset: 0,
                        reason:
                            "the snapshot at LSN \(checkpoint.snapshotLSN.rawValue) starts after the cut at "
                            + "\(firstCut - 1): it may hold records the group log does not"))
            }
        }
    }

    /// Writes the next `log-end` slot with the cut as its end (it may go
    /// back: the records after it are gone on purpose), when the file exists.
    private static func writeLogEnd(
        cutTo lsn: LogSequenceNumber, openSegment: LogSequenceNumber?, layout: StorageLayout
    ) throws(StorageError) {
        let fileSystem = layout.fileSystem
        let path = layout.logEndPath
        do {
            guard
                case .valid(let last, _, _) = LogEndFormat.decode(
                    try fileSystem.readWhole(path, limitBytes: LogEndFormat.fileBytes), path: path)
            else { return }
            let next = LogEnd(
                sequence: last.sequence + 1, endLSN: min(last.endLSN, lsn),
                openSegment: min(last.openSegment, openSegment ?? LogSequenceNumber(0)), cleanShutdown: false)
            let file = try fileSystem.open(path, create: false)
            defer { file.close() }
            try file.write(LogEndFormat.encode(next)[...], at: LogEndFormat.slotOffsets[Int(next.sequence % 2)])
            try file.syncData()
        } catch {
            throw .io(error)
        }
    }
}

/// Reading records of a log by LSN, from its segments (cluster mode: a node
/// compares its own log after its checkpoint with the group log's batches,
/// spec §13.2). Reads whole segments (`StorageOptions.segmentReadBytesMax`
/// each); safe beside a running log for records it has made durable.
package enum LogRead {
    /// Returns the records with LSNs in `range`, in LSN order, from the
    /// segments of the log in `directory` (fewer when the log ends sooner).
    /// Throws when a segment cannot be read.
    package static func records(
        in range: ClosedRange<LogSequenceNumber>, directory: String, options: StorageOptions = StorageOptions()
    ) throws(StorageError) -> [LogRecord] {
        var reader = LogRangeReader(directory: directory, options: options)
        return try reader.records(in: range)
    }
}

/// Reads ranges of a log's records one after another, keeping the segment
/// it read last: ranges that move forward through a segment (a node
/// comparing its log with the group log page by page) read each segment
/// once, not once per range. The kept segment is read again when a range
/// reaches past its last record and it is the log's newest (it may have
/// grown). Holds at most one segment's records.
package struct LogRangeReader {
    private let layout: StorageLayout
    private let options: StorageOptions
    /// The segment read last and its records, in LSN order.
    private var kept: (name: String, records: [LogRecord])?

    package init(directory: String, options: StorageOptions = StorageOptions()) {
        layout = StorageLayout(directory: directory, fileSystem: options.fileSystem)
        self.options = options
    }

    /// Returns the records with LSNs in `range`, in LSN order (fewer when
    /// the log ends sooner). Throws when a segment cannot be read.
    package mutating func records(in range: ClosedRange<LogSequenceNumber>) throws(StorageError) -> [LogRecord] {
        let names = try layout.segmentNames()
        let firsts = names.map { SegmentFormat.firstLSN(fileName: $0) }
        var records: [LogRecord] = []
        for (index, name) in names.enumerated() {
            guard let first = firsts[index], first <= range.upperBound else { continue }
            // A segment that ends before the range (the next one starts at or before its start) is skipped.
            if index + 1 < names.count, let next = firsts[index + 1], next <= range.lowerBound { continue }
            let segment = try segmentRecords(name, isNewest: index + 1 == names.count, reaching: range.upperBound)
            var position = Self.firstIndex(in: segment, notBefore: range.lowerBound)
            while position < segment.count, segment[position].lsn <= range.upperBound {
                records.append(segment[position])
                position += 1
            }
        }
        return records
    }

    /// The records of segment `name`, from the one kept when it still holds
    /// what a range reaching `upper` needs.
    private mutating func segmentRecords(
        _ name: String, isNewest: Bool, reaching upper: LogSequenceNumber
    ) throws(StorageError) -> [LogRecord] {
        if let kept, kept.name == name, !isNewest || (kept.records.last.map { $0.lsn >= upper } ?? false) {
            return kept.records
        }
        kept = nil  // one segment's records at a time
        var records: [LogRecord] = []
        _ = try layout.scanSegment(name, options: options) { records.append($0) }
        kept = (name, records)
        return records
    }

    /// The position of the first record at or after `lsn` (records in LSN order).
    private static func firstIndex(in records: [LogRecord], notBefore lsn: LogSequenceNumber) -> Int {
        var low = 0
        var high = records.count
        while low < high {
            let middle = (low + high) / 2
            if records[middle].lsn < lsn { low = middle + 1 } else { high = middle }
        }
        return low
    }
}
