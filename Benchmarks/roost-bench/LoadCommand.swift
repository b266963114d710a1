import CBenchShims
import Glibc
import RoostPlatform
import RoostTesting
import Synchronization

/// Everything `roost-bench load` was asked to do.
struct LoadOptions {
    var shape = WorkloadShape()
    var adminKey: String? = nil
    var setup = false
    var connections = 64
    /// Requests each connection may have out at once (1: no pipelining).
    var pipelineDepth = 1
    var threads = 1
    /// Requests per second over all threads (open loop); nil: closed loop.
    var rate: Double? = nil
    var seconds: Double? = 10
    var requests: Int? = nil
    var seed: UInt64 = 1
    var drainSeconds: Double = 5
    var tickMicroseconds = 0
    var out: String? = nil
    var plot: String? = nil
    var quiet = false
    /// A roost binary to ask `--version` when /healthz does not say.
    var roostBinary: String? = nil
    var label: String? = nil
    /// Unexpected and failed answers above this fraction fail the run.
    var errorFractionMax = 0.001
    /// The arguments as given (recorded in the result file).
    var commandLine: [String] = []

    /// The largest connection count accepted.
    static let connectionsMax = 4096
    /// The most load threads.
    static let threadsMax = 64
    /// The most requests an open-loop run may schedule (bounds the queue of
    /// intended sends: 8 bytes each, 80 MB if the server answers nothing).
    static let requestsMax = 10_000_000
    /// The largest key space (each device costs the generator ~60 bytes).
    static let tokensMax = 50_000_000
    /// The most people (Connect keeps an identity token for each).
    static let peopleMax = 10_000_000
    /// The longest run.
    static let secondsMax = 86_400.0

    static let usage = """
        usage: roost-bench load --url http://HOST:PORT (--key KEY | --setup --admin-key KEY) [options]
          --url http://IPV4:PORT       the server (any Roost)
          --key KEY                    an app secret key (Native Notify: the appToken)
          --admin-key KEY              the operator key (needed by --setup)
          --setup                      create an app, a key with every capability, the APNs credential
                                       (barua) and the people (barua) the run needs; expectations are exact
          --connections N              keep-alive connections (64)
          --pipeline N                 requests out at once per connection, answered in order (1: none; at most 64)
          --threads N                  load threads, each with connections/N connections (1)
          --seconds S | --requests N   how long (10 s) or how many requests
          --rate R                     open loop at R req/s (latency from the intended send); closed without
          --mix NAME=W,…               register, refresh, rotate, move, delete, feedback, read
                                       (register=80,refresh=10,rotate=4,move=3,delete=1,feedback=1,read=1)
          --tokens N                   device key space (1000000)
          --people N                   people user_0 … (200000)
          --android P                  percent of devices on FCM (40; barua: 0)
          --tags N                     tags per registration (2; barua, nativenotify: 0)
          --dialect D                  native | barua | nativenotify | connect (native)
          --batch N                    register operations sent N per POST /v1/devices/batch (1: one
                                       POST /v1/devices each); each item's status is checked (native)
          --app ID                     the app id (nativenotify without --setup)
          --bundle-id B                the APNs bundle id (barua; com.example.roostbench)
          --out FILE.json              config, machine, Roost version, per-second series, histogram
          --plot FILE.svg              throughput and latency over time
          --any-2xx                    accept any 2xx (a peer answering a fixed body, e.g. nginx)
          --seed N (1)  --drain S (5)  --tick-us N (0)  --roost-bin PATH  --label TEXT  --quiet
        exits 0, 1 when more than 0.1 % of the requests failed or got an unexpected status, 2 on misuse
        """

