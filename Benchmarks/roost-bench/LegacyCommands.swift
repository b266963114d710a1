import Glibc
import RoostHTTP
import RoostPlatform

/// The in-process benchmarks and self-checks, with strict arguments: flags
/// by name (`--devices N`), or the positional forms the docs' older commands
/// use (`registry 1000000 1`), never both; anything else is exit 2.
enum LegacyCommands {
    /// The most devices the in-process benchmarks populate.
    static let devicesMax = 100_000_000
    /// Shards of the in-process registry (ShardSet's own bound).
    static let shardsMax = 256

    static func registry(_ arguments: ArraySlice<String>) async -> Int32 {
        let usage =
            "usage: roost-bench registry [--devices N (1000000)] [--shards N (1)] [--shape person-each|issue12]"
            + " [--through populate|re-register|all (all)]   (or: registry DEVICES [SHARDS])"
        return await guarded(arguments, usage) { () async throws(UsageError) in
            let flags = try Arguments(
                arguments, valued: ["--devices", "--shards", "--shape", "--through"], positionalAllowed: 2)
            let devices = try value(flags, "--devices", position: 0, in: 1...devicesMax) ?? 1_000_000
            let shards = try value(flags, "--shards", position: 1, in: 1...shardsMax) ?? 1
            let shape =
                try flags.choice("--shape", RegistryBenchmark.Shape.allCases.map(\.rawValue)).flatMap(
                    RegistryBenchmark.Shape.init(rawValue:)) ?? .personEach
            let through =
                try flags.choice("--through", RegistryBenchmark.LastPhase.allCases.map(\.rawValue)).flatMap(
                    RegistryBenchmark.LastPhase.init(rawValue:)) ?? .all
            await RegistryBenchmark.run(devices: devices, shards: shards, shape: shape, through: through)
            return 0
        }
    }

    static func inactivity(_ arguments: ArraySlice<String>) -> Int32 {
        let usage = "usage: roost-bench inactivity [--devices N (1000000)]"
        return guardedSync(arguments, usage) { () throws(UsageError) in
            let flags = try Arguments(arguments, valued: ["--devices"], positionalAllowed: 0)
            let devices = try value(flags, "--devices", position: 0, in: 1...devicesMax) ?? 1_000_000
            InactivityBenchmark.run(devices: devices)
            return 0
        }
    }

    static func apiMicro(_ arguments: ArraySlice<String>) async -> Int32 {
        let usage = "usage: roost-bench api-micro [--iterations N (200000)]   (or: api-micro ITERATIONS)"
        return await guarded(arguments, usage) { () async throws(UsageError) in
            let flags = try Arguments(arguments, valued: ["--iterations"], positionalAllowed: 1)
            let iterations = try value(flags, "--iterations", position: 0, in: 1...1_000_000_000) ?? 200_000
            await APIMicroBenchmark.run(iterations: iterations)
            return 0
        }
    }

    static func snapshot(_ arguments: ArraySlice<String>) async -> Int32 {
        let usage =
            "usage: roost-bench snapshot DIR [--devices N (1000000)] [--log-records N (1000000)]   "
            + "(or: snapshot DIR DEVICES LOG-RECORDS)"
        return await guarded(arguments, usage) { () async throws(UsageError) in
            let flags = try Arguments(arguments, valued: ["--devices", "--log-records"], positionalAllowed: 3)
            guard let directory = flags.positional.first else { throw UsageError("name the data directory") }
            let devices = try value(flags, "--devices", position: 1, in: 1...devicesMax) ?? 1_000_000
            let records = try value(flags, "--log-records", position: 2, in: 0...devicesMax) ?? 1_000_000
            do {
                try await DurabilityBenchmark.run(directory: directory, devices: devices, logRecords: records)
            } catch {
                StandardStreams.error("roost-bench snapshot: \(error)")
                return 1
            }
            return 0
        }
    }

