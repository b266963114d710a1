import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting
import Testing

/// Real bytes flipped on disk, the real binary: `roost wal verify` names the
/// damage and its exit code says the verdict; `roost serve` refuses to start
/// on mid-log damage and says where and what to run.
@Suite("Damaged data directories (system)", .serialized)
struct DamageTests {
    /// Runs `roost wal verify DIR`; returns its exit code and output.
    static func verify(_ data: String) -> (code: Int32, output: String) {
        let out = data + ".verify.out"
        let status = system("'\(RoostProcess.builtProduct("roost"))' wal verify '\(data)' > '\(out)' 2>&1")
        let text = (try? DurableFile.readIfExists(path: out, limitBytes: 1 << 20)).flatMap { $0 }
        return ((status >> 8) & 0xFF, text.map { String(decoding: $0, as: UTF8.self) } ?? "")
    }

    @Test("a flipped bit inside the log: verify exits 2 naming file and offset; serve refuses to start")
    func flippedBitInTheLog() throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-system")
        defer { TemporaryDirectory.remove(directory) }
        let data = directory + "/data"
        let (process, _) = try ServeTests.start(data: directory)
        let key = try CrashRecoveryTests.setUp(port: process.port)
        for slot in 0..<5 {
            let body = #"{"platform":"ios","token":"\#(CrashRecoveryTests.token(client: 3, slot: slot))"}"#
            #expect(try ServeTests.request(process.port, "POST", "/v1/devices", key: key, body: body).status == 201)
        }
        #expect(process.stop(signal: SIGTERM) == 0)
        let clean = Self.verify(data)
        #expect(clean.code == 0, "\(clean.output)")

        // Flip one bit inside the second record's frame: valid records follow,
        // so this is mid-log damage, not a torn tail.
        let segment = data + "/wal/00000000000000000001.seg"
        let fd = open(segment, O_RDWR)
        #expect(fd >= 0)
        var byte: UInt8 = 0
        #expect(pread(fd, &byte, 1, 200) == 1)
        byte ^= 0x01
        #expect(pwrite(fd, &byte, 1, 200) == 1)
        close(fd)

