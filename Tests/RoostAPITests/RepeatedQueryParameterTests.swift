import RoostJSON
import Testing

@testable import RoostAPI

/// Issue 24 L-5: every route that reads a query string refuses a parameter
/// given twice, as `/v1/changes` did (one grammar, `QueryString.parse`).
@Suite("Query strings: a parameter given twice is refused on every route")
struct RepeatedQueryParameterTests {
    /// One route of each family that reads a query, with a repeated parameter
    /// (the field the 400 names last).
    static let repeated: [(target: String, field: String)] = [
        ("/v1/devices?limit=10&limit=20", "limit"),
        ("/v1/devices?platform=ios&state=all&platform=ios", "platform"),
        ("/v1/devices?tag.plan=pro&tag.plan=free", "tag.plan"),
        // Compared after decoding: an escaped spelling is the same name.
        ("/v1/devices?limit=10&%6Cimit=20", "limit"),
        ("/v1/devices/inactive?older_than_days=30&older_than_days=40", "older_than_days"),
        ("/v1/devices/inactive?older_than_days=30&limit=5&limit=6", "limit"),
        ("/v1/people?limit=1&limit=2", "limit"),
        ("/v1/changes?limit=1&limit=2", "limit"),
    ]

    @Test("a repeated parameter is 400 invalid_field naming it, with /v1/changes' message", arguments: repeated)
    func repeatedParameter(_ target: String, _ field: String) async throws {
        let app = try await DeviceApp.make()
        _ = try await app.registerID(1, #""external_id":"p1","tags":{"plan":"pro"}"#)
        let answer = await app.call(.get, target)
        #expect(answer.status == 400, "\(target): \(answer.text)")
        #expect(answer.json?["error"]?["code"]?.stringValue == "invalid_field")
        #expect(answer.json?["error"]?["field"]?.stringValue == field)
        #expect(answer.json?["error"]?["message"]?.stringValue == "\(field) given twice")
    }

    @Test("each parameter once is still answered: the same routes without the repeat are 200")
    func onceIsFine() async throws {
        let app = try await DeviceApp.make()
        _ = try await app.registerID(1, #""external_id":"p1","tags":{"plan":"pro"}"#)
        for target in [
            "/v1/devices?limit=10&tag.plan=pro&platform=ios", "/v1/devices/inactive?older_than_days=30&limit=5",
            "/v1/people?limit=1", "/v1/changes?limit=1",
        ] {
            #expect(await app.call(.get, target).status == 200, "\(target)")
        }
    }

    @Test("Native Notify health: appId or appToken twice is 400 invalid_field; unknown and empty values as before")
    func nativeNotifyHealth() async throws {
        let harness = try Harness()
        let (app, token) = try await NativeNotifyTests.setUp(harness)
        let base = "/api/universal/health?appId=\(app)&appToken=\(token)"
        #expect(await harness.call(.get, base).status == 200)
        for (target, field) in [(base + "&appId=\(app)", "appId"), (base + "&appToken=\(token)", "appToken")] {
            let answer = await harness.call(.get, target)
            #expect(answer.status == 400, "\(target): \(answer.text)")
            #expect(answer.errorCode == "invalid_field")
            #expect(answer.json?["error"]?["field"]?.stringValue == field)
        }
        // The dialect's leniencies stay: an unknown name is ignored, an empty appToken is a wrong one.
        #expect(await harness.call(.get, base + "&cachebust=1").status == 200)
        #expect(await harness.call(.get, "/api/universal/health?appId=\(app)&appToken=").status == 401)
    }

    @Test("the parser refuses a repeat before the route reads any value; names differing by normalization are two")
    func parser() throws {
        #expect(throws: APIError.invalidField("a", "a given twice")) {
            try QueryString.parse("a=1&b=2&a=1", parametersMax: 10)
        }
        let pairs = try QueryString.parse("tag.caf%C3%A9=1&tag.cafe%CC%81=2", parametersMax: 10)
        #expect(pairs.map { Array($0.name.utf8) } == [Array("tag.caf\u{E9}".utf8), Array("tag.cafe\u{301}".utf8)])
    }
}