    static func parse(_ arguments: ArraySlice<String>) throws(UsageError) -> LoadOptions {
        let flags = try Arguments(
            arguments,
            valued: [
                "--url", "--key", "--admin-key", "--connections", "--threads", "--seconds", "--requests", "--rate",
                "--mix", "--tokens", "--people", "--android", "--tags", "--dialect", "--app", "--bundle-id", "--out",
                "--plot", "--seed", "--drain", "--tick-us", "--roost-bin", "--label", "--batch", "--pipeline",
            ],
            switches: ["--setup", "--quiet", "--any-2xx"])
        var options = LoadOptions()
        options.commandLine = Array(arguments)
        guard let url = flags.string("--url") else { throw UsageError("--url http://HOST:PORT is required") }
        (options.shape.host, options.shape.port) = try parseURL(url)
        if let name = try flags.choice("--dialect", Dialect.allCases.map(\.rawValue)) {
            options.shape.dialect = Dialect(rawValue: name)!
        }
        let dialect = options.shape.dialect
        options.setup = flags.has("--setup")
        options.quiet = flags.has("--quiet")
        options.shape.acceptAnySuccess = flags.has("--any-2xx")
        if options.setup && options.shape.acceptAnySuccess {
            throw UsageError("--any-2xx is for peers with a fixed answer; with --setup the statuses are exact")
        }
        options.adminKey = flags.string("--admin-key")
        if let key = flags.string("--key") { options.shape.key = key }
        if options.setup {
            guard options.adminKey != nil else { throw UsageError("--setup needs --admin-key") }
            guard flags.string("--key") == nil else { throw UsageError("--setup makes its own key: drop --key") }
        } else if options.shape.key.isEmpty {
            throw UsageError("--key is required (or --setup with --admin-key)")
        }
        options.connections = try flags.int("--connections", in: 1...connectionsMax) ?? 64
        options.threads = try flags.int("--threads", in: 1...threadsMax) ?? 1
        options.pipelineDepth =
            try flags.int("--pipeline", in: 1...LoadEngine<MixedWorkload>.pipelineDepthMax) ?? 1
        guard options.threads <= options.connections else {
            throw UsageError("--threads \(options.threads) above --connections \(options.connections)")
        }
        options.shape.threads = options.threads
        options.rate = try flags.double("--rate", in: 0.001...1e9)
        if flags.has("--seconds") && flags.has("--requests") {
            throw UsageError("--seconds and --requests exclude each other")
        }
        options.requests = try flags.int("--requests", in: 1...Int(Int32.max))
        options.seconds = options.requests == nil ? try flags.double("--seconds", in: 0.001...secondsMax) ?? 10 : nil
        if let rate = options.rate {
            let scheduled = options.requests.map(Double.init) ?? rate * (options.seconds ?? 0)
            guard scheduled <= Double(requestsMax) else {
                throw UsageError("open loop: --rate × --seconds (or --requests) above \(requestsMax) requests")
            }
            if let requests = options.requests { options.seconds = Double(requests) / rate }
        }
        if let mix = flags.string("--mix") { options.shape.mix = try OperationMix.parse(mix) }
        options.shape.tokens = try flags.int("--tokens", in: 1...tokensMax) ?? 1_000_000
        options.shape.people = try flags.int("--people", in: 1...peopleMax) ?? 200_000
        if let android = try flags.int("--android", in: 0...100) {
            guard dialect.hasAndroid || android == 0 else {
                throw UsageError("--dialect barua registers APNs tokens only")
            }
            options.shape.androidPercent = android
        } else {
            options.shape.androidPercent = dialect.hasAndroid ? 40 : 0
        }
        if let tags = try flags.int("--tags", in: 0...WorkloadShape.tagsMax) {
            guard dialect.hasTags || tags == 0 else { throw UsageError("--dialect \(dialect.rawValue) has no tags") }
            options.shape.tags = tags
        } else {
            options.shape.tags = dialect.hasTags ? 2 : 0
        }
        options.shape.appID = try flags.int("--app", in: 1...Int(Int32.max))
        if dialect == .nativenotify && options.shape.appID == nil && !options.setup {
            throw UsageError("--dialect nativenotify needs --app ID (or --setup)")
        }
        if let bundle = flags.string("--bundle-id") {
            guard !bundle.isEmpty && bundle.utf8.allSatisfy({ $0 > 32 && $0 < 127 && $0 != 47 }) else {
                throw UsageError("--bundle-id \(bundle): expected a bundle id such as com.example.app")
            }
            options.shape.bundleID = bundle
        }
        if let batch = try flags.int("--batch", in: 1...WorkloadShape.batchMax) {
            guard dialect == .native || batch == 1 else { throw UsageError("--batch is for --dialect native") }
            options.shape.batch = batch
        }
        if let seed = try flags.int("--seed", in: 0...Int.max) { options.seed = UInt64(seed) }
        options.drainSeconds = try flags.double("--drain", in: 0.1...3600) ?? 5
        options.tickMicroseconds = try flags.int("--tick-us", in: 0...1_000_000) ?? 0
        options.out = flags.string("--out")
        options.plot = flags.string("--plot")
        options.roostBinary = flags.string("--roost-bin")
        options.label = flags.string("--label")
        return options
    }

