import RoostEngine
import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI
@testable import RoostModel

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

    @Test("every timestamp is written as its own RFC 3339 form, when it repeats the one before and when it does not")
    func timestampsRepeated() throws {
        let id = DeviceID(appID: AppID(1), mode: .live, platform: .ios, sequence: 7)
        let first = Timestamp(millisecondsSinceEpoch: 1_790_000_000_123)
        let second = Timestamp(millisecondsSinceEpoch: 1_790_000_000_124)
        // Each field's time: the same as the last one written, or not, in every mix over 4 fields.
        for pattern in 0..<16 {
            var device = Device(id: id, environment: .production, token: nil, createdAt: first)
            device.lastSeenAt = pattern & 1 == 0 ? first : second
            device.boundAt = pattern & 2 == 0 ? first : second
            device.externalID = ExternalID(unchecked: "p")
            device.invalidatedAt = pattern & 4 == 0 ? device.boundAt : first
            device.invalidationReason = .dead
            if pattern & 8 != 0 { device.createdAt = second }
            var line = [UInt8](repeating: 0, count: 4_096)
            var written = 0
            line.withUnsafeMutableBufferPointer { buffer in
                var writer = DeviceLineWriter(buffer)
                var fitted = false
                device.withStoredFields { fields in fitted = writer.write(fields) }
                #expect(fitted)
                written = writer.count
            }
            let text = String(decoding: line[..<written], as: UTF8.self)
            for (key, time) in [
                ("created_at", device.createdAt), ("last_seen_at", device.lastSeenAt),
                ("bound_at", try #require(device.boundAt)), ("invalidated_at", try #require(device.invalidatedAt)),
            ] {
                #expect(text.contains("\"\(key)\":\"\(time.rfc3339)\""), "pattern \(pattern): \(key) in \(text)")
            }
        }
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
        // Each chunk rendered into the previous one's memory once nothing
        // else holds it (`ExportChunkStorage`): the same bytes, one buffer.
        var joined: [UInt8] = []
        var storage: [UInt8] = []
        var buffers = Set<UnsafeRawPointer>()
        var after: UInt64? = 0
        let scratch = StoredFieldsScratch()
        while let sequence = after {
            let (chunk, next) = DeviceExport.render(
                view, after: sequence, bytes: 10_000, reusing: consume storage, scratch: scratch)
            joined += chunk
            chunk.withUnsafeBytes { if let base = $0.baseAddress { buffers.insert(base) } }
            storage = chunk
            after = next
        }
        #expect(joined == whole.chunk)
        #expect(buffers.count == 1, "\(buffers.count) buffers for the chunks of one export")
    }
}

/// The device JSON as `DeviceJSON.write` rendered it through `JSONWriter`
/// before `DeviceLineWriter`: the reference the bytes are held to.
enum ReferenceDeviceJSON {
    static func render(_ device: Device, includeToken: Bool, closing: Bool = true) -> [UInt8] {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("id")
        writer.string(device.id.rendered)
        writer.member("platform", device.platform.name)
        writer.member("environment", device.environment.name)
        if includeToken { writer.member("token", device.token?.text) }
        writer.member("bundle_id", device.bundleID?.rawValue)
        writer.member("installation_id", device.installationID?.rawValue)
        writer.member("external_id", device.externalID?.rawValue)
        writer.member("created_at", device.createdAt.rfc3339)
        writer.member("last_seen_at", device.lastSeenAt.rfc3339)
        writer.member("bound_at", device.boundAt?.rfc3339)
        writer.member("app_version", device.appVersion)
        writer.member("timezone", device.timezone)
        writer.member("locale", device.locale)
        writer.key("push_permission")
        if let permission = device.pushPermission { writer.bool(permission) } else { writer.null() }
        writer.member("opted_in", device.optedIn)
        writer.key("tags")
        writer.beginObject()
        for (key, value) in device.tags.sortedEntries {
            writer.key(key.rawValue)
            switch value {
            case .string(let text): writer.string(text)
            case .bool(let flag): writer.bool(flag)
            case .number(let number):
                if number == number.rounded(), abs(number) <= 9_007_199_254_740_992.0,
                    !(number == 0 && number.sign == .minus)
                {
                    writer.int(Int(number))
                } else {
                    writer.double(number)
                }
            }
        }
        writer.endObject()
        writer.member("invalidated_at", device.invalidatedAt?.rfc3339)
        writer.member("invalidation_reason", device.invalidationReason?.rawValue)
        writer.member("strikes", Int(device.strikes))
        writer.member("mode", device.mode.name)
        writer.member("version", Int(device.version))
        writer.key("client_sequence")
        if let sequence = device.clientSequence { writer.int(Int(sequence)) } else { writer.null() }
        if closing {
            writer.endObject()
        } else {
            writer.key("more")
            writer.int(1)
            writer.endObject()
        }
        return writer.bytes
    }

