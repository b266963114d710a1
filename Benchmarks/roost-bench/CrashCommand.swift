import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting
import Synchronization

/// Everything `roost-bench crash` was asked to do.
struct CrashOptions {
    var binary = ""
    var data: String? = nil
    var fsync = "always"
    var cycles = 20
    var clients = 4
    var slots = 250
    var people = 8
    /// Weights by `CrashOperation.rawValue` (`CrashOperation.standardMix`).
    var weights = [25, 15, 15, 10, 15, 5, 15]
    var snapshotEveryBytes = 262_144
    var seed: UInt64 = 1
    var populate = 20_000
    var killAfterMilliseconds = 30...400
    /// Every n-th cycle waits for a snapshot and kills during it or just after
    /// it, in turn (0: never).
    var snapshotKillEvery = 3
    var keepData = false
    /// A shell command run after each kill, before the restart (a power-loss
    /// simulation: docs/crash-testing.md); nil: none.
    var afterKill: String? = nil

    /// How long the --after-kill command may run.
    static let afterKillTimeoutMilliseconds = 300_000
    /// The most clients (threads) of the workload.
    static let clientsMax = 64
    /// Slots per client: below the server's max_devices_per_person (1,000),
    /// so that no eviction ever changes a device behind its client's back.
    static let slotsMax = 1_000
    /// The most cycles.
    static let cyclesMax = 100_000
    /// The most background devices.
    static let populateMax = 5_000_000
    /// How long a start (recovery included) may take.
    static let startTimeoutMilliseconds = 120_000
    /// How long a cycle waits for a snapshot to begin (or end) before killing anyway.
    static let snapshotWaitMilliseconds = 4_000
    /// The operator key the harness gives the server it starts.
    static let adminKey = "roost-bench-crash-admin-key-0123456789"

    static let usage = """
        usage: roost-bench crash --bin PATH [options]
          --bin PATH                   the roost binary to test (e.g. .build/release/roost)
          --data DIR                   data directory (empty or absent; default: a new one under $TMPDIR or /var/tmp,
                                       removed when the run passes)
          --fsync always|everysec|never  the policy to serve with (always)
          --cycles N                   kill -9 / restart / check cycles (20)
          --mix NAME=W,…               register, rotate, move, delete, tags, erase, import
                                       (\(CrashOperation.standardMix))
          --clients N                  concurrent clients, one write in flight each (4)
          --slots N                    devices per client (250; at most 1000)
          --people N                   people per client (8)
          --populate N                 background devices imported at the start, checked every cycle (20000)
          --snapshot-every-bytes N     roost serve --snapshot-log-bytes N (262144; 0: the server's default)
          --kill-after-ms MIN-MAX      random delay before each kill (30-400)
          --snapshot-kill-every N      every N-th cycle kills during a snapshot or just after one, in turn
                                       (3; 0: never)
          --seed S                     random seed (1); printed, so a run can be repeated
          --keep-data                  keep the data directory even when the run passes
          --after-kill CMD             run `sh -c CMD` after each kill, before the restart (ROOST_CRASH_DATA and
                                       ROOST_CRASH_CYCLE set); must exit 0 — e.g. a dm-flakey power cut
        exits 0 when nothing acknowledged was lost, nothing extra appeared and nothing was half-applied;
        1 otherwise; 2 on misuse
        """

