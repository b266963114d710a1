import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

/// Erasure erases everywhere (issue 24, deliverable 5, findings M-5 and L-1)
/// through the routes: replayed `Idempotency-Key`s, identity tokens and the
/// history of devices that moved away, before and after a restart.
@Suite("Erasure erases everywhere: replays, identity tokens, moved devices' history")
struct ErasureRoutesTests {
    @Test("M-5: a replay after DELETE /v1/people/{id} answers 410 person_erased, naming nobody, across a restart")
    func replayAfterErasure() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (first, engine) = try await Harness.durable(directory)
        let app = try await DeviceApp.make(first)
        let body =
            #"{"platform":"ios","token":"\#(TestTokens.apns(1))","external_id":"erased_ada","installation_id":"ada-inst","tags":{"plan":"pro"}}"#
        let registered = await first.call(.post, "/v1/devices", key: app.secret, body: body, idempotencyKey: "r-1")
        #expect(registered.status == 201)
        let mint = #"{"external_id":"erased_ada"}"#
        let minted = await first.call(
            .post, "/v1/identities/authenticated", key: app.secret, body: mint, idempotencyKey: "m-1")
        #expect(minted.status == 201)
        let erased = await first.call(.delete, "/v1/people/erased_ada", key: app.secret)
        #expect(erased.status == 200)

        for harness in [first] {
            for (target, body, key) in [("/v1/devices", body, "r-1"), ("/v1/identities/authenticated", mint, "m-1")] {
                let replay = await harness.call(.post, target, key: app.secret, body: body, idempotencyKey: key)
                #expect(replay.status == 410, "\(target): \(replay.status) \(replay.text)")
                #expect(replay.errorCode == "person_erased", "\(target): \(replay.text)")
                #expect(replay.header("Idempotent-Replayed") == "true")
                #expect(!replay.text.contains("erased_ada") && !replay.text.contains("ada-inst"), "\(replay.text)")
                #expect(!replay.text.contains("identity_token"))
            }
        }
        #expect(await first.call(.get, "/v1/people/erased_ada", key: app.secret).status == 404, "nothing re-created")
        engine.close()

        let (second, secondEngine) = try await Harness.durable(directory)
        defer { secondEngine.close() }
        for (target, body, key) in [("/v1/devices", body, "r-1"), ("/v1/identities/authenticated", mint, "m-1")] {
            let replay = await second.call(.post, target, key: app.secret, body: body, idempotencyKey: key)
            #expect(replay.status == 410, "after restart \(target): \(replay.status) \(replay.text)")
            #expect(!replay.text.contains("erased_ada"), "after restart: \(replay.text)")
        }
        #expect(await second.call(.get, "/v1/people/erased_ada", key: app.secret).status == 404)
    }

    @Test("M-5: an identity token issued before the erasure → 401, across a restart; a new one and others work")
    func tokenStopsWorking() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (first, engine) = try await Harness.durable(directory)
        let app = try await DeviceApp.make(first)
        let connect = ConnectTests.App(id: app.app, mobile: app.mobile, secret: app.secret)
        let old = try await ConnectTests.user(first, connect, "erased_eve")
        let bystander = try await ConnectTests.user(first, connect, "bob")
        let put = await first.call(.put, "/v1/me/devices", key: old, body: ConnectTests.device(installation: "i-1"))
        #expect(put.status == 201)
        first.clock.advance(milliseconds: 1_000)
        #expect(await first.call(.delete, "/v1/people/erased_eve", key: app.secret).status == 200)
        first.clock.advance(milliseconds: 1_000)

        let again = await first.call(.put, "/v1/me/devices", key: old, body: ConnectTests.device(installation: "i-1"))
        #expect(again.status == 401, "\(again.status) \(again.text)")
        #expect(await first.call(.get, "/v1/people/erased_eve", key: app.secret).status == 404, "not re-created")
        let delete = await first.call(.delete, "/v1/me/devices/i-1", key: old)
        #expect(delete.status == 401, "\(delete.status) \(delete.text)")
        let others = await first.call(
            .put, "/v1/me/devices", key: bystander,
            body: ConnectTests.device(installation: "b-1", token: TestTokens.apns(2)))
        #expect(others.status == 201, "another user's token still works: \(others.text)")
        engine.close()

        let (second, secondEngine) = try await Harness.durable(directory)
        defer { secondEngine.close() }
        second.clock.advance(milliseconds: 3_000)
        let afterRestart = await second.call(
            .put, "/v1/me/devices", key: old, body: ConnectTests.device(installation: "i-1"))
        #expect(afterRestart.status == 401, "after restart: \(afterRestart.status) \(afterRestart.text)")
        // A token minted after the erasure is the new person's, and works; the old one stays dead.
        let fresh = try await ConnectTests.user(second, connect, "erased_eve")
        let recreated = await second.call(
            .put, "/v1/me/devices", key: fresh, body: ConnectTests.device(installation: "i-1"))
        #expect(recreated.status == 201, "\(recreated.text)")
        let stillOld = await second.call(
            .put, "/v1/me/devices", key: old, body: ConnectTests.device(installation: "i-1"))
        #expect(stillOld.status == 401, "a re-created person does not revive old tokens")
    }

    @Test("after erasure the index's snapshot names the person nowhere, also answers made with their own token")
    func snapshotNamesNobody() async throws {
        let app = try await DeviceApp.make()
        let harness = app.harness
        let connect = ConnectTests.App(id: app.app, mobile: app.mobile, secret: app.secret)
        let token = try await ConnectTests.user(harness, connect, "erased_kim")
        let put = await harness.call(
            .put, "/v1/me/devices", key: token, body: ConnectTests.device(installation: "k-1"), idempotencyKey: "k")
        #expect(put.status == 201)
        let minted = await harness.call(
            .post, "/v1/identities/authenticated", key: app.secret, body: #"{"external_id":"erased_kim"}"#,
            idempotencyKey: "mint")
        #expect(minted.status == 201)
        _ = try await app.registerID(2, #""external_id":"erased_kim""#)
        _ = try await app.registerID(2, #""external_id":"bob""#)
        #expect(String(describing: try await harness.indexState(app: app.app)).contains("erased_kim"))
        harness.clock.advance(milliseconds: 1_000)
        #expect(await app.call(.delete, "/v1/people/erased_kim").status == 200)
        let state = String(describing: try await harness.indexState(app: app.app))
        #expect(!state.contains("erased_kim"), "\(state)")
    }

    @Test("L-1: the history of a device that moved away before the erasure no longer names the person")
    func movedDeviceHistory() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1, #""external_id":"erased_zoe""#)
        app.harness.clock.advance(milliseconds: 1_000)
        _ = try await app.registerID(1, #""external_id":"bob""#)
        let before = await app.call(.get, "/v1/devices/\(id)/history")
        #expect(before.text.contains("erased_zoe"))
        #expect(await app.call(.delete, "/v1/people/erased_zoe").status == 200)
        let after = await app.call(.get, "/v1/devices/\(id)/history")
        #expect(after.status == 200)
        #expect(!after.text.contains("erased_zoe"), "\(after.text)")
        let kinds = after.json?["events"]?.arrayValue?.compactMap { $0["kind"]?.stringValue }
        #expect(kinds == ["moved", "registered", "created"])
        let export = await app.call(.get, "/v1/people/bob/export")
        #expect(!export.text.contains("erased_zoe"), "\(export.text)")
    }
}
