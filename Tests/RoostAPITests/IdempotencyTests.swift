import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostPlatform
import RoostStorage
import RoostTesting
import Synchronization
import Testing

@testable import RoostAPI

extension Harness {
    /// Sends a request with an `Idempotency-Key` (nil: without one) and any other headers.
    func call(
        _ method: HTTPMethod, _ target: String, key: String?, body: String? = nil, idempotencyKey: String?,
        headers extra: [(String, String)] = []
    ) async -> Answer {
        var headers = HTTPHeaders([("Host", "test")])
        if let key { headers.append(name: "Authorization", value: "Bearer \(key)") }
        if let idempotencyKey { headers.append(name: "Idempotency-Key", value: idempotencyKey) }
        for (name, value) in extra { headers.append(name: name, value: value) }
        let head = HTTPRequestHead(method: method, target: target, version: .http11, headers: headers, keepAlive: true)
        let response = await service.handle(HTTPRequest(head: head, body: Array((body ?? "").utf8)))
        return Answer(status: response.status, headers: response.headers, body: response.body)
    }

    /// Everything an (app, mode) index holds, remembered answers included.
    func indexState(app: Int, mode: AppMode = .live) async throws -> [Mutation] {
        try await withIndex(app: app, mode: mode) { index, _ in (index.snapshotMutations(), []) }
    }
}

/// A log whose acknowledgements can be held back: a request stays in flight
/// until `release`.
final class HoldingLog: MutationLog {
    private struct State {
        var appended: UInt64 = 0
        var acknowledged: UInt64 = 0
        var holding = false
        var waiting: [LoopExecutor] = []
    }

    private let state = Mutex(State())

    func append(_ records: [[UInt8]]) -> LogSequenceNumber? {
        state.withLock { state in
            state.appended += UInt64(records.count)
            if !state.holding { state.acknowledged = state.appended }
            return LogSequenceNumber(state.appended)
        }
    }

    var appendedThrough: LogSequenceNumber { LogSequenceNumber(state.withLock { $0.appended }) }
    var acknowledgedThrough: LogSequenceNumber { LogSequenceNumber(state.withLock { $0.acknowledged }) }
    var acceptsWrites: Bool { true }

    func wakeWhenAcknowledged(_ lsn: LogSequenceNumber, _ executor: LoopExecutor) {
        let now = state.withLock { state -> Bool in
            if lsn <= LogSequenceNumber(state.acknowledged) { return true }
            state.waiting.append(executor)
            return false
        }
        if now { executor.wake() }
    }

    func hold() { state.withLock { $0.holding = true } }

    func release() {
        let waiting = state.withLock { state -> [LoopExecutor] in
            state.holding = false
            state.acknowledged = state.appended
            defer { state.waiting = [] }
            return state.waiting
        }
        for executor in waiting { executor.wake() }
    }
}

/// Spec §7, second bullet: `Idempotency-Key`.
@Suite("Idempotency-Key (spec §7)")
struct IdempotencyTests {
    static let replayed = "Idempotent-Replayed"

    @Test("a retry with the same key gets the first answer again, marked Idempotent-Replayed, and applies nothing")
    func replay() async throws {
        let app = try await DeviceApp.make()
        let body = #"{"platform":"ios","token":"\#(TestTokens.apns(1))","tags":{"n":1}}"#
        let first = await app.harness.call(.post, "/v1/devices", key: app.secret, body: body, idempotencyKey: "k-1")
        #expect(first.status == 201)
        #expect(first.header(IdempotencyTests.replayed) == nil)
        let state = try await app.harness.indexState(app: app.app)
        app.harness.clock.advance(milliseconds: 60_000)
        let again = await app.harness.call(.post, "/v1/devices", key: app.secret, body: body, idempotencyKey: "k-1")
        #expect(again.status == 201, "the first status, not the 200 a re-registration answers")
        #expect(again.body == first.body)
        #expect(again.header(IdempotencyTests.replayed) == "true")
        #expect(try await app.harness.indexState(app: app.app) == state, "a replay applies nothing")
        // Without the key the same body is applied again: 200, last_seen_at moves.
        let plain = await app.register(body)
        #expect(plain.status == 200)
        #expect(plain.json?["last_seen_at"] != first.json?["last_seen_at"])
    }