    static func parse(_ arguments: ArraySlice<String>) throws(UsageError) -> CrashOptions {
        let flags = try Arguments(
            arguments,
            valued: [
                "--bin", "--data", "--fsync", "--cycles", "--mix", "--clients", "--slots", "--people", "--populate",
                "--snapshot-every-bytes", "--kill-after-ms", "--snapshot-kill-every", "--seed", "--after-kill",
            ],
            switches: ["--keep-data"])
        var options = CrashOptions()
        guard let binary = flags.string("--bin") else { throw UsageError("--bin PATH is required") }
        guard access(binary, X_OK) == 0 else { throw UsageError("--bin \(binary): not an executable file") }
        options.binary = binary
        options.data = flags.string("--data")
        options.fsync = try flags.choice("--fsync", ["always", "everysec", "never"]) ?? "always"
        options.cycles = try flags.int("--cycles", in: 1...cyclesMax) ?? 20
        if let mix = flags.string("--mix") { options.weights = try CrashOperation.parseMix(mix) }
        options.clients = try flags.int("--clients", in: 1...clientsMax) ?? 4
        options.slots = try flags.int("--slots", in: 1...slotsMax) ?? 250
        options.people = try flags.int("--people", in: 1...slotsMax) ?? 8
        options.populate = try flags.int("--populate", in: 0...populateMax) ?? 20_000
        options.snapshotEveryBytes = try flags.int("--snapshot-every-bytes", in: 0...(1 << 36)) ?? 262_144
        if let text = flags.string("--kill-after-ms") {
            let parts = text.split(separator: "-").compactMap { Int($0) }
            guard parts.count == 2, parts[0] >= 1, parts[0] <= parts[1], parts[1] <= 600_000 else {
                throw UsageError("--kill-after-ms \(text): expected MIN-MAX in milliseconds, e.g. 30-400")
            }
            options.killAfterMilliseconds = parts[0]...parts[1]
        }
        options.snapshotKillEvery = try flags.int("--snapshot-kill-every", in: 0...cyclesMax) ?? 3
        if let seed = try flags.int("--seed", in: 0...Int.max) { options.seed = UInt64(seed) }
        options.keepData = flags.has("--keep-data")
        options.afterKill = flags.string("--after-kill")
        return options
    }
}

/// `roost-bench crash …`: the crash-recovery harness (docs/crash-testing.md).
enum CrashCommand {
    static func run(_ arguments: ArraySlice<String>) -> Int32 {
        if Arguments.wantsHelp(arguments) {
            StandardStreams.out(CrashOptions.usage)
            return 0
        }
        let options: CrashOptions
        do {
            options = try CrashOptions.parse(arguments)
        } catch {
            StandardStreams.error("roost-bench crash: \(error)")
            StandardStreams.error(CrashOptions.usage)
            return 2
        }
        do {
            return try CrashRun(options: options).run()
        } catch let error as UsageError {
            StandardStreams.error("roost-bench crash: \(error)")
            return 2
        } catch {
            StandardStreams.error("roost-bench crash: \(error)")
            return 1
        }
    }
}

/// One run of the harness: the data directory, the server, the model.
final class CrashRun {
    private let options: CrashOptions
    private var random: SeededRandom
    private let directory: String
    private let createdDirectory: Bool
    private let stderrPath: String
    private var slots: [[SlotState]]
    private var nextGeneration: [UInt32]
    private var key = ""
    /// The key answered 401 after a restart: no later check can run.
    private var keyLost = false
    /// The change-feed consumer, from the first export on (spec §9).
    private var follower: CrashFeedFollower?
    /// Acknowledged keyed writes, sent again after every restart (spec §7).
    private var remembered: [RememberedWrite] = []

    init(options: CrashOptions) throws {
        self.options = options
        random = SeededRandom(seed: options.seed)
        if let data = options.data {
            var info = stat()
            if stat(data, &info) == 0 {
                guard (info.st_mode & S_IFMT) == S_IFDIR else { throw UsageError("--data \(data) is not a directory") }
                guard Self.entries(data).isEmpty else {
                    throw UsageError("--data \(data) is not empty: the model starts from an empty directory")
                }
            } else {
                guard mkdir(data, 0o700) == 0 else { throw LoadError("cannot create \(data): errno \(errno)") }
            }
            directory = data
            createdDirectory = false
        } else {
            let base = getenv("TMPDIR").map { String(cString: $0) } ?? "/var/tmp"
            do {
                directory = try TemporaryDirectory.make(prefix: "roost-crash", under: base)
            } catch {
                throw LoadError("cannot create a directory under \(base): \(error)")
            }
            createdDirectory = true
        }
        stderrPath = directory + ".stderr.log"
        slots = Array(repeating: Array(repeating: .absent, count: options.slots), count: options.clients)
        nextGeneration = Array(repeating: 0, count: options.clients)
    }

    /// What the cycles added up to.
    private struct Totals {
        var counts = CheckCounts()
        var cycles = 0
        var acknowledged = 0
        var acknowledgedByOperation = [Int](repeating: 0, count: CrashOperation.allCases.count)
        var unexpected: [String] = []
        var midSnapshotKills = 0
    }

