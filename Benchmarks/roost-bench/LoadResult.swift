import Glibc
import RoostJSON
import RoostPlatform

/// Everything one run produced, for the text, the JSON file and the plot.
struct LoadResult {
    let options: LoadOptions
    let report: LoadReport
    let series: [SecondSummary]
    let machine: MachineInfo
    let roostVersion: String
    let startedAt: String

    /// Answers per second over the run.
    var rate: Double {
        let seconds = Double(report.elapsedNanoseconds) / 1e9
        return seconds > 0 ? Double(report.answered) / seconds : 0
    }

    /// The generator's CPU time as a percentage of one core over the run.
    var cpuPercent: Double {
        let seconds = Double(report.elapsedNanoseconds) / 1e9
        return seconds > 0 ? (report.userCPUSeconds + report.systemCPUSeconds) / seconds * 100 : 0
    }

    var errorFraction: Double { Double(report.failures) / Double(max(report.sent, report.scheduled, 1)) }
    var passed: Bool { errorFraction <= options.errorFractionMax }

    /// The result file (docs/benchmarking.md, "The result file").
    func json() -> [UInt8] {
        var writer = JSONWriter(reservingCapacity: 64 * 1024)
        writer.beginObject()
        writer.member("roost_bench", "load")
        writer.member("format", 1)
        if let label = options.label { writer.member("label", label) }
        writer.member("started_at", startedAt)
        // Keys are never written to a result file: the value after --key or --admin-key is hidden.
        writer.key("command")
        writer.beginArray()
        var hideNext = false
        for argument in options.commandLine {
            if hideNext {
                writer.string("(hidden)")
                hideNext = false
            } else if argument.hasPrefix("--key=") || argument.hasPrefix("--admin-key=") {
                writer.string(String(argument.prefix { $0 != "=" }) + "=(hidden)")
            } else {
                writer.string(argument)
                hideNext = argument == "--key" || argument == "--admin-key"
            }
        }
        writer.endArray()
        writeConfig(&writer)
        writer.key("machine")
        machine.write(&writer)
        writer.key("roost")
        writer.beginObject()
        writer.member("version", roostVersion)
        writer.endObject()
        writeSummary(&writer)
        writeOperations(&writer)
        writer.key("series")
        writer.beginArray()
        for second in series {
            writer.beginObject()
            writer.member("second", second.second + 1)
            writer.member("duration_s", second.duration)
            writer.member("answers", second.answers)
            writer.member("rate", (second.rate * 10).rounded() / 10)
            writer.member("unexpected", second.unexpected)
            writer.member("failed", second.failed)
            writer.member("p50_us", Self.micros(second.p50Nanoseconds))
            writer.member("p90_us", Self.micros(second.p90Nanoseconds))
            writer.member("p99_us", Self.micros(second.p99Nanoseconds))
            writer.member("max_us", Self.micros(second.maxNanoseconds))
            writer.endObject()
        }
        writer.endArray()
        writer.key("histogram")
        Self.writeHistogram(report.latency, &writer)
        writer.endObject()
        var bytes = writer.bytes
        bytes.append(UInt8(ascii: "\n"))
        return bytes
    }

    private func writeConfig(_ writer: inout JSONWriter) {
        let shape = options.shape
        writer.key("config")
        writer.beginObject()
        writer.member("url", "http://\(shape.host):\(shape.port)")
        writer.member("dialect", shape.dialect.rawValue)
        writer.member("mix", shape.mix.description)
        writer.member("mode", options.rate == nil ? "closed" : "open")
        if let rate = options.rate { writer.member("rate", rate) } else { writer.key("rate"); writer.null() }
        if let seconds = options.seconds, options.requests == nil { writer.member("seconds", seconds) }
        if let requests = options.requests { writer.member("requests", requests) }
        writer.member("connections", options.connections)
        writer.member("pipeline", options.pipelineDepth)
        writer.member("threads", options.threads)
        writer.member("tokens", shape.tokens)
        writer.member("people", shape.people)
        writer.member("android_percent", shape.androidPercent)
        writer.member("tags", shape.tags)
        writer.member("setup", options.setup)
        writer.member("any_2xx", shape.acceptAnySuccess)
        writer.member("seed", Int(truncatingIfNeeded: options.seed))
        writer.member("tick_us", options.tickMicroseconds)
        writer.member("error_fraction_max", options.errorFractionMax)
        writer.endObject()
    }

