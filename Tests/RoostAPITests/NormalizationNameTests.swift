import RoostJSON
import RoostTesting
import Testing

@testable import RoostAPI

/// Issue 24 B1: names that differ only by Unicode normalization (NFC
/// `"caf\u{E9}"`, NFD `"cafe\u{301}"`) are two names everywhere (RFC 7493
/// §2.3 compares code points), not one as Swift's `String` `==` has it.
@Suite("Names are compared as code points: NFC and NFD spellings are two names")
struct NormalizationDistinctNameTests {
    static let nfc = "caf\u{E9}"
    static let nfd = "cafe\u{301}"
    static let nfcQuery = "caf%C3%A9"
    static let nfdQuery = "cafe%CC%81"

    /// The UTF-8 bytes of `text` (compared so that the test does not itself
    /// use canonical equivalence).
    static func bytes(_ text: String?) -> [UInt8]? { text.map { Array($0.utf8) } }

    /// One tag as bytes: the key's UTF-8, 0xFF (never in UTF-8), the string value's.
    static func entry(_ key: String, _ value: String) -> [UInt8] { Array(key.utf8) + [0xFF] + Array(value.utf8) }

    /// The device's tags as `entry` bytes, in rendered order.
    static func tags(_ answer: Answer) -> [[UInt8]] {
        (answer.json?["tags"]?.objectMembers ?? []).map { entry($0.key, $0.value.stringValue ?? "") }
    }

    /// The tags one device was registered with: both spellings, in key order.
    static var both: [[UInt8]] {
        [entry(nfc, "1"), entry(nfd, "2")].sorted { $0.lexicographicallyPrecedes($1) }
    }