    private static func parseURL(_ url: String) throws(UsageError) -> (String, UInt16) {
        guard url.hasPrefix("http://") else { throw UsageError("--url \(url): only http://HOST:PORT") }
        var authority = url.dropFirst("http://".count)
        if authority.hasSuffix("/") { authority = authority.dropLast() }
        let parts = authority.split(separator: ":")
        guard parts.count == 2, let port = UInt16(parts[1]), port != 0, parts[0].split(separator: ".").count == 4
        else { throw UsageError("--url \(url): expected http://IPV4:PORT") }
        return (String(parts[0]), port)
    }

    /// "closed loop" or "open loop at R req/s", and how long.
    var modeDescription: String {
        let mode = rate.map { "open loop at \(Format.fixed($0, 0)) req/s" } ?? "closed loop"
        let tick = rate != nil && tickMicroseconds > 0 ? ", tick \(tickMicroseconds) µs" : ""
        let span = requests.map { "\($0) requests" } ?? "\(Format.fixed(seconds ?? 0, 1)) s"
        return "\(mode)\(tick) for \(span)"
    }
}

/// `roost-bench load …`: sets up (optionally), prepares what the dialect
/// needs, runs the threads, prints a progress line each second and the
/// result, writes the JSON and SVG files; exits 1 when more than 0.1 % of the
/// requests failed or got an unexpected status.
enum LoadCommand {
    static func run(_ arguments: ArraySlice<String>) -> Int32 {
        if Arguments.wantsHelp(arguments) {
            print(LoadOptions.usage)
            return 0
        }
        var options: LoadOptions
        do {
            options = try LoadOptions.parse(arguments)
        } catch {
            StandardStreams.error("roost-bench load: \(error)")
            StandardStreams.error(LoadOptions.usage)
            return 2
        }
        do {
            return try execute(&options)
        } catch {
            StandardStreams.error("roost-bench load: \(error)")
            return 1
        }
    }