    @Test("the key is 1 to 200 visible ASCII characters, sent once; anything else is 400 and applies nothing")
    func keyShape() async throws {
        let app = try await DeviceApp.make()
        let body = #"{"platform":"ios","token":"\#(TestTokens.apns(1))"}"#
        let longest = String(repeating: "k", count: 200)
        #expect(
            await app.harness.call(.post, "/v1/devices", key: app.secret, body: body, idempotencyKey: longest).status
                == 201)
        let bad = [
            "", String(repeating: "k", count: 201), "has space", "tab\there", "caf\u{e9}", "nul\u{7f}",
        ]
        for (index, key) in bad.enumerated() {
            let answer = await app.harness.call(
                .post, "/v1/devices", key: app.secret,
                body: #"{"platform":"ios","token":"\#(TestTokens.apns(10 + index))"}"#,
                idempotencyKey: key)
            #expect(answer.status == 400, "key \(key.debugDescription)")
            #expect(answer.errorCode == "invalid_idempotency_key")
        }
        let twice = await app.harness.call(
            .post, "/v1/devices", key: app.secret, body: #"{"platform":"ios","token":"\#(TestTokens.apns(30))"}"#,
            idempotencyKey: "a", headers: [("Idempotency-Key", "b")])
        #expect(twice.status == 400)
        #expect(await app.call(.get, "/v1/stats").json?["devices"]?.intValue == 1)
        // Every visible ASCII character is allowed.
        let visible = String(decoding: Array(UInt8(0x21)...UInt8(0x7E)), as: UTF8.self)
        let all = await app.harness.call(
            .post, "/v1/devices", key: app.secret, body: #"{"platform":"ios","token":"\#(TestTokens.apns(31))"}"#,
            idempotencyKey: visible)
        #expect(all.status == 201)
    }

    @Test("the same key with another method, path or body is 422 idempotency_key_reused and applies nothing")
    func reused() async throws {
        let app = try await DeviceApp.make()
        let body = #"{"platform":"ios","token":"\#(TestTokens.apns(1))"}"#
        let first = await app.harness.call(.post, "/v1/devices", key: app.secret, body: body, idempotencyKey: "same")
        let id = try #require(first.json?["id"]?.stringValue)
        let state = try await app.harness.indexState(app: app.app)
        let attempts = [
            await app.harness.call(
                .post, "/v1/devices", key: app.secret, body: #"{"platform":"ios","token":"\#(TestTokens.apns(2))"}"#,
                idempotencyKey: "same"),
            await app.harness.call(
                .post, "/v1/devices/batch", key: app.secret, body: #"{"devices":[\#(body)]}"#, idempotencyKey: "same"),
            await app.harness.call(.delete, "/v1/devices/\(id)", key: app.secret, idempotencyKey: "same"),
            await app.harness.call(
                .patch, "/v1/devices/\(id)", key: app.secret, body: body, idempotencyKey: "same"),
        ]
        for answer in attempts {
            #expect(answer.status == 422)
            #expect(answer.errorCode == "idempotency_key_reused")
            #expect(answer.header(IdempotencyTests.replayed) == nil)
        }
        #expect(try await app.harness.indexState(app: app.app) == state)
    }

    @Test("answers belong to one API key: another key's same Idempotency-Key is its own request")
    func perAPIKey() async throws {
        let app = try await DeviceApp.make()
        let other = try await app.key(["devices:write"])
        let body = #"{"platform":"ios","token":"\#(TestTokens.apns(1))"}"#
        #expect(
            await app.harness.call(.post, "/v1/devices", key: app.secret, body: body, idempotencyKey: "k").status == 201
        )
        let second = await app.harness.call(.post, "/v1/devices", key: other, body: body, idempotencyKey: "k")
        #expect(second.status == 200)
        #expect(second.header(IdempotencyTests.replayed) == nil)
        // A different body under the other key is not a reuse either.
        let third = await app.harness.call(
            .post, "/v1/devices", key: app.mobile, body: #"{"platform":"ios","token":"\#(TestTokens.apns(2))"}"#,
            idempotencyKey: "k")
        #expect(third.status == 201)
    }

    @Test("within 24 hours the answer is replayed; after them the key starts a new request")
    func retention() async throws {
        let app = try await DeviceApp.make()
        let body = #"{"platform":"ios","token":"\#(TestTokens.apns(1))"}"#
        #expect(
            await app.harness.call(.post, "/v1/devices", key: app.secret, body: body, idempotencyKey: "day").status
                == 201)
        app.harness.clock.advance(milliseconds: IdempotencyLimits.retentionMilliseconds - 1)
        let within = await app.harness.call(.post, "/v1/devices", key: app.secret, body: body, idempotencyKey: "day")
        #expect(within.status == 201)
        #expect(within.header(IdempotencyTests.replayed) == "true")
        app.harness.clock.advance(milliseconds: 1)
        let after = await app.harness.call(.post, "/v1/devices", key: app.secret, body: body, idempotencyKey: "day")
        #expect(after.status == 200)
        #expect(after.header(IdempotencyTests.replayed) == nil)
        // …and that new answer is remembered in turn.
        let again = await app.harness.call(.post, "/v1/devices", key: app.secret, body: body, idempotencyKey: "day")
        #expect(again.status == 200)
        #expect(again.body == after.body)
        #expect(again.header(IdempotencyTests.replayed) == "true")
    }

    @Test("a model refusal is remembered too: the retry gets the same 409 even once it would succeed")
    func refusalRemembered() async throws {
        let app = try await DeviceApp.make(settings: #"{"require_known_person":true}"#)
        let body = #"{"platform":"ios","token":"\#(TestTokens.apns(1))","external_id":"later"}"#
        let first = await app.harness.call(.post, "/v1/devices", key: app.secret, body: body, idempotencyKey: "r")
        #expect(first.status == 409)
        #expect(await app.call(.put, "/v1/people/later").status == 201)
        let again = await app.harness.call(.post, "/v1/devices", key: app.secret, body: body, idempotencyKey: "r")
        #expect(again.status == 409)
        #expect(again.body == first.body)
        #expect(again.header(IdempotencyTests.replayed) == "true")
        #expect(await app.call(.get, "/v1/stats").json?["devices"]?.intValue == 0)
    }

    @Test("a request still in flight with the same key is 409 idempotency_key_in_use; once answered it replays")
    func inFlight() async throws {
        let log = HoldingLog()
        let harness = Harness(log: log)
        let app = try await DeviceApp.make(harness)
        let body = #"{"platform":"ios","token":"\#(TestTokens.apns(1))"}"#
        log.hold()
        let first = Task {
            await harness.call(.post, "/v1/devices", key: app.secret, body: body, idempotencyKey: "slow")
        }
        _ = await ConditionWait.until { () async -> Bool in harness.service.idempotencyInFlight.count > 0 }
        #expect(harness.service.idempotencyInFlight.count == 1)
        let busy = await harness.call(.post, "/v1/devices", key: app.secret, body: body, idempotencyKey: "slow")
        #expect(busy.status == 409)
        #expect(busy.errorCode == "idempotency_key_in_use")
        // Another key is not held up by it (its answer waits for the log too).
        log.release()
        let answered = await first.value
        #expect(answered.status == 201)
        #expect(harness.service.idempotencyInFlight.count == 0)
        let replay = await harness.call(.post, "/v1/devices", key: app.secret, body: body, idempotencyKey: "slow")
        #expect(replay.status == 201)
        #expect(replay.body == answered.body)
        #expect(replay.header(IdempotencyTests.replayed) == "true")
    }

    @Test("a 400 of the route's own checks is not remembered: the corrected request with the key is applied")
    func validationNotRemembered() async throws {
        let app = try await DeviceApp.make()
        let bad = await app.harness.call(
            .post, "/v1/devices", key: app.secret, body: #"{"platform":"ios"}"#, idempotencyKey: "fix")
        #expect(bad.status == 400)
        let fixed = await app.harness.call(
            .post, "/v1/devices", key: app.secret, body: #"{"platform":"ios","token":"\#(TestTokens.apns(1))"}"#,
            idempotencyKey: "fix")
        #expect(fixed.status == 201)
    }

    @Test("the header is ignored outside spec §4, §6 and §7 (apps and keys, the operator's routes)")
    func outsideScope() async throws {
        let harness = try Harness()
        let first = await harness.call(
            .post, "/v1/apps", key: Harness.adminKey, body: #"{"name":"A"}"#, idempotencyKey: "x")
        let second = await harness.call(
            .post, "/v1/apps", key: Harness.adminKey, body: #"{"name":"A"}"#, idempotencyKey: "x")
        #expect(first.status == 201)
        #expect(second.status == 201)
        #expect(first.json?["id"] != second.json?["id"])
        let ignored = await harness.call(
            .post, "/v1/apps", key: Harness.adminKey, body: #"{"name":"B"}"#, idempotencyKey: "")
        #expect(ignored.status == 201)
    }

    @Test("every write route of spec §4, §6 and §7 in the route table takes the header; no other does")
    func routeCoverage() async throws {
        let harness = try Harness()
        var taking: [String] = []
        for route in harness.service.routes where Idempotency.applies(to: route) {
            taking.append("\(route.method.name) \(route.path)")
        }
        let expected = [
            "POST /v1/devices", "POST /v1/devices/import", "POST /v1/devices/batch", "PATCH /v1/devices/{id}",
            "DELETE /v1/devices/{id}", "PUT /v1/people/{external_id}", "DELETE /v1/people/{external_id}",
            "PUT /v1/credentials/apns/{bundle_id}/{environment}",
            "DELETE /v1/credentials/apns/{bundle_id}/{environment}", "POST /v1/feedback",
            "PUT /api/integrations/v1/devices", "DELETE /api/integrations/v1/devices",
            "POST /api/universal/device/register", "POST /api/universal/device/deregister",
            "POST /v1/identities/guest", "POST /v1/identities/authenticated", "PUT /v1/me/devices",
            "DELETE /v1/me/devices/{installation_id}",
        ]
        #expect(Set(taking).isSuperset(of: Set(expected)), "missing: \(Set(expected).subtracting(taking).sorted())")
        for route in harness.service.routes where !Idempotency.applies(to: route) {
            let scoped = [RouteAccess.open, .operatorKey, .setup, .liveSetup].contains(route.access)
            #expect(scoped || route.method == .get || route.method == .head, "\(route.method.name) \(route.path)")
        }
    }
}

@Suite("Idempotency-Key: remembered answers are durable (spec §7)")
struct IdempotencyDurabilityTests {
    @Test(
        "a remembered answer survives a restart from the log and from a snapshot: same body, replayed, nothing applied",
        arguments: [false, true])
    func survivesRestart(snapshot: Bool) async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (harness, engine) = try await Harness.durable(directory)
        let app = try await DeviceApp.make(harness)
        let body = #"{"devices":[{"platform":"ios","token":"\#(TestTokens.apns(1))"},{"platform":"ios"}]}"#
        let first = await harness.call(.post, "/v1/devices/batch", key: app.secret, body: body, idempotencyKey: "d")
        #expect(first.status == 200)
        let single = await harness.call(
            .post, "/v1/devices", key: app.secret, body: #"{"platform":"ios","token":"\#(TestTokens.apns(2))"}"#,
            idempotencyKey: "s")
        #expect(single.status == 201)
        if snapshot { #expect(try await engine.snapshot() != nil) }
        let state = try await harness.indexState(app: app.app)
        engine.close()

        let (reopened, reopenedEngine) = try await Harness.durable(directory)
        defer { reopenedEngine.close() }
        #expect(try await reopened.indexState(app: app.app) == state)
        let again = await reopened.call(.post, "/v1/devices/batch", key: app.secret, body: body, idempotencyKey: "d")
        #expect(again.status == 200)
        #expect(again.body == first.body)
        #expect(again.header("Idempotent-Replayed") == "true")
        let singleAgain = await reopened.call(
            .post, "/v1/devices", key: app.secret, body: #"{"platform":"ios","token":"\#(TestTokens.apns(2))"}"#,
            idempotencyKey: "s")
        #expect(singleAgain.status == 201)
        #expect(singleAgain.body == single.body)
        #expect(try await reopened.indexState(app: app.app) == state, "the replays applied nothing")
    }
}
