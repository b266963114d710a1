import Glibc
import RoostPlatform

/// The durable end of the log as known outside the log's own tail
/// (docs/decisions/0009-wal-damage-log-end.md): the file `log-end` beside the
/// checkpoint slots. A zeroed or shortened last segment looks like space
/// that was never written; this file says how far the log had certainly
/// reached, so that recovery can tell "never written" from "lost".
///
/// It is written (pwrite of one slot, fdatasync) when the log opens, after
/// each roll (naming the new segment before any record goes into it), at
/// most once per `StorageOptions.logEndIntervalMilliseconds` after a group
/// commit's fdatasync, and at a clean close. It only ever records LSNs that
/// were already durable in the segments, so after any crash the log reaches
/// at least `endLSN`.
package struct LogEnd: Sendable, Equatable {
    /// Increases by one per write; the valid slot with the higher one wins.
    package var sequence: UInt64
    /// Every record up to this LSN was durable in the segments when this was
    /// written (0: none yet).
    package var endLSN: LogSequenceNumber
    /// The first LSN of the segment open when this was written: it (or a
    /// later one) must exist. 0: no segment was required yet.
    package var openSegment: LogSequenceNumber
    /// True when written by a clean close: then `endLSN` is the exact end.
    package var cleanShutdown: Bool

    package init(sequence: UInt64, endLSN: LogSequenceNumber, openSegment: LogSequenceNumber, cleanShutdown: Bool) {
        self.sequence = sequence
        self.endLSN = endLSN
        self.openSegment = openSegment
        self.cleanShutdown = cleanShutdown
    }
}

/// The byte layout of `log-end`: two 48-byte slots, at offsets 0 and 4096 (so
/// a torn write of one never touches the other), written alternately in place.
package enum LogEndFormat {
    package static let magic: [UInt8] = Array("ROOSTEND".utf8)
    package static let version: UInt32 = 1
    package static let fileName = "log-end"
    package static let slotBytes = 48
    package static let slotOffsets = [0, 4096]
    package static let fileBytes = 8192
    /// The file is created whole under this name, then renamed into place.
    package static let temporaryName = "log-end.tmp"

    /// Returns the 48 bytes of one slot.
    package static func encode(_ end: LogEnd) -> [UInt8] {
        var bytes = magic
        Bytes.append(version, to: &bytes)
        Bytes.append(UInt32(end.cleanShutdown ? 1 : 0), to: &bytes)
        Bytes.append(end.sequence, to: &bytes)
        Bytes.append(end.endLSN.rawValue, to: &bytes)
        Bytes.append(end.openSegment.rawValue, to: &bytes)
        Bytes.append(CRC32C.checksum(bytes), to: &bytes)
        Bytes.append(UInt32(0), to: &bytes)
        precondition(bytes.count == slotBytes, "log-end slot is \(bytes.count) bytes")
        return bytes
    }

    /// What one slot holds.
    enum Slot: Equatable {
        case empty
        case valid(LogEnd)
        case damaged(Damage)
    }

    /// Returns what the slot at `offset` of `bytes` holds.
    static func decodeSlot(_ bytes: [UInt8], at offset: Int, path: String) -> Slot {
        let slot = bytes[offset..<(offset + slotBytes)]
        if Bytes.allZero(slot) { return .empty }
        func damaged(_ at: Int, _ reason: String) -> Slot {
            .damaged(Damage(file: path, offset: offset + at, reason: reason))
        }
        if Array(slot.prefix(8)) != magic { return damaged(0, "bad log-end magic") }
        if Bytes.read(UInt32.self, slot, at: offset + 40) != CRC32C.checksum(slot.prefix(40)) {
            return damaged(40, "log-end slot CRC mismatch")
        }
        let version = Bytes.read(UInt32.self, slot, at: offset + 8)
        if version != self.version { return damaged(8, "unsupported log-end version \(version)") }
        let flags = Bytes.read(UInt32.self, slot, at: offset + 12)
        if flags > 1 { return damaged(12, "unknown log-end flags \(flags)") }
        if Bytes.read(UInt32.self, slot, at: offset + 44) != 0 {
            return damaged(44, "nonzero reserved bytes in log-end")
        }
        let end = Bytes.read(UInt64.self, slot, at: offset + 24)
        let open = Bytes.read(UInt64.self, slot, at: offset + 32)
        // The open segment starts at most one past the durable end (a roll names it before any record).
        if open > end &+ 1 { return damaged(32, "log-end names segment \(open), past its end LSN \(end)") }
        return .valid(
            LogEnd(
                sequence: Bytes.read(UInt64.self, slot, at: offset + 16), endLSN: LogSequenceNumber(end),
                openSegment: LogSequenceNumber(open), cleanShutdown: flags == 1))
    }

    /// Returns what the file holds: nil contents mean it is missing. The
    /// valid slot with the higher sequence wins; a damaged slot beside a
    /// valid one is a torn slot write (noted); no valid slot at all is damage.
    package static func decode(_ bytes: [UInt8]?, path: String) -> LogEndRead {
        guard let bytes else { return .missing(path: path) }
        if bytes.count != fileBytes {
            return .damaged(
                Damage(
                    file: path, offset: min(bytes.count, fileBytes),
                    reason: "log-end file is \(bytes.count) bytes, not \(fileBytes)"))
        }
        var best: LogEnd?
        var firstDamage: Damage?
        for offset in slotOffsets {
            switch decodeSlot(bytes, at: offset, path: path) {
            case .empty: break
            case .damaged(let damage): firstDamage = firstDamage ?? damage
            case .valid(let end): if best.map({ end.sequence > $0.sequence }) ?? true { best = end }
            }
        }
        guard let best else {
            return .damaged(firstDamage ?? Damage(file: path, offset: 0, reason: "log-end file holds no slot"))
        }
        return .valid(best, path: path, tornSlot: firstDamage)
    }
}

