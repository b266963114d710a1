import CAllocationCounter
import Glibc
import RoostPlatform

// `roost-alloc-count`: heap allocations per operation through the whole
// request path, from request bytes to answer bytes (issue 25 item 2, decision
// 0070). The service runs in this process behind a loopback socket; the
// client is this main thread, excluded from the counts; every other thread
// (the event loop, which also runs the shard, and the log's thread) is
// counted. Each operation is warmed up first, then counted over `--count`
// operations; the figures go to stdout as one JSON object.
// Tests/SystemTests/AllocationBudgetTests.swift holds the ceilings.

/// One counted window.
struct Measurement {
    var name: String
    /// What one unit is (a request, a batch item, an exported device).
    var unit: String
    var units: Int
    var counts: roost_alloc_counts

    func perUnit(_ value: UInt64) -> Double { Double(value) / Double(units) }
}

struct Options {
    var count = 10_000
    var warmup = 500
    var only: Set<String>?
    var backtraces: String?
    var depth = 16
    var top = 25
    /// SIGALRM ends the run after this many seconds, whatever it waits for.
    var deadlineSeconds = 600

    static let usage = """
        usage: roost-alloc-count [--count N (10000)] [--warmup N (500)] [--only NAME,NAME…]
                                 [--backtraces NAME [--depth N (16)] [--top N (25)]] [--deadline SECONDS (600)]
               roost-alloc-count --build      (prints debug or release)
        Counts heap allocations per operation (all threads of the in-process server; the
        client excluded) and prints one JSON object. NAME: \(Operations.names.joined(separator: ", ")).
        --backtraces NAME also records the call stack of each allocation counted in NAME's
        window and writes the top stacks to stderr (slow; the counts stay exact);
        Benchmarks/roost-alloc-count/symbolize.py names their functions.
        """

    static func parse(_ arguments: ArraySlice<String>) -> Options? {
        var options = Options()
        var rest = arguments
        while let flag = rest.popFirst() {
            guard let value = rest.popFirst() else { return nil }
            switch flag {
            case "--count":
                guard let number = Int(value), number >= 100 else { return nil }
                options.count = number
            case "--warmup":
                guard let number = Int(value), number >= 10 else { return nil }
                options.warmup = number
            case "--only":
                let names = Set(value.split(separator: ",").map(String.init))
                guard names.isSubset(of: Operations.names) else { return nil }
                options.only = names
            case "--backtraces":
                guard Operations.names.contains(value) else { return nil }
                options.backtraces = value
            case "--depth":
                guard let number = Int(value), (1...32).contains(number) else { return nil }
                options.depth = number
            case "--top":
                guard let number = Int(value), number >= 1 else { return nil }
                options.top = number
            case "--deadline":
                guard let number = Int(value), (1...86_400).contains(number) else { return nil }
                options.deadlineSeconds = number
            default: return nil
            }
        }
        return options
    }
}

/// Counts the allocations of `body` (every thread but this one) over `units` units.
func measure(_ name: String, unit: String, units: Int, backtraces: Options?, _ body: () throws -> Void) rethrows
    -> Measurement
{
    let recording = backtraces?.backtraces == name
    if recording, let backtraces { roost_alloc_counter_record_backtraces(Int32(backtraces.depth)) }
    roost_alloc_counter_start()
    try body()
    let counts = roost_alloc_counter_stop()
    if recording, let backtraces {
        roost_alloc_counter_record_backtraces(0)
        StandardStreams.error("roost-alloc-count: the \(backtraces.top) most frequent stacks of \(name):")
        let distinct = roost_alloc_counter_write_backtraces(2, Int32(backtraces.top))
        StandardStreams.error(
            distinct < 0 ? "roost-alloc-count: the stack table overflowed" : "\(distinct) distinct stacks")
    }
    return Measurement(name: name, unit: unit, units: units, counts: counts)
}

#if DEBUG
    let build = "debug"
#else
    let build = "release"
#endif

func json(_ measurements: [Measurement], options: Options) -> String {
    func figure(_ value: Double) -> String {
        let hundredths = Int((value * 100).rounded())
        let fraction = hundredths % 100
        return "\(hundredths / 100).\(fraction < 10 ? "0" : "")\(fraction)"
    }
    var lines = [
        "{", #"  "build": "\#(build)","#, #"  "log": "wal --fsync never","#, #"  "shards": 1, "event_loops": 1,"#,
        #"  "count": \#(options.count), "warmup": \#(options.warmup),"#, #"  "operations": ["#,
    ]
    for (index, measurement) in measurements.enumerated() {
        let counts = measurement.counts
        let fields = [
            #""name": "\#(measurement.name)""#, #""unit": "\#(measurement.unit)""#, #""units": \#(measurement.units)"#,
            #""allocations": \#(counts.allocations)"#, #""reallocations": \#(counts.reallocations)"#,
            #""frees": \#(counts.frees)"#, #""bytes": \#(counts.bytes)"#,
            #""allocations_per_unit": \#(figure(measurement.perUnit(counts.allocations + counts.reallocations)))"#,
            #""frees_per_unit": \#(figure(measurement.perUnit(counts.frees)))"#,
            #""bytes_per_unit": \#(figure(measurement.perUnit(counts.bytes)))"#,
        ]
        lines.append("    {" + fields.joined(separator: ", ") + "}" + (index + 1 < measurements.count ? "," : ""))
    }
    lines += ["  ]", "}"]
    return lines.joined(separator: "\n")
}

if CommandLine.arguments.dropFirst() == ["--build"] {
    print(build)
    exit(0)
}
guard let options = Options.parse(CommandLine.arguments.dropFirst()) else {
    StandardStreams.error(Options.usage)
    exit(2)
}
// A hung run ends (SIGALRM's default action) instead of holding a test.
alarm(UInt32(options.deadlineSeconds))
// Not a counting process (linked without the shim, or a static libc): every figure would read 0.
guard roost_alloc_counter_check_interposed() == 1 else {
    StandardStreams.error("roost-alloc-count: malloc is not interposed in this process; nothing can be counted")
    exit(1)
}
roost_alloc_counter_exclude_current_thread(1)
let server: InProcessServer
do {
    server = try InProcessServer()
} catch {
    StandardStreams.error("roost-alloc-count: cannot start the service: \(error)")
    exit(1)
}
let status: Int32
do {
    let operations = Operations(workload: try Workload(port: server.port), options: options)
    let measurements = try operations.run()
    print(json(measurements, options: options))
    status = 0
} catch {
    StandardStreams.error("roost-alloc-count: \(error)")
    status = 1
}
server.stop()
exit(status)
