import Glibc
import Synchronization
import Testing

@testable import RoostHTTP
@testable import RoostPlatform
@testable import RoostTesting

/// Defers every request and answers all of a loop's requests at the end of
/// the loop's round (its executor's round handler), as the engine does when
/// it hands a round's commands to the shards.
final class BatchingResponder: HTTPResponder {
    /// The round handler of one loop: answers what that loop deferred.
    final class Round: LoopRoundHandler {
        let loop: Int
        unowned let responder: BatchingResponder

        init(loop: Int, responder: BatchingResponder) {
            self.loop = loop
            self.responder = responder
        }

        func endOfRound() { responder.answer(loop: loop) }
    }

    private let pending = Mutex<[Int: [(target: String, sink: any HTTPReplySink)]]>([:])
    private let batches = Mutex<[(loop: Int, count: Int)]>([])
    private let rounds = Mutex<[Round]>([])
    let executors: [LoopExecutor]

    init(loops: Int) throws {
        executors = try (0..<loops).map { try LoopExecutor(index: $0) }
        let made = executors.map { Round(loop: $0.index, responder: self) }
        for (executor, round) in zip(executors, made) { executor.setRoundHandler(round) }
        rounds.withLock { $0 = made }
    }

    /// Every round that answered requests: its loop and how many it answered.
    var batchLog: [(loop: Int, count: Int)] { batches.withLock { $0 } }

    func bodyLimitBytes(for head: HTTPRequestHead) -> Int { 1024 }

    func respond(to request: HTTPRequest, sink: any HTTPReplySink) -> HTTPResponderResult {
        let target = request.head.target
        pending.withLock { $0[sink.loopIndex, default: []].append((target, sink)) }
        return .deferred(nil)
    }

    func answer(loop: Int) {
        executors[loop].preconditionOnLoop("BatchingResponder.answer")
        let group = pending.withLock { pending in
            let group = pending[loop] ?? []
            pending[loop] = []
            return group
        }
        guard !group.isEmpty else { return }
        batches.withLock { $0.append((loop, group.count)) }
        for (target, sink) in group {
            sink.send(HTTPResponse(status: 200, body: Array("batched \(target) on \(loop)".utf8)))
        }
    }

    func response(for failure: HTTPRequestFailure) -> HTTPResponse {
        HTTPResponse(status: failure.status, body: Array("refused".utf8))
    }
}

/// Chunk `index` of the test stream: a fixed pattern whose first 8 bytes hold
/// the index (little-endian), so a chunk out of place or a byte lost shows.
func streamChunk(_ index: Int, count: Int) -> [UInt8] {
    var chunk = Array(streamPattern.prefix(count))
    for byte in 0..<min(8, count) { chunk[byte] = UInt8(truncatingIfNeeded: index >> (8 * byte)) }
    return chunk
}

let streamPattern: [UInt8] = (0..<StreamingResponder.chunkBytes).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }

/// Returns the offset of the first chunk of `body` that differs from the test stream, or nil.
func firstMisplacedChunk(_ body: [UInt8], total: Int) -> Int? {
    let size = StreamingResponder.chunkBytes
    if body.count != total { return -1 }
    return body.withUnsafeBytes { raw -> Int? in
        var offset = 0
        while offset < total {
            let count = min(size, total - offset)
            let expected = streamChunk(offset / size, count: count)
            let same = expected.withUnsafeBytes { memcmp(raw.baseAddress! + offset, $0.baseAddress!, count) == 0 }
            if !same { return offset }
            offset += count
        }
        return nil
    }
}

/// Streams bodies. Targets: `/stream/<bytes>` streams that many pattern bytes
/// in 64 KiB chunks; `/lines/<n>` streams n lines from a task, one write per
/// line, each once the loop took the one before; `/forever` streams until
/// aborted; `/cut` writes a chunk then aborts. Anything else answers at once.
final class StreamingResponder: HTTPResponder {
    static let chunkBytes = 64 * 1024
    private let aborts = Atomic<Int>(0)
    private let started = Atomic<Int>(0)

    /// Producers that were told `.aborted`.
    var abortsSeen: Int { aborts.load(ordering: .relaxed) }
    /// Streams started.
    var streamsStarted: Int { started.load(ordering: .relaxed) }

    func bodyLimitBytes(for head: HTTPRequestHead) -> Int { 1024 }

