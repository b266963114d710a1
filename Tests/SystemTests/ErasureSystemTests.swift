import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting
import Testing

/// Erasure erases everywhere (issue 24 M-5 and L-1, decision 0079) with the
/// real binary: after `DELETE /v1/people/{id}`, kill -9 and a restart from
/// the log, then a clean stop and a restart from the snapshot, a replayed
/// key answers 410 `person_erased`, the person's old identity token 401, and
/// a moved device's history names nobody.
@Suite("Erasure across kill -9 and snapshots (system)", .serialized)
struct ErasureSystemTests {
    static func setUp(port: UInt16) throws -> String {
        _ = try ServeTests.request(port, "POST", "/v1/apps", key: ServeTests.adminKey, body: #"{"name":"erasure"}"#)
        let made = try ServeTests.request(
            port, "POST", "/v1/apps/1/keys", key: ServeTests.adminKey,
            body: #"{"kind":"secret","capabilities":["devices:write","devices:read","people:write"]}"#)
        return try #require(try JSONReader.parse(made.body)["key"]?.stringValue)
    }

    static func expectErased(
        _ port: UInt16, key: String, register: String, token: String, deviceID: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let replay = try IdempotencySystemTests.request(
            port, "/v1/devices", key: key, idempotencyKey: "erase-1", body: register)
        #expect(replay.status == 410, "\(replay.bodyText)", sourceLocation: sourceLocation)
        #expect(replay.header("Idempotent-Replayed") == "true", sourceLocation: sourceLocation)
        #expect(!replay.bodyText.contains("erased_sys"), "\(replay.bodyText)", sourceLocation: sourceLocation)
        let device =
            #"{"installation_id":"sys-1","platform":"ios","token":"\#(CrashRecoveryTests.token(client: 9, slot: 3))"}"#
        let again = try ServeTests.request(port, "PUT", "/v1/me/devices", key: token, body: device)
        #expect(again.status == 401, "\(again.bodyText)", sourceLocation: sourceLocation)
        let history = try ServeTests.request(port, "GET", "/v1/devices/\(deviceID)/history", key: key)
        #expect(history.status == 200, sourceLocation: sourceLocation)
        #expect(!history.bodyText.contains("erased_sys"), "\(history.bodyText)", sourceLocation: sourceLocation)
        let person = try ServeTests.request(port, "GET", "/v1/people/erased_sys", key: key)
        #expect(person.status == 404, "nothing re-created", sourceLocation: sourceLocation)
    }

    @Test("replay 410, old token 401, moved history clean: after kill -9 (log) and after a clean stop (snapshot)")
    func erasureSurvivesRestarts() throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-system")
        defer { TemporaryDirectory.remove(directory) }
        var (process, _) = try ServeTests.start(data: directory, extra: ["--fsync", "always"])
        let key = try Self.setUp(port: process.port)
        let register =
            #"{"platform":"ios","token":"\#(CrashRecoveryTests.token(client: 9, slot: 1))","external_id":"erased_sys"}"#
        let first = try IdempotencySystemTests.request(
            process.port, "/v1/devices", key: key, idempotencyKey: "erase-1", body: register)
        #expect(first.status == 201)
        let deviceID = try #require(try JSONReader.parse(first.body)["id"]?.stringValue)
        let moved =
            #"{"platform":"ios","token":"\#(CrashRecoveryTests.token(client: 9, slot: 1))","external_id":"bob"}"#
        #expect(try ServeTests.request(process.port, "POST", "/v1/devices", key: key, body: moved).status == 200)
        let minted = try ServeTests.request(
            process.port, "POST", "/v1/identities/authenticated", key: key, body: #"{"external_id":"erased_sys"}"#)
        let token = try #require(try JSONReader.parse(minted.body)["identity_token"]?.stringValue)
        let device =
            #"{"installation_id":"sys-1","platform":"ios","token":"\#(CrashRecoveryTests.token(client: 9, slot: 2))"}"#
        #expect(try ServeTests.request(process.port, "PUT", "/v1/me/devices", key: token, body: device).status == 201)
        let erased = try ServeTests.request(process.port, "DELETE", "/v1/people/erased_sys", key: key)
        #expect(erased.status == 200)
        try Self.expectErased(process.port, key: key, register: register, token: token, deviceID: deviceID)
        #expect(process.stop(signal: SIGKILL) == 128 + SIGKILL)

        // From the log.
        (process, _) = try ServeTests.start(data: directory, extra: ["--fsync", "always"])
        try Self.expectErased(process.port, key: key, register: register, token: token, deviceID: deviceID)
        // A clean stop writes a snapshot: the redactions and the mark are in it.
        #expect(process.stop(signal: SIGTERM) == 0)
        (process, _) = try ServeTests.start(data: directory, extra: ["--fsync", "always"])
        defer { _ = process.stop(signal: SIGTERM) }
        try Self.expectErased(process.port, key: key, register: register, token: token, deviceID: deviceID)
    }
}
