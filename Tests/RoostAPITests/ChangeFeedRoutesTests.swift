import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostTesting
import Synchronization
import Testing

@testable import RoostAPI

/// Spec §9 `GET /v1/changes` and the export's `Roost-Cursor` over the real
/// routes. docs/api.md "§9 change feed" maps each sentence to these tests.
@Suite("Change feed and point-in-time export (spec §9)")
struct ChangeFeedRoutesTests {
    static func changes(_ answer: Answer) -> [JSONValue] { answer.json?["changes"]?.arrayValue ?? [] }
    static func cursors(_ answer: Answer) -> [String] { changes(answer).compactMap { $0["cursor"]?.stringValue } }

    func feed(_ app: DeviceApp, _ query: String = "", key: String? = nil) async -> Answer {
        await app.call(.get, "/v1/changes" + (query.isEmpty ? "" : "?" + query), key: key)
    }

    @Test("every change in commit order, each device once at its latest state with its token; deletions as tombstones")
    func commitOrder() async throws {
        let app = try await DeviceApp.make()
        let first = try await app.registerID(1, #""external_id":"ada""#)
        let second = try await app.registerID(2)
        let third = try await app.registerID(3)
        app.harness.clock.advance(milliseconds: 1_000)
        #expect(await app.call(.patch, "/v1/devices/\(first)", body: #"{"tags":{"plan":"pro"}}"#).status == 200)
        #expect(await app.call(.delete, "/v1/devices/\(second)").status == 200)
        let answer = await feed(app)
        #expect(answer.status == 200)
        #expect(answer.header("Content-Type")?.hasPrefix("application/json") == true)
        let changes = Self.changes(answer)
        #expect(changes.compactMap { $0["op"]?.stringValue } == ["upsert", "upsert", "delete"])
        #expect(changes[0]["device"]?["id"]?.stringValue == third)
        #expect(changes[1]["device"]?["id"]?.stringValue == first)
        #expect(changes[1]["device"]?["tags"]?["plan"]?.stringValue == "pro", "the latest state")
        #expect(changes[1]["device"]?["token"]?.stringValue == TestTokens.apns(1), "with its token")
        #expect(changes[2]["id"]?.stringValue == second && changes[2]["device"] == nil)
        for change in changes {
            #expect(Timestamp(rfc3339: change["at"]?.stringValue ?? "") != nil, "at is RFC 3339")
            let names = Set((change.objectMembers ?? []).map(\.key))
            #expect(names == ["cursor", "at", "op", change["op"]?.stringValue == "delete" ? "id" : "device"])
        }
        let cursors = Self.cursors(answer)
        #expect(cursors == cursors.sorted() && Set(cursors).count == 3, "cursors grow in commit order")
        #expect(answer.json?["next_cursor"]?.stringValue == cursors.last)
        // From the last cursor: nothing, and the same cursor back.
        let after = await feed(app, "after=\(cursors[2])")
        #expect(after.status == 200 && Self.changes(after).isEmpty)
        #expect(after.json?["next_cursor"]?.stringValue == cursors[2])
        // From the first: the two after it.
        #expect(Self.cursors(await feed(app, "after=\(cursors[0])")) == Array(cursors[1...]))
    }

    @Test("limit pages through the feed without a gap or a repeat; limit is 1 to 1000, default 100")
    func paging() async throws {
        let app = try await DeviceApp.make()
        for n in 0..<105 { _ = try await app.registerID(n) }
        #expect(Self.changes(await feed(app)).count == 100)
        var seen: [String] = []
        var query = "limit=7"
        while true {
            let page = await feed(app, query)
            #expect(page.status == 200)
            let ids = Self.changes(page).compactMap { $0["device"]?["id"]?.stringValue }
            if ids.isEmpty { break }
            #expect(ids.count <= 7)
            seen += ids
            query = "limit=7&after=\(page.json?["next_cursor"]?.stringValue ?? "")"
        }
        #expect(seen.count == 105 && Set(seen).count == 105)
        #expect(Self.changes(await feed(app, "limit=1000")).count == 105)
    }

    @Test(
        "malformed parameters are 400 invalid_field naming the parameter",
        arguments: [
            ("limit=0", "limit"), ("limit=1001", "limit"), ("limit=x", "limit"), ("wait_ms=30001", "wait_ms"),
            ("wait_ms=-1", "wait_ms"), ("after=c123", "after"), ("after=C0000000000000001", "after"),
            ("after=c000000000000000g", "after"), ("after=c000000000000000A", "after"), ("since=1", "since"),
            ("limit=5&limit=6", "limit"),
        ])
    func malformed(_ query: String, _ field: String) async throws {
        let app = try await DeviceApp.make()
        let answer = await feed(app, query)
        #expect(answer.status == 400, "\(query): \(answer.text)")
        #expect(answer.json?["error"]?["code"]?.stringValue == "invalid_field")
        #expect(answer.json?["error"]?["field"]?.stringValue == field)
    }

    @Test("the feed is the key's app and mode's: test-mode and other apps' changes never show; devices:read needed")
    func isolation() async throws {
        let app = try await DeviceApp.make()
        let other = try await DeviceApp.make(app.harness)
        _ = try await app.registerID(1)
        _ = try await app.registerID(2, key: app.testSecret)
        _ = try await other.registerID(3)
        #expect(Self.changes(await feed(app)).count == 1)
        #expect(Self.changes(await feed(app, key: app.testSecret)).count == 1)
        #expect(
            Self.changes(await feed(app, key: app.testSecret)).first?["device"]?["token"]?.stringValue
                == TestTokens.apns(2))
        #expect(Self.changes(await feed(other)).first?["device"]?["token"]?.stringValue == TestTokens.apns(3))
        let writer = try await app.key(["devices:write"])
        #expect(await feed(app, key: writer).status == 403)
        #expect(await feed(app, key: app.mobile).status == 403)
        #expect(await app.harness.call(.get, "/v1/changes", key: nil).status == 401)
    }

