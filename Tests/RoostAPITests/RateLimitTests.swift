import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostPlatform
import RoostTesting
import Testing

@testable import RoostAPI

private func address(_ text: String) -> IPAddress {
    guard let parsed = IPAddress(parsing: text[...]) else { preconditionFailure("\(text) is not an address") }
    return parsed
}

/// Checks a 429 of the given limit: the code, the reason and `Retry-After`.
private func expectRateLimited(
    _ answer: Answer, retryAfter: Int, _ comment: Comment? = nil, sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(answer.status == 429, comment, sourceLocation: sourceLocation)
    #expect(answer.errorCode == "rate_limited", comment, sourceLocation: sourceLocation)
    #expect(answer.header("Retry-After") == String(retryAfter), comment, sourceLocation: sourceLocation)
}

@Suite("Per-token limit through the routes")
struct TokenLimitRouteTests {
    @Test("POST /v1/devices: the 11th registration of one token in a burst is 429 with Retry-After and changes nothing")
    func native() async throws {
        let app = try await DeviceApp.make()
        for n in 1...10 {
            #expect(await app.registerIOS(1, #""app_version":"\#(n)""#).status == (n == 1 ? 201 : 200))
        }
        let refused = await app.registerIOS(1, #""app_version":"11","external_id":"someone""#)
        expectRateLimited(refused, retryAfter: 6)
        #expect(refused.json?["error"]?["message"]?.stringValue?.contains("token") == true)
        let listed = await app.call(.get, "/v1/devices").json?["devices"]?.arrayValue ?? []
        #expect(listed.count == 1)
        #expect(listed.first?["app_version"]?.stringValue == "10")
        #expect(listed.first?["external_id"] == .null)
        // Another token of the same app is not held back.
        #expect(await app.registerIOS(2).status == 201)
        // After the interval one more registration of the token is accepted.
        app.harness.clock.advance(milliseconds: 6_000)
        #expect(await app.registerIOS(1, #""app_version":"12""#).status == 200)
        expectRateLimited(await app.registerIOS(1), retryAfter: 6)
    }

    @Test("Barua PUT, Native Notify register and Connect PUT /v1/me/devices answer the same 429 after the burst")
    func dialects() async throws {
        let harness = try Harness()
        let burst = Shard.tokenRegistrationRate.burst

        let (barua, baruaKey) = try await BaruaTests.setUp(harness)
        for _ in 0..<burst {
            #expect(await harness.call(.put, BaruaTests.path, key: baruaKey, body: BaruaTests.body()).status == 200)
        }
        expectRateLimited(
            await harness.call(.put, BaruaTests.path, key: baruaKey, body: BaruaTests.body()), retryAfter: 6, "Barua")
        #expect(try await harness.stats(app: barua).devices == 1)

        let (native, mobile) = try await NativeNotifyTests.setUp(harness)
        let register = NativeNotifyRoutes.prefix + "/device/register"
        let body = NativeNotifyTests.body(app: native, token: mobile)
        for _ in 0..<burst { #expect(await harness.call(.post, register, key: nil, body: body).status == 201) }
        expectRateLimited(await harness.call(.post, register, key: nil, body: body), retryAfter: 6, "Native Notify")

        let connect = try await ConnectTests.setUp(harness)
        let guest = try await ConnectTests.guest(harness, connect)
        for n in 0..<burst {
            let answer = await harness.call(.put, "/v1/me/devices", key: guest.token, body: ConnectTests.device())
            #expect(answer.status == (n == 0 ? 201 : 200))
        }
        expectRateLimited(
            await harness.call(.put, "/v1/me/devices", key: guest.token, body: ConnectTests.device()), retryAfter: 6,
            "Connect")
    }

    @Test("the refusal names its limit for metrics: token")
    func reason() {
        let error = APIError(RegistryRejection.tokenRateLimited(retryAfterSeconds: 4))
        #expect(error.rateLimit == .token)
        #expect(error.status == 429)
        #expect(error.retryAfterSeconds == 4)
        #expect(APIError.rateLimited(.clientAddress, retryAfterSeconds: 0).retryAfterSeconds == 1)
    }
}

@Suite("Per-address limit of mobile-key and identity-token routes")
struct ClientAddressLimitTests {
    static let burst = ClientAddressLimiter.rate.burst

    /// Mints guest identities (a mobile-key route without engine work) from
    /// `peer` until one is refused; returns how many were accepted.
    static func mintUntilRefused(
        _ harness: Harness, key: String, peer: IPAddress, headers: [(name: String, value: String)] = []
    ) async -> (accepted: Int, refusal: Answer?) {
        for accepted in 0..<(burst * 2) {
            let answer = await harness.call(.post, "/v1/identities/guest", key: key, peer: peer, headers: headers)
            guard answer.status == 201 else { return (accepted, answer) }
        }
        return (burst * 2, nil)
    }

    @Test("a mobile key gets 200 requests from one address at once, then 20 a second; 429 names the address limit")
    func burstThenSteady() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        let peer = address("203.0.113.7")
        let (accepted, refusal) = await ClientAddressLimitTests.mintUntilRefused(harness, key: app.mobile, peer: peer)
        #expect(accepted == ClientAddressLimitTests.burst)
        let answer = try #require(refusal)
        expectRateLimited(answer, retryAfter: 1)
        #expect(answer.json?["error"]?["message"]?.stringValue?.contains("address") == true)
        // Every mobile-key route from that address is held back: registration included.
        let device = #"{"platform":"ios","token":"\#(TestTokens.apns(5))"}"#
        expectRateLimited(
            await harness.call(.post, "/v1/devices", key: app.mobile, body: device, peer: peer), retryAfter: 1)
        // A second later, 20 more.
        harness.clock.advance(milliseconds: 1_000)
        let (again, _) = await ClientAddressLimitTests.mintUntilRefused(harness, key: app.mobile, peer: peer)
        #expect(again == Int(1_000_000_000 / ClientAddressLimiter.rate.intervalNanoseconds))
        #expect(harness.service.clientLimiter.counts().refusals == 3)
    }

    @Test("other addresses, other apps and secret keys are not held back by one address's flood")
    func separateBudgets() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        let flooder = address("198.51.100.9")
        _ = await ClientAddressLimitTests.mintUntilRefused(harness, key: app.mobile, peer: flooder)
        #expect(
            await harness.call(.post, "/v1/identities/guest", key: app.mobile, peer: address("198.51.100.10")).status
                == 201)
        let other = try await ConnectTests.setUp(harness)
        #expect(await harness.call(.post, "/v1/identities/guest", key: other.mobile, peer: flooder).status == 201)
        // The backend's secret key is not an app-embedded credential: not limited per address.
        let user = await harness.call(
            .post, "/v1/identities/authenticated", key: app.secret, body: #"{"external_id":"u1"}"#, peer: flooder)
        #expect(user.status == 201)
    }

