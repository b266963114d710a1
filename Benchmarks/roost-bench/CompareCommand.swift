import RoostJSON
import RoostPlatform

/// `roost-bench compare A.json B.json …`: a table of the runs' figures and
/// their ratios to the first (or `--baseline N`), as markdown; optionally a
/// bar chart of throughput and a plot of latency against offered rate.
/// A file is a `roost-bench load --out` result or a peer's result (Redis,
/// PostgreSQL: Benchmarks/peers/result.py), whose missing percentiles show as `-`.
enum CompareCommand {
    /// The largest result file read.
    static let fileBytesMax = 64 << 20
    /// The most files compared at once.
    static let filesMax = 64

    static let usage = """
        usage: roost-bench compare A.json B.json … [--baseline N] [--plot bars.svg] [--latency-plot rates.svg]
                                                  [--title TEXT]
          A.json …            result files of `roost-bench load --out`, or peer result files
                              (`"roost_bench": "peer"`, Benchmarks/peers/result.py)
          --baseline N        the run the ratios are against (1: the first)
          --plot FILE         a bar chart of answers/s per run
          --latency-plot FILE p50/p99/max latency against the offered rate (open-loop runs)
        """

    /// The figures of one result file; a percentile a peer's tool does not
    /// report is NaN (printed `-`).
    struct Run {
        var name: String
        var rate: Double
        var offered: Double?
        var p50: Double
        var p90: Double
        var p99: Double
        var p999: Double
        var max: Double
        var errors: Int
        var passed: Bool
        var cpuPercent: Double
        var mode: String
    }

    static func run(_ arguments: ArraySlice<String>) -> Int32 {
        if Arguments.wantsHelp(arguments) {
            print(usage)
            return 0
        }
        do {
            let flags = try Arguments(
                arguments, valued: ["--baseline", "--plot", "--latency-plot", "--title"], positionalAllowed: filesMax)
            guard !flags.positional.isEmpty else { throw UsageError("name at least one result file") }
            let baseline = (try flags.int("--baseline", in: 1...flags.positional.count) ?? 1) - 1
            var runs: [Run] = []
            for path in flags.positional { runs.append(try read(path)) }
            print(table(runs, baseline: baseline))
            if let plot = flags.string("--plot") {
                let title = flags.string("--title") ?? "answers/s"
                try FileOutput.write(
                    Array(SVGPlot.bars(title: title, unit: "/s", runs.map { ($0.name, $0.rate) }).utf8), to: plot)
                StandardStreams.error("roost-bench compare: wrote \(plot)")
            }
            if let plot = flags.string("--latency-plot") {
                let open = runs.compactMap { run in
                    run.offered.map { (name: run.name, offered: $0, p50: run.p50, p99: run.p99, max: run.max) }
                }
                guard !open.isEmpty else { throw UsageError("--latency-plot needs open-loop runs (--rate)") }
                try FileOutput.write(Array(SVGPlot.latencyAgainstRate(open).utf8), to: plot)
                StandardStreams.error("roost-bench compare: wrote \(plot)")
            }
            return 0
        } catch let error as UsageError {
            StandardStreams.error("roost-bench compare: \(error)")
            StandardStreams.error(usage)
            return 2
        } catch {
            StandardStreams.error("roost-bench compare: \(error)")
            return 1
        }
    }

    /// Reads one result file.
    static func read(_ path: String) throws -> Run {
        guard let bytes = FileOutput.read(path, limitBytes: fileBytesMax) else {
            throw LoadError("cannot read \(path) (missing, or over \(fileBytesMax) bytes)")
        }
        let value = try JSONReader.parse(bytes)
        let kind = value["roost_bench"]?.stringValue
        guard kind == "load" || kind == "peer", let summary = value["summary"],
            let latency = summary["latency_us"], let rate = summary["rate"]?.doubleValue
        else { throw LoadError("\(path) is not a `roost-bench load --out` result or a peer result file") }
        // A load result has every percentile; a peer's tool may not (redis-benchmark: no p90, p99.9).
        let missing = kind == "peer" ? Double.nan : 0
        func ms(_ key: String) -> Double { (latency[key]?.doubleValue ?? missing) / 1000 }
        let errors =
            (summary["unexpected"]?.intValue ?? 0) + (summary["connection_failures"]?.intValue ?? 0)
            + (summary["unanswered"]?.intValue ?? 0) + (summary["malformed"]?.intValue ?? 0)
        let file = String(path.split(separator: "/").last ?? Substring(path))
        let name = value["label"]?.stringValue ?? String(file.hasSuffix(".json") ? file.dropLast(5) : Substring(file))
        let config = value["config"]
        return Run(
            name: name, rate: rate, offered: config?["rate"]?.doubleValue, p50: ms("p50"), p90: ms("p90"),
            p99: ms("p99"), p999: ms("p99.9"), max: ms("max"), errors: errors,
            passed: summary["passed"]?.boolValue ?? false,
            cpuPercent: summary["generator_cpu"]?["percent_of_core"]?.doubleValue ?? 0,
            mode: (config?["mode"]?.stringValue ?? "?") + (config?["rate"]?.doubleValue.map { " \(Int($0))/s" } ?? ""))
    }

    /// The markdown table: figures, then throughput and p99 as ratios to the baseline.
    static func table(_ runs: [Run], baseline: Int) -> String {
        let base = runs[baseline]
        func ratio(_ value: Double, _ reference: Double) -> String {
            value.isFinite && reference > 0 ? Format.fixed(value / reference, 2) + "×" : "-"
        }
        var lines = [
            "| run | load | answers/s | × \(base.name) | p50 ms | p90 ms | p99 ms | p99 × | p99.9 ms | max ms | errors | generator CPU |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for run in runs {
            lines.append(
                "| \(run.name)\(run.passed ? "" : " (FAILED)") | \(run.mode) | \(Format.grouped(Int(run.rate.rounded()))) | "
                    + "\(ratio(run.rate, base.rate)) | \(Format.fixed(run.p50, 2)) | \(Format.fixed(run.p90, 2)) | "
                    + "\(Format.fixed(run.p99, 2)) | \(ratio(run.p99, base.p99)) | \(Format.fixed(run.p999, 2)) | "
                    + "\(Format.fixed(run.max, 2)) | \(run.errors) | \(Format.fixed(run.cpuPercent, 0)) % |")
        }
        return lines.joined(separator: "\n")
    }
}