    func respond(to request: HTTPRequest, sink: any HTTPReplySink) -> HTTPResponderResult {
        let target = request.head.target
        if target.hasPrefix("/stream/"), let total = Int(target.dropFirst(8)) {
            let stream = sink.startStream(status: 200, headers: [("Content-Type", "application/octet-stream")])
            started.add(1, ordering: .relaxed)
            writePattern(stream, offset: 0, total: total)
            return .deferred(nil)
        }
        if target.hasPrefix("/lines/"), let count = Int(target.dropFirst(7)) {
            let stream = sink.startStream(status: 200, headers: [("Content-Type", "application/x-ndjson")])
            started.add(1, ordering: .relaxed)
            Task.detached {
                for line in 0..<count {
                    let signal = await withCheckedContinuation { continuation in
                        stream.write(Array("{\"line\":\(line)}\n".utf8)) { continuation.resume(returning: $0) }
                    }
                    if signal == .aborted { return }
                }
                stream.finish()
            }
            return .deferred(nil)
        }
        if target == "/forever" {
            let stream = sink.startStream(status: 200, headers: [])
            started.add(1, ordering: .relaxed)
            writeForever(stream, offset: 0)
            return .deferred(nil)
        }
        if target == "/cut" {
            let stream = sink.startStream(status: 200, headers: [])
            stream.write(Array("partial".utf8)) { _ in stream.abort() }
            return .deferred(nil)
        }
        return .respond(HTTPResponse(status: 200, body: Array("\(request.head.method.name) \(target)".utf8)))
    }

    private func writePattern(_ stream: any HTTPBodyStream, offset: Int, total: Int) {
        if offset >= total {
            stream.finish()
            return
        }
        let count = min(Self.chunkBytes, total - offset)
        let chunk = streamChunk(offset / Self.chunkBytes, count: count)
        stream.write(chunk) { signal in
            switch signal {
            case .writable: self.writePattern(stream, offset: offset + count, total: total)
            case .aborted: self.aborts.add(1, ordering: .relaxed)
            }
        }
    }

    private func writeForever(_ stream: any HTTPBodyStream, offset: Int) {
        let chunk = [UInt8](repeating: UInt8(ascii: "x"), count: Self.chunkBytes)
        stream.write(chunk) { signal in
            switch signal {
            case .writable: self.writeForever(stream, offset: offset + chunk.count)
            case .aborted: self.aborts.add(1, ordering: .relaxed)
            }
        }
    }

    func response(for failure: HTTPRequestFailure) -> HTTPResponse {
        HTTPResponse(status: failure.status, body: Array("refused".utf8))
    }
}

/// Starts a two-loop server with `responder` on a free port and stops it after `body`.
func withResponderServer<Responder: HTTPResponder>(
    _ responder: Responder, limits: HTTPServerLimits = HTTPServerLimits(), executors: [LoopExecutor] = [],
    loops: Int = 2, clock: (any MonotonicClock)? = nil, _ body: (UInt16, HTTPServer) throws -> Void
) throws {
    var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0, eventLoopCount: loops, limits: limits)
    if let clock { configuration.clock = clock }
    let server = try HTTPServer(configuration: configuration, responder: responder, executors: executors)
    let port = try server.start()
    defer {
        server.beginShutdown()
        server.waitUntilStopped()
    }
    try body(port, server)
}

extension HTTPServerTests {
    @Suite("HTTP batching hook and streamed responses")
    struct HTTPStreamingTests {
        @Test("a responder that answers at the end of each loop round serves pipelined requests in order")
        func endOfRoundAnswersPipelinedRequests() throws {
            let responder = try BatchingResponder(loops: 2)
            try withResponderServer(responder, executors: responder.executors) { port, _ in
                var clients: [LoopbackConnection] = []
                for _ in 0..<4 { clients.append(try LoopbackConnection(port: port)) }
                for (index, client) in clients.enumerated() {
                    try client.send((0..<20).map { get("/c\(index)/r\($0)") }.joined())
                }
                var loopsSeen: Set<Int> = []
                for (index, client) in clients.enumerated() {
                    for request in 0..<20 {
                        let text = try client.readResponse().bodyText
                        #expect(text.hasPrefix("batched /c\(index)/r\(request) on "), "got \(text)")
                        if let loop = Int(text.split(separator: " ").last ?? "") { loopsSeen.insert(loop) }
                    }
                }
                let log = responder.batchLog
                #expect(log.allSatisfy { $0.count > 0 })
                #expect(log.allSatisfy { (0..<2).contains($0.loop) })
                #expect(log.reduce(0) { $0 + $1.count } == 80)
                // A connection has one request with the responder at a time
                // (decision 0021), so whether a round holds several depends on
                // which connections are ready together: 80 rounds of one was
                // seen on a quiet CI run. That rounds batch requests ready at
                // once is `HTTPRoundTests`' claim.
                #expect(loopsSeen.isSubset(of: [0, 1]))
            }
        }

        @Test("one shared listener: accepted connections go to the loops in turn")
        func connectionsSpreadOverLoops() throws {
            let responder = try BatchingResponder(loops: 2)
            try withResponderServer(responder, executors: responder.executors) { port, _ in
                var clients: [LoopbackConnection] = []
                for _ in 0..<8 {
                    // One at a time, so that each is accepted before the next connects.
                    let client = try LoopbackConnection(port: port)
                    try client.send(get("/which"))
                    _ = try client.readResponse()
                    clients.append(client)
                }
                var perLoop = [0, 0]
                for client in clients {
                    try client.send(get("/again"))
                    let text = try client.readResponse().bodyText
                    if let loop = Int(text.split(separator: " ").last ?? ""), perLoop.indices.contains(loop) {
                        perLoop[loop] += 1
                    }
                }
                #expect(perLoop == [4, 4], "connections per loop: \(perLoop)")
            }
        }

