import Glibc
import RoostAPI
import RoostHTTP
import RoostPlatform

/// `roost serve` (spec §1). Prints exactly one line to stdout,
/// `listening on HOST:PORT`, once it serves; everything else goes to stderr.

let usage = """
    usage: roost serve [--listen HOST:PORT] [--data DIR] [--fsync always|everysec|never] [--shards N]
                       [--max-connections N] [--header-timeout-ms N] [--body-timeout-ms N] [--idle-timeout-ms N]
    """

/// Writes a line to a descriptor with one write call (stdio's globals are not
/// concurrency-safe in Swift 6).
func writeLine(_ fd: Int32, _ text: String) {
    let bytes = Array((text + "\n").utf8)
    try? DurableFile.writeAll(fd: fd, bytes: bytes, subject: fd == 1 ? "stdout" : "stderr")
}

func fail(_ message: String) -> Never {
    writeLine(2, "roost: \(message)")
    exit(2)
}

var arguments = CommandLine.arguments.dropFirst()
guard arguments.first == "serve" else { fail(usage) }
arguments = arguments.dropFirst()

var options: ServeOptions
do {
    options = try ServeOptions.parse(Array(arguments), coreCount: Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
} catch {
    fail("\(error)\n\(usage)")
}

// Signals: SIGPIPE is ignored (a peer closing mid-write is an error code, not a
// death); SIGTERM and SIGINT are blocked in every thread and taken by sigwait below.
signal(SIGPIPE, SIG_IGN)
var shutdownSignals = sigset_t()
sigemptyset(&shutdownSignals)
sigaddset(&shutdownSignals, SIGTERM)
sigaddset(&shutdownSignals, SIGINT)
pthread_sigmask(SIG_BLOCK, &shutdownSignals, nil)

let server: HTTPServer
do {
    try DurableFile.createDirectory(path: options.dataDirectory)
    let admin = try AdminKey.resolve(
        environmentValue: getenv("ROOST_ADMIN_KEY").map { String(cString: $0) }, dataDirectory: options.dataDirectory)
    if let path = admin.filePath { writeLine(2, "roost: admin key in \(path)") }
    let service = try RoostService(
        dataDirectory: options.dataDirectory, adminKey: admin.key, shardCount: options.shards)
    server = try HTTPServer(configuration: options.httpConfiguration, responder: service)
    let port = try server.start()
    writeLine(1, "listening on \(options.host):\(port)")
} catch {
    fail("cannot start: \(error)")
}

var received: Int32 = 0
sigwait(&shutdownSignals, &received)
writeLine(2, "roost: signal \(received), draining")
server.beginShutdown()
server.waitUntilStopped()
exit(0)
