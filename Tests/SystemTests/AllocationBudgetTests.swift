import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting
import Synchronization
import Testing

/// Issue 25 item 2: the allocation budget, a tripwire on counts, not times
/// (house style 20). `roost-alloc-count` (Benchmarks/roost-alloc-count,
/// decision 0070) runs the service in its own process behind a loopback
/// socket and counts every heap allocation of every server thread per
/// operation; this test fails when an operation allocates more than its
/// ceiling. The ceilings are today's counts: lower one after a change that
/// removes allocations (docs/testing.md, "The allocation budget").
///
/// `swift test` runs the debug binary built beside the tests; `make test`
/// also runs this suite against the release binary (`ROOST_ALLOC_COUNT_BIN`),
/// whose counts are the ones the budget is about.
@Suite("Allocation budget: heap allocations per request, whole path (roost-alloc-count)", .serialized)
struct AllocationBudgetTests {
    /// One operation's budget.
    struct Budget: Sendable, CustomStringConvertible {
        /// The operation's name in roost-alloc-count's output.
        var operation: String
        /// Issue 25's target, where it names one (allocations per unit).
        var target: Double?
        /// Today's count of a release build plus 0.01 per unit. Release
        /// counts are the same in every run (checked: 5 runs alone and 4 at
        /// once on 2 cores); the margin, 100 allocations over a run of 10,000
        /// requests, leaves room for work done once a second in a slow run and
        /// stays far below one allocation per request.
        var releaseCeiling: Double
        /// Today's count of a debug build plus about 4 %. Unspecialised generic
        /// code of the standard library allocates in a debug build, in loops
        /// whose trips depend on timing (the connection sweep, the latency
        /// histogram's bucket search): debug runs vary by up to 1 % and more
        /// on a slow machine. These ceilings catch an allocation added per
        /// element or per field, not one per request; the release ones do that.
        var debugCeiling: Double

        var description: String { operation }
    }

    /// Today's ceilings (docs/performance.md, "Allocation budget", for the
    /// runs behind them). Release figures over `releaseArguments`, debug
    /// figures over `debugArguments`: a figure is only comparable with a
    /// ceiling measured with the same arguments.
    static let budgets: [Budget] = [
        Budget(operation: "register_new", target: 2, releaseCeiling: 2.02, debugCeiling: 181),
        Budget(operation: "register_known", target: 2, releaseCeiling: 2.01, debugCeiling: 165),
        Budget(operation: "register_known_tagged", target: nil, releaseCeiling: 9.01, debugCeiling: 134),
        Budget(operation: "get_device", target: nil, releaseCeiling: 5.01, debugCeiling: 875),
        Budget(operation: "get_person", target: nil, releaseCeiling: 7.01, debugCeiling: 340),
        Budget(operation: "batch_item", target: nil, releaseCeiling: 4.34, debugCeiling: 146),
        Budget(operation: "export_device", target: nil, releaseCeiling: 0.04, debugCeiling: 10),
        Budget(operation: "patch_device", target: nil, releaseCeiling: 23.02, debugCeiling: 967),
        Budget(operation: "feedback", target: nil, releaseCeiling: 9.51, debugCeiling: 238),
    ]
    /// The release run: the figures of docs/performance.md (about 5 s).
    static let releaseArguments = ["--count", "10000", "--warmup", "500", "--deadline", "300"]
    /// The debug run: fewer operations, as a debug build is about 8 times slower (about 5 s).
    static let debugArguments = ["--count", "1000", "--warmup", "200", "--deadline", "300"]

    /// What one run of roost-alloc-count measured: allocations per unit by operation.
    struct Figures: Sendable {
        var build: String
        var perUnit: [String: Double]
        var units: [String: Int]
    }

    /// The binary under test: `ROOST_ALLOC_COUNT_BIN`, or the one built beside the tests.
    static var binary: String {
        getenv("ROOST_ALLOC_COUNT_BIN").map { String(cString: $0) } ?? RoostProcess.builtProduct("roost-alloc-count")
    }