/// What the `log-end` file holds.
package enum LogEndRead: Sendable, Equatable {
    /// No such file (a new directory, or one written by an older release).
    case missing(path: String)
    /// Neither slot is valid.
    case damaged(Damage)
    /// The newest valid slot; `tornSlot` is the other slot's damage, if any.
    case valid(LogEnd, path: String, tornSlot: Damage?)
}

/// The open `log-end` file: each `write` puts the next slot in place and
/// fdatasyncs it. A value inside `OpenSegment`, so used only under the log's
/// segment mutex (the I/O thread, open and close): one write at a time.
struct LogEndFile: Sendable {
    let file: any StorageFile
    private(set) var last: LogEnd

    private init(file: any StorageFile, last: LogEnd) {
        self.file = file
        self.last = last
    }

    /// Opens the file `read` describes, or creates it whole (temporary file
    /// with the first slot, fdatasync, rename, fsync of the directory) when
    /// it is missing, holding `initial`.
    static func openOrCreate(
        read: LogEndRead, layout: StorageLayout, initial: LogEnd
    ) throws(SystemCallError) -> LogEndFile {
        let fileSystem = layout.fileSystem
        let path = layout.logEndPath
        switch read {
        case .valid(let last, _, _):
            return LogEndFile(file: try fileSystem.open(path, create: false), last: last)
        case .missing, .damaged:
            // Damaged never reaches here (recovery refuses); missing: create.
            let temporary = fileSystem.join(layout.directory, LogEndFormat.temporaryName)
            let created = try fileSystem.open(temporary, create: true)
            do {
                try created.truncate(size: 0)
                var bytes = [UInt8](repeating: 0, count: LogEndFormat.fileBytes)
                let slot = LogEndFormat.slotOffsets[Int(initial.sequence % 2)]
                bytes.replaceSubrange(slot..<(slot + LogEndFormat.slotBytes), with: LogEndFormat.encode(initial))
                try created.write(bytes[...], at: 0)
                try created.syncData()
                created.close()
                try fileSystem.rename(temporary, to: path)
                try fileSystem.syncDirectory(layout.directory)
            } catch {
                created.close()
                throw error
            }
            return LogEndFile(file: try fileSystem.open(path, create: false), last: initial)
        }
    }

    /// Records that every record through `endLSN` is durable and that the
    /// segment starting at `openSegment` exists: the other slot, then fdatasync.
    /// Only call it once the segments hold those records durably.
    mutating func write(
        endLSN: LogSequenceNumber, openSegment: LogSequenceNumber, cleanShutdown: Bool
    ) throws(SystemCallError) {
        precondition(endLSN >= last.endLSN, "log-end would go back from \(last.endLSN) to \(endLSN)")
        precondition(
            openSegment >= last.openSegment, "log-end segment would go back from \(last.openSegment) to \(openSegment)")
        let next = LogEnd(
            sequence: last.sequence + 1, endLSN: endLSN, openSegment: openSegment, cleanShutdown: cleanShutdown)
        let slot = LogEndFormat.slotOffsets[Int(next.sequence % 2)]
        try file.write(LogEndFormat.encode(next)[...], at: slot)
        try file.syncData()
        last = next
    }

    func close() {
        file.close()
    }
}