    private func writeSummary(_ writer: inout JSONWriter) {
        writer.key("summary")
        writer.beginObject()
        writer.member("scheduled", report.scheduled)
        writer.member("sent", report.sent)
        writer.member("answered", report.answered)
        writer.member("expected", report.expectedAnswers)
        writer.member("unexpected", report.unexpectedCount)
        writer.member("connection_failures", report.connectionFailures)
        writer.member("unanswered", report.unanswered)
        writer.member("malformed", report.malformed)
        writer.member("in_flight_per_connection_max", report.inFlightPerConnectionMax)
        writer.member("error_fraction", errorFraction)
        writer.member("passed", passed)
        writer.member("elapsed_s", Double(report.elapsedNanoseconds) / 1e9)
        writer.member("rate", (rate * 10).rounded() / 10)
        writer.key("latency_us")
        Self.writePercentiles(report.latency, &writer)
        writer.key("send_delay_us")
        Self.writePercentiles(report.sendDelay, &writer)
        writer.key("service_us")
        Self.writePercentiles(report.service, &writer)
        writer.key("generator_cpu")
        writer.beginObject()
        writer.member("user_s", report.userCPUSeconds)
        writer.member("system_s", report.systemCPUSeconds)
        writer.member("percent_of_core", (cpuPercent * 10).rounded() / 10)
        writer.endObject()
        writer.endObject()
    }

    private func writeOperations(_ writer: inout JSONWriter) {
        writer.key("operations")
        writer.beginObject()
        for (index, name) in report.operationNames.enumerated() where report.sentByOperation[index] > 0 {
            writer.key(name)
            writer.beginObject()
            writer.member("sent", report.sentByOperation[index])
            writer.key("statuses")
            writer.beginObject()
            for (status, count) in report.statuses[index].sorted(by: { $0.key < $1.key }) {
                writer.member(String(status), count)
            }
            writer.endObject()
            writer.endObject()
        }
        writer.endObject()
        writer.key("unexpected")
        writer.beginArray()
        for (answer, count) in report.unexpected.sorted(by: { $0.value > $1.value }) {
            writer.beginObject()
            writer.member("operation", report.operationNames[answer.operation])
            writer.member("status", answer.status)
            writer.member("code", answer.code)
            writer.member("count", count)
            writer.endObject()
        }
        writer.endArray()
    }

    static func micros(_ nanoseconds: UInt64) -> Double { (Double(nanoseconds) / 100).rounded() / 10 }

    static func writePercentiles(_ histogram: LatencyHistogram, _ writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("p50", micros(histogram.percentile(50)))
        writer.member("p90", micros(histogram.percentile(90)))
        writer.member("p99", micros(histogram.percentile(99)))
        writer.member("p99.9", micros(histogram.percentile(99.9)))
        writer.member("max", micros(histogram.max))
        writer.member("mean", (histogram.mean / 100).rounded() / 10)
        writer.member("count", Int(histogram.count))
        writer.endObject()
    }

    /// The non-empty buckets as `[lowest_ns, highest_ns, count]`.
    static func writeHistogram(_ histogram: LatencyHistogram, _ writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("unit", "ns")
        writer.member("kind", "log-linear: exact below 256, then 128 buckets per power of two")
        writer.member("count", Int(histogram.count))
        writer.member("min", Int(histogram.count == 0 ? 0 : histogram.min))
        writer.member("max", Int(histogram.max))
        writer.key("buckets")
        writer.beginArray()
        for (index, count) in histogram.counts.enumerated() where count > 0 {
            let range = LatencyHistogram.range(of: index)
            writer.beginArray()
            writer.int(Int(range.lowest))
            writer.int(Int(range.highest))
            writer.int(Int(count))
            writer.endArray()
        }
        writer.endArray()
        writer.endObject()
    }
}

extension JSONWriter {
    /// Writes `"name":value` for a finite double.
    mutating func member(_ name: String, _ value: Double) {
        key(name)
        double(value)
    }
}