    @Test(
        "cursors count the app and mode's own records: other apps' and the other mode's writes move none (issue 24 L-2)"
    )
    func cursorsRevealNothingOfOthers() async throws {
        let app = try await DeviceApp.make()
        let other = try await DeviceApp.make(app.harness)
        func position(_ answer: Answer) throws -> UInt64 {
            let text = try #require(answer.json?["next_cursor"]?.stringValue)
            return try #require(ChangeCursor.decode(text))
        }
        _ = try await app.registerID(1)
        let first = try position(await feed(app))
        _ = try await app.registerID(2)
        let second = try position(await feed(app))
        for n in 0..<100 { _ = try await other.registerID(1_000 + n) }
        for n in 0..<20 { _ = try await app.registerID(3_000 + n, key: app.testSecret) }
        _ = try await app.registerID(3)
        let third = try position(await feed(app))
        #expect(second - first == third - second, "\(first), \(second), \(third): one registration each")
        #expect(first == second - first, "the first registration is the app's first records")
        let export = await app.call(.get, "/v1/devices/export")
        #expect(export.header("Roost-Cursor").flatMap(ChangeCursor.decode) == third)
        // The test mode counts its own: 20 registrations, nothing of the live ones.
        #expect(try position(await feed(app, "limit=1000", key: app.testSecret)) == 20 * first)
    }

    @Test("with nothing after the cursor, wait_ms holds the call until a change comes (then answers it)")
    func longPollWakes() async throws {
        let app = try await DeviceApp.make()
        _ = try await app.registerID(1)
        let cursor = try #require(await feed(app).json?["next_cursor"]?.stringValue)
        async let waited = feed(app, "after=\(cursor)&wait_ms=10000")
        #expect(await ConditionWait.until { await app.harness.changeWaitersHeld() == 1 }, "the call is held")
        let id = try await app.registerID(2)
        let answer = await waited
        #expect(answer.status == 200)
        // The manual clock did not move: the change answered it, not the timeout.
        #expect(Self.changes(answer).compactMap { $0["device"]?["id"]?.stringValue } == [id])
    }

    @Test("with no change within wait_ms the call answers an empty list once wait_ms passed (a manual clock)")
    func longPollTimesOut() async throws {
        let app = try await DeviceApp.make()
        _ = try await app.registerID(1)
        let cursor = try #require(await feed(app).json?["next_cursor"]?.stringValue)
        // Another app's change wakes nobody here.
        let other = try await DeviceApp.make(app.harness)
        async let waited = feed(app, "after=\(cursor)&wait_ms=400")
        #expect(await ConditionWait.until { await app.harness.changeWaitersHeld() == 1 }, "the call is held")
        _ = try await other.registerID(9)
        // A millisecond short of wait_ms, a turn of every shard (the stats call) keeps it.
        app.harness.advanceAndWake(milliseconds: 399)
        #expect(await app.call(.get, "/v1/stats").status == 200)
        #expect(await other.call(.get, "/v1/stats").status == 200)
        #expect(await app.harness.changeWaitersHeld() == 1, "held until its time is up")
        app.harness.advanceAndWake(milliseconds: 1)
        let answer = await waited
        #expect(answer.status == 200 && Self.changes(answer).isEmpty)
        #expect(answer.json?["next_cursor"]?.stringValue == cursor)
    }

