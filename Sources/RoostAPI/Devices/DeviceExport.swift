import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import Synchronization

extension DeviceRoutes {
    /// `GET /v1/devices/export` (`devices:read`): every device of the key's app
    /// and mode, with its token, one JSON object a line (`application/x-ndjson`),
    /// in creation order, streamed — and exactly the state at the change-feed
    /// position in the `Roost-Cursor` header (spec §9), however long it streams.
    ///
    /// One shard turn freezes a copy-on-write view of the index's devices
    /// (`IndexExportView`) and reads the feed's last position; the answer
    /// waits, as every read does, until the log has acknowledged everything
    /// appended before it, so the cursor is durable when the head goes out.
    /// The loop then renders the view a chunk of `DeviceExport.chunkBytes`
    /// at a time, the next chunk only once the stream has taken the last
    /// (`whenWritable`): the server holds one chunk and the connection's
    /// bounded output, plus the chunks writers copied since the view was
    /// taken (at most the index's size, per export: `concurrentMax` bounds
    /// the exports at once; past it 429). Export then
    /// `GET /v1/changes?after=<Roost-Cursor>` misses and repeats nothing.
    func export(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let app = scope.indexKey.app
        guard exports.take(for: app) else { throw DeviceExport.busy }
        return .engine(
            [.index(scope.indexKey, settings: scope.settings, .beginExport)],
            answer: EngineAnswer { [exports] outcomes, reply in
                guard let outcomes else {
                    exports.give(for: app)
                    reply.sink.send(APIError.logUnavailable.response)
                    return
                }
                guard case .exportView(let view) = outcomes[0] else {
                    preconditionFailure("an export began with \(outcomes[0])")
                }
                let headers = DeviceExport.headers + [("Roost-Cursor", ChangeCursor.encode(view.cursor))]
                let stream = reply.sink.startStream(status: 200, headers: headers)
                DeviceExport(view: view, slots: exports, app: app).send(after: 0, to: stream)
            })
    }
}

/// The exports streaming at once (each pins up to its index's size of
/// copied chunks while writers go on): at most `max` in all, and at most
/// `perAppMax` of one app (both modes), so that one app's stalled exports
/// cannot take every slot from the others (issue 24 L-4). Taken and given
/// on the loops, rarely (once per export): a mutex is cheap here.
final class ExportSlots: Sendable {
    private struct Counts {
        var total = 0
        var byApp: [AppID: Int] = [:]
    }

    private let counts = Mutex(Counts())
    let max: Int
    let perAppMax: Int

    init(max: Int = DeviceExport.concurrentMax, perAppMax: Int = DeviceExport.concurrentPerAppMax) {
        precondition(perAppMax >= 1 && perAppMax <= max, "export slots per app \(perAppMax) of \(max)")
        self.max = max
        self.perAppMax = perAppMax
    }

    /// Takes a slot for `app`; false when all are taken, or `app` holds its share.
    func take(for app: AppID) -> Bool {
        counts.withLock { counts in
            let held = counts.byApp[app] ?? 0
            guard counts.total < max, held < perAppMax else { return false }
            counts.total += 1
            counts.byApp[app] = held + 1
            return true
        }
    }

    /// Gives back a slot `app` took.
    func give(for app: AppID) {
        counts.withLock { counts in
            let held = counts.byApp[app] ?? 0
            precondition(held > 0 && counts.total > 0, "an export slot of app \(app.rawValue) given back twice")
            counts.total -= 1
            counts.byApp[app] = held == 1 ? nil : held - 1
        }
    }

    /// Exports streaming now.
    var inUse: Int { counts.withLock { $0.total } }
}

/// One export in progress: the frozen view, rendered a chunk at a time.
struct DeviceExport: Sendable {
    /// The bytes of one chunk: devices are rendered into it until the next
    /// might not fit (~450 devices of 570 bytes). One chunk is rendered
    /// between writes to the stream.
    static let chunkBytes = 1 << 18
    /// Exports streaming at once, per server (docs/limits.md).
    static let concurrentMax = 8
    /// Of those, what one app may stream at once (docs/limits.md).
    static let concurrentPerAppMax = 2

    static let headers: [(name: String, value: String)] = [("Content-Type", "application/x-ndjson")]

    static let busy = APIError.rateLimited(.exports, retryAfterSeconds: 1)

    let view: IndexExportView
    let slots: ExportSlots
    /// Whose slot this export holds.
    let app: AppID

    /// Writes the chunk after `sequence`, then (once the stream has taken
    /// it) the next; finishes the stream and gives the slot back at the end.
    func send(after sequence: UInt64, to stream: any HTTPBodyStream, storage: ExportChunkStorage = ExportChunkStorage())
    {
        let (chunk, next) = Self.render(view, after: sequence, reusing: storage.take(), scratch: storage.scratch)
        guard let next else {
            slots.give(for: app)
            if chunk.isEmpty {
                stream.finish()
            } else {
                stream.write(chunk) { signal in if signal == .writable { stream.finish() } }
            }
            return
        }
        storage.keep(chunk)
        stream.write(chunk) { signal in
            guard signal == .writable else {
                slots.give(for: app)  // the client went away: the view goes with this closure
                return
            }
            self.send(after: next, to: stream, storage: storage)
        }
    }

    /// Renders the devices of `view` created after `sequence` as NDJSON
    /// lines, tokens included, until the next might not fit a chunk of
    /// `bytes`; returns the chunk and the sequence to continue after (nil:
    /// every device is in it). The chunk is rendered into `storage`'s memory
    /// when nothing else holds it (the previous chunk, once the connection
    /// took it).
    static func render(
        _ view: IndexExportView, after sequence: UInt64, bytes: Int = chunkBytes,
        reusing storage: consuming [UInt8] = [],
        scratch: StoredFieldsScratch = StoredFieldsScratch()
    ) -> (chunk: [UInt8], next: UInt64?) {
        var next: UInt64? = nil
        var chunk = storage
        chunk.removeAll(keepingCapacity: true)
        chunk.append(addingCapacity: bytes) { span in
            span.withUnsafeMutableBufferPointer { buffer, initialized in
                var writer = DeviceLineWriter(UnsafeMutableBufferPointer(rebasing: buffer[0..<bytes]))
                next = view.forEachDevice(afterSequence: sequence, scratch: scratch) { writer.write($0) }
                initialized = writer.count
            }
        }
        precondition(next == nil || !chunk.isEmpty, "a device line longer than an export chunk of \(bytes) bytes")
        return (chunk, next)
    }
}

/// The memory an export hands from one chunk to the next, and the scratch
/// its passes over the store copy fields into (`StoredFieldsScratch`). Once the
/// connection copied a chunk into its output, the stream holds it no more
/// and the next chunk is rendered into the same memory: a fresh 256 KiB
/// buffer per chunk was mapped and faulted in page by page (the allocator
/// maps blocks that large, `MemoryAllocator`), and with the connection's
/// output the page faults were 13 % of an export's CPU (issue 25).
/// @unchecked: an export's chunks are written one at a time (the stream
/// takes a write only after the previous write's `whenWritable`), so one
/// thread at a time touches it.
final class ExportChunkStorage: @unchecked Sendable {
    private var bytes: [UInt8] = []
    let scratch = StoredFieldsScratch()

    /// Keeps a reference to the chunk just written.
    func keep(_ chunk: [UInt8]) { bytes = chunk }

    /// The kept chunk, given up by the storage (its memory is reused when the stream let go of it).
    func take() -> [UInt8] {
        var taken: [UInt8] = []
        swap(&taken, &bytes)
        return taken
    }
}