    static func recover(_ arguments: ArraySlice<String>) -> Int32 {
        let usage = "usage: roost-bench recover DIR [--runs N (1)] [--shards N (1)]   (or: recover DIR RUNS SHARDS)"
        return guardedSync(arguments, usage) { () throws(UsageError) in
            let flags = try Arguments(arguments, valued: ["--runs", "--shards"], positionalAllowed: 3)
            guard let directory = flags.positional.first else { throw UsageError("name the data directory") }
            let runs = try value(flags, "--runs", position: 1, in: 1...1000) ?? 1
            let shards = try value(flags, "--shards", position: 2, in: 1...shardsMax) ?? 1
            do {
                try DurabilityBenchmark.recover(directory: directory, shardCount: shards, runs: runs)
            } catch {
                StandardStreams.error("roost-bench recover: \(error)")
                return 1
            }
            return 0
        }
    }

    static func httpServe(_ arguments: ArraySlice<String>) -> Int32 {
        let usage = "usage: roost-bench http-serve [--port N (8080)]   (or: http-serve PORT); serves until killed"
        return guardedSync(arguments, usage) { () throws(UsageError) in
            let flags = try Arguments(arguments, valued: ["--port"], positionalAllowed: 1)
            let port = try value(flags, "--port", position: 0, in: 0...65535) ?? 8080
            do {
                let server = try HTTPServer(
                    configuration: HTTPServerConfiguration(host: "127.0.0.1", port: UInt16(port)),
                    responder: BenchResponder())
                let bound = try server.start()
                print("roost-bench: serving on 127.0.0.1:\(bound)")
                server.waitUntilStopped()
            } catch {
                StandardStreams.error("roost-bench http-serve: \(error)")
                return 1
            }
            return 0
        }
    }

    static func selftestHistogram(_ arguments: ArraySlice<String>) -> Int32 {
        let usage = "usage: roost-bench selftest-histogram [--seed N (42)]   (or: selftest-histogram SEED)"
        return guardedSync(arguments, usage) { () throws(UsageError) in
            let flags = try Arguments(arguments, valued: ["--seed"], positionalAllowed: 1)
            let seed = try value(flags, "--seed", position: 0, in: 0...Int.max) ?? 42
            return LatencyHistogramSelfTest.run(seed: UInt64(seed)).isEmpty ? 0 : 1
        }
    }

    static func selftestLoad(_ arguments: ArraySlice<String>) -> Int32 {
        guardedSync(arguments, "usage: roost-bench selftest-load") { () throws(UsageError) in
            _ = try Arguments(arguments, valued: [])
            return LoadSelfTest.run().isEmpty ? 0 : 1
        }
    }

    static func selftestCrash(_ arguments: ArraySlice<String>) -> Int32 {
        guardedSync(arguments, "usage: roost-bench selftest-crash") { () throws(UsageError) in
            _ = try Arguments(arguments, valued: [])
            return CrashSelfTest.run().isEmpty ? 0 : 1
        }
    }

    /// The value of `flag`, or of the positional argument at `position`; not both.
    private static func value(
        _ flags: Arguments, _ flag: String, position: Int, in range: ClosedRange<Int>
    ) throws(UsageError) -> Int? {
        let named = try flags.int(flag, in: range)
        guard position < flags.positional.count else { return named }
        guard named == nil else { throw UsageError("\(flag) given both by name and by position") }
        let text = flags.positional[position]
        guard let number = Arguments.integer(text), range.contains(number) else {
            throw UsageError("'\(text)' (\(flag)): expected an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }

    private static func guarded(
        _ arguments: ArraySlice<String>, _ usage: String, _ body: () async throws(UsageError) -> Int32
    ) async -> Int32 {
        if Arguments.wantsHelp(arguments) {
            print(usage)
            return 0
        }
        do {
            return try await body()
        } catch {
            StandardStreams.error("roost-bench: \(error)")
            StandardStreams.error(usage)
            return 2
        }
    }

    private static func guardedSync(
        _ arguments: ArraySlice<String>, _ usage: String, _ body: () throws(UsageError) -> Int32
    ) -> Int32 {
        if Arguments.wantsHelp(arguments) {
            print(usage)
            return 0
        }
        do {
            return try body()
        } catch {
            StandardStreams.error("roost-bench: \(error)")
            StandardStreams.error(usage)
            return 2
        }
    }
}