        let damaged = Self.verify(data)
        #expect(damaged.code == 2, "\(damaged.output)")
        #expect(damaged.output.contains(segment))
        #expect(damaged.output.contains("offset"))
        #expect(throws: RoostProcessError.self) { _ = try ServeTests.start(data: directory) }
    }

    /// The records of a segment: the offset and LSN of each, in order (at
    /// most the first 4 MiB of the file are read).
    static func records(_ path: String) -> [(offset: Int, lsn: UInt64)] {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 4 << 20)
        let count = pread(fd, &bytes, bytes.count, 0)
        guard count > 32 else { return [] }
        func read(_ at: Int, _ width: Int) -> UInt64 {
            (0..<width).reduce(UInt64(0)) { $0 | UInt64(bytes[at + $1]) << (8 * UInt64($1)) }
        }
        var found: [(offset: Int, lsn: UInt64)] = []
        var offset = 32
        while offset + 24 <= count, bytes[offset..<(offset + 24)].contains(where: { $0 != 0 }) {
            found.append((offset, read(offset + 8, 8)))
            offset += 24 + (Int(read(offset, 4)) + 7) / 8 * 8
        }
        return found
    }

    /// The end LSN the newest slot of `data/log-end` holds (0 when there is none).
    static func logEndLSN(_ data: String) -> UInt64 {
        let fd = open(data + "/log-end", O_RDONLY)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 8192)
        guard pread(fd, &bytes, bytes.count, 0) == 8192 else { return 0 }
        func read(_ at: Int) -> UInt64 { (0..<8).reduce(UInt64(0)) { $0 | UInt64(bytes[at + $1]) << (8 * UInt64($1)) } }
        let slots = [0, 4096].filter { Array(bytes[$0..<($0 + 8)]) == Array("ROOSTEND".utf8) }
        return slots.max { read($0 + 16) < read($1 + 16) }.map { read($0 + 24) } ?? 0
    }

    /// Runs `roost serve` on `data` (bounded: 15 s) and returns its exit code and output.
    static func serveRefusal(_ data: String) -> (code: Int32, output: String) {
        let out = data + ".serve.out"
        let status = system(
            "timeout 15 '\(RoostProcess.builtProduct("roost"))' serve --listen 127.0.0.1:0 --data '\(data)'"
                + " > '\(out)' 2>&1")
        let text = (try? DurableFile.readIfExists(path: out, limitBytes: 1 << 20)).flatMap { $0 }
        return ((status >> 8) & 0xFF, text.map { String(decoding: $0, as: UTF8.self) } ?? "")
    }

    /// The four shapes of a shortened log (Roost issue 9, finding 4).
    enum Shape: String, CaseIterable {
        case truncatedAtRecordBoundary, zeroedFromRecordBoundary, cutToHeader, segmentDeleted
    }

    @Test(
        "a log cut, zeroed or deleted at a record boundary: serve refuses (exit 2) and verify fails, naming file and offset",
        arguments: [false, true])
    func shortenedLog(snapshot: Bool) throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-system")
        defer { TemporaryDirectory.remove(directory) }
        let data = directory + "/data"
        var (process, _) = try ServeTests.start(data: directory)
        let key = try CrashRecoveryTests.setUp(port: process.port)
        func register(_ slots: Range<Int>) throws {
            for slot in slots {
                let body = #"{"platform":"ios","token":"\#(CrashRecoveryTests.token(client: 4, slot: slot))"}"#
                #expect(try ServeTests.request(process.port, "POST", "/v1/devices", key: key, body: body).status == 201)
            }
        }
        try register(0..<25)
        if snapshot {
            // A clean stop writes a snapshot of everything so far; the log goes on after it.
            #expect(process.stop(signal: SIGTERM) == 0)
            (process, _) = try ServeTests.start(data: directory)
        }
        try register(25..<50)
        let segment = data + "/wal/00000000000000000001.seg"
        let records = Self.records(segment)
        let last = try #require(records.last)
        // A crash, not a clean stop: the end is known only as far as the log-end
        // file recorded it, about a second after the last sync at the latest.
        _ = ConditionWait.until(within: .seconds(5)) { Self.logEndLSN(data) >= last.lsn }
        _ = process.stop(signal: SIGKILL)
        let clean = Self.verify(data)
        #expect(clean.code == 0, "\(clean.output)")
        // Ten records before the end: after the snapshot in either case.
        let boundary = records[records.count - 10].offset
        let recordsEnd = last.offset + 24 + 256
        for shape in Shape.allCases {
            let copy = directory + "/" + shape.rawValue
            #expect(system("mkdir -p '\(copy)' && cp -a '\(data)' '\(copy)/data'") == 0)
            let damaged = copy + "/data/wal/00000000000000000001.seg"
            switch shape {
            case .truncatedAtRecordBoundary: #expect(truncate(damaged, off_t(boundary)) == 0)
            case .cutToHeader: #expect(truncate(damaged, 32) == 0)
            case .segmentDeleted: #expect(unlink(damaged) == 0)
            case .zeroedFromRecordBoundary:
                let fd = open(damaged, O_RDWR)
                var zeros = [UInt8](repeating: 0, count: recordsEnd - boundary)
                #expect(pwrite(fd, &zeros, zeros.count, off_t(boundary)) == zeros.count)
                close(fd)
            }
            let verified = Self.verify(copy + "/data")
            #expect(verified.code == 2, "\(shape): \(verified.output)")
            #expect(verified.output.contains(copy + "/data/wal"), "\(shape): \(verified.output)")
            #expect(verified.output.contains("offset"), "\(shape): \(verified.output)")
            do {
                let (started, _) = try ServeTests.start(data: copy)
                Issue.record("\(shape): started on a shortened log")
                _ = started.stop(signal: SIGKILL)
            } catch {
                let refused = Self.serveRefusal(copy + "/data")
                #expect(refused.code == 2, "\(shape): \(refused.output)")
                #expect(refused.output.contains(copy + "/data/wal"), "\(shape): \(refused.output)")
                #expect(refused.output.contains("offset"), "\(shape): \(refused.output)")
            }
        }
    }

    @Test(
        "disk full (ENOSPC injected into the log's pwrite): the write answered 503 is not visible to reads; a restart recovers",
        .enabled(if: InjectedFault.isAvailable))
    func diskFull() throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-system")
        defer { TemporaryDirectory.remove(directory) }
        let data = directory + "/data"
        var (process, _) = try ServeTests.start(data: directory)
        let key = try CrashRecoveryTests.setUp(port: process.port)
        func register(_ slot: Int) throws -> Int {
            let body = #"{"platform":"ios","token":"\#(CrashRecoveryTests.token(client: 5, slot: slot))"}"#
            return try ServeTests.request(process.port, "POST", "/v1/devices", key: key, body: body).status
        }
        #expect(try register(0) == 201)
        // From now on every write into the segment fails with ENOSPC.
        let segment = data + "/wal/00000000000000000001.seg"
        let (fault, attached) = try InjectedFault.start(
            pid: process.pid, options: "-e trace=pwrite64 -e inject=pwrite64:error=ENOSPC -P '\(segment)'",
            scratch: data + ".strace.pid")
        defer { fault.stop() }
        #expect(attached)
        let refused = try register(1)
        #expect(refused == 503)
        #expect(try register(2) == 503, "the log accepts no write after it failed")
        let stats = try ServeTests.request(process.port, "GET", "/v1/stats", key: key)
        let devices = try? JSONReader.parse(stats.body)["devices"]?.intValue
        // Spec §2: a write answered 503 was not applied, so no read may show it.
        #expect(stats.status == 503 || devices == 1, "\(stats.status) \(stats.bodyText)")
        #expect(devices != 2, "the write answered 503 is visible")
        #expect(try ServeTests.request(process.port, "GET", "/healthz").status == 200)
        _ = process.stop(signal: SIGKILL)
        (process, _) = try ServeTests.start(data: directory)
        let recovered = try ServeTests.request(process.port, "GET", "/v1/stats", key: key)
        #expect(try JSONReader.parse(recovered.body)["devices"]?.intValue == 1, "\(recovered.bodyText)")
        #expect(process.stop(signal: SIGTERM) == 0)
    }
}
