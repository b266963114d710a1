import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostStorage
import RoostTelemetry
import RoostTesting
import Testing

@testable import RoostAPI

/// Spec §8, token lifecycle: the `inactive_after_days` setting, the server's
/// sweep, the preview and invalidate routes, and the `last_seen_*` list
/// filters, each through the real routes (docs/api.md, "§8 token lifecycle").
@Suite("§8 token lifecycle: inactivity")
struct InactivityTests {
    static let day: Int64 = 86_400_000

    // MARK: - The setting

    @Test("inactive_after_days defaults to null on a new app and in every app answer")
    func settingDefaultsToNull() async throws {
        let harness = try Harness()
        let created = await harness.call(.post, "/v1/apps", key: Harness.adminKey, body: #"{"name":"A"}"#)
        #expect(created.status == 201)
        #expect(created.json?["settings"]?["inactive_after_days"]?.isNull == true)
        let id = try #require(created.json?["id"]?.intValue)
        let read = await harness.call(.get, "/v1/apps/\(id)", key: Harness.adminKey)
        #expect(read.json?["settings"]?["inactive_after_days"]?.isNull == true)
        let listed = await harness.call(.get, "/v1/apps", key: Harness.adminKey)
        #expect(listed.json?["apps"]?.arrayValue?.first?["settings"]?["inactive_after_days"]?.isNull == true)
    }

    @Test("inactive_after_days is set by create and PATCH, turned off by null, and other settings are kept")
    func settingSetAndCleared() async throws {
        let harness = try Harness()
        let created = await harness.call(
            .post, "/v1/apps", key: Harness.adminKey, body: #"{"name":"A","settings":{"inactive_after_days":270}}"#)
        #expect(created.json?["settings"]?["inactive_after_days"]?.intValue == 270)
        let id = try #require(created.json?["id"]?.intValue)
        let patched = await harness.call(
            .patch, "/v1/apps/\(id)", key: Harness.adminKey,
            body: #"{"settings":{"inactive_after_days":1,"max_devices_per_person":3}}"#)
        #expect(patched.status == 200)
        #expect(patched.json?["settings"]?["inactive_after_days"]?.intValue == 1)
        let other = await harness.call(
            .patch, "/v1/apps/\(id)", key: Harness.adminKey, body: #"{"settings":{"require_known_person":true}}"#)
        #expect(other.json?["settings"]?["inactive_after_days"]?.intValue == 1, "an omitted setting is kept")
        let off = await harness.call(
            .patch, "/v1/apps/\(id)", key: Harness.adminKey, body: #"{"settings":{"inactive_after_days":null}}"#)
        #expect(off.status == 200)
        #expect(off.json?["settings"]?["inactive_after_days"]?.isNull == true)
        #expect(off.json?["settings"]?["max_devices_per_person"]?.intValue == 3)
        let upper = await harness.call(
            .patch, "/v1/apps/\(id)", key: Harness.adminKey, body: #"{"settings":{"inactive_after_days":3650}}"#)
        #expect(upper.json?["settings"]?["inactive_after_days"]?.intValue == 3650)
    }

    @Test(
        "inactive_after_days outside 1 to 3650 or not an integer is 400 naming the field, and changes nothing",
        arguments: ["0", "3651", "-1", "1.5", "\"30\"", "true", "99999999999"])
    func settingOutOfRange(value: String) async throws {
        let harness = try Harness()
        let id = try await harness.createApp()
        let answer = await harness.call(
            .patch, "/v1/apps/\(id)", key: Harness.adminKey, body: #"{"settings":{"inactive_after_days":\#(value)}}"#)
        #expect(answer.status == 400)
        #expect(answer.errorCode == "invalid_field")
        #expect(answer.errorField == "settings.inactive_after_days")
        let created = await harness.call(
            .post, "/v1/apps", key: Harness.adminKey,
            body: #"{"name":"B","settings":{"inactive_after_days":\#(value)}}"#)
        #expect(created.status == 400)
        let read = await harness.call(.get, "/v1/apps/\(id)", key: Harness.adminKey)
        #expect(read.json?["settings"]?["inactive_after_days"]?.isNull == true)
    }

    @Test("inactive_after_days survives a restart through the log and through a snapshot, in catalog and indexes")
    func settingIsDurable() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (first, firstEngine) = try await Harness.durable(directory)
        let app = try await first.createApp()
        // Data in the live index, so that it carries the settings too.
        let key = try await first.createKey(
            app: app, #"{"kind":"secret","capabilities":["devices:write","devices:read"]}"#)
        #expect(await first.call(.post, "/v1/devices", key: key.key, body: Self.ios(1)).status == 201)
        let patched = await first.call(
            .patch, "/v1/apps/\(app)", key: Harness.adminKey, body: #"{"settings":{"inactive_after_days":30}}"#)
        #expect(patched.status == 200)
        firstEngine.close()

        let (second, secondEngine) = try await Harness.durable(directory)
        let afterLog = await second.call(.get, "/v1/apps/\(app)", key: Harness.adminKey)
        #expect(afterLog.json?["settings"]?["inactive_after_days"]?.intValue == 30)
        let liveKey = IndexKey(app: AppID(UInt32(app)), mode: .live)
        let indexSettings = await second.service.registry.perform(liveKey) { index in (index.settings, []) }
        #expect(indexSettings?.inactiveAfterDays == 30)
        _ = try await secondEngine.snapshot()
        secondEngine.close()

        let (third, thirdEngine) = try await Harness.durable(directory)
        defer { thirdEngine.close() }
        let afterSnapshot = await third.call(.get, "/v1/apps/\(app)", key: Harness.adminKey)
        #expect(afterSnapshot.json?["settings"]?["inactive_after_days"]?.intValue == 30)
        let snapshotSettings = await third.service.registry.perform(liveKey) { index in (index.settings, []) }
        #expect(snapshotSettings?.inactiveAfterDays == 30)
    }

    @Test("an app record and a settings mutation written before the setting existed load with it off")
    func oldFormatRecordsLoad() throws {
        // Kind 1 app record as the previous release wrote it: id 7, name "Old",
        // created 1000 ms, max 10, require_known_person true.
        var app: [UInt8] = [1, 1, 7, 0, 0, 0, 3, 0, 0, 0] + Array("Old".utf8)
        app += [0xE8, 0x03, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 1]
        guard case .app(let record) = try CatalogRecord.decode(app) else {
            Issue.record("not an app record")
            return
        }
        #expect(record.settings == AppSettings(maxDevicesPerPerson: 10, requireKnownPerson: true))
        #expect(record.settings.inactiveAfterDays == nil)
        // Re-encoded without the setting it is the same bytes (kind 1).
        #expect(CatalogRecord.app(record).encoded() == app)
        // With it: kind 13, and it round-trips.
        var on = record
        on.settings.inactiveAfterDays = 270
        let encoded = CatalogRecord.app(on).encoded()
        #expect(encoded[1] == 13)
        #expect(try CatalogRecord.decode(encoded) == .app(on))
        // Out of range in a record is damage, not a default.
        for bad: UInt32 in [0, 3651] {
            var damaged = Array(encoded.dropLast(4))
            withUnsafeBytes(of: bad.littleEndian) { damaged += $0 }
            #expect(throws: CatalogRecordError.self) { try CatalogRecord.decode(damaged) }
        }
    }

    // MARK: - The sweep

    @Test("the sweep invalidates an active device not seen for more than the app's days, with reason Inactive")
    func sweepInvalidatesStaleDevices() async throws {
        let app = try await DeviceApp.make(settings: #"{"inactive_after_days":30}"#)
        let stale = try await app.registerID(1)
        app.harness.clock.advance(milliseconds: 2 * Self.day)
        let recent = try await app.registerID(2)
        app.harness.clock.advance(milliseconds: 29 * Self.day)  // stale: 31 days, recent: 29 days
        let now = Timestamp(millisecondsSinceEpoch: app.harness.clock.wallMilliseconds())
        let summary = await app.harness.service.inactivity.sweep()
        #expect(summary.invalidated == 1)
        #expect(summary.complete)
        let device = await app.device(stale)
        #expect(device.json?["invalidation_reason"]?.stringValue == "Inactive")
        #expect(device.json?["invalidated_at"]?.stringValue == now.rfc3339)
        #expect(await app.device(recent).json?["invalidated_at"]?.isNull == true)
    }

    @Test("a device exactly the app's days old is not yet inactive: older than, not as old as")
    func sweepBoundaryIsStrict() async throws {
        let app = try await DeviceApp.make(settings: #"{"inactive_after_days":1}"#)
        let id = try await app.registerID(1)
        app.harness.clock.advance(milliseconds: Self.day)
        #expect(await app.harness.service.inactivity.sweep().invalidated == 0)
        #expect(await app.device(id).json?["invalidated_at"]?.isNull == true)
        app.harness.clock.advance(milliseconds: 1)
        #expect(await app.harness.service.inactivity.sweep().invalidated == 1)
    }

    @Test("the sweep leaves apps with the setting off alone, and sweeps both modes of an app with it on")
    func sweepScope() async throws {
        let harness = try Harness()
        let on = try await DeviceApp.make(harness, settings: #"{"inactive_after_days":10}"#)
        let off = try await DeviceApp.make(harness)
        let liveOn = try await on.registerID(1)
        let testOn = try await on.registerID(2, key: on.testSecret)
        let liveOff = try await off.registerID(3)
        harness.clock.advance(milliseconds: 11 * Self.day)
        let summary = await harness.service.inactivity.sweep()
        #expect(summary.invalidated == 2)
        #expect(summary.indexes == 2)
        #expect(await on.device(liveOn).json?["invalidation_reason"]?.stringValue == "Inactive")
        #expect(await on.device(testOn, key: on.testSecret).json?["invalidation_reason"]?.stringValue == "Inactive")
        #expect(await off.device(liveOff).json?["invalidated_at"]?.isNull == true)
    }

    @Test("an already invalidated device keeps its reason and time: the sweep never invalidates it again")
    func sweepSkipsInvalidated() async throws {
        let app = try await DeviceApp.make(settings: #"{"inactive_after_days":5}"#)
        let id = try await app.registerID(1)
        let feedback = await app.call(
            .post, "/v1/feedback",
            body: #"{"provider":"apns","token":"\#(TestTokens.apns(1))","reason":"Unregistered"}"#)
        #expect(feedback.json?["invalidated"]?.boolValue == true)
        let before = await app.device(id)
        app.harness.clock.advance(milliseconds: 6 * Self.day)
        #expect(await app.harness.service.inactivity.sweep().invalidated == 0)
        let after = await app.device(id)
        #expect(after.json?["invalidation_reason"]?.stringValue == "Unregistered")
        #expect(after.json?["invalidated_at"] == before.json?["invalidated_at"])
        // And an Inactive device is not touched by the next sweep either.
        _ = try await app.registerID(2)
        app.harness.clock.advance(milliseconds: 6 * Self.day)
        #expect(await app.harness.service.inactivity.sweep().invalidated == 1)
        app.harness.clock.advance(milliseconds: Self.day)
        #expect(await app.harness.service.inactivity.sweep().invalidated == 0)
    }

    @Test("re-registering an Inactive device clears its invalidation and refreshes last_seen_at, as for any reason")
    func reRegistrationRevalidates() async throws {
        let app = try await DeviceApp.make(settings: #"{"inactive_after_days":5}"#)
        let id = try await app.registerID(1)
        app.harness.clock.advance(milliseconds: 6 * Self.day)
        await app.harness.service.inactivity.sweep()
        #expect(await app.device(id).json?["invalidation_reason"]?.stringValue == "Inactive")
        let again = await app.registerIOS(1)
        #expect(again.status == 200)
        #expect(again.json?["id"]?.stringValue == id)
        #expect(again.json?["invalidated_at"]?.isNull == true)
        #expect(again.json?["invalidation_reason"]?.isNull == true)
        let now = Timestamp(millisecondsSinceEpoch: app.harness.clock.wallMilliseconds())
        #expect(again.json?["last_seen_at"]?.stringValue == now.rfc3339)
        #expect(await app.harness.service.inactivity.sweep().invalidated == 0)
    }

    @Test("the sweep's interval is a named constant of at most 10 minutes")
    func sweepInterval() {
        #expect(InactivitySweeper.intervalDefault <= .seconds(600))
        #expect(InactivitySweeper.intervalMax == .seconds(600))
        #expect(InactivitySweeper.intervalDefault > .zero)
    }

    @Test("the server's sweeper runs by itself on its interval, without a request asking for it (a stepped clock)")
    func sweeperRunsOnItsInterval() async throws {
        let app = try await DeviceApp.make(settings: #"{"inactive_after_days":2}"#)
        let id = try await app.registerID(1)
        app.harness.clock.advance(milliseconds: 3 * Self.day)
        let sweeper = app.harness.service.inactivity
        let period = SteppedClock()
        sweeper.start(interval: InactivitySweeper.intervalDefault, clock: period)
        #expect(await ConditionWait.until { () async in period.sleeperCount == 1 })
        period.advance(by: InactivitySweeper.intervalDefault - .seconds(1))
        #expect(period.sleeperCount == 1)
        #expect(sweeper.sweepTotals.sweeps == 0, "swept before its interval")
        period.advance(by: .seconds(1))
        var reason: String?
        _ = await ConditionWait.until {
            reason = await app.device(id).json?["invalidation_reason"]?.stringValue
            return reason != nil
        }
        await sweeper.stop()
        #expect(reason == "Inactive")
        #expect(sweeper.sweepTotals.sweeps >= 1)
        #expect(sweeper.sweepTotals.invalidated == 1)
    }

    @Test("the sweep goes through the log: its invalidations are durable and replayed after a restart")
    func sweepIsLogged() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (first, firstEngine) = try await Harness.durable(directory)
        let app = try await DeviceApp.make(first, settings: #"{"inactive_after_days":3}"#)
        let id = try await app.registerID(1)
        first.clock.advance(milliseconds: 4 * Self.day)
        let appends = firstEngine.log.wal.ioStatistics.appends
        #expect(await first.service.inactivity.sweep().invalidated == 1)
        #expect(firstEngine.log.wal.ioStatistics.appends == appends + 1, "one append for the one step")
        firstEngine.close()

        let (second, secondEngine) = try await Harness.durable(directory)
        defer { secondEngine.close() }
        let device = await second.call(.get, "/v1/devices/\(id)", key: app.secret)
        #expect(device.json?["invalidation_reason"]?.stringValue == "Inactive")
    }

    @Test("10× the per-turn bound of stale devices takes 10 steps, and other commands are served between them")
    func sweepIsBoundedPerTurn() async throws {
        let app = try await DeviceApp.make(settings: #"{"inactive_after_days":1}"#)
        let bound = 5
        let csv = "platform,token\n" + (1...(10 * bound)).map { "ios,\(TestTokens.apns($0))" }.joined(separator: "\n")
        #expect(await app.importCSV(csv).json?["created"]?.intValue == 10 * bound)
        app.harness.clock.advance(milliseconds: 2 * Self.day)
        let sweeper = InactivitySweeper(
            catalog: app.harness.catalog, registry: app.harness.service.registry, clock: app.harness.clock,
            logger: Logger(output: .memory), invalidateMax: bound)
        var pass = await sweeper.beginPass()
        var steps = 0
        var more = true
        while more {
            more = await sweeper.step(&pass)
            steps += 1
            // Between two steps a request of the same shard is served and sees
            // exactly the steps so far: each invalidated at most `bound`.
            let stats = await app.call(.get, "/v1/stats")
            #expect(stats.json?["invalidated"]?.intValue == min(steps * bound, 10 * bound))
            let registered = await app.registerIOS(1000 + steps)
            #expect(registered.status == 201)
            #expect(steps <= 20, "the sweep did not end")
            if steps > 20 { break }
        }
        let summary = sweeper.finish(pass)
        #expect(summary.invalidated == 10 * bound)
        #expect(summary.steps >= 10)
        #expect(steps == summary.steps)
        // The devices registered between steps are fresh: none was invalidated.
        let active = await app.call(.get, "/v1/devices?state=active&limit=1000")
        #expect(active.json?["devices"]?.arrayValue?.count == steps)
    }

    @Test("a pass leaves an index whose app is deleted or whose setting changes mid-sweep, and recreates nothing")
    func sweepFollowsTheCatalog() async throws {
        let harness = try Harness()
        let kept = try await DeviceApp.make(harness, settings: #"{"inactive_after_days":1}"#)
        let deleted = try await DeviceApp.make(harness, settings: #"{"inactive_after_days":1}"#)
        let changed = try await DeviceApp.make(harness, settings: #"{"inactive_after_days":1}"#)
        let keptID = try await kept.registerID(1)
        _ = try await deleted.registerID(2)
        let changedID = try await changed.registerID(3)
        harness.clock.advance(milliseconds: 2 * Self.day)
        let sweeper = harness.service.inactivity
        var pass = await sweeper.beginPass()
        // The live index of each app (its registration made it; a settings change makes no index).
        #expect(pass.summary.indexes == 3)
        #expect(await harness.call(.delete, "/v1/apps/\(deleted.app)", key: Harness.adminKey).status == 200)
        let patched = await harness.call(
            .patch, "/v1/apps/\(changed.app)", key: Harness.adminKey, body: #"{"settings":{"inactive_after_days":5}}"#)
        #expect(patched.status == 200)
        while await sweeper.step(&pass) {}
        let summary = sweeper.finish(pass)
        #expect(summary.invalidated == 1)
        #expect(await kept.device(keptID).json?["invalidation_reason"]?.stringValue == "Inactive")
        #expect(await changed.device(changedID).json?["invalidated_at"]?.isNull == true)
        var indexes: [IndexKey] = []
        for shard in harness.service.registry.shardSet.shards { indexes += await shard.keys() }
        #expect(!indexes.contains { $0.app == AppID(UInt32(deleted.app)) }, "the deleted app's index came back")
    }

    @Test("once the log has failed, a sweep stops at its first step, changes nothing and says so; invalidate is 503")
    func sweepWhenTheLogFails() async throws {
        let log = SwitchableLog()
        let harness = Harness(log: log)
        let app = try await DeviceApp.make(harness, settings: #"{"inactive_after_days":1}"#)
        let id = try await app.registerID(1)
        harness.clock.advance(milliseconds: 2 * Self.day)
        log.failing.withLock { $0 = true }
        let summary = await harness.service.inactivity.sweep()
        #expect(!summary.complete)
        #expect(summary.invalidated == 0)
        #expect(harness.service.inactivity.sweepTotals.incomplete == 1)
        let device = await app.device(id)
        #expect(device.status == 200)
        #expect(device.json?["invalidated_at"]?.isNull == true)
        let invalidate = await app.call(.post, "/v1/devices/inactive/invalidate", body: #"{"older_than_days":1}"#)
        #expect(invalidate.status == 503)
        #expect(invalidate.errorCode == "unavailable")
        let preview = await app.call(.get, "/v1/devices/inactive?older_than_days=1")
        #expect(preview.status == 200, "a read goes on")
        #expect(preview.json?["count"]?.intValue == 1)
    }

    @Test("an operator sees the sweep in /metrics: sweeps, steps and devices invalidated")
    func sweepMetrics() async throws {
        let app = try await DeviceApp.make(settings: #"{"inactive_after_days":1}"#)
        _ = try await app.registerID(1)
        _ = try await app.registerID(2)
        app.harness.clock.advance(milliseconds: 2 * Self.day)
        await app.harness.service.inactivity.sweep()
        let text = String(decoding: await app.harness.service.metrics.render(), as: UTF8.self)
        #expect(text.contains(#"roost_inactivity_sweeps_total{result="complete"} 1"#))
        #expect(text.contains(#"roost_inactivity_sweeps_total{result="incomplete"} 0"#))
        // One step: the live index (its registrations made it; the test index was never made).
        #expect(text.contains("roost_inactivity_sweep_steps_total 1"))
        #expect(text.contains("roost_inactivity_invalidated_total 2"))
        #expect(text.contains("roost_inactivity_last_sweep_duration_seconds "))
    }

    // MARK: - Preview

    /// A registration body for ios token `n`.
    static func ios(_ n: Int) -> String { #"{"platform":"ios","token":"\#(TestTokens.apns(n))"}"# }

    /// Devices last seen 40, 35, 30, 20 and 5 days before now (returned, oldest
    /// first), and before them a 50-day-old one invalidated by feedback.
    func agedDevices(_ app: DeviceApp) async throws -> [String] {
        var ids: [String] = []
        for (n, gap) in [(9, 10), (1, 5), (2, 5), (3, 10), (4, 15), (5, 5)] as [(Int, Int64)] {
            ids.append(try await app.registerID(n))
            app.harness.clock.advance(milliseconds: gap * Self.day)
        }
        let feedback = await app.call(
            .post, "/v1/feedback",
            body: #"{"provider":"apns","token":"\#(TestTokens.apns(9))","reason":"Unregistered"}"#)
        #expect(feedback.json?["invalidated"]?.boolValue == true)
        return Array(ids.dropFirst())
    }

    @Test("the preview counts active devices older than N days and lists the oldest first, up to limit, with tokens")
    func previewCountsAndOrders() async throws {
        let app = try await DeviceApp.make()
        let ids = try await agedDevices(app)
        let answer = await app.call(.get, "/v1/devices/inactive?older_than_days=25&limit=2")
        #expect(answer.status == 200)
        #expect(answer.json?["count"]?.intValue == 3, "40, 35 and 30 days; not the invalidated 50-day one")
        let devices = try #require(answer.json?["devices"]?.arrayValue)
        #expect(devices.map { $0["id"]?.stringValue } == [ids[0], ids[1]])
        #expect(devices[0]["token"]?.stringValue == TestTokens.apns(1))
        let all = await app.call(.get, "/v1/devices/inactive?older_than_days=1")
        #expect(all.json?["count"]?.intValue == 5)
        #expect(all.json?["devices"]?.arrayValue?.map { $0["id"]?.stringValue } == ids.map { $0 })
        let none = await app.call(.get, "/v1/devices/inactive?older_than_days=3650")
        #expect(none.json?["count"]?.intValue == 0)
        #expect(none.json?["devices"]?.arrayValue?.isEmpty == true)
    }

    @Test("the preview changes nothing: no device, count or log record")
    func previewChangesNothing() async throws {
        let app = try await DeviceApp.make(settings: #"{"inactive_after_days":1}"#)
        let id = try await app.registerID(1)
        app.harness.clock.advance(milliseconds: 3 * Self.day)
        let before = await app.device(id).text
        for _ in 0..<3 {
            let preview = await app.call(.get, "/v1/devices/inactive?older_than_days=1")
            #expect(preview.json?["count"]?.intValue == 1)
        }
        #expect(await app.device(id).text == before)
        #expect(await app.call(.get, "/v1/stats").json?["invalidated"]?.intValue == 0)
    }

    @Test(
        "the preview's query is bounded: older_than_days 1 to 3650 (required), limit 1 to 1000, nothing else",
        arguments: [
            ("", "older_than_days"), ("older_than_days=0", "older_than_days"),
            ("older_than_days=3651", "older_than_days"), ("older_than_days=abc", "older_than_days"),
            ("older_than_days=-5", "older_than_days"), ("older_than_days=10&limit=0", "limit"),
            ("older_than_days=10&limit=1001", "limit"), ("older_than_days=10&limit=x", "limit"),
            ("older_than_days=10&state=all", "state"),
        ])
    func previewBounds(query: String, field: String) async throws {
        let app = try await DeviceApp.make()
        let answer = await app.call(.get, "/v1/devices/inactive" + (query.isEmpty ? "" : "?" + query))
        #expect(answer.status == 400)
        #expect(answer.errorField == field)
        #expect(answer.errorCode == (query.isEmpty ? "missing_field" : "invalid_field"))
        let ok = await app.call(.get, "/v1/devices/inactive?older_than_days=3650&limit=1000")
        #expect(ok.status == 200)
    }

    @Test("the inactive routes are not taken for a device id, and /v1/devices/{id} still answers")
    func routeOrder() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1)
        let preview = await app.call(.get, "/v1/devices/inactive?older_than_days=1")
        #expect(preview.status == 200)
        #expect(preview.json?["count"] != nil)
        #expect(await app.device(id).status == 200)
        #expect(await app.call(.delete, "/v1/devices/inactive").json?["deleted"]?.boolValue == false)
        #expect(await app.call(.get, "/v1/devices/inactive/invalidate").status == 405)
    }

    // MARK: - Invalidate now

    @Test("invalidate applies the rule now for the key's app and mode only, and answers how many it invalidated")
    func invalidateNow() async throws {
        let harness = try Harness()
        let app = try await DeviceApp.make(harness)
        let other = try await DeviceApp.make(harness)
        let ids = try await agedDevices(app)
        let testID = try await app.registerID(50, key: app.testSecret)
        let otherID = try await other.registerID(51)
        harness.clock.advance(milliseconds: 40 * Self.day)
        let now = Timestamp(millisecondsSinceEpoch: harness.clock.wallMilliseconds())
        // Now: 80, 75, 70, 60 and 45 days; the test-mode and other app's devices 40.
        let answer = await app.call(.post, "/v1/devices/inactive/invalidate", body: #"{"older_than_days":62}"#)
        #expect(answer.status == 200)
        #expect(answer.json?["invalidated"]?.intValue == 3)
        for id in ids.prefix(3) {
            let device = await app.device(id)
            #expect(device.json?["invalidation_reason"]?.stringValue == "Inactive")
            #expect(device.json?["invalidated_at"]?.stringValue == now.rfc3339)
        }
        for id in ids.suffix(2) { #expect(await app.device(id).json?["invalidated_at"]?.isNull == true) }
        let again = await app.call(.post, "/v1/devices/inactive/invalidate", body: #"{"older_than_days":62}"#)
        #expect(again.json?["invalidated"]?.intValue == 0, "already invalidated devices are not invalidated again")
        let wider = await app.call(.post, "/v1/devices/inactive/invalidate", body: #"{"older_than_days":1}"#)
        #expect(wider.json?["invalidated"]?.intValue == 2)
        #expect(await app.device(testID, key: app.testSecret).json?["invalidated_at"]?.isNull == true)
        #expect(await other.device(otherID).json?["invalidated_at"]?.isNull == true)
        let test = await app.call(
            .post, "/v1/devices/inactive/invalidate", key: app.testSecret, body: #"{"older_than_days":1}"#)
        #expect(test.json?["invalidated"]?.intValue == 1)
    }

    @Test("invalidate takes more devices than one turn's bound in several steps and answers the total")
    func invalidateManySteps() async throws {
        let app = try await DeviceApp.make()
        let count = 2 * Limits.inactiveInvalidationsPerTurnMax + 7
        let csv = "platform,token\n" + (1...count).map { "ios,\(TestTokens.apns($0))" }.joined(separator: "\n")
        #expect(await app.importCSV(csv).json?["created"]?.intValue == count)
        app.harness.clock.advance(milliseconds: 2 * Self.day)
        let answer = await app.call(.post, "/v1/devices/inactive/invalidate", body: #"{"older_than_days":1}"#)
        #expect(answer.json?["invalidated"]?.intValue == count)
        #expect(await app.call(.get, "/v1/stats").json?["invalidated"]?.intValue == count)
    }

    @Test(
        "invalidate needs older_than_days from 1 to 3650",
        arguments: [
            ("{}", "missing_field"), (#"{"older_than_days":0}"#, "invalid_field"),
            (#"{"older_than_days":3651}"#, "invalid_field"), (#"{"older_than_days":"5"}"#, "invalid_field"),
            (#"{"older_than_days":null}"#, "missing_field"), (#"{"older_than_days":2.5}"#, "invalid_field"),
        ])
    func invalidateBounds(body: String, code: String) async throws {
        let app = try await DeviceApp.make()
        _ = try await app.registerID(1)
        app.harness.clock.advance(milliseconds: 4000 * Self.day)
        let answer = await app.call(.post, "/v1/devices/inactive/invalidate", body: body)
        #expect(answer.status == 400)
        #expect(answer.errorCode == code)
        #expect(answer.errorField == "older_than_days")
        #expect(await app.call(.get, "/v1/stats").json?["invalidated"]?.intValue == 0)
    }

    @Test("invalidate's answer comes once the change is durable: it survives a restart")
    func invalidateIsDurable() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (first, firstEngine) = try await Harness.durable(directory)
        let app = try await DeviceApp.make(first)
        let id = try await app.registerID(1)
        first.clock.advance(milliseconds: 2 * Self.day)
        let answer = await app.call(.post, "/v1/devices/inactive/invalidate", body: #"{"older_than_days":1}"#)
        #expect(answer.json?["invalidated"]?.intValue == 1)
        firstEngine.close()
        let (second, secondEngine) = try await Harness.durable(directory)
        defer { secondEngine.close() }
        let device = await second.call(.get, "/v1/devices/\(id)", key: app.secret)
        #expect(device.json?["invalidation_reason"]?.stringValue == "Inactive")
    }

    // MARK: - List filters

    @Test("last_seen_before and last_seen_after filter the list, exclusive, with other filters and cursors")
    func listFilters() async throws {
        let app = try await DeviceApp.make()
        let start = app.harness.clock.wallMilliseconds()
        var ids: [String] = []
        for n in 1...4 {
            ids.append(try await app.registerID(n))
            app.harness.clock.advance(milliseconds: Self.day)
        }
        let android = await app.register(#"{"platform":"android","token":"\#(TestTokens.fcm(1))"}"#)
        let androidID = try #require(android.json?["id"]?.stringValue)
        func at(_ days: Int64) -> String { Timestamp(millisecondsSinceEpoch: start + days * Self.day).rfc3339 }
        func listed(_ query: String) async -> [String?] {
            await app.call(.get, "/v1/devices?" + query).json?["devices"]?.arrayValue?.map { $0["id"]?.stringValue }
                ?? [nil]
        }
        #expect(await listed("last_seen_before=\(at(2))") == [ids[0], ids[1]])
        #expect(await listed("last_seen_after=\(at(1))") == [ids[2], ids[3], androidID])
        #expect(await listed("last_seen_after=\(at(0))&last_seen_before=\(at(3))") == [ids[1], ids[2]])
        #expect(await listed("last_seen_after=\(at(0))&platform=android") == [androidID])
        #expect(await listed("last_seen_after=\(at(3))&last_seen_before=\(at(1))") == [])
        // An offset instead of Z names the same instant (`+` escaped in a query).
        #expect(await listed("last_seen_before=\(at(2).dropLast())%2B00:00") == [ids[0], ids[1]])
        // Cursors page through the filtered list.
        let first = await app.call(.get, "/v1/devices?last_seen_before=\(at(4))&limit=2")
        #expect(first.json?["devices"]?.arrayValue?.map { $0["id"]?.stringValue } == [ids[0], ids[1]])
        let cursor = try #require(first.json?["next_cursor"]?.stringValue)
        #expect(await listed("last_seen_before=\(at(4))&limit=2&cursor=\(cursor)") == [ids[2], ids[3]])
        // With state: an invalidated device is listed under invalidated only.
        _ = await app.call(
            .post, "/v1/feedback",
            body: #"{"provider":"apns","token":"\#(TestTokens.apns(1))","reason":"Unregistered"}"#)
        #expect(await listed("last_seen_before=\(at(2))&state=active") == [ids[1]])
        #expect(await listed("last_seen_before=\(at(2))&state=invalidated") == [ids[0]])
    }

    @Test(
        "an invalid last_seen timestamp is 400 naming the parameter",
        arguments: [
            "last_seen_before=yesterday", "last_seen_before=2026-13-01T00:00:00Z", "last_seen_after=2026-01-01",
            "last_seen_after=1790000000000", "last_seen_before=2026-02-30T00:00:00Z", "last_seen_after=",
        ])
    func listFilterRejects(query: String) async throws {
        let app = try await DeviceApp.make()
        let answer = await app.call(.get, "/v1/devices?" + query)
        #expect(answer.status == 400)
        #expect(answer.errorCode == "invalid_field")
        #expect(answer.errorField == String(query.prefix { $0 != "=" }))
    }
}
