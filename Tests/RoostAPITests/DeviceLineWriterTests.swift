import RoostEngine
import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

/// The export's line writer (issue 25): its bytes are `DeviceJSON`'s, for
/// every field a device can hold, and chunks of any size add up to the same.
@Suite("Export lines written from stored fields")
struct DeviceLineWriterTests {
    /// Devices with every field set or unset, escapes, non-ASCII text, tag
    /// values of each type, both platforms, an invalidated one.
    static func populate(_ app: DeviceApp) async throws -> [String] {
        var ids: [String] = []
        let bodies = [
            #"{"platform":"ios","token":"\#(TestTokens.apns(1))"}"#,
            #"{"platform":"android","token":"\#(TestTokens.fcm(2))","external_id":"ada \"the\" \\ first\u0001","app_version":"1.0\n","timezone":"Europe/Zürich","locale":"ja-JP","tags":{"b":true,"n":30,"f":1.5,"s":"ünï \"q\"","neg":-2,"big":1e300,"caf\u00e9":1,"cafe\u0301":2,"Z":"upper","k\"ey":false},"push_permission":false,"opted_in":false,"installation_id":"inst-1","client_sequence":7}"#,
            #"{"platform":"ios","environment":"sandbox","token":"\#(TestTokens.apns(3))","bundle_id":"com.example.app","external_id":"ada \"the\" \\ first\u0001","tags":{"b":true,"n":30,"f":1.5,"s":"ünï \"q\"","neg":-2,"big":1e300},"push_permission":true}"#,
            #"{"platform":"ios","token":"\#(TestTokens.apns(4))","tags":{"plan":"pro"}}"#,
            #"{"platform":"ios","token":"\#(TestTokens.apns(5))","tags":{"plan":"pro"},"external_id":"bob"}"#,
        ]
        for body in bodies {
            let answer = await app.register(body)
            #expect(answer.status == 201, "\(answer.text)")
            ids.append(try #require(answer.json?["id"]?.stringValue))
        }
        // An invalidated device: the feedback route names its token.
        let feedback = await app.call(
            .post, "/v1/feedback",
            body:
                #"{"provider":"apns","token":"\#(TestTokens.apns(4))","reason":"Unregistered","timestamp":"2030-01-02T03:04:05Z"}"#
        )
        #expect(feedback.status == 200, "\(feedback.text)")
        return ids
    }

    @Test("each export line is the device's JSON as GET /v1/devices/{id} writes it, byte for byte")
    func linesAreDeviceJSON() async throws {
        let app = try await DeviceApp.make()
        let ids = try await Self.populate(app)
        let export = await app.call(.get, "/v1/devices/export")
        #expect(export.status == 200)
        let lines = export.body.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        #expect(lines.count == ids.count + 1 && lines.last?.isEmpty == true)
        for (line, id) in zip(lines, ids) {
            let single = await app.device(id)
            #expect(single.status == 200)
            #expect(Array(line) == single.body, "\(String(decoding: line, as: UTF8.self))")
        }
        #expect(export.text.contains(#""invalidated_at":"20"#), "the invalidated device is among them")
    }

    @Test(
        "chunks of any size hold whole lines and add up to the one-chunk rendering; a line too long for one is refused")
    func chunksAddUp() async throws {
        let app = try await DeviceApp.make()
        _ = try await Self.populate(app)
        for n in 10..<200 { _ = try await app.registerID(n, #""tags":{"n":\#(n % 7)}"#) }
        let key = IndexKey(app: AppID(UInt32(app.app)), mode: .live)
        let begun = await app.harness.service.registry.execute(key, .beginExport)
        guard case .exportView(let view)? = begun else { Issue.record("\(begun as Any)"); return }
        let whole = DeviceExport.render(view, after: 0)
        #expect(whole.next == nil)
        for bytes in [3_000, 4_096, 10_000, 65_536] {
            var joined: [UInt8] = []
            var after: UInt64? = 0
            var chunks = 0
            while let sequence = after {
                let (chunk, next) = DeviceExport.render(view, after: sequence, bytes: bytes)
                #expect(chunk.count <= bytes && (next == nil || !chunk.isEmpty))
                #expect(chunk.isEmpty || chunk.last == UInt8(ascii: "\n"), "a chunk ends with a whole line")
                joined += chunk
                after = next
                chunks += 1
            }
            #expect(joined == whole.chunk, "chunks of \(bytes) bytes")
            #expect(chunks > 1)
        }
    }
}