    @Test("IPv6 clients count by their /64; an IPv4-mapped IPv6 peer is its IPv4 address")
    func ipv6Prefixes() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        _ = await ClientAddressLimitTests.mintUntilRefused(harness, key: app.mobile, peer: address("2001:db8:1:2::5"))
        let sameHost = await harness.call(
            .post, "/v1/identities/guest", key: app.mobile, peer: address("2001:db8:1:2:ffff::77"))
        expectRateLimited(sameHost, retryAfter: 1)
        let nextPrefix = await harness.call(
            .post, "/v1/identities/guest", key: app.mobile, peer: address("2001:db8:1:3::5"))
        #expect(nextPrefix.status == 201)

        _ = await ClientAddressLimitTests.mintUntilRefused(harness, key: app.mobile, peer: address("192.0.2.1"))
        let mapped = await harness.call(
            .post, "/v1/identities/guest", key: app.mobile, peer: address("::ffff:192.0.2.1"))
        expectRateLimited(mapped, retryAfter: 1)
        #expect(
            await harness.call(.post, "/v1/identities/guest", key: app.mobile, peer: address("192.0.2.2")).status
                == 201)
    }

    @Test("Native Notify with a mobile appToken and Connect's identity-token routes count per address too")
    func dialects() async throws {
        let harness = try Harness()
        let app = try await ConnectTests.setUp(harness)
        let guest = try await ConnectTests.guest(harness, app)
        let peer = address("203.0.113.50")
        _ = await ClientAddressLimitTests.mintUntilRefused(harness, key: app.mobile, peer: peer)
        expectRateLimited(
            await harness.call(.put, "/v1/me/devices", key: guest.token, body: ConnectTests.device(), peer: peer),
            retryAfter: 1)
        let health = NativeNotifyRoutes.prefix + "/health?appId=\(app.id)&appToken=\(app.mobile)"
        expectRateLimited(await harness.call(.get, health, peer: peer), retryAfter: 1)
        // A secret appToken (the app's backend) is not limited per address.
        let writer = try await harness.createKey(
            app: app.id, #"{"kind":"secret","capabilities":["devices:write"]}"#
        ).key
        let backendHealth = NativeNotifyRoutes.prefix + "/health?appId=\(app.id)&appToken=\(writer)"
        #expect(await harness.call(.get, backendHealth, peer: peer).status == 200)
    }

    @Test("behind a trusted proxy the client is the right-most X-Forwarded-For entry; an untrusted peer's is ignored")
    func trustedProxy() async throws {
        let proxy = address("10.0.0.1")
        let limiter = ClientAddressLimiter(trustedProxies: [proxy, address("10.0.0.2")], clock: ManualWallClock())
        func client(_ peer: IPAddress, _ forwarded: [String]) -> IPAddress? {
            var head = HTTPRequestHead(
                method: .get, target: "/", version: .http11,
                headers: HTTPHeaders(forwarded.map { (name: "X-Forwarded-For", value: $0) }), keepAlive: true)
            head.peerAddress = peer
            return limiter.clientAddress(head)
        }
        #expect(client(proxy, ["198.51.100.1, 198.51.100.2"]) == address("198.51.100.2"))
        #expect(client(proxy, ["198.51.100.1", "198.51.100.3 , 10.0.0.2"]) == address("198.51.100.3"))
        #expect(client(proxy, ["2001:db8::1"]) == address("2001:db8::1"))
        // No entry, or one that is not an address: the proxy itself.
        #expect(client(proxy, []) == proxy)
        #expect(client(proxy, ["unknown"]) == proxy)
        #expect(client(proxy, ["198.51.100.1, garbage, 10.0.0.2"]) == address("10.0.0.2"))
        // A client that is not a trusted proxy cannot pick its own address.
        let direct = address("192.0.2.44")
        #expect(client(direct, ["198.51.100.1"]) == direct)
        #expect(
            ClientAddressLimiter(clock: ManualWallClock()).clientAddress(
                HTTPRequestHead(
                    method: .get, target: "/", version: .http11, headers: HTTPHeaders(), keepAlive: true)) == nil)

        let harness = try Harness(trustedProxies: [proxy])
        let app = try await ConnectTests.setUp(harness)
        let behind = [("X-Forwarded-For", "198.51.100.7")]
        let (accepted, _) = await ClientAddressLimitTests.mintUntilRefused(
            harness, key: app.mobile, peer: proxy, headers: behind)
        #expect(accepted == ClientAddressLimitTests.burst)
        let neighbour = await harness.call(
            .post, "/v1/identities/guest", key: app.mobile, peer: proxy, headers: [("X-Forwarded-For", "198.51.100.8")])
        #expect(neighbour.status == 201)
    }

    @Test("IP addresses parse and print in both families; anything else is refused")
    func addresses() {
        #expect(address("192.0.2.1").isIPv4)
        #expect(address("192.0.2.1").description == "192.0.2.1")
        #expect(address("::ffff:192.0.2.1") == address("192.0.2.1"))
        #expect(!address("2001:db8::1").isIPv4)
        #expect(address("2001:DB8:0:0:0:0:0:1").description == "2001:db8::1")
        #expect(address("2001:db8:1:2::5").high == 0x2001_0db8_0001_0002)
        for bad in ["", "1.2.3", "256.1.1.1", "1.2.3.4:80", "[::1]", "fe80::1%eth0", "host", " 1.2.3.4"] {
            #expect(IPAddress(parsing: bad[...]) == nil, "\(bad)")
        }
    }
}
