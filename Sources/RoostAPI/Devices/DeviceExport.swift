import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel

extension DeviceRoutes {
    /// `GET /v1/devices/export` (`devices:read`): every device of the key's app
    /// and mode, with its token, one JSON object a line (`application/x-ndjson`),
    /// in creation order, streamed.
    ///
    /// Bounded memory: one shard job reads a slice of `DeviceExport.sliceDevices`
    /// devices after the last sequence sent, its completion renders the slice as
    /// one chunk and writes it, and only when the stream says the chunk has
    /// moved on (`whenWritable`) is the next job submitted. So the server holds
    /// one slice and the connection's bounded output, never the whole export,
    /// and the shard is free between slices. The export is not a point-in-time
    /// snapshot: a device created after its position was passed is not in it,
    /// one deleted before its slice is read is not either, and no device
    /// appears twice.
    func export(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let export = DeviceExport(scope: scope)
        return .engine([export.slice(after: 0)], answer: export.answer(stream: nil))
    }
}

/// One export in progress: the index to read, a slice at a time.
struct DeviceExport: Sendable {
    /// Devices per shard command and per chunk (about 0.7 MB of NDJSON).
    static let sliceDevices = 1_000

    static let headers: [(name: String, value: String)] = [("Content-Type", "application/x-ndjson")]

    let scope: IndexScope

    /// Returns the work that reads the slice after `sequence` (a value
    /// command; the devices come back as `Outcome.deviceSlice`).
    func slice(after sequence: UInt64) -> ShardWork {
        .index(
            scope.indexKey, settings: scope.settings,
            .exportSlice(afterSequence: sequence, limit: DeviceExport.sliceDevices))
    }

    /// Returns how a slice is answered, on the request's loop: the stream
    /// starts with the first slice (so that a log failure before any byte is
    /// sent is still a proper 503); each chunk is written, and only when the
    /// stream says it has moved on (`whenWritable`) is the next slice asked for.
    func answer(stream: (any HTTPBodyStream)?) -> EngineAnswer {
        EngineAnswer { outcomes, reply in
            guard let outcomes else {
                // Reads wait for earlier writes; if those failed, stop.
                if let stream { stream.abort() } else { reply.sink.send(APIError.logUnavailable.response) }
                return
            }
            guard case .deviceSlice(let devices, let next) = outcomes[0] else {
                preconditionFailure("an export slice answered \(outcomes[0])")
            }
            let body = stream ?? reply.sink.startStream(status: 200, headers: DeviceExport.headers)
            let chunk = DeviceExport.render(devices)
            guard let next else {
                if chunk.isEmpty {
                    body.finish()
                } else {
                    body.write(chunk) { signal in if signal == .writable { body.finish() } }
                }
                return
            }
            body.write(chunk) { signal in
                guard signal == .writable else { return }
                reply.submit([self.slice(after: next)], answer: self.answer(stream: body))
            }
        }
    }

    /// Renders the devices of a slice as NDJSON lines, tokens included.
    static func render(_ devices: [Device]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(devices.count * 720)
        for device in devices {
            var writer = JSONWriter(reservingCapacity: 720)
            DeviceJSON.write(device, includeToken: true, into: &writer)
            bytes.append(contentsOf: writer.bytes)
            bytes.append(UInt8(ascii: "\n"))
        }
        return bytes
    }
}