/// The human lines of a load run, then one `result` line of key=value pairs
/// for scripts (Benchmarks/spine/run.sh reads it).
enum LoadText {
    static func render(_ report: LoadReport, options: LoadOptions) -> String {
        let seconds = Double(report.elapsedNanoseconds) / 1e9
        let achieved = seconds > 0 ? Double(report.answered) / seconds : 0
        let cpu = report.userCPUSeconds + report.systemCPUSeconds
        let cpuPercent = seconds > 0 ? cpu / seconds * 100 : 0
        func us(_ nanoseconds: UInt64) -> String { Format.fixed(Double(nanoseconds) / 1000, 1) }
        let shape = options.shape
        let latency = report.latency
        var lines = [
            "load: \(options.modeDescription) over \(options.connections) connections "
                + (options.pipelineDepth > 1
                    ? "pipelining \(options.pipelineDepth) (at most \(report.inFlightPerConnectionMax) seen out) " : "")
                + "(\(options.threads) thread\(options.threads == 1 ? "" : "s")), dialect \(shape.dialect.rawValue), "
                + "mix \(shape.mix), \(shape.tokens) tokens, \(shape.people) people, \(shape.androidPercent) % android, "
                + "\(shape.tags) tags, seed \(options.seed)" + (shape.freshApp ? ", fresh app (--setup)" : ""),
            "requests: scheduled \(report.scheduled), sent \(report.sent), answered \(report.answered), "
                + "expected \(report.expectedAnswers), unexpected \(report.unexpectedCount), failed "
                + "\(report.connectionFailures + report.unanswered + report.malformed) (connection "
                + "\(report.connectionFailures), unanswered \(report.unanswered), malformed \(report.malformed))",
        ]
        for (index, name) in report.operationNames.enumerated() where report.sentByOperation[index] > 0 {
            let statuses = report.statuses[index].sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }
            lines.append(
                "  \(name.padding(9)) sent \(String(report.sentByOperation[index]).leftPadding(9)), "
                    + "statuses \(statuses.joined(separator: ", "))")
        }
        for (answer, count) in report.unexpected.sorted(by: { $0.value > $1.value }).prefix(20) {
            lines.append(
                "  UNEXPECTED: \(report.operationNames[answer.operation]) answered \(answer.status)"
                    + (answer.code.isEmpty ? "" : " \(answer.code)") + " × \(count)")
        }
        lines += [
            "achieved: \(Format.fixed(achieved, 0)) answers/s over \(Format.fixed(seconds, 3)) s",
            "latency µs (\(options.rate == nil ? "from send" : "from intended send")): p50 \(us(latency.percentile(50))) "
                + "p90 \(us(latency.percentile(90))) p99 \(us(latency.percentile(99))) "
                + "p99.9 \(us(latency.percentile(99.9))) max \(us(latency.max)) mean \(Format.fixed(latency.mean / 1000, 1))",
            "send delay µs (intended → sent): p50 \(us(report.sendDelay.percentile(50))) "
                + "p99 \(us(report.sendDelay.percentile(99))) max \(us(report.sendDelay.max)); "
                + "service µs (sent → answered): p50 \(us(report.service.percentile(50))) "
                + "p99 \(us(report.service.percentile(99))) max \(us(report.service.max))",
            "generator cpu: \(Format.fixed(cpu, 2)) s (user \(Format.fixed(report.userCPUSeconds, 2)), "
                + "sys \(Format.fixed(report.systemCPUSeconds, 2))) = \(Format.fixed(cpuPercent, 0)) % of one core"
                + (cpuPercent > 80 * Double(options.threads) ? " — the generator may be the bottleneck" : ""),
        ]
        lines.append(
            "result rate=\(Format.fixed(achieved, 0)) target=\(Format.fixed(options.rate ?? 0, 0)) "
                + "answered=\(report.answered) failed=\(report.failures) unexpected=\(report.unexpectedCount) "
                + "p50_us=\(us(latency.percentile(50))) p90_us=\(us(latency.percentile(90))) "
                + "p99_us=\(us(latency.percentile(99))) p999_us=\(us(latency.percentile(99.9))) "
                + "max_us=\(us(latency.max)) send_delay_p99_us=\(us(report.sendDelay.percentile(99))) "
                + "service_p99_us=\(us(report.service.percentile(99))) "
                + "cpu_pct=\(Format.fixed(cpuPercent, 0))")
        return lines.joined(separator: "\n")
    }
}

/// Number and time formatting without Foundation.
enum Format {
    /// `value` with `digits` decimals.
    static func fixed(_ value: Double, _ digits: Int) -> String {
        guard value.isFinite else { return "-" }
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        let scaled = Int((value * scale).rounded())
        if digits == 0 { return String(scaled) }
        let sign = scaled < 0 ? "-" : ""
        let magnitude = abs(scaled)
        let whole = magnitude / Int(scale)
        let fraction = String(magnitude % Int(scale))
        return "\(sign)\(whole).\(String(repeating: "0", count: digits - fraction.count))\(fraction)"
    }

    /// `value` with thousands separated by commas (`25,103`).
    static func grouped(_ value: Int) -> String {
        let digits = String(abs(value))
        var result = ""
        for (offset, character) in digits.enumerated() {
            if offset > 0 && (digits.count - offset) % 3 == 0 { result.append(",") }
            result.append(character)
        }
        return (value < 0 ? "-" : "") + result
    }

