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
}
