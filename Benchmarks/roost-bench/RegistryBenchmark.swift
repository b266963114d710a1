import Glibc
import RoostEngine
import RoostModel
import RoostPlatform
import Synchronization

/// `roost-bench registry [devices] [shards]`: in-process registrations per
/// second through `Registry` (no HTTP, no disk: `VolatileLog`), and resident
/// memory per device.
///
/// 1. populate: `devices` new APNs devices, each bound to its own person, with
///    two tags: registrations/s for new devices, then RSS growth per device.
/// 2. re-register: every known token again (same person, nothing else); then
///    the same with the records encoded and appended (the server's shape).
/// 3. rotate: 100,000 devices with an installation id get a new token each.
/// 4. move: 100,000 known tokens presented for another person.
/// 5. history: 100,000 new devices, each registered 9 more times with a tag
///    that changes every other time: with consecutive `registered` events
///    coalesced, 10 history events a device (`created`, then 4 × `registered`
///    + `tags_changed`, a last `registered`); RSS growth per device (spec §9).
/// Jobs go in batches of `batchSize`, up to `batchesInFlight` at once, as the
/// HTTP front hands them over.
enum RegistryBenchmark {
    static let batchSize = 1024
    static let batchesInFlight = 8
    /// Registrations after creation in the history phase: with the `round`
    /// tag changing every other one, 10 events a device.
    static let historyChanges = 9

    /// What each populated device carries.
    enum Shape: String, CaseIterable, Sendable {
        /// A person of its own and the tags `plan`/`score`; then every phase below.
        case personEach = "person-each"
        /// Issue 12's registration shape (the `roost-bench load` registrations):
        /// a person out of `issuePeople`, `app_version`, `locale`, `timezone`
        /// and two tags `t0`/`t1` of 8 values each; populate and memory only.
        case issue12
    }

    /// The last phase a run measures (`--through`): a profile or an
    /// instruction count of the re-registrations alone is the difference of
    /// a run through `re-register` and one through `populate`, or the part
    /// after the populate line of one run (`Benchmarks/spine/shard_instructions.sh`).
    enum LastPhase: String, CaseIterable, Sendable {
        case populate
        case reRegister = "re-register"
        case all
    }

    /// People of the issue-12 shape.
    static let issuePeople = 200_000
    /// The issue-12 shape's app: room for 25 devices a person at 5M devices
    /// (the defaults' 10 would evict, and the figure would count fewer devices).
    static let issueSettings = AppSettings(maxDevicesPerPerson: 1_000, requireKnownPerson: false)

    /// The issue-12 shape's request for device `number` (as `MixedWorkload`'s
    /// registration body with `--tags 2`).
    static func issueRequest(_ number: Int) -> RegisterRequest {
        var request = RegisterRequest(token: token(number, generation: 0))
        request.externalID = .set(try! ExternalID("user_\(number % issuePeople)"))
        request.appVersion = .set("2.4.0")
        request.locale = .set("en-US")
        request.timezone = .set("Europe/Berlin")
        request.tags = .merge(["t0": .string("v\(number % 8)"), "t1": .string("v\((number / 2) % 8)")])
        return request
    }

    static func run(devices: Int, shards: Int, shape: Shape = .personEach, through: LastPhase = .all) async {
        let registry = Registry(shardCount: shards, log: VolatileLog())
        let apps = (1...shards).map { AppID(UInt32($0)) }
        let tags = TagsChange.merge(["plan": .string("pro"), "score": .number(7)])
        let baseline = residentBytes()
        if shape == .issue12 {
            await measure(
                "populate (new devices, issue 12 shape)", count: devices, registry: registry,
                settings: issueSettings
            ) { number in
                (apps[number % shards], issueRequest(number))
            }
            let grown = residentBytes() - baseline
            print(
                "memory: \(grown / devices) bytes/device RSS growth at \(devices) devices (\(grown >> 20) MiB), issue 12 shape"
            )
            return
        }

        @Sendable func request(_ number: Int, person: Int, installation: Bool = false, generation: Int = 0)
            -> RegisterRequest
        {
            var request = RegisterRequest(token: token(number, generation: generation))
            request.externalID = .set(try! ExternalID("user_\(person)"))
            if installation { request.installationID = try! InstallationID("inst-\(number)") }
            request.tags = tags
            return request
        }

        await measure("populate (new devices)", count: devices, registry: registry) { number in
            (apps[number % shards], request(number, person: number))
        }
        let grown = residentBytes() - baseline
        print("memory: \(grown / devices) bytes/device RSS growth at \(devices) devices (\(grown >> 20) MiB)")
        if through == .populate { return }
        await measure("re-register known tokens", count: devices, registry: registry) { number in
            var plain = RegisterRequest(token: token(number, generation: 0))
            plain.externalID = .set(try! ExternalID("user_\(number)"))
            return (apps[number % shards], plain)
        }
        if through == .reRegister { return }
        let side = 100_000
        let offset = devices
        await measure("populate with installation ids", count: side, registry: registry) { number in
            (apps[number % shards], request(offset + number, person: number, installation: true))
        }
        await measure("rotate (installation id, new token)", count: side, registry: registry) { number in
            (apps[number % shards], request(offset + number, person: number, installation: true, generation: 1))
        }
        await measure("move (known token, another person)", count: side, registry: registry) { number in
            (apps[number % shards], request(number, person: number + 1))
        }
        let historyOffset = devices + side
        let beforeHistory = residentBytes()
        await measure("populate for history", count: side, registry: registry) { number in
            (apps[number % shards], request(historyOffset + number, person: historyOffset + number))
        }
        for change in 0..<historyChanges {
            await measure("history change \(change + 1)", count: side, registry: registry) { number in
                var changed = RegisterRequest(token: token(historyOffset + number, generation: 0))
                if change < historyChanges - 1 { changed.tags = .merge(["round": .number(Double(change / 2))]) }
                return (apps[number % shards], changed)
            }
        }
        let withHistory = residentBytes() - beforeHistory
        print(
            "memory: \(withHistory / side) bytes/device RSS growth for \(side) devices with 10 history events"
                + " (\(withHistory >> 20) MiB)")
    }