    @Test("a cursor older than the retention is 410 cursor_expired; no cursor starts at the oldest retained change")
    func retention() async throws {
        let harness = try Harness(changesRetained: 3)
        let app = try await DeviceApp.make(harness)
        _ = try await app.registerID(1)
        let early = try #require(await feed(app).json?["next_cursor"]?.stringValue)
        for n in 2...5 { _ = try await app.registerID(n) }
        let expired = await feed(app, "after=\(early)")
        #expect(expired.status == 410)
        #expect(expired.json?["error"]?["code"]?.stringValue == "cursor_expired")
        let fresh = await feed(app)
        #expect(
            Self.changes(fresh).compactMap { $0["device"]?["token"]?.stringValue }
                == (3...5).map { TestTokens.apns($0) })
    }

    @Test("a cursor past every change of this server's feed is 410 cursor_expired")
    func foreignCursor() async throws {
        let app = try await DeviceApp.make()
        _ = try await app.registerID(1)
        let answer = await feed(app, "after=c00000000ffffffff")
        #expect(answer.status == 410)
        #expect(answer.json?["error"]?["code"]?.stringValue == "cursor_expired")
    }

    @Test("the export answers Roost-Cursor; export then follow from it equals the final state, writes going on")
    func exportThenFollow() async throws {
        let app = try await DeviceApp.make()
        var registered: [String] = []
        for n in 0..<2_050 { registered.append(try await app.registerID(n)) }
        let ids = registered
        let roundsDone = Mutex(0)
        let writers = Task {
            // Registrations, re-registrations, patches and deletes while the export streams.
            for round in 0..<300 {
                defer { roundsDone.withLock { $0 += 1 } }
                switch round % 4 {
                case 0: _ = await app.registerIOS(10_000 + round)
                case 1: _ = await app.call(.patch, "/v1/devices/\(ids[round])", body: #"{"tags":{"r":\#(round)}}"#)
                case 2: _ = await app.call(.delete, "/v1/devices/\(ids[round])")
                default: _ = await app.registerIOS(round, #""app_version":"\#(round)""#)
                }
            }
        }
        // The suspending wait: the writers' task needs a thread of the cooperative pool.
        #expect(await ConditionWait.until { () async in roundsDone.withLock { $0 } >= 1 }, "the writers started")
        let export = await app.call(.get, "/v1/devices/export")
        await writers.value
        #expect(export.status == 200)
        let cursor = try #require(export.header("Roost-Cursor"))
        #expect(ChangeCursor.decode(cursor) != nil)
        var state: [String: JSONValue] = [:]
        for line in export.text.split(separator: "\n") {
            let device = try JSONReader.parse(Array(line.utf8))
            state[try #require(device["id"]?.stringValue)] = device
        }
        // Follow the feed from the cursor and apply it.
        var after = cursor
        while true {
            let page = await feed(app, "after=\(after)&limit=1000")
            #expect(page.status == 200)
            let changes = Self.changes(page)
            if changes.isEmpty { break }
            for change in changes {
                if change["op"]?.stringValue == "delete" {
                    state[try #require(change["id"]?.stringValue)] = nil
                } else {
                    let device = try #require(change["device"])
                    state[try #require(device["id"]?.stringValue)] = device
                }
            }
            after = try #require(page.json?["next_cursor"]?.stringValue)
        }
        let final = await app.call(.get, "/v1/devices/export")
        var expected: [String: JSONValue] = [:]
        for line in final.text.split(separator: "\n") {
            let device = try JSONReader.parse(Array(line.utf8))
            expected[try #require(device["id"]?.stringValue)] = device
        }
        #expect(state.count == expected.count)
        #expect(state == expected, "export + feed from its cursor is the final state exactly")
        #expect(final.header("Roost-Cursor") == after, "the final export is at the feed's end")
    }

    @Test("the feed after a restart is the feed before it: from the log alone, and from a snapshot plus the log")
    func restart() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (first, engine) = try await Harness.durable(directory)
        let app = try await DeviceApp.make(first)
        var ids: [String] = []
        for n in 0..<40 { ids.append(try await app.registerID(n, #""external_id":"p\#(n % 7)""#)) }
        for n in stride(from: 0, to: 40, by: 5) { _ = await app.call(.delete, "/v1/devices/\(ids[n])") }
        _ = await app.call(.delete, "/v1/people/p3")
        _ = await app.call(.patch, "/v1/devices/\(ids[1])", body: #"{"tags":{"x":1}}"#)
        let middle = Self.cursors(await feed(app, "limit=10")).last ?? ""
        let expected = (await feed(app, "limit=1000").text, await feed(app, "after=\(middle)&limit=1000").text)
        #expect(Self.changes(await feed(app, "limit=1000")).count == 40)
        engine.close()

        let (second, secondEngine) = try await Harness.durable(directory)
        let replayed = DeviceApp(
            harness: second, app: app.app, secret: app.secret, mobile: app.mobile, testSecret: app.testSecret)
        #expect(await feed(replayed, "limit=1000").text == expected.0, "log replay: same changes, cursors and times")
        #expect(await feed(replayed, "after=\(middle)&limit=1000").text == expected.1, "a cursor survives")
        #expect(try await secondEngine.snapshot() != nil)
        // A change after the snapshot: the snapshot's feed plus the log.
        let late = try await replayed.registerID(99)
        let withLate = await feed(replayed, "after=\(middle)&limit=1000")
        secondEngine.close()

        let (third, thirdEngine) = try await Harness.durable(directory)
        defer { thirdEngine.close() }
        let restored = DeviceApp(
            harness: third, app: app.app, secret: app.secret, mobile: app.mobile, testSecret: app.testSecret)
        #expect(await feed(restored, "after=\(middle)&limit=1000").text == withLate.text, "snapshot + log")
        #expect(Self.changes(withLate).last?["device"]?["id"]?.stringValue == late)
        let final = await restored.call(.get, "/v1/devices/export")
        #expect(final.header("Roost-Cursor") == withLate.json?["next_cursor"]?.stringValue)
    }

    @Test("exports streaming at once are bounded: past the bound 429 rate_limited with Retry-After")
    func exportSlots() async throws {
        let slots = ExportSlots(max: 2, perAppMax: 2)
        let app = AppID(1)
        #expect(slots.take(for: app) && slots.take(for: app))
        #expect(!slots.take(for: app))
        #expect(!slots.take(for: AppID(2)), "the server's bound holds for every app")
        slots.give(for: app)
        #expect(slots.take(for: app))
        #expect(DeviceExport.busy.status == 429 && DeviceExport.busy.code == "rate_limited")
        #expect(DeviceExport.busy.retryAfterSeconds == 1)
    }

    @Test("one app's stalled exports take at most its share of the slots: other apps still export (issue 24 L-4)")
    func exportSlotsPerApp() async throws {
        let slots = ExportSlots()
        #expect(slots.max == DeviceExport.concurrentMax)
        let greedy = AppID(1)
        var taken = 0
        while slots.take(for: greedy) { taken += 1 }
        #expect(taken == DeviceExport.concurrentPerAppMax)
        #expect(taken < DeviceExport.concurrentMax)
        // Every other app gets its share until the server's bound.
        var others = 0
        for app in 2...UInt32(DeviceExport.concurrentMax) where slots.take(for: AppID(app)) { others += 1 }
        #expect(taken + others == DeviceExport.concurrentMax)
        #expect(slots.inUse == DeviceExport.concurrentMax)
        slots.give(for: greedy)
        #expect(slots.take(for: AppID(1_000)), "a slot given back is free for any app")
    }

    @Test("an app holding its export share gets 429 while another app's export streams")
    func exportShareOverHTTP() async throws {
        let app = try await DeviceApp.make()
        let other = try await DeviceApp.make(app.harness)
        for _ in 0..<DeviceExport.concurrentPerAppMax {
            #expect(app.harness.service.deviceExportSlots.take(for: AppID(UInt32(app.app))))
        }
        let refused = await app.call(.get, "/v1/devices/export")
        #expect(refused.status == 429)
        #expect(refused.errorCode == "rate_limited")
        let served = await other.call(.get, "/v1/devices/export")
        #expect(served.status == 200)
    }
}