        @Test("a 50 MB stream arrives complete and in order while the queue stays within streamBufferBytesMax")
        func largeStreamIsBounded() throws {
            let responder = StreamingResponder()
            let total = 50 * 1024 * 1024
            try withResponderServer(responder) { port, server in
                let client = try LoopbackConnection(port: port)
                try client.send(get("/stream/\(total)"))
                // Not reading fills the socket buffers, then the stream's queue
                // up to its bound: the producer must wait. Read only then.
                let limit = HTTPServerLimits().streamBufferBytesMax
                #expect(
                    ConditionWait.until { server.streamQueuedBytesHighWater >= limit },
                    "the queue never reached its bound: \(server.streamQueuedBytesHighWater) bytes")
                let response = try client.readResponse(timeout: .seconds(60))
                #expect(response.status == 200)
                #expect(response.header("Transfer-Encoding") == "chunked")
                #expect(response.body.count == total)
                let misplaced = firstMisplacedChunk(response.body, total: total)
                #expect(misplaced == nil, "chunk at \(misplaced ?? 0) out of place")
                let highWater = server.streamQueuedBytesHighWater
                #expect(highWater > 0)
                #expect(
                    highWater <= limit + StreamingResponder.chunkBytes + 1024,
                    "queued \(highWater) bytes, limit \(limit) plus one chunk")
                try client.send(get("/next"))
                #expect(try client.readResponse().bodyText == "GET /next")
            }
        }

        @Test("a pipelined request behind a stream is answered after the stream ends")
        func pipelinedAfterStream() throws {
            try withResponderServer(StreamingResponder()) { port, _ in
                let client = try LoopbackConnection(port: port)
                try client.send(get("/lines/20") + get("/after"))
                let stream = try client.readResponse(timeout: .seconds(5))
                let expected = (0..<20).map { "{\"line\":\($0)}\n" }.joined()
                #expect(stream.bodyText == expected)
                #expect(try client.readResponse().bodyText == "GET /after")
            }
        }

        @Test("a client that disconnects mid-stream makes the producer see an abort")
        func disconnectAborts() throws {
            let responder = StreamingResponder()
            try withResponderServer(responder) { port, server in
                let client = try LoopbackConnection(port: port)
                try client.send(get("/forever"))
                #expect(ConditionWait.until { responder.streamsStarted == 1 })
                _ = try? client.readResponse(timeout: .milliseconds(200))  // head and some chunks
                client.close()
                #expect(ConditionWait.until { responder.abortsSeen == 1 }, "producer not told of the abort")
                #expect(ConditionWait.until { server.openConnections == 0 })
            }
        }

        @Test("a client that stops reading is closed at writeStallTimeout and the producer told")
        func stalledClientAborts() throws {
            let responder = StreamingResponder()
            var limits = HTTPServerLimits()
            limits.writeStallTimeout = .milliseconds(300)
            try withResponderServer(responder, limits: limits) { port, server in
                let client = try LoopbackConnection(port: port)
                try client.send(get("/forever"))
                let start = ContinuousClock.now
                #expect(ConditionWait.until { responder.abortsSeen == 1 }, "producer not told of the stall")
                #expect(ContinuousClock.now - start >= .milliseconds(250))
                #expect(ConditionWait.until { server.openConnections == 0 })
                #expect(
                    server.streamQueuedBytesHighWater <= limits.streamBufferBytesMax + StreamingResponder.chunkBytes
                        + 1024)
            }
        }

        @Test("a HEAD request to a stream gets the head only; the producer is told to stop")
        func headOfStream() throws {
            let responder = StreamingResponder()
            try withResponderServer(responder) { port, _ in
                let client = try LoopbackConnection(port: port)
                try client.send("HEAD /forever HTTP/1.1\r\nHost: t\r\n\r\n")
                let head = try client.readResponse(forHead: true)
                #expect(head.status == 200)
                #expect(head.header("Transfer-Encoding") == "chunked")
                #expect(ConditionWait.until { responder.abortsSeen == 1 })
                try client.send(get("/next"))
                #expect(try client.readResponse().bodyText == "GET /next")
            }
        }

        @Test("an HTTP/1.0 client gets a close-delimited stream")
        func http10Stream() throws {
            try withResponderServer(StreamingResponder()) { port, _ in
                let client = try LoopbackConnection(port: port)
                try client.send("GET /lines/3 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
                let response = try client.readResponse(timeout: .seconds(5))
                #expect(response.header("Connection") == "close")
                #expect(response.header("Transfer-Encoding") == nil)
                #expect(response.bodyText == "{\"line\":0}\n{\"line\":1}\n{\"line\":2}\n")
            }
        }

        @Test("a producer that aborts cuts the response: no last chunk, connection closed")
        func producerAbortCutsResponse() throws {
            try withResponderServer(StreamingResponder()) { port, _ in
                let client = try LoopbackConnection(port: port)
                try client.send(get("/cut"))
                #expect(throws: LoopbackError.self) { _ = try client.readResponse() }
            }
        }
    }
}
