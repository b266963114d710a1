import Glibc
import RoostHTTP
import RoostJSON
import RoostPlatform
import RoostTesting

/// Answers GET /healthz and echoes the size of any POST body: the smallest
/// responder, so a load generator measures the HTTP layer alone.
struct BenchResponder: HTTPResponder {
    func bodyLimitBytes(for head: HTTPRequestHead) -> Int { 64 * 1024 }

    func respond(to request: HTTPRequest, sink: any HTTPReplySink) -> HTTPResponderResult {
        if request.head.method == .post {
            return .respond(
                HTTPResponse(
                    status: 201, headers: [("Content-Type", "application/json")],
                    body: Array("{\"ok\":true,\"bytes\":\(request.body.count)}".utf8)))
        }
        return .respond(
            HTTPResponse(status: 200, headers: [("Content-Type", "text/plain")], body: Array("ok".utf8)))
    }

    func response(for failure: HTTPRequestFailure) -> HTTPResponse {
        HTTPResponse(status: failure.status, body: Array("refused".utf8))
    }
}

/// One subcommand: its one-line summary, its usage, and what runs it
/// (returns the exit status: 0 ok, 1 failed, 2 misuse).
struct Subcommand: Sendable {
    let name: String
    let summary: String
    let run: @Sendable (ArraySlice<String>) async -> Int32
}

/// Every subcommand, in the order `roost-bench --help` lists them.
enum Subcommands {
    static let all: [Subcommand] = [
        Subcommand(name: "load", summary: "HTTP load against any Roost: mix, dialects, statuses checked, JSON, SVG") {
            LoadCommand.run($0)
        },
        Subcommand(name: "crash", summary: "kill -9 a roost binary under a mixed workload and check every write") {
            CrashCommand.run($0)
        },
        Subcommand(name: "cluster", summary: "faults on a real etcd + roost cluster, every operation checked") {
            ClusterCommand.run($0)
        },
        Subcommand(name: "compare", summary: "a table of ratios between `load --out` result files, and plots") {
            CompareCommand.run($0)
        },
        Subcommand(name: "registry", summary: "in-process registrations/s through the Registry, RSS per device") {
            await LegacyCommands.registry($0)
        },
        Subcommand(name: "api-micro", summary: "in-process cost of the request path behind HTTP") {
            await LegacyCommands.apiMicro($0)
        },
        Subcommand(name: "inactivity", summary: "cost of one inactivity step (spec §8) on an index of N devices") {
            LegacyCommands.inactivity($0)
        },
        Subcommand(name: "snapshot", summary: "populate, snapshot and time one open of a data directory") {
            await LegacyCommands.snapshot($0)
        },
        Subcommand(name: "recover", summary: "time opens of a data directory (writes nothing)") {
            LegacyCommands.recover($0)
        },
        Subcommand(name: "http-serve", summary: "serve the minimal responder for wrk") { LegacyCommands.httpServe($0) },
        Subcommand(name: "selftest-histogram", summary: "check the latency histogram against sorted arrays") {
            LegacyCommands.selftestHistogram($0)
        },
        Subcommand(name: "selftest-crash", summary: "check that the crash harness's comparison finds every damage") {
            LegacyCommands.selftestCrash($0)
        },
        Subcommand(name: "selftest-cluster", summary: "check that the cluster history checker finds every violation") {
            ClusterSelfTest.command($0)
        },
        Subcommand(name: "selftest-load", summary: "check the response reader, the requests and the expectations") {
            LegacyCommands.selftestLoad($0)
        },
    ]

    static func usage() -> String {
        var lines = ["usage: roost-bench COMMAND [options]   (roost-bench COMMAND --help for a command's options)", ""]
        for command in all { lines.append("  \(command.name.padding(20)) \(command.summary)") }
        return lines.joined(separator: "\n")
    }
}

let arguments = CommandLine.arguments
if arguments.count < 2 {
    StandardStreams.error(Subcommands.usage())
    exit(2)
}
if arguments[1] == "--help" || arguments[1] == "-h" || arguments[1] == "help" {
    print(Subcommands.usage())
    exit(0)
}
guard let command = Subcommands.all.first(where: { $0.name == arguments[1] }) else {
    StandardStreams.error("roost-bench: unknown command '\(arguments[1])'")
    StandardStreams.error(Subcommands.usage())
    exit(2)
}
exit(await command.run(arguments.dropFirst(2)))