    /// A device with each field drawn at random: set or not, ASCII or not,
    /// needing escapes or not; tags of every value type.
    static func randomDevice(_ random: inout SeededRandom) throws -> Device {
        let pieces = ["a", "Z", "0", "é", "ü", "日本", "\"", "\\", "\n", "\u{01}", "\u{7F}", " ", "e\u{301}", "/"]
        func text(_ maxPieces: Int) -> String {
            (0..<Int.random(in: 1...maxPieces, using: &random)).map { _ in pieces.randomElement(using: &random)! }
                .joined()
        }
        func maybe<T>(_ make: () throws -> T) rethrows -> T? { Bool.random(using: &random) ? try make() : nil }
        let platform: Platform = Bool.random(using: &random) ? .ios : .android
        let token =
            platform == .ios
            ? try PushToken(
                parsing: String((0..<64).map { _ in "0123456789abcdef".randomElement(using: &random)! }), platform: .ios
            )
            : try PushToken(
                parsing: "fcm:" + String(repeating: "x", count: Int.random(in: 40...160, using: &random)),
                platform: .android)
        let id = DeviceID(
            appID: AppID(UInt32.random(in: 1...1_000, using: &random)),
            mode: Bool.random(using: &random) ? .live : .test,
            platform: platform, sequence: UInt64.random(in: 1...(1 << 40), using: &random))
        func time() -> Timestamp {
            Timestamp(millisecondsSinceEpoch: Int64.random(in: 0...4_102_444_800_000, using: &random))
        }
        var device = Device(
            id: id, environment: Bool.random(using: &random) ? .production : .sandbox,
            token: Int.random(in: 0..<8, using: &random) == 0 ? nil : token, createdAt: time())
        device.lastSeenAt = time()
        device.bundleID = maybe { BundleID(unchecked: text(4)) }
        device.installationID = maybe { InstallationID(unchecked: text(6)) }
        device.externalID = maybe { ExternalID(unchecked: text(8)) }
        device.boundAt = device.externalID == nil ? nil : time()
        device.appVersion = maybe { text(3) }
        device.timezone = maybe { text(3) }
        device.locale = maybe { text(2) }
        device.pushPermission = maybe { Bool.random(using: &random) }
        device.optedIn = Bool.random(using: &random)
        var values: [TagKey: TagValue] = [:]
        for _ in 0..<Int.random(in: 0...6, using: &random) {
            let value: TagValue
            switch Int.random(in: 0..<5, using: &random) {
            case 0: value = .string(text(5))
            case 1: value = .bool(Bool.random(using: &random))
            case 2: value = .number(Double(Int.random(in: -1_000_000...1_000_000, using: &random)))
            case 3: value = .number(Double.random(in: -1e300...1e300, using: &random))
            default: value = .number([0.5, -0.0, 1e-7, 9_007_199_254_740_994, 123.456].randomElement(using: &random)!)
            }
            values[TagKey(text(3))] = value
        }
        device.tags = try Tags(values)
        if Bool.random(using: &random) {
            device.invalidatedAt = time()
            device.invalidationReason = InvalidationReason(unchecked: text(3))
        }
        device.strikes = UInt32.random(in: 0...5, using: &random)
        device.version = UInt32.random(in: 1...UInt32.max, using: &random)
        device.clientSequence = maybe { UInt64.random(in: 0...Limits.clientSequenceMax, using: &random) }
        return device
    }
}

@Suite("Device JSON against its reference rendering")
struct DeviceJSONReferenceTests {
    @Test(
        "2,000 random devices render byte for byte as the JSONWriter reference, with and without the token, closed or left open"
    )
    func randomDevices() throws {
        var random = SeededRandom(seed: 20_261_206)
        for _ in 0..<2_000 {
            let device = try ReferenceDeviceJSON.randomDevice(&random)
            for includeToken in [true, false] {
                let expected = ReferenceDeviceJSON.render(device, includeToken: includeToken)
                var spare: [UInt8] = []
                #expect(DeviceJSON.body(device, includeToken: includeToken, reusing: &spare) == expected)
                var writer = JSONWriter()
                writer.beginArray()
                DeviceJSON.write(device, includeToken: includeToken, into: &writer, closing: false)
                writer.key("more")
                writer.int(1)
                writer.endObject()
                writer.endArray()
                let open = ReferenceDeviceJSON.render(device, includeToken: includeToken, closing: false)
                #expect(writer.bytes == [UInt8(ascii: "[")] + open + [UInt8(ascii: "]")], "\(device)")
            }
        }
    }
}
