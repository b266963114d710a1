import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting
import Testing

/// Remembered answers of `Idempotency-Key` (spec §7) with the real binary:
/// an acknowledged answer survives kill -9, from the log and from a snapshot.
@Suite("Idempotency-Key across kill -9 (system)", .serialized)
struct IdempotencySystemTests {
    /// One request with an `Idempotency-Key`.
    static func request(_ port: UInt16, _ path: String, key: String, idempotencyKey: String, body: String) throws
        -> LoopbackResponse
    {
        let connection = try LoopbackConnection(port: port)
        let head =
            "POST \(path) HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer \(key)\r\n"
            + "Idempotency-Key: \(idempotencyKey)\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(body.utf8.count)\r\n\r\n"
        try connection.send(head + body)
        return try connection.readResponse(timeout: .seconds(5))
    }

    static func deviceCount(_ port: UInt16, key: String) throws -> Int? {
        let stats = try ServeTests.request(port, "GET", "/v1/stats", key: key)
        return try JSONReader.parse(stats.body)["devices"]?.intValue
    }

    static func expectReplay(
        _ port: UInt16, key: String, idempotencyKey: String, path: String, body: String, first: LoopbackResponse,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let again = try request(port, path, key: key, idempotencyKey: idempotencyKey, body: body)
        #expect(again.status == first.status, sourceLocation: sourceLocation)
        #expect(again.bodyText == first.bodyText, sourceLocation: sourceLocation)
        #expect(again.header("Idempotent-Replayed") == "true", sourceLocation: sourceLocation)
    }

    @Test("an acknowledged answer is replayed after kill -9, from the log and then from a snapshot; nothing is applied")
    func killNine() throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-system")
        defer { TemporaryDirectory.remove(directory) }
        var (process, _) = try ServeTests.start(data: directory, extra: ["--fsync", "always"])
        let key = try CrashRecoveryTests.setUp(port: process.port)
        let register = #"{"platform":"ios","token":"\#(CrashRecoveryTests.token(client: 1, slot: 1))"}"#
        let first = try Self.request(process.port, "/v1/devices", key: key, idempotencyKey: "crash-1", body: register)
        #expect(first.status == 201)
        let batch =
            #"{"devices":[{"platform":"ios","token":"\#(CrashRecoveryTests.token(client: 1, slot: 2))"},{"platform":"web"}]}"#
        let batched = try Self.request(
            process.port, "/v1/devices/batch", key: key, idempotencyKey: "crash-2", body: batch)
        #expect(batched.status == 200)
        #expect(process.stop(signal: SIGKILL) == 128 + SIGKILL)

        // From the log.
        (process, _) = try ServeTests.start(data: directory, extra: ["--fsync", "always"])
        try Self.expectReplay(
            process.port, key: key, idempotencyKey: "crash-1", path: "/v1/devices", body: register, first: first)
        try Self.expectReplay(
            process.port, key: key, idempotencyKey: "crash-2", path: "/v1/devices/batch", body: batch, first: batched)
        #expect(try Self.deviceCount(process.port, key: key) == 2)

        // A clean stop writes a snapshot; the answers are then in it, not in the log after it.
        #expect(process.stop(signal: SIGTERM) == 0)
        (process, _) = try ServeTests.start(data: directory, extra: ["--fsync", "always"])
        let later = #"{"platform":"ios","token":"\#(CrashRecoveryTests.token(client: 1, slot: 3))"}"#
        let third = try Self.request(process.port, "/v1/devices", key: key, idempotencyKey: "crash-3", body: later)
        #expect(third.status == 201)
        #expect(process.stop(signal: SIGKILL) == 128 + SIGKILL)

        (process, _) = try ServeTests.start(data: directory, extra: ["--fsync", "always"])
        defer { _ = process.stop(signal: SIGTERM) }
        try Self.expectReplay(
            process.port, key: key, idempotencyKey: "crash-1", path: "/v1/devices", body: register, first: first)
        try Self.expectReplay(
            process.port, key: key, idempotencyKey: "crash-2", path: "/v1/devices/batch", body: batch, first: batched)
        try Self.expectReplay(
            process.port, key: key, idempotencyKey: "crash-3", path: "/v1/devices", body: later, first: third)
        #expect(try Self.deviceCount(process.port, key: key) == 3, "the replays applied nothing")
        let reused = try Self.request(process.port, "/v1/devices", key: key, idempotencyKey: "crash-1", body: later)
        #expect(reused.status == 422)
    }
}
