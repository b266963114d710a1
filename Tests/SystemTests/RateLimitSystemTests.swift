import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting
import Testing

/// The per-token and per-address limits on the built `roost` binary.
@Suite("roost serve: rate limits (system)", .serialized)
struct RateLimitSystemTests {
    static func register(_ port: UInt16, key: String, token: Int, version: String) throws -> LoopbackResponse {
        let body = #"{"platform":"ios","token":"\#(DeviceSystemTests.token(token))","app_version":"\#(version)"}"#
        return try ServeTests.request(port, "POST", "/v1/devices", key: key, body: body)
    }

    @Test("a token registered in a loop: the 11th is 429 with Retry-After; after kill -9 the log shows only the 10")
    func tokenLoopNeverReachesTheLog() throws {
        let (process, directory) = try ServeTests.start()
        defer { TemporaryDirectory.remove(directory) }
        let keys = try DeviceSystemTests.setUp(process.port)
        for n in 1...10 {
            let answer = try RateLimitSystemTests.register(process.port, key: keys.secret, token: 1, version: "v\(n)")
            #expect(answer.status == (n == 1 ? 201 : 200), "registration \(n): \(answer.bodyText)")
        }
        for n in 11...15 {
            let refused = try RateLimitSystemTests.register(
                process.port, key: keys.secret, token: 1, version: "flood-\(n)")
            #expect(refused.status == 429)
            #expect(try JSONReader.parse(refused.body)["error"]?["code"]?.stringValue == "rate_limited")
            let retryAfter = try #require(refused.header("Retry-After").flatMap { Int($0) })
            #expect(retryAfter >= 1 && retryAfter <= 6)
        }
        // A later write is durable (fsync always) and covers anything appended before it.
        #expect(
            try RateLimitSystemTests.register(process.port, key: keys.secret, token: 2, version: "v1").status == 201)
        // No snapshot at exit: recovery replays the whole log.
        #expect(process.stop(signal: SIGKILL) == 128 + SIGKILL)

        let (restarted, _) = try ServeTests.start(data: directory)
        defer { restarted.stop() }
        let listed = try ServeTests.request(restarted.port, "GET", "/v1/devices", key: keys.secret)
        let devices = try #require(try JSONReader.parse(listed.body)["devices"]?.arrayValue)
        #expect(devices.count == 2)
        let first = devices.first { $0["token"]?.stringValue == DeviceSystemTests.token(1) }
        #expect(first?["app_version"]?.stringValue == "v10")
    }

    /// Mints guest identities (a mobile-key route that writes nothing, so the
    /// loop runs fast) on one connection until one is refused, at most 1,000.
    static func mintUntilRefused(_ port: UInt16, mobile: String, forwardedFor: String? = nil) throws -> (
        accepted: Int, refusal: LoopbackResponse?
    ) {
        let connection = try LoopbackConnection(port: port)
        let forwarded = forwardedFor.map { "X-Forwarded-For: \($0)\r\n" } ?? ""
        for accepted in 0..<1_000 {
            try connection.send(
                "POST /v1/identities/guest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(mobile)\r\n"
                    + forwarded + "Content-Length: 0\r\n\r\n")
            let answer = try connection.readResponse(timeout: .seconds(5))
            guard answer.status == 201 else { return (accepted, answer) }
        }
        return (1_000, nil)
    }

    @Test("a mobile key from one address: a burst of 200, then 429 naming the address; a secret key goes on")
    func mobileKeyPerAddress() throws {
        let (process, directory) = try ServeTests.start()
        defer {
            process.stop()
            TemporaryDirectory.remove(directory)
        }
        let keys = try DeviceSystemTests.setUp(process.port)
        // X-Forwarded-For from a peer nobody named a trusted proxy changes nothing.
        let (accepted, refusal) = try RateLimitSystemTests.mintUntilRefused(
            process.port, mobile: keys.mobile, forwardedFor: "198.51.100.1")
        // 200 at once, plus what refilled (20 a second) while the loop ran.
        #expect(accepted >= 200 && accepted < 400, "\(accepted) accepted")
        let answer = try #require(refusal)
        #expect(answer.status == 429)
        let error = try JSONReader.parse(answer.body)["error"]
        #expect(error?["code"]?.stringValue == "rate_limited")
        #expect(error?["message"]?.stringValue?.contains("address") == true)
        #expect(answer.header("Retry-After") == "1")
        // The app's backend, on its secret key from the same address, is not held back.
        let user = try ServeTests.request(
            process.port, "POST", "/v1/identities/authenticated", key: keys.secret, body: #"{"external_id":"u"}"#)
        #expect(user.status == 201)
        let other = try RateLimitSystemTests.mintUntilRefused(
            process.port, mobile: keys.mobile, forwardedFor: "198.51.100.2")
        #expect(other.accepted < 100, "X-Forwarded-For of an untrusted peer chose the address")
    }

    @Test("--trusted-proxy 127.0.0.1: each X-Forwarded-For client has its own budget; a bad address refuses to start")
    func trustedProxy() throws {
        let (process, directory) = try ServeTests.start(extra: ["--trusted-proxy", "127.0.0.1"])
        defer {
            process.stop()
            TemporaryDirectory.remove(directory)
        }
        let keys = try DeviceSystemTests.setUp(process.port)
        let first = try RateLimitSystemTests.mintUntilRefused(
            process.port, mobile: keys.mobile, forwardedFor: "203.0.113.1, 198.51.100.1")
        #expect(first.accepted >= 200 && first.accepted < 400, "\(first.accepted) accepted")
        #expect(first.refusal?.status == 429)
        let second = try RateLimitSystemTests.mintUntilRefused(
            process.port, mobile: keys.mobile, forwardedFor: "2001:db8::1")
        #expect(second.accepted >= 200 && second.accepted < 400, "\(second.accepted) accepted")

        let refused = CatalogSystemTests.run(
            ["serve", "--listen", "127.0.0.1:0", "--data", directory + "/other", "--trusted-proxy", "proxy.local"],
            in: directory)
        #expect(refused.code == 2)
        #expect(refused.output.contains("--trusted-proxy must be an IPv4 or IPv6 address"), "\(refused.output)")
    }
}
