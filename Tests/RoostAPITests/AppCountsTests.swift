import Testing

@testable import RoostAPI

@Suite("App counts and removal through the engine")
struct AppCountsTests {
    @Test("GET /v1/apps/{app} counts each mode's devices and people; DELETE reports devices_removed and drops them")
    func countsAndRemoval() async throws {
        let app = try await DeviceApp.make()
        for n in 0..<3 { #expect(await app.registerIOS(n, #""external_id":"p\#(n % 2)""#).status == 201) }
        #expect(await app.registerIOS(10, key: app.testSecret).status == 201)

        let read = await app.harness.call(.get, "/v1/apps/\(app.app)", key: Harness.adminKey)
        #expect(read.status == 200)
        let counts = try #require(read.json?["counts"])
        #expect(counts["devices"]?.intValue == 4)
        #expect(counts["people"]?.intValue == 2)
        #expect(counts["live"]?["devices"]?.intValue == 3)
        #expect(counts["test"]?["devices"]?.intValue == 1)
        #expect(counts["keys"]?.intValue == 3)

        let deleted = await app.harness.call(.delete, "/v1/apps/\(app.app)", key: Harness.adminKey)
        #expect(deleted.status == 200)
        #expect(deleted.json?["devices_removed"]?.intValue == 4)
        #expect(await app.registerIOS(20).status == 401)
    }

    @Test("a settings change reaches the engine: a lower max_devices_per_person evicts on the next binding")
    func settingsReachTheEngine() async throws {
        let app = try await DeviceApp.make()
        for n in 0..<3 { #expect(await app.registerIOS(n, #""external_id":"solo""#).status == 201) }
        let patched = await app.harness.call(
            .patch, "/v1/apps/\(app.app)", key: Harness.adminKey, body: #"{"settings":{"max_devices_per_person":2}}"#)
        #expect(patched.status == 200)
        #expect(await app.registerIOS(3, #""external_id":"solo""#).status == 201)
        let person = await app.call(.get, "/v1/people/solo")
        #expect(person.json?["devices"]?.arrayValue?.count == 2)
    }
}