    @Test("a registration with both spellings as tag keys keeps both; GET shows both")
    func registerKeepsBoth() async throws {
        let app = try await DeviceApp.make()
        let answer = await app.registerIOS(1, #""tags":{"\#(Self.nfc)":"1","\#(Self.nfd)":"2"}"#)
        #expect(answer.status == 201, "\(answer.text)")
        #expect(Self.tags(answer) == Self.both)
        let id = try #require(answer.json?["id"]?.stringValue)
        #expect(Self.tags(await app.device(id)) == Self.both)
    }

    @Test("a PATCH of one spelling leaves the other; deleting one leaves the other")
    func patchKeepsTheOther() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1, #""tags":{"\#(Self.nfc)":"1"}"#)
        let patched = await app.call(.patch, "/v1/devices/\(id)", body: #"{"tags":{"\#(Self.nfd)":"2"}}"#)
        #expect(patched.status == 200, "\(patched.text)")
        #expect(Self.tags(patched) == Self.both)
        let changed = await app.call(.patch, "/v1/devices/\(id)", body: #"{"tags":{"\#(Self.nfd)":"3"}}"#)
        #expect(Self.bytes(changed.json?["tags"]?[Self.nfc]?.stringValue) == Array("1".utf8))
        #expect(Self.bytes(changed.json?["tags"]?[Self.nfd]?.stringValue) == Array("3".utf8))
        let removed = await app.call(.patch, "/v1/devices/\(id)", body: #"{"tags":{"\#(Self.nfc)":null}}"#)
        #expect(Self.tags(removed) == [Self.entry(Self.nfd, "3")])
    }

    @Test("a PATCH changing a tag's value from its NFC to its NFD spelling stores the NFD spelling")
    func valueSpellingChanges() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1, #""tags":{"k":"\#(Self.nfc)"}"#)
        let patched = await app.call(.patch, "/v1/devices/\(id)", body: #"{"tags":{"k":"\#(Self.nfd)"}}"#)
        #expect(Self.bytes(patched.json?["tags"]?["k"]?.stringValue) == Self.bytes(Self.nfd))
        #expect(Self.bytes(await app.device(id).json?["tags"]?["k"]?.stringValue) == Self.bytes(Self.nfd))
    }

    @Test("a tag filter on one spelling does not match the other, in the key or in the value")
    func filterMatchesOneSpelling() async throws {
        let app = try await DeviceApp.make()
        let nfcDevice = try await app.registerID(1, #""tags":{"\#(Self.nfc)":"1","k":"\#(Self.nfc)"}"#)
        let nfdDevice = try await app.registerID(2, #""tags":{"\#(Self.nfd)":"1","k":"\#(Self.nfd)"}"#)
        func listed(_ query: String) async -> [String] {
            let answer = await app.call(.get, "/v1/devices?" + query)
            #expect(answer.status == 200, "\(query): \(answer.text)")
            return (answer.json?["devices"]?.arrayValue ?? []).compactMap { $0["id"]?.stringValue }
        }
        #expect(await listed("tag.\(Self.nfcQuery)=1") == [nfcDevice])
        #expect(await listed("tag.\(Self.nfdQuery)=1") == [nfdDevice])
        #expect(await listed("tag.k=\(Self.nfcQuery)") == [nfcDevice])
        #expect(await listed("tag.k=\(Self.nfdQuery)") == [nfdDevice])
        // Two filters, one per spelling: two names (not a repeat), and no device has both.
        #expect(await listed("tag.\(Self.nfcQuery)=1&tag.\(Self.nfdQuery)=1") == [])
    }

    @Test("app versions and people spelled NFC and NFD stay as each device sent them")
    func internedAndIndexedStrings() async throws {
        let app = try await DeviceApp.make()
        let first = try await app.registerID(1, #""app_version":"\#(Self.nfc)","external_id":"\#(Self.nfc)""#)
        let second = try await app.registerID(2, #""app_version":"\#(Self.nfd)","external_id":"\#(Self.nfd)""#)
        let nfdDevice = await app.device(second)
        #expect(Self.bytes(nfdDevice.json?["app_version"]?.stringValue) == Self.bytes(Self.nfd))
        #expect(Self.bytes(nfdDevice.json?["external_id"]?.stringValue) == Self.bytes(Self.nfd))
        #expect(Self.bytes(await app.device(first).json?["app_version"]?.stringValue) == Self.bytes(Self.nfc))
        let person = await app.call(.get, "/v1/people/\(Self.nfdQuery)")
        #expect(person.status == 200, "\(person.text)")
        let devices = (person.json?["devices"]?.arrayValue ?? []).compactMap { $0["id"]?.stringValue }
        #expect(devices == [second])
        // Re-registering the NFC device with the NFD app version is a change, stored as sent.
        let changed = await app.registerIOS(1, #""app_version":"\#(Self.nfd)""#)
        #expect(Self.bytes(changed.json?["app_version"]?.stringValue) == Self.bytes(Self.nfd))
    }

    @Test("both spellings survive log replay and a snapshot plus the log")
    func restart() async throws {
        let directory = try TemporaryDirectory.make()
        defer { TemporaryDirectory.remove(directory) }
        let (first, engine) = try await Harness.durable(directory)
        let app = try await DeviceApp.make(first)
        let id = try await app.registerID(1, #""tags":{"\#(Self.nfc)":"1","\#(Self.nfd)":"2"}"#)
        let nfdVersion = try await app.registerID(2, #""app_version":"\#(Self.nfd)""#)
        _ = try await app.registerID(3, #""app_version":"\#(Self.nfc)""#)
        engine.close()

        func check(_ harness: Harness, _ when: Comment) async {
            let reopened = DeviceApp(
                harness: harness, app: app.app, secret: app.secret, mobile: app.mobile, testSecret: app.testSecret)
            #expect(Self.tags(await reopened.device(id)) == Self.both, when)
            let version = await reopened.device(nfdVersion).json?["app_version"]?.stringValue
            #expect(Self.bytes(version) == Self.bytes(Self.nfd), when)
            let filtered = await reopened.call(.get, "/v1/devices?tag.\(Self.nfdQuery)=2")
            #expect(filtered.json?["devices"]?.arrayValue?.count == 1, when)
        }
        let (second, secondEngine) = try await Harness.durable(directory)
        await check(second, "after log replay")
        #expect(try await secondEngine.snapshot() != nil)
        secondEngine.close()
        let (third, thirdEngine) = try await Harness.durable(directory)
        defer { thirdEngine.close() }
        await check(third, "after a snapshot")
    }

    @Test("two users whose external ids differ only by normalization never get each other's remembered answer")
    func idempotencyOwners() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        let nfcUser = try await ConnectTests.user(harness, app, Self.nfc)
        let nfdUser = try await ConnectTests.user(harness, app, Self.nfd)
        let first = await harness.call(
            .put, "/v1/me/devices", key: nfcUser, body: ConnectTests.device(installation: "one"),
            idempotencyKey: "same-key")
        #expect(first.status == 201, "\(first.text)")
        #expect(Self.bytes(first.json?["external_id"]?.stringValue) == Self.bytes(Self.nfc))
        let second = await harness.call(
            .put, "/v1/me/devices", key: nfdUser,
            body: ConnectTests.device(installation: "two", token: TestTokens.apns(2)), idempotencyKey: "same-key")
        #expect(second.status == 201, "\(second.text)")
        #expect(second.header("Idempotent-Replayed") == nil)
        #expect(Self.bytes(second.json?["external_id"]?.stringValue) == Self.bytes(Self.nfd))
    }
}
