import Glibc
import RoostPlatform
import RoostTesting
import Synchronization
import Testing

@testable import RoostTelemetry

@Suite("Prometheus text exposition")
struct PrometheusTextTests {
    @Test(
        "integers in units of 10^exponent are written exactly, without trailing zeros",
        arguments: [
            (UInt64(0), -9, "0"), (1_500_000, -9, "0.0015"), (2_000_000_000, -9, "2"), (100_000, -9, "0.0001"),
            (1_796_155_295_227, -3, "1796155295.227"), (7, 0, "7"), (10, -1, "1"), (12_345, -2, "123.45"),
        ])
    func exactDecimals(units: UInt64, exponent: Int, expected: String) {
        #expect(PrometheusText.decimal(units, exponent: exponent) == expected)
    }

    @Test("floating-point values use the format's spelling of infinities and NaN")
    func specialFloats() {
        #expect(PrometheusText.format(.infinity) == "+Inf")
        #expect(PrometheusText.format(-.infinity) == "-Inf")
        #expect(PrometheusText.format(.nan) == "NaN")
        #expect(PrometheusText.format(3) == "3")
        #expect(PrometheusText.format(0.25) == "0.25")
    }

    @Test("label values cannot end a label or a line: backslash, quote and newline are escaped")
    func labelEscaping() {
        var text = PrometheusText()
        text.family("roost_things", .gauge, help: "Things.\nwith a newline \\ and a backslash")
        text.sample("roost_things", [("name", "a\"b\\c\nd")], 1)
        let output = String(decoding: text.bytes, as: UTF8.self)
        #expect(
            output
                == "# HELP roost_things Things.\\nwith a newline \\\\ and a backslash\n# TYPE roost_things gauge\n"
                + "roost_things{name=\"a\\\"b\\\\c\\nd\"} 1\n")
        #expect(output.split(separator: "\n").count == 3)
    }

    @Test("a histogram is written cumulative with le=\"+Inf\", _sum in the exported unit, and _count")
    func histogramExposition() {
        var histogram = Histogram(HistogramBuckets(upperBounds: [1_000_000, 10_000_000], decimalExponent: -9))
        for value: UInt64 in [500_000, 1_000_000, 2_000_000, 50_000_000] { histogram.observe(value) }
        #expect(histogram.counts == [2, 1, 1])
        #expect(histogram.count == 4)
        var text = PrometheusText()
        text.family("roost_latency_seconds", .histogram, help: "Latency.")
        text.histogram("roost_latency_seconds", [("route", "/x")], histogram)
        let lines = String(decoding: text.bytes, as: UTF8.self).split(separator: "\n").dropFirst(2)
        #expect(
            Array(lines) == [
                #"roost_latency_seconds_bucket{route="/x",le="0.001"} 2"#,
                #"roost_latency_seconds_bucket{route="/x",le="0.01"} 3"#,
                #"roost_latency_seconds_bucket{route="/x",le="+Inf"} 4"#,
                #"roost_latency_seconds_sum{route="/x"} 0.0535"#,
                #"roost_latency_seconds_count{route="/x"} 4"#,
            ])
    }

    @Test("a value on a bound falls in that bound's bucket; above the last, in +Inf")
    func bucketBoundaries() {
        let buckets = HistogramBuckets.latencyNanoseconds
        #expect(buckets.bucket(for: 0) == 0)
        #expect(buckets.bucket(for: 100_000) == 0)
        #expect(buckets.bucket(for: 100_001) == 1)
        #expect(buckets.bucket(for: 10_000_000_000) == buckets.upperBounds.count - 1)
        #expect(buckets.bucket(for: UInt64.max) == buckets.upperBounds.count)
    }

    @Test("metric and label names are checked")
    func names() {
        #expect(PrometheusText.isMetricName("roost_http_requests_total"))
        #expect(PrometheusText.isMetricName("a:b"))
        #expect(!PrometheusText.isMetricName("9lives"))
        #expect(!PrometheusText.isMetricName("a-b"))
        #expect(!PrometheusText.isMetricName(""))
        #expect(PrometheusText.isLabelName("route"))
        #expect(!PrometheusText.isLabelName("__name__"))
        #expect(!PrometheusText.isLabelName("a:b"))
    }
}

@Suite("Counter cells")
struct CounterCellsTests {
    @Test("adds from many threads into their own and each other's blocks sum exactly")
    func concurrentAddsSumExactly() throws {
        let blocks = (0..<4).map { _ in CounterCells(count: 3) }
        let perThread = 50_000
        let threads = try (0..<4).map { index in
            try PlatformThread.spawn {
                for step in 0..<perThread {
                    blocks[index].add(0)
                    blocks[(index + step) % 4].add(1, 2)
                }
            }
        }
        for thread in threads { thread.join() }
        #expect(CounterCells.sum(blocks) == [UInt64(4 * perThread), UInt64(8 * perThread), 0])
        #expect(blocks[0].increment(2) == 0)
        #expect(blocks[0].increment(2) == 1)
    }
}