    private static func execute(_ options: inout LoadOptions) throws -> Int32 {
        let startedAt = Format.utcTimestamp()
        if options.setup, let adminKey = options.adminKey {
            let made = try LoadSetup.run(options.shape, adminKey: adminKey)
            options.shape.key = made.key
            options.shape.appID = made.appID
            options.shape.freshApp = true
            StandardStreams.error(
                "roost-bench load: setup: app \(made.appID) (max_devices_per_person \(made.devicesPerPersonMax)), "
                    + "key \(made.keyID) with \(LoadSetup.capabilities.joined(separator: " "))"
                    + (options.shape.dialect == .barua ? ", APNs credential \(options.shape.bundleID)/production" : ""))
        } else if options.shape.devicesPerPersonMax > 10 {
            StandardStreams.error(
                "roost-bench load: note: a person may hold up to \(options.shape.devicesPerPersonMax) devices "
                    + "(--tokens/--people); an app with a lower max_devices_per_person evicts devices and reads answer 404"
            )
        }
        if options.setup && options.shape.dialect == .barua {
            _ = try prepare(.people, options)
        }
        if options.shape.dialect == .connect {
            options.shape.identityTokens = try prepare(.identityTokens, options).identityTokens
        }
        let version = RoostVersion.find(host: options.shape.host, port: options.shape.port, binary: options.roostBinary)
        let cpuBefore = ProcessCPU.seconds()
        let (report, series) = try runThreads(options)
        let cpuAfter = ProcessCPU.seconds()
        var merged = report
        merged.userCPUSeconds = cpuAfter.user - cpuBefore.user
        merged.systemCPUSeconds = cpuAfter.system - cpuBefore.system
        print(LoadText.render(merged, options: options))
        let result = LoadResult(
            options: options, report: merged, series: series, machine: MachineInfo.current(), roostVersion: version,
            startedAt: startedAt)
        if let out = options.out {
            try FileOutput.write(result.json(), to: out)
            StandardStreams.error("roost-bench load: wrote \(out)")
        }
        if let plot = options.plot {
            try FileOutput.write(Array(SVGPlot.timeSeries(result).utf8), to: plot)
            StandardStreams.error("roost-bench load: wrote \(plot)")
        }
        if !result.passed {
            StandardStreams.error(
                "roost-bench load: FAILED: \(merged.failures) of \(max(merged.sent, merged.scheduled)) requests "
                    + "failed or got an unexpected status (more than \(Format.fixed(options.errorFractionMax * 100, 1)) %)"
            )
        }
        return result.passed ? 0 : 1
    }

    /// Runs a finite preparation (people, identity tokens) over the
    /// connections, untimed; throws when any request failed.
    private static func prepare(_ kind: PreparationSource.Kind, _ options: LoadOptions) throws -> PreparationSource {
        let clock = ContinuousClock()
        let started = clock.now
        var schedule = LoadSchedule()
        schedule.host = options.shape.host
        schedule.port = options.shape.port
        schedule.connections = min(options.connections, options.shape.people)
        schedule.start = roost_bench_monotonic_ns()
        schedule.drainNanoseconds = UInt64(options.drainSeconds * 1e9)
        let engine = try LoadEngine(
            schedule: schedule, source: PreparationSource(kind: kind, shape: options.shape), seed: options.seed)
        let report = try engine.run()
        let source = engine.source
        let what = kind == .people ? "people (PUT /v1/people)" : "identity tokens (POST /v1/identities/authenticated)"
        guard report.failures == 0 && source.failures.isEmpty && report.expectedAnswers == options.shape.people else {
            throw LoadError(
                "preparing \(what): \(report.failures) of \(options.shape.people) failed: "
                    + source.failures.joined(separator: "; "))
        }
        StandardStreams.error(
            "roost-bench load: prepared \(options.shape.people) \(what) in \(clock.now - started) (not measured)")
        return source
    }