    /// How one kill went.
    private struct Kill {
        var waitedMilliseconds: Int
        var aim: SnapshotAim?
        var midSnapshot: Bool
        var outcomes: [CrashClientResult]
    }

    func run() throws -> Int32 {
        printHeader()
        var server = try start()
        try setUp(port: server.port)
        let first = try export(port: server.port)
        follower = try CrashFeedFollower(
            export: try CrashModel.parseExport(first.body), cursor: first.header("Roost-Cursor"))
        var totals = Totals()
        for cycle in 1...options.cycles {
            totals.cycles = cycle
            let kill = try killUnderLoad(cycle: cycle, server: server)
            var cycleAcknowledged = 0
            for (client, outcome) in kill.outcomes.enumerated() {
                slots[client] = outcome.slots
                nextGeneration[client] = outcome.nextGeneration
                cycleAcknowledged += outcome.acknowledged
                for index in 0..<totals.acknowledgedByOperation.count {
                    totals.acknowledgedByOperation[index] += outcome.acknowledgedByOperation[index]
                }
                totals.unexpected += outcome.unexpected
                // This cycle's erasures came after every write remembered in earlier cycles.
                for person in outcome.erased {
                    RememberedWrite.mark(&remembered, erasing: person, certainly: true)
                }
                if let person = outcome.erasureInFlight {
                    RememberedWrite.mark(&remembered, erasing: person, certainly: false)
                }
                remembered += outcome.remembered
            }
            if remembered.count > RememberedWrite.keptMax {
                remembered.removeFirst(remembered.count - RememberedWrite.keptMax)
            }
            totals.acknowledged += cycleAcknowledged
            if kill.midSnapshot { totals.midSnapshotKills += 1 }
            try runAfterKill(cycle: cycle)
            server = try start()
            let pending = kill.outcomes.map(\.pending)
            let counts = try verify(port: server.port, pending: pending)
            totals.counts.add(counts)
            StandardStreams.out(
                "cycle \(cycle)/\(options.cycles): killed after \(kill.waitedMilliseconds) ms"
                    + (kill.aim.map { " (aimed \($0.description))" } ?? "")
                    + ", mid-snapshot \(kill.midSnapshot ? "yes" : "no"); "
                    + "acknowledged \(cycleAcknowledged), in flight \(pending.compactMap { $0 }.count) "
                    + "(applied \(counts.inFlightApplied), not applied \(counts.inFlightNotApplied)), "
                    + "checked \(counts.checked), lost \(counts.lost), extra \(counts.extra), "
                    + "half-applied \(counts.halfApplied); feed: followed \(counts.feedChecked), "
                    + "differing \(counts.feedMismatched); idempotent replays \(counts.replayChecked), "
                    + "differing \(counts.replayMismatched); restart \(Self.seconds(server.startupDuration)) s")
            for problem in counts.problems { StandardStreams.out("  PROBLEM: \(problem)") }
            for outcome in kill.outcomes {
                for line in outcome.unexpected { StandardStreams.out("  UNEXPECTED ANSWER: \(line)") }
            }
            if keyLost { break }
        }
        // A clean stop and start must reproduce the state as well.
        let stopStatus = server.stop(signal: SIGTERM)
        server = try start()
        let final = try verify(port: server.port, pending: Array(repeating: nil, count: options.clients))
        totals.counts.add(final)
        let finalStatus = server.stop(signal: SIGTERM)
        StandardStreams.out(
            "after a clean restart: checked \(final.checked), lost \(final.lost), extra \(final.extra), "
                + "feed followed \(final.feedChecked) (differing \(final.feedMismatched)), idempotent replays "
                + "\(final.replayChecked) (differing \(final.replayMismatched)); "
                + "SIGTERM exits \(stopStatus) and \(finalStatus)")
        for problem in final.problems { StandardStreams.out("  PROBLEM: \(problem)") }
        let passed = totals.counts.failures == 0 && totals.unexpected.isEmpty && stopStatus == 0 && finalStatus == 0
        printTotals(totals, passed: passed)
        if passed && createdDirectory && !options.keepData {
            TemporaryDirectory.remove(directory)
            unlink(stderrPath)
        } else {
            StandardStreams.out("crash: data kept in \(directory), server stderr in \(stderrPath)")
        }
        return passed ? 0 : 1
    }