@Suite("Structured log lines")
struct LogLineTests {
    @Test(
        "timestamps are RFC 3339 UTC with milliseconds",
        arguments: [
            (Int64(0), "1970-01-01T00:00:00.000Z"), (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_709_210_096_789, "2024-02-29T12:34:56.789Z"), (4_102_444_799_999, "2099-12-31T23:59:59.999Z"),
        ])
    func timestamps(milliseconds: Int64, expected: String) {
        var bytes: [UInt8] = []
        LogLine.appendTimestamp(milliseconds, to: &bytes)
        #expect(String(decoding: bytes, as: UTF8.self) == expected)
    }

    @Test("a line is one JSON object on one line; quotes, backslashes and control characters are escaped")
    func escaping() {
        var line = LogLine(level: .warning, event: "test.event", wallMilliseconds: 0)
        line.field("text", "a\"b\\c\nd\re\tf\u{01}g\u{7F}")
        line.field("count", 3)
        line.field("flag", true)
        line.field("duration.ms", milliseconds: .microseconds(12_345))
        line.field("small.ms", milliseconds: .microseconds(7))
        let text = String(decoding: line.finished(), as: UTF8.self)
        #expect(
            text
                == #"{"ts":"1970-01-01T00:00:00.000Z","level":"warning","event":"test.event","#
                + #""text":"a\"b\\c\nd\re\tf\u0001g\u007f","count":3,"flag":true,"duration.ms":12.345,"#
                + #""small.ms":0.007}"# + "\n")
        #expect(text.filter { $0 == "\n" }.count == 1)
    }
}

@Suite("Logger", .serialized)
struct LoggerTests {
    @Test("warnings are rate-limited per event; the next line written says how many were held back")
    func rateLimit() throws {
        let clock = ManualMonotonicClock()
        let logger = Logger(output: .memory, clock: clock)
        let extra = 10
        for index in 0..<(Logger.errorLinesBurstMax + extra) {
            logger.warning("test.flood") { $0.field("n", index) }
        }
        logger.info("test.other")
        logger.error("test.other_error")
        #expect(logger.lines.count == Logger.errorLinesBurstMax + 2)
        #expect(logger.suppressedLineCount == UInt64(extra))
        // Lazy: a suppressed line's fields are never built.
        var built = false
        logger.warning("test.flood") { _ in built = true }
        #expect(!built)
        // Two lines a second come back: after 0.6 s one is allowed and counts those held back.
        clock.advance(by: .milliseconds(600))
        logger.warning("test.flood")
        let last = try #require(logger.lines.last)
        #expect(last.contains(#""log.suppressed":\#(extra + 1)"#), "\(last)")
    }

    @Test("a stuck output never blocks the caller: lines past the lane's bound are dropped, counted and reported")
    func stuckOutputDropsLines() throws {
        var descriptors: [Int32] = [0, 0]
        #expect(pipe(&descriptors) == 0)
        let logger = Logger(output: .fileDescriptor(descriptors[1]))
        let clock = ContinuousClock()
        let started = clock.now
        let padding = String(repeating: "x", count: 200)
        // ~2.5 MB into a pipe nobody reads (64 KiB) and one 256 KiB lane.
        for index in 0..<10_000 { logger.info("test.line") { $0.field("padding", padding + String(index)) } }
        #expect(clock.now - started < .seconds(5))
        #expect(logger.droppedLineCount > 0)
        // Drain the pipe, write what is queued, and look for the report.
        let received = ReceivedText()
        let readEnd = descriptors[0]
        let reader = try PlatformThread.spawn {
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            var all: [UInt8] = []
            while true {
                let count = read(readEnd, &buffer, buffer.count)
                if count <= 0 { break }
                all.append(contentsOf: buffer[0..<count])
            }
            received.text.withLock { $0 = String(decoding: all, as: UTF8.self) }
        }
        logger.flush()
        Glibc.close(descriptors[1])
        reader.join()
        Glibc.close(descriptors[0])
        let lines = received.text.withLock { $0 }.split(separator: "\n")
        #expect(lines.contains { $0.contains(#""event":"log.dropped""#) })
        #expect(lines.allSatisfy { $0.hasPrefix(#"{"ts":""#) && $0.hasSuffix("}") })
    }
}

/// Text a reader thread hands to the test.
final class ReceivedText: Sendable {
    let text = Mutex("")
}