    /// Runs the load threads (each its share of devices and connections),
    /// printing progress from this thread; returns the merged report and the series.
    private static func runThreads(_ options: LoadOptions) throws -> (LoadReport, [SecondSummary]) {
        let threads = options.threads
        let series = SeriesCollector(threads: threads)
        // Time for every thread to connect before the first send is due.
        let start = roost_bench_monotonic_ns() + 100_000_000 + UInt64(options.connections) * 1_000_000
        let results = Mutex<[Result<LoadReport, LoadError>?]>(Array(repeating: nil, count: threads))
        let done = Atomic<Int>(0)
        var handles: [PlatformThread] = []
        for thread in 0..<threads {
            var schedule = LoadSchedule()
            schedule.host = options.shape.host
            schedule.port = options.shape.port
            schedule.connections = options.connections / threads + (thread < options.connections % threads ? 1 : 0)
            schedule.pipelineDepth = options.pipelineDepth
            schedule.start = start
            schedule.rate = options.rate.map { $0 / Double(threads) }
            schedule.phase = Double(thread) / Double(threads)
            schedule.sendNanoseconds = options.seconds.map { UInt64($0 * 1e9) }
            if let requests = options.requests {
                // A count, not a time, ends the run (open loop: that many at the rate).
                schedule.requestLimit = requests / threads + (thread < requests % threads ? 1 : 0)
                schedule.sendNanoseconds = nil
            }
            schedule.drainNanoseconds = UInt64(options.drainSeconds * 1e9)
            schedule.tickNanoseconds = UInt64(options.tickMicroseconds) * 1000
            schedule.thread = thread
            schedule.series = series
            let shape = options.shape
            let threadSchedule = schedule
            let seed = options.seed &+ UInt64(thread) &* 0x9E37_79B9_7F4A_7C15
            handles.append(
                try PlatformThread.spawn(name: "bench-load-\(thread)") {
                    let outcome: Result<LoadReport, LoadError>
                    do {
                        let engine = try LoadEngine(
                            schedule: threadSchedule, source: MixedWorkload(shape: shape, thread: thread), seed: seed)
                        outcome = .success(try engine.run())
                    } catch let error as LoadError {
                        outcome = .failure(error)
                    } catch {
                        outcome = .failure(LoadError("\(error)"))
                    }
                    results.withLock { $0[thread] = outcome }
                    done.add(1, ordering: .releasing)
                })
        }
        let progress = ProgressPrinter(quiet: options.quiet)
        while done.load(ordering: .acquiring) < threads {
            usleep(100_000)
            progress.show(series.takeFinished())
        }
        for handle in handles { handle.join() }
        progress.show(series.takeFinished())
        progress.finish()
        var merged: LoadReport? = nil
        for outcome in results.withLock({ $0 }) {
            switch outcome {
            case .success(let report)?:
                if merged == nil { merged = report } else { merged!.merge(report) }
            case .failure(let error)?: throw error
            case nil: throw LoadError("a load thread ended without a report")
            }
        }
        guard let merged else { throw LoadError("no load thread ran") }
        return (merged, series.all)
    }
}

/// The line printed each second: rewritten in place on a terminal, one line
/// per second otherwise (stderr, so that stdout holds only the result).
final class ProgressPrinter {
    private let quiet: Bool
    private let terminal: Bool
    private var wroteInPlace = false

    init(quiet: Bool) {
        self.quiet = quiet
        terminal = isatty(2) != 0
    }

    func show(_ seconds: [SecondSummary]) {
        guard !quiet, let last = seconds.last else { return }
        let items = terminal ? [last] : seconds
        for second in items {
            // A last part-second (the drain after the schedule) would show a rate it never had.
            let rate =
                second.duration >= 0.5
                ? "\(Format.grouped(Int(second.rate.rounded()))) answers/s"
                : "\(second.answers) answers in the last \(Format.fixed(second.duration * 1000, 0)) ms"
            let line =
                "[\(second.second + 1) s] \(rate), "
                + "p50 \(Format.duration(second.p50Nanoseconds)), p99 \(Format.duration(second.p99Nanoseconds)), "
                + "max \(Format.duration(second.maxNanoseconds)), unexpected \(second.unexpected), "
                + "failed \(second.failed)"
            if terminal {
                StandardStreams.errorRaw("\r\u{1B}[K" + line)
                wroteInPlace = true
            } else {
                StandardStreams.error(line)
            }
        }
    }

    func finish() {
        if wroteInPlace { StandardStreams.errorRaw("\n") }
    }
}

extension StandardStreams {
    /// Writes `text` to stderr as it is (no newline added).
    static func errorRaw(_ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeMutableBytes { Glibc.write(2, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return }
            offset += written
        }
        bytes.removeAll()
    }
}
