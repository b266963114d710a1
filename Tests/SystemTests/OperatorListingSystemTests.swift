import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting
import Testing

/// `roost serve` keeps `last_used_at` across a clean shutdown (spec §11,
/// decision 0053): the uses the hot path kept in memory are logged on SIGTERM.
@Suite("operator listings (system)", .serialized)
struct OperatorListingSystemTests {
    @Test("last_used_at after SIGTERM and a restart is the last use before it, to the millisecond")
    func lastUsedAtSurvivesCleanShutdown() throws {
        let (first, directory) = try ServeTests.start()
        defer { TemporaryDirectory.remove(directory) }
        let admin = ServeTests.adminKey
        _ = try ServeTests.request(first.port, "POST", "/v1/apps", key: admin, body: #"{"name":"A"}"#)
        let made = try JSONReader.parse(
            try ServeTests.request(
                first.port, "POST", "/v1/apps/1/keys", key: admin,
                body: #"{"kind":"secret","capabilities":["setup:write"]}"#
            ).body)
        let key = try #require(made["key"]?.stringValue)
        func lastUsed(_ port: UInt16) throws -> String? {
            let answer = try ServeTests.request(port, "GET", "/v1/apps/1/keys", key: admin)
            #expect(answer.status == 200)
            return try JSONReader.parse(answer.body)["keys"]?.arrayValue?.first?["last_used_at"]?.stringValue
        }
        #expect(try lastUsed(first.port) == nil)
        #expect(try ServeTests.request(first.port, "GET", "/v1/apps/1", key: key).status == 200)  // logged at once
        let firstUse = try #require(try lastUsed(first.port))
        // The next use is stamped later: the wall clock (milliseconds) moves on first.
        let firstUseSeenAt = SystemWallClock().wallMilliseconds()
        #expect(ConditionWait.until { SystemWallClock().wallMilliseconds() > firstUseSeenAt })
        #expect(try ServeTests.request(first.port, "GET", "/v1/apps/1", key: key).status == 200)  // memory only
        let lastUse = try #require(try lastUsed(first.port))
        #expect(lastUse != firstUse)
        #expect(first.stop(signal: SIGTERM) == 0)

        let (second, _) = try ServeTests.start(data: directory)
        defer { second.stop() }
        #expect(try lastUsed(second.port) == lastUse)
    }
}