    /// Registers `count` requests made by `make` and prints registrations/s.
    /// `batchesInFlight` submitters each build one batch of requests (so that
    /// no request list stays resident and skews the memory figure) and hand it
    /// to the shards, one batch at a time.
    @discardableResult
    static func measure(
        _ name: String, count: Int, registry: Registry, settings: AppSettings = .defaults,
        _ make: @escaping @Sendable (Int) -> (AppID, RegisterRequest)
    ) async -> Double {
        let batchStarts = Array(stride(from: 0, to: count, by: batchSize))
        let now = Timestamp(millisecondsSinceEpoch: 1_790_000_000_000)
        let clock = ContinuousClock()
        let started = clock.now
        await withTaskGroup(of: Void.self) { group in
            for submitter in 0..<batchesInFlight {
                group.addTask {
                    for position in stride(from: submitter, to: batchStarts.count, by: batchesInFlight) {
                        let start = batchStarts[position]
                        let batch = (start..<min(count, start + batchSize)).map(make)
                        await submit(batch, to: registry, settings: settings, at: now)
                    }
                }
            }
        }
        let elapsed = clock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let rate = Double(count) / seconds
        // Written at once (not buffered): each phase's line shows as it ends, also into a file.
        StandardStreams.out("\(name): \(count) in \(format3(seconds)) s = \(Int(rate)) registrations/s")
        return rate
    }

    /// Submits one batch of register commands (each shard gets its part in
    /// one message, as a loop hands over a round) and returns when every
    /// outcome is in. Records are encoded and appended to the registry's log
    /// (`VolatileLog` keeps nothing): the server's shape.
    static func submit(
        _ batch: [(AppID, RegisterRequest)], to registry: Registry, settings: AppSettings = .defaults,
        at now: Timestamp
    ) async {
        let work: [ShardWork] = batch.map { app, request in
            .index(IndexKey(app: app, mode: .live), settings: settings, .register(request, at: now))
        }
        for outcome in await registry.shardSet.perform(batch: work) {
            guard case .registered? = outcome else {
                preconditionFailure("benchmark registration refused: \(outcome as Any)")
            }
        }
    }

    /// A 32-byte APNs token unique to (number, generation), random-looking
    /// (SplitMix64 over the pair) so that snapshots compress as real ones do.
    static func token(_ number: Int, generation: Int) -> PushToken {
        let bytes = [UInt8](unsafeUninitializedCapacity: 32) { buffer, initialized in
            var state = UInt64(number) << 8 | UInt64(generation & 0xFF)
            let raw = UnsafeMutableRawBufferPointer(buffer)
            for word in 0..<4 {
                state &+= 0x9E37_79B9_7F4A_7C15
                var mixed = state
                mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
                mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
                mixed ^= mixed >> 31
                raw.storeBytes(of: mixed.littleEndian, toByteOffset: word * 8, as: UInt64.self)
            }
            initialized = 32
        }
        return try! PushToken(validatingBytes: bytes, platform: .ios)
    }

    /// Resident set size of this process, from /proc/self/statm.
    static func residentBytes() -> Int {
        let fd = open("/proc/self/statm", O_RDONLY)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = read(fd, &buffer, buffer.count)
        guard count > 0 else { return 0 }
        let fields = String(decoding: buffer[0..<count], as: UTF8.self).split(separator: " ")
        return (Int(fields[1]) ?? 0) * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    static func format3(_ value: Double) -> String {
        let thousandths = Int((value * 1000).rounded())
        let fraction = String(thousandths % 1000)
        return "\(thousandths / 1000).\(String(repeating: "0", count: 3 - fraction.count))\(fraction)"
    }
}

/// Counts down from `count`; `tick` returns true exactly once, at zero.
final class Countdown: Sendable {
    private let remaining: Atomic<Int>

    init(_ count: Int) {
        remaining = Atomic(count)
    }

    func tick() -> Bool {
        remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0
    }
}
