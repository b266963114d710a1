import RoostJSON

/// `roost-bench selftest-load`: checks the load generator's parts that need no
/// server: `HTTPResponseReader` on whole, split and bad answers, and the
/// requests `MixedWorkload` builds, and (WorkloadSelfTest) its expectations. Exits 1 on a mismatch.
enum LoadSelfTest {
    /// Returns the failures found (empty: all good), printing a summary.
    static func run() -> [String] {
        var failures: [String] = []
        func expect(_ condition: Bool, _ message: @autoclosure () -> String) {
            if !condition { failures.append(message()) }
        }

        // Two keep-alive answers, fed whole and then one byte at a time.
        let two = Array(
            ("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"
                + "HTTP/1.1 200 OK\r\ncontent-length:  2 \r\nConnection: keep-alive\r\n\r\n{}").utf8)
        let expected: [HTTPResponseReader.Step] = [
            .response(status: 201, closes: false), .response(status: 200, closes: false),
        ]
        expect(steps(feeding: [two]) == expected, "whole feed: \(steps(feeding: [two]))")
        let split = two.map { [$0] }
        expect(steps(feeding: split) == expected, "byte-at-a-time feed: \(steps(feeding: split))")

        let closing = Array("HTTP/1.1 503 Service Unavailable\r\nConnection: Close\r\nContent-Length: 0\r\n\r\n".utf8)
        expect(
            steps(feeding: [closing]) == [.response(status: 503, closes: true)],
            "Connection: close: \(steps(feeding: [closing]))")

        let refusals: [(String, String)] = [
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "chunked"),
            ("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", "no Content-Length"),
            ("HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n", "bad status"),
            ("SMTP 220 hello\r\n\r\n", "not HTTP"),
            ("HTTP/1.1 200 OK\r\nContent-Length: 12a\r\n\r\n", "bad Content-Length"),
        ]
        for (text, name) in refusals {
            let got = steps(feeding: [Array(text.utf8)])
            if case .malformed = got.last {} else { failures.append("\(name) not refused: \(got)") }
        }
        let endless = [UInt8](repeating: UInt8(ascii: "a"), count: HTTPResponseReader.headBytesMax + 1)
        if case .malformed = steps(feeding: [Array("HTTP/1.1 200 OK\r\nX: ".utf8), endless]).last {
        } else {
            failures.append("a head over \(HTTPResponseReader.headBytesMax) bytes is not refused")
        }

        // Requests: valid JSON with the seven fields, a 64-hex token that is the
        // same for the same index, a Content-Length that matches the body.
        var spine = WorkloadShape()
        spine.mix = .registerOnly
        spine.port = 8080
        spine.key = "k"
        var workload = MixedWorkload(shape: spine, thread: 0)
        var tokens: Set<String> = []
        var request: [UInt8] = []
        for index in [0, 1, 2, 199_999, 200_000, 999_999] {
            workload.preview(.register, device: index, into: &request)
            guard let check = checkRequest(request, index: index) else {
                failures.append("request for device \(index) is not well formed")
                continue
            }
            tokens.insert(check)
            var again: [UInt8] = []
            workload.preview(.register, device: index, into: &again)
            expect(again == request, "device \(index) gives two different requests")
        }
        expect(tokens.count == 6, "six devices share tokens: \(tokens.count) distinct")
        // Pinned: register.lua computes the same token for device 0 (xorshift32 from 1).
        workload.preview(.register, device: 0, into: &request)
        expect(
            checkRequest(request, index: 0) == "00042021040806019dcca8c51255994f8ef917d12c6f5bd025b2331a19f91cb2",
            "device 0's token changed: keep MixedWorkload and Benchmarks/spine/register.lua equal")
        failures += WorkloadSelfTest.run()

        print(
            "selftest-load: response reader and workload: " + (failures.isEmpty ? "ok" : "\(failures.count) failures"))
        for failure in failures.prefix(20) { print("  \(failure)") }
        return failures
    }

    /// Feeds `chunks` in turn and collects every step except `.needMore`,
    /// stopping at the first `.malformed`.
    private static func steps(feeding chunks: [[UInt8]]) -> [HTTPResponseReader.Step] {
        var reader = HTTPResponseReader()
        var result: [HTTPResponseReader.Step] = []
        for chunk in chunks {
            chunk.withUnsafeBytes { reader.feed($0) }
            while true {
                let step = reader.next()
                if step == .needMore { break }
                result.append(step)
                if case .malformed = step { return result }
            }
        }
        return result
    }

    /// Returns the token of a well-formed registration request for `index`, or nil.
    private static func checkRequest(_ request: [UInt8], index: Int) -> String? {
        let separator = Array("\r\n\r\n".utf8)
        guard let headEnd = (0...(request.count - 4)).first(where: { Array(request[$0..<$0 + 4]) == separator })
        else { return nil }
        let head = String(decoding: request[..<headEnd], as: UTF8.self)
        let body = Array(request[(headEnd + 4)...])
        guard head.hasPrefix("POST /v1/devices HTTP/1.1\r\n"), head.hasSuffix("\r\nContent-Length: \(body.count)")
        else { return nil }
        guard case .object(let members)? = try? JSONReader.parse(body) else { return nil }
        let fields = Dictionary(members.map { ($0.key, $0.value.stringValue ?? "") }, uniquingKeysWith: { a, _ in a })
        let names = ["platform", "environment", "token", "external_id", "app_version", "locale", "timezone"]
        guard members.count == names.count, names.allSatisfy({ fields[$0] != nil }) else { return nil }
        guard fields["external_id"] == "user_\(index % 200_000)", let token = fields["token"], token.utf8.count == 64,
            token.utf8.allSatisfy({ ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) })
        else { return nil }
        return token
    }
}
