import Synchronization
import Testing

@testable import RoostHTTP
@testable import RoostPlatform

@Suite("Answer buffers kept by a loop")
struct AnswerBufferPoolTests {
    @Test("a kept answer's arrays come back emptied with their room, once; a holder's bytes stay; off the loop, none")
    func keptArrays() throws {
        try Self.onLoop(bytesRetainedMax: 1024) { pool in try Self.keptArrays(pool) }
    }

    /// Runs `body` with a pool whose loop this thread runs meanwhile.
    private static func onLoop(bytesRetainedMax: Int, _ body: (AnswerBufferPool) throws -> Void) throws {
        let executor = try LoopExecutor(index: 0)
        executor.adoptCurrentThread()
        defer { executor.releaseThread() }
        try body(AnswerBufferPool(executor: executor, bytesRetainedMax: bytesRetainedMax))
    }

    private static func keptArrays(_ pool: AnswerBufferPool) throws {

        var headers: [(name: String, value: String)] = []
        headers.reserveCapacity(4)
        headers.append(("Content-Type", "application/json"))
        let body = [UInt8](repeating: 7, count: 100)
        let heldBody = body
        pool.keep(HTTPResponse(status: 200, headers: headers, body: body))
        let taken = pool.take()
        #expect(taken.body.isEmpty && taken.body.capacity >= 100)
        #expect(taken.headers.isEmpty && taken.headers.capacity >= 4)
        #expect(heldBody == [UInt8](repeating: 7, count: 100), "an array still held elsewhere keeps its bytes")
        #expect(headers.count == 1 && headers[0].value == "application/json")
        let again = pool.take()
        #expect(again.body.capacity == 0 && again.headers.capacity == 0, "each kept array is handed out once")

        // A body past the retained size, or an empty array, is not kept.
        pool.keep(HTTPResponse(status: 200, headers: [], body: [UInt8](repeating: 1, count: 4096)))
        #expect(pool.take().body.capacity == 0)

        // Off the loop's thread: nothing is handed out, whatever is kept.
        pool.keep(HTTPResponse(status: 200, headers: headers, body: [UInt8](repeating: 2, count: 10)))
        let offLoop = Mutex<(body: Int, headers: Int)?>(nil)
        let other = try PlatformThread.spawn {
            let taken = pool.take()
            offLoop.withLock { $0 = (taken.body.capacity, taken.headers.capacity) }
        }
        other.join()
        #expect(offLoop.withLock { $0 }.map { $0.body == 0 && $0.headers == 0 } == true)
        #expect(pool.take().body.capacity >= 10, "kept for the loop's own next answer")
    }

    @Test("a loop that retains no buffer bytes keeps no body")
    func nothingRetained() throws {
        try Self.onLoop(bytesRetainedMax: 0) { pool in
            pool.keep(HTTPResponse(status: 200, headers: [("A", "b")], body: [1, 2, 3]))
            let taken = pool.take()
            #expect(taken.body.capacity == 0)
            #expect(taken.headers.capacity >= 1, "header arrays are bounded by their field count, not by bytes")
        }
    }
}