    @Test("every operation allocates no more than its ceiling (the budget names its target)", arguments: budgets)
    func withinCeiling(_ budget: Budget) throws {
        let figures = try Self.measured()
        let measured = try #require(figures.perUnit[budget.operation], "roost-alloc-count did not report \(budget)")
        let ceiling = figures.build == "release" ? budget.releaseCeiling : budget.debugCeiling
        let target = budget.target.map { "; issue 25's target is ≤ \($0)" } ?? ""
        #expect(
            measured <= ceiling,
            """
            \(budget.operation): \(measured) allocations per unit in a \(figures.build) build over \
            \(figures.units[budget.operation] ?? 0) units, above its ceiling of \(ceiling)\(target). A change added \
            allocations to this path: find them with `roost-alloc-count --backtraces \(budget.operation)` \
            (docs/testing.md, "The allocation budget"); raise the ceiling only with the reason in the commit.
            """)
        if figures.build == "release" && measured < ceiling - 0.5 {
            // Not a failure: the path got cheaper. Lower the ceiling to keep the gain
            // (release only: the debug ceilings are coarse on purpose).
            print(
                "AllocationBudgetTests: \(budget.operation) measured \(measured), well below its \(figures.build) "
                    + "ceiling of \(ceiling): lower the ceiling (docs/testing.md)")
        }
    }

    @Test("the counter counts: malloc is interposed and each operation reports its units")
    func counterCounts() throws {
        let figures = try Self.measured()
        #expect(Set(figures.perUnit.keys) == Set(Self.budgets.map(\.operation)))
        // The server's threads were counted at all (the binary itself checks
        // that malloc is its own): one operation may reach zero, not all.
        #expect(figures.perUnit.values.reduce(0, +) > 0, "no allocation counted on any server thread")
        for (operation, units) in figures.units {
            #expect(units >= 1000, "\(operation): \(units) units, too few to divide by")
        }
    }

    // MARK: running roost-alloc-count

    /// One run per test process, shared by the tests above (each run takes seconds).
    private static let shared = Mutex<Result<Figures, RunError>?>(nil)

    struct RunError: Error, Sendable, CustomStringConvertible {
        var description: String
    }

    static func measured() throws -> Figures {
        try shared.withLock { cached in
            if cached == nil { cached = Result { () throws(RunError) in try run() } }
            return try cached!.get()
        }
    }

    /// Runs the binary with the arguments of its build and parses its JSON.
    private static func run() throws(RunError) -> Figures {
        let build = try String(decoding: execute([binary, "--build"]), as: UTF8.self).filter { !$0.isWhitespace }
        guard build == "release" || build == "debug" else { throw RunError(description: "unknown build '\(build)'") }
        let output = try execute([binary] + (build == "release" ? releaseArguments : debugArguments))
        let document: JSONValue
        do {
            document = try JSONReader.parse(output)
        } catch {
            throw RunError(
                description: "roost-alloc-count printed no JSON (\(error)): \(String(decoding: output, as: UTF8.self))")
        }
        guard document["build"]?.stringValue == build, let operations = document["operations"]?.arrayValue else {
            throw RunError(description: "unexpected output: \(String(decoding: output, as: UTF8.self))")
        }
        var figures = Figures(build: build, perUnit: [:], units: [:])
        for operation in operations {
            guard let name = operation["name"]?.stringValue, let units = operation["units"]?.intValue, units > 0,
                let allocations = operation["allocations"]?.intValue,
                let reallocations = operation["reallocations"]?.intValue
            else { throw RunError(description: "unexpected operation: \(operation)") }
            figures.perUnit[name] = Double(allocations + reallocations) / Double(units)
            figures.units[name] = units
        }
        return figures
    }

    /// Runs `argv` to its end (the binary's own `--deadline` bounds it) and
    /// returns its stdout; its stderr goes to the test's. Throws unless it exits 0.
    private static func execute(_ argv: [String]) throws(RunError) -> [UInt8] {
        let directory: String
        do {
            directory = try TemporaryDirectory.make(prefix: "roost-alloc-budget")
        } catch {
            throw RunError(description: "\(error)")
        }
        defer { TemporaryDirectory.remove(directory) }
        let outPath = directory + "/stdout"
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, outPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        let arguments = argv.map { strdup($0) } + [nil]
        defer { arguments.forEach { free($0) } }
        var child: pid_t = 0
        let spawned = posix_spawn(&child, argv[0], &actions, nil, arguments, environ)
        guard spawned == 0 else { throw RunError(description: "cannot start \(argv[0]): error \(spawned)") }
        var status: Int32 = 0
        while waitpid(child, &status, 0) < 0 && errno == EINTR {}
        let output = Self.read(outPath)
        guard status == 0 else {
            throw RunError(
                description: "\(argv.joined(separator: " ")) ended with status \(status): "
                    + String(decoding: output, as: UTF8.self))
        }
        return output
    }

    private static func read(_ path: String) -> [UInt8] {
        let descriptor = open(path, O_RDONLY)
        guard descriptor >= 0 else { return [] }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = Glibc.read(descriptor, &chunk, chunk.count)
            guard count > 0 else { break }
            bytes += chunk[0..<count]
        }
        return bytes
    }
}
