import RoostTesting
import Testing

@testable import RoostAPI

/// Issue 24 M-4 (decision 0072): the app's name and settings govern live
/// devices, so only the operator and live keys may change them; a test key
/// sees its own mode's counts only.
@Suite("Test-mode keys and the app's settings")
struct TestModeSetupTests {
    @Test("a test key with setup:write cannot PATCH the app: 403, and the settings stay as they were")
    func testKeyCannotPatch() async throws {
        let harness = try Harness()
        let app = try await harness.createApp()
        let test = try await harness.createKey(
            app: app, #"{"kind":"secret","mode":"test","capabilities":["setup:write"]}"#)
        for body in [
            #"{"settings":{"max_devices_per_person":1}}"#, #"{"settings":{"inactive_after_days":1}}"#,
            #"{"name":"renamed"}"#,
        ] {
            let answer = await harness.call(.patch, "/v1/apps/\(app)", key: test.key, body: body)
            #expect(answer.status == 403, "\(body)")
            #expect(answer.errorCode == "forbidden")
        }
        let after = await harness.call(.get, "/v1/apps/\(app)", key: Harness.adminKey)
        #expect(after.json?["name"]?.stringValue == "Example")
        #expect(after.json?["settings"]?["max_devices_per_person"]?.intValue == 10)
        #expect(after.json?["settings"]?["inactive_after_days"]?.isNull == true)
        // A live key with the capability still may.
        let live = try await harness.createKey(
            app: app, #"{"kind":"secret","mode":"live","capabilities":["setup:write"]}"#)
        let patched = await harness.call(
            .patch, "/v1/apps/\(app)", key: live.key, body: #"{"settings":{"max_devices_per_person":3}}"#)
        #expect(patched.status == 200)
        #expect(patched.json?["settings"]?["max_devices_per_person"]?.intValue == 3)
    }

    @Test("GET /v1/apps/{app} with a test key shows the test mode's counts and keys only")
    func testKeySeesTestCounts() async throws {
        let harness = try Harness()
        let app = try await harness.createApp()
        let test = try await harness.createKey(
            app: app, #"{"kind":"secret","mode":"test","capabilities":["setup:write","devices:write"]}"#)
        let live = try await harness.createKey(
            app: app, #"{"kind":"secret","mode":"live","capabilities":["devices:write"]}"#)
        for seed in 0..<3 {
            let body = #"{"platform":"ios","token":"\#(TestTokens.apns(seed))"}"#
            #expect(await harness.call(.post, "/v1/devices", key: live.key, body: body).status == 201)
        }
        let testBody = #"{"platform":"ios","token":"\#(TestTokens.apns(9))"}"#
        #expect(await harness.call(.post, "/v1/devices", key: test.key, body: testBody).status == 201)

        let seen = await harness.call(.get, "/v1/apps/\(app)", key: test.key)
        #expect(seen.status == 200)
        let counts = try #require(seen.json?["counts"])
        #expect(counts["live"] == nil)
        #expect(counts["test"]?["devices"]?.intValue == 1)
        #expect(counts["devices"]?.intValue == 1)
        #expect(counts["keys"]?.intValue == 1)
        let operatorView = await harness.call(.get, "/v1/apps/\(app)", key: Harness.adminKey)
        #expect(operatorView.json?["counts"]?["live"]?["devices"]?.intValue == 3)
        #expect(operatorView.json?["counts"]?["devices"]?.intValue == 4)
        #expect(operatorView.json?["counts"]?["keys"]?.intValue == 2)
    }
}

/// Decision 0075: the catalog owns an app's settings; the indexes adopt them.
@Suite("Settings have one owner")
struct SettingsOwnerTests {
    @Test("a settings PATCH appends one record, the catalog's; the next registration obeys the new settings")
    func patchLogsOnlyTheCatalog() async throws {
        let app = try await DeviceApp.make()
        for seed in 0..<3 {
            #expect(await app.registerIOS(seed, #""external_id":"ada""#).status == 201)
        }
        let log = app.harness.service.registry.shardSet.log
        let before = log.appendedThrough.rawValue
        let patched = await app.harness.call(
            .patch, "/v1/apps/\(app.app)", key: Harness.adminKey, body: #"{"settings":{"max_devices_per_person":1}}"#)
        #expect(patched.status == 200)
        #expect(log.appendedThrough.rawValue == before + 1, "the indexes logged settings of their own")
        #expect(await app.registerIOS(9, #""external_id":"ada""#).status == 201)
        let person = await app.call(.get, "/v1/people/ada")
        #expect(person.json?["devices"]?.arrayValue?.count == 1, "the new max_devices_per_person evicted the others")
    }
}