    /// A duration in the unit that reads best: µs below 1 ms, ms below 10 s.
    static func duration(_ nanoseconds: UInt64) -> String {
        if nanoseconds < 1_000_000 { return fixed(Double(nanoseconds) / 1e3, 0) + " µs" }
        if nanoseconds < 10_000_000_000 { return fixed(Double(nanoseconds) / 1e6, 2) + " ms" }
        return fixed(Double(nanoseconds) / 1e9, 1) + " s"
    }

    /// Now as RFC 3339 UTC with seconds (`2026-12-01T17:38:18Z`).
    static func utcTimestamp() -> String {
        var now = time(nil)
        var parts = tm()
        gmtime_r(&now, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T"
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }
}

extension String {
    /// The string padded with spaces to `width` on the right.
    func padding(_ width: Int) -> String { count >= width ? self : self + String(repeating: " ", count: width - count) }
    /// The string padded with spaces to `width` on the left.
    func leftPadding(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}

/// Writes whole files (result JSON, SVG) with the one syscall wrapper.
enum FileOutput {
    static func write(_ bytes: [UInt8], to path: String) throws(LoadError) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw LoadError("cannot write \(path): errno \(errno)") }
        defer { close(descriptor) }
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { throw LoadError("cannot write \(path): errno \(errno)") }
            offset += written
        }
    }

    /// Returns the whole file at `path`, at most `limitBytes`, or nil.
    static func read(_ path: String, limitBytes: Int) -> [UInt8]? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var result: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while result.count <= limitBytes {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            result += chunk[0..<count]
        }
        return result.count <= limitBytes ? result : nil
    }
}

/// The machine a run measured on: what a reader needs to compare two runs.
struct MachineInfo {
    var cores: Int
    var kernel: String
    var cpuModel: String
    var memoryKiB: Int
    var loadAverage: String

    static func current() -> MachineInfo {
        func firstLine(_ path: String) -> String {
            FileOutput.read(path, limitBytes: 4096).map { String(decoding: $0, as: UTF8.self) }?
                .split(separator: "\n").first.map(String.init) ?? "unknown"
        }
        let kernel = "\(firstLine("/proc/sys/kernel/ostype")) \(firstLine("/proc/sys/kernel/osrelease"))"
        let cpuinfo = FileOutput.read("/proc/cpuinfo", limitBytes: 4 << 20).map { String(decoding: $0, as: UTF8.self) }
        let model =
            cpuinfo?.split(separator: "\n").first { $0.hasPrefix("model name") }
            .flatMap { $0.split(separator: ":", maxSplits: 1).last }.map { String($0.drop { $0 == " " }) } ?? "unknown"
        let meminfo = FileOutput.read("/proc/meminfo", limitBytes: 1 << 20).map { String(decoding: $0, as: UTF8.self) }
        let memory =
            meminfo?.split(separator: "\n").first { $0.hasPrefix("MemTotal:") }
            .flatMap { $0.split(separator: " ").dropFirst().first }.flatMap { Int($0) } ?? 0
        let load = FileOutput.read("/proc/loadavg", limitBytes: 4096).map { String(decoding: $0, as: UTF8.self) }
        return MachineInfo(
            cores: PlatformThread.onlineProcessorCount, kernel: kernel, cpuModel: model, memoryKiB: memory,
            loadAverage: load?.split(separator: " ").prefix(3).joined(separator: " ") ?? "unknown")
    }

    func write(_ writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("cores", cores)
        writer.member("kernel", kernel)
        writer.member("cpu", cpuModel)
        writer.member("memory_kib", memoryKiB)
        writer.member("load_average_at_start", loadAverage)
        writer.endObject()
    }
}

/// The version of the Roost under test: the `version` member of
/// `GET /healthz` when it has one, else the first line of `BINARY --version`,
/// else "unknown".
enum RoostVersion {
    static func find(host: String, port: UInt16, binary: String?) -> String {
        let client = BlockingHTTPClient(host: host, port: port)
        if let answer = try? client.request("GET", "/healthz", key: nil), answer.status == 200,
            let value = try? JSONReader.parse(answer.body), let version = value["version"]?.stringValue
        {
            return version
        }
        if let binary, let output = Subprocess.output([binary, "--version"]),
            let line = output.split(separator: "\n").first, !line.isEmpty
        {
            return String(line)
        }
        return "unknown"
    }
}
