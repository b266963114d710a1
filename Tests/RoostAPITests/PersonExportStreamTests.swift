import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostTesting
import Synchronization
import Testing

@testable import RoostAPI

/// Issue 24 H-1 (decision 0081): `GET /v1/people/{external_id}/export`
/// streams `PersonExportStream.windowDevices` devices a chunk, each chunk
/// only once the stream took the last, and the bytes are exactly those of
/// the whole rendering.
@Suite("Person export streamed in windows (issue 24 H-1)")
struct PersonExportStreamTests {
    /// Devices of the large person, and rounds of tag changes (one history
    /// event each) after their registration.
    static let devices = 150
    static let tagRounds = 6

    /// A stream that records each chunk and calls back at once.
    final class RecordingStream: HTTPBodyStream {
        private struct State {
            var chunks: [[UInt8]] = []
            var finished = false
            var outstanding = false
        }

        private let state = Mutex(State())
        /// Abort after this many chunks (nil: never).
        let abortAfter: Int?

        init(abortAfter: Int? = nil) { self.abortAfter = abortAfter }

        func write(_ chunk: [UInt8], whenWritable: @escaping @Sendable (HTTPBodyStreamSignal) -> Void) {
            let signal: HTTPBodyStreamSignal = state.withLock { state in
                precondition(!state.outstanding && !state.finished, "a write while one is outstanding, or after finish")
                state.chunks.append(chunk)
                if let abortAfter, state.chunks.count >= abortAfter { return .aborted }
                return .writable
            }
            whenWritable(signal)
        }

        func finish() { state.withLock { $0.finished = true } }
        func abort() {}
        var isAborted: Bool { false }
        var chunks: [[UInt8]] { state.withLock { $0.chunks } }
        var finished: Bool { state.withLock { $0.finished } }
    }

    /// An app whose person `big` has `devices` devices, each with a history
    /// of `tagRounds` tag changes after its creation.
    static func largePerson() async throws -> DeviceApp {
        let app = try await DeviceApp.make(settings: #"{"max_devices_per_person":1000}"#)
        for round in 0...Self.tagRounds {
            let items = (0..<Self.devices).map { n in
                DeviceBatchTests.ios(n, #""external_id":"big","tags":{"round":"r\#(round)","n":"\#(n)"}"#)
            }
            let answer = await app.call(.post, "/v1/devices/batch", body: DeviceBatchTests.batch(items))
            try #require(answer.status == 200, "\(answer.text.prefix(300))")
            app.harness.clock.advance(milliseconds: 1_000)
        }
        return app
    }

    /// The person's export as the shard builds it.
    static func export(_ app: DeviceApp, _ id: String) async throws -> PersonExport {
        let externalID = try ExternalID(id)
        let found = await app.harness.service.registry.perform(IndexKey(app: AppID(UInt32(app.app)), mode: .live)) {
            index in (index.exportPerson(externalID), [Mutation]())
        }
        return try #require(found ?? nil)
    }

    @Test("the streamed answer of a person with 150 devices and their histories is byte for byte the whole rendering")
    func streamedEqualsWhole() async throws {
        let app = try await Self.largePerson()
        let export = try await Self.export(app, "big")
        #expect(export.devices.count == Self.devices)
        #expect(export.devices.indices.allSatisfy { export.history($0).count >= Self.tagRounds })
        let whole = PersonExportStream.renderWhole(export)
        let answer = await app.call(.get, "/v1/people/big/export")
        #expect(answer.status == 200)
        #expect(answer.header("Content-Type") == "application/json")
        #expect(answer.body.count == whole.count)
        #expect(answer.body == whole)
        // And it is JSON of the documented shape.
        let json = try #require(answer.json)
        #expect(json["external_id"]?.stringValue == "big")
        #expect(json["devices"]?.arrayValue?.count == Self.devices)
    }

    @Test("chunks hold at most windowDevices devices, come one per writable signal, and concatenate to the whole")
    func chunksAreWindows() async throws {
        let app = try await Self.largePerson()
        let export = try await Self.export(app, "big")
        let stream = RecordingStream()
        PersonExportStream(export: export).send(from: 0, to: stream)
        let chunks = stream.chunks
        let window = PersonExportStream.windowDevices
        #expect(chunks.count == (Self.devices + window - 1) / window)
        #expect(stream.finished)
        #expect(chunks.flatMap { $0 } == PersonExportStream.renderWhole(export))
        // The largest chunk is about a window's share of the answer, not the answer.
        let whole = PersonExportStream.renderWhole(export).count
        #expect(chunks.map(\.count).max()! <= whole * (window + 1) / Self.devices)
    }

    @Test("the view is frozen: writes to the person's devices and histories after it was taken do not reach its stream")
    func viewIsFrozen() async throws {
        let app = try await Self.largePerson()
        let export = try await Self.export(app, "big")
        let before = PersonExportStream.renderWhole(export)
        // Every device changes again (new events in every ring), one is deleted.
        let items = (0..<Self.devices).map { n in
            DeviceBatchTests.ios(n, #""external_id":"big","tags":{"round":"after"}"#)
        }
        #expect(await app.call(.post, "/v1/devices/batch", body: DeviceBatchTests.batch(items)).status == 200)
        #expect(await app.call(.delete, "/v1/devices/\(export.devices[0].id.rendered)").status == 200)
        let stream = RecordingStream()
        PersonExportStream(export: export).send(from: 0, to: stream)
        #expect(stream.chunks.flatMap { $0 } == before)
        let now = await app.call(.get, "/v1/people/big/export")
        #expect(now.status == 200)
        #expect(now.body != before)
        #expect(now.json?["devices"]?.arrayValue?.count == Self.devices - 1)
    }

    @Test("an aborted stream gets no more chunks and is not finished")
    func abortStops() async throws {
        let app = try await Self.largePerson()
        let export = try await Self.export(app, "big")
        let stream = RecordingStream(abortAfter: 2)
        PersonExportStream(export: export).send(from: 0, to: stream)
        #expect(stream.chunks.count == 2)
        #expect(!stream.finished)
    }

    @Test("a person with no devices and one with fewer than a window render as before")
    func smallPeople() async throws {
        let app = try await DeviceApp.make()
        #expect(await app.call(.put, "/v1/people/empty").status == 201)
        _ = try await app.registerID(1, #""external_id":"one""#)
        for id in ["empty", "one"] {
            let export = try await Self.export(app, id)
            let answer = await app.call(.get, "/v1/people/\(id)/export")
            #expect(answer.status == 200)
            #expect(answer.body == PersonExportStream.renderWhole(export))
            let stream = RecordingStream()
            PersonExportStream(export: export).send(from: 0, to: stream)
            #expect(stream.chunks.count == 1)
            #expect(stream.finished)
        }
        #expect(await app.call(.get, "/v1/people/nobody/export").status == 404)
        #expect(await app.call(.get, "/v1/people/nobody/export").errorCode == "person_not_found")
    }
}