    private func printHeader() {
        let version = Subprocess.output([options.binary, "--version"]).flatMap { $0.split(separator: "\n").first }
        StandardStreams.out(
            "crash: \(options.binary) (\(version.map(String.init) ?? "version unknown")), --fsync \(options.fsync), "
                + "\(options.cycles) cycles, seed \(options.seed); data \(directory), server stderr \(stderrPath)")
        StandardStreams.out(
            "crash: \(options.clients) clients × \(options.slots) slots, \(options.people) people each, "
                + "\(options.populate) background devices, snapshot every \(options.snapshotEveryBytes) log bytes, "
                + "kill after \(options.killAfterMilliseconds.lowerBound)-\(options.killAfterMilliseconds.upperBound) ms, "
                + (options.snapshotKillEvery > 0
                    ? "one cycle in \(options.snapshotKillEvery) aimed at a snapshot (during one, just after one, in turn)"
                    : "no cycle aimed at a snapshot"))
        if let command = options.afterKill { StandardStreams.out("crash: after each kill: sh -c '\(command)'") }
    }

    private func printTotals(_ totals: Totals, passed: Bool) {
        let counts = totals.counts
        let byOperation = CrashOperation.allCases.map { "\($0.name) \(totals.acknowledgedByOperation[$0.rawValue])" }
        let log = FileOutput.read(stderrPath, limitBytes: 256 << 20).map { String(decoding: $0, as: UTF8.self) } ?? ""
        let lines = log.split(separator: "\n")
        // Every snapshot written ends in a checkpoint, periodic or at shutdown,
        // and the server logs one `wal.checkpoint` line for it (docs/metrics-and-logs.md).
        let snapshots = lines.filter { $0.contains(#""event":"wal.checkpoint""#) }.count
        let tornTails = lines.filter { $0.contains("torn tail") }.count
        StandardStreams.out(
            "crash total: \(totals.cycles) of \(options.cycles) cycles, --fsync \(options.fsync), seed \(options.seed): "
                + "acknowledged \(totals.acknowledged) (\(byOperation.joined(separator: ", "))), in flight at the kills "
                + "\(counts.inFlightApplied + counts.inFlightNotApplied) (applied \(counts.inFlightApplied)), checked "
                + "\(counts.checked), lost \(counts.lost), extra \(counts.extra), half-applied \(counts.halfApplied), "
                + "change feed followed across the kills \(counts.feedChecked) devices (\(follower?.applied ?? 0) changes, "
                + "differing \(counts.feedMismatched)), idempotent replays \(counts.replayChecked) "
                + "(differing \(counts.replayMismatched)), "
                + "unexpected answers \(totals.unexpected.count); kills during a snapshot \(totals.midSnapshotKills), "
                + "snapshots written \(snapshots), torn log tails cut at restart \(tornTails): "
                + (passed ? "PASS" : "FAIL"))
    }

    /// Starts the clients on `server`, waits (a random delay, or for a
    /// snapshot), kills the server with SIGKILL and collects the clients.
    private func killUnderLoad(cycle: Int, server: RoostProcess) throws -> Kill {
        let seeds = (0..<options.clients).map { _ in random.next() }
        let stop = StopFlag()
        let results = Mutex<[CrashClientResult?]>(Array(repeating: nil, count: options.clients))
        var threads: [PlatformThread] = []
        for client in 0..<options.clients {
            let plan = CrashClientPlan(
                client: client, port: server.port, key: key, slots: slots[client], people: options.people,
                weights: options.weights, seed: seeds[client], nextGeneration: nextGeneration[client])
            threads.append(
                try PlatformThread.spawn(name: "crash-client") {
                    let result = CrashClient.run(plan, stop: stop)
                    results.withLock { $0[client] = result }
                })
        }
        // The feed consumer tails while the clients write; the kill cuts it off.
        let tailed = Mutex<CrashFeedFollower?>(nil)
        if let follower {
            let port = server.port
            let key = self.key
            threads.append(
                try PlatformThread.spawn(name: "crash-feed") {
                    var consumer = follower
                    consumer.tail(port: port, key: key, stop: stop)
                    tailed.withLock { $0 = consumer }
                })
        }
        // Of the cycles aimed at snapshots, odd ones kill during one, even ones just after one.
        var aim: SnapshotAim? = nil
        if options.snapshotKillEvery > 0 && cycle % options.snapshotKillEvery == 0 {
            aim = (cycle / options.snapshotKillEvery) % 2 == 1 ? .during : .after
        }
        let delay =
            options.killAfterMilliseconds.lowerBound + Int(random.next() % UInt64(options.killAfterMilliseconds.count))
        let waited = aim.map { waitForSnapshot($0) } ?? sleepMilliseconds(delay)
        let status = server.stop(signal: SIGKILL)
        // A snapshot file still being written proves the kill landed inside a snapshot.
        let midSnapshot = !snapshotTemporaries().isEmpty
        stop.set()
        for thread in threads { thread.join() }
        guard status == 128 + SIGKILL else {
            throw LoadError("cycle \(cycle): the server exited \(status) before the kill (stderr: \(stderrPath))")
        }
        if let consumer = tailed.withLock({ $0 }) { follower = consumer }
        let outcomes = results.withLock { $0 }.compactMap { $0 }
        precondition(outcomes.count == options.clients, "a crash client ended without a result")
        return Kill(waitedMilliseconds: waited, aim: aim, midSnapshot: midSnapshot, outcomes: outcomes)
    }

    /// Runs `--after-kill` (a power-loss simulation), which must exit 0.
    private func runAfterKill(cycle: Int) throws {
        guard let command = options.afterKill else { return }
        let exit = Subprocess.shell(
            command, environment: ["ROOST_CRASH_DATA=\(directory)", "ROOST_CRASH_CYCLE=\(cycle)"],
            timeoutMilliseconds: CrashOptions.afterKillTimeoutMilliseconds)
        guard exit == 0 else {
            throw LoadError("cycle \(cycle): --after-kill exited \(exit.map(String.init) ?? "late or not at all")")
        }
    }

    // MARK: Server

    private func start() throws -> RoostProcess {
        var arguments = ["serve", "--listen", "127.0.0.1:0", "--data", directory, "--fsync", options.fsync]
        if options.snapshotEveryBytes > 0 { arguments += ["--snapshot-log-bytes", String(options.snapshotEveryBytes)] }
        do {
            return try RoostProcess(
                binary: options.binary, arguments: arguments,
                environment: ["ROOST_ADMIN_KEY=\(CrashOptions.adminKey)"], standardError: .appended(stderrPath),
                startTimeoutMilliseconds: CrashOptions.startTimeoutMilliseconds)
        } catch {
            throw LoadError("\(options.binary): \(error) (stderr in \(stderrPath))")
        }
    }

    /// An app with room for every slot on one person, a key with the
    /// capabilities the workload uses, and the background devices.
    private func setUp(port: UInt16) throws {
        let client = BlockingHTTPClient(host: "127.0.0.1", port: port)
        let app = try client.expect(
            201, "POST", "/v1/apps", key: CrashOptions.adminKey,
            body: #"{"name":"roost-bench crash","settings":{"max_devices_per_person":1000}}"#)
        guard let appID = app["id"]?.intValue else { throw LoadError("POST /v1/apps: no id") }
        let made = try client.expect(
            201, "POST", "/v1/apps/\(appID)/keys", key: CrashOptions.adminKey,
            body: #"{"kind":"secret","capabilities":["devices:write","devices:read","devices:delete","people:write"]}"#)
        guard let secret = made["key"]?.stringValue else { throw LoadError("POST /v1/apps/\(appID)/keys: no key") }
        key = secret
        guard options.populate > 0 else { return }
        var csv = "platform,token,external_id\n"
        for index in 0..<options.populate {
            csv += "ios,\(CrashNames.backgroundToken(index)),\(CrashNames.backgroundPerson(index))\n"
        }
        let answer = try client.request("POST", "/v1/devices/import", key: key, body: csv, contentType: "text/csv")
        let value = try? JSONReader.parse(answer.body)
        guard answer.status == 200, value?["created"]?.intValue == options.populate else {
            throw LoadError(
                "importing \(options.populate) background devices answered \(answer.status): "
                    + String(decoding: answer.body.prefix(300), as: UTF8.self))
        }
    }

    /// Exports every device and checks it against the model; adopts what it
    /// found as the model's next state.
    private func verify(port: UInt16, pending: [PendingWrite?]) throws -> CheckCounts {
        let answer = try export(port: port)
        if answer.status == 401 {
            // The app or its key did not survive the restart: everything acknowledged is lost.
            var counts = CheckCounts()
            let present = slots.reduce(0) { $0 + $1.filter(\.present).count }
            counts.checked = present + options.populate
            counts.lost = present + options.populate
            counts.note("the key made at the start answers 401 after the restart: the app or its key was lost")
            keyLost = true
            return counts
        }
        guard answer.status == 200 else { throw LoadError("export answered \(answer.status): \(answer.bodyText)") }
        let devices = try CrashModel.parseExport(answer.body)
        var (counts, found) = CrashModel.check(devices, slots: slots, pending: pending, background: options.populate)
        slots = found
        // The consumer goes on from its cursor and must hold the export exactly.
        if var consumer = follower {
            try consumer.catchUp(port: port, key: key)
            consumer.check(against: devices, cursor: answer.header("Roost-Cursor"), into: &counts)
            follower = consumer
        }
        try RememberedWrite.check(remembered, port: port, into: &counts)
        return counts
    }

    /// `GET /v1/devices/export`, read whole.
    private func export(port: UInt16) throws -> LoopbackResponse {
        let connection: LoopbackConnection
        do {
            connection = try LoopbackConnection(port: port)
            try connection.send(CrashClient.request("GET", "/v1/devices/export", key: key, body: nil))
        } catch {
            throw LoadError("export: \(error)")
        }
        do {
            return try connection.readResponse(timeout: .seconds(120))
        } catch {
            throw LoadError("export: \(error)")
        }
    }

    // MARK: Kill timing

    private func sleepMilliseconds(_ milliseconds: Int) -> Int {
        usleep(UInt32(milliseconds) * 1000)
        return milliseconds
    }

    /// Where a cycle aimed at a snapshot kills: while it is being written, or
    /// just after one was renamed into place (recovery then starts from it).
    enum SnapshotAim {
        case during
        case after

        var description: String {
            switch self {
            case .during: "during a snapshot"
            case .after: "just after a snapshot"
            }
        }
    }

    /// Waits (polling every millisecond) until a snapshot is being written
    /// (`.during`) or a new one is complete (`.after`), then a random 0–3 ms
    /// (0–50 ms after one) more; returns how long it waited.
    private func waitForSnapshot(_ aim: SnapshotAim) -> Int {
        let clock = ContinuousClock()
        let started = clock.now
        let before = Set(snapshotsWritten())
        while clock.now - started < .milliseconds(CrashOptions.snapshotWaitMilliseconds) {
            switch aim {
            case .during:
                if !snapshotTemporaries().isEmpty {
                    usleep(UInt32(random.next() % 3_000))
                    return Self.milliseconds(clock.now - started)
                }
            case .after:
                if !Set(snapshotsWritten()).subtracting(before).isEmpty {
                    usleep(UInt32(random.next() % 50_000))
                    return Self.milliseconds(clock.now - started)
                }
            }
            usleep(1000)
        }
        return Self.milliseconds(clock.now - started)
    }

    private static func milliseconds(_ duration: Duration) -> Int {
        Int(duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000)
    }

    /// Snapshot files in place (`snapshots/*.snap`).
    private func snapshotsWritten() -> [String] {
        Self.entries(directory + "/snapshots").filter { $0.hasSuffix(".snap") }
    }

    /// Snapshot files being written (`snapshots/*.snap.tmp`, docs/storage.md).
    private func snapshotTemporaries() -> [String] {
        Self.entries(directory + "/snapshots").filter { $0.hasSuffix(".snap.tmp") }
    }

    // MARK: Files

    /// The names in `path`, sorted; none when it cannot be listed.
    static func entries(_ path: String) -> [String] {
        (try? DurableFile.names(in: path)) ?? []
    }

    static func seconds(_ duration: Duration) -> String {
        let components = duration.components
        return Format.fixed(Double(components.seconds) + Double(components.attoseconds) / 1e18, 2)
    }
}
