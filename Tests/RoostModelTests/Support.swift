import RoostTesting
import Testing

@testable import RoostModel

/// The model's tests call the shared seeded generator by its algorithm's name.
typealias SplitMix64 = SeededRandom

let testApp = AppID(7)

/// A 64-hex-character APNs token derived from `n`.
func apnsToken(_ n: UInt64) -> PushToken {
    var random = SplitMix64(seed: n &+ 0xA11CE)
    let bytes = (0..<32).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    return PushToken(unchecked: bytes, platform: .ios)
}

/// A 152-character FCM token derived from `n`.
func fcmToken(_ n: UInt64) -> PushToken {
    var random = SplitMix64(seed: n &+ 0xFC3)
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-:.".utf8)
    let bytes = (0..<152).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] }
    return PushToken(unchecked: bytes, platform: .android)
}

func person(_ name: String) -> ExternalID { try! ExternalID(name) }
func installation(_ name: String) -> InstallationID { try! InstallationID(name) }
func digest(_ n: UInt8) -> SecretDigest { SecretDigest(bytes: [UInt8](repeating: n, count: 32))! }

/// Returns a registration of `token` changed by `configure`.
func request(_ token: PushToken, _ configure: (inout RegisterRequest) -> Void = { _ in }) -> RegisterRequest {
    var request = RegisterRequest(token: token)
    configure(&request)
    return request
}

extension Result {
    var value: Success? {
        if case .success(let value) = self { return value }
        return nil
    }

    var rejection: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

/// An index with a manual clock and the log of everything it did, which `verify`
/// replays (through the codec) into an empty index and compares.
struct Harness {
    var index: AppIndex
    var log: [Mutation] = []
    var clockMilliseconds: Int64 = 1_789_912_931_000

    init(settings: AppSettings = .defaults, mode: AppMode = .live) {
        index = AppIndex(appID: testApp, mode: mode, settings: settings)
        if settings != .defaults { log.append(.settings(settings)) }
    }

    var now: Timestamp { Timestamp(millisecondsSinceEpoch: clockMilliseconds) }

    mutating func advance(seconds: Int64 = 1) { clockMilliseconds += seconds * 1000 }

    /// Registers one second after the previous call; a rejection must change nothing.
    mutating func register(
        _ request: RegisterRequest, sourceLocation: SourceLocation = #_sourceLocation
    ) -> Result<RegisterOutcome, RegistryRejection> {
        advance()
        let before = index.snapshotMutations()
        let result = index.register(request, at: now)
        switch result {
        case .success(let outcome): log += outcome.mutations
        case .failure:
            #expect(index.snapshotMutations() == before, "a rejection changed state", sourceLocation: sourceLocation)
        }
        return result
    }

    /// Registers and requires success.
    mutating func mustRegister(
        _ request: RegisterRequest, sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> RegisterOutcome {
        let result = register(request, sourceLocation: sourceLocation)
        return try #require(
            result.value, "rejected: \(String(describing: result.rejection))", sourceLocation: sourceLocation)
    }

    mutating func record(_ mutations: [Mutation]) { log += mutations }

    /// Checks invariants and that replaying the log (encoded and decoded) rebuilds the index.
    func verify(sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(index.invariantViolations() == [], sourceLocation: sourceLocation)
        var replayed = AppIndex(appID: testApp, mode: index.mode)
        for mutation in log {
            let decoded = try MutationCodec.decode(MutationCodec.encode(mutation))
            #expect(decoded == mutation, sourceLocation: sourceLocation)
            try replayed.apply(decoded)
        }
        #expect(replayed.invariantViolations() == [], sourceLocation: sourceLocation)
        #expect(
            replayed.snapshotMutations() == index.snapshotMutations(), "replay differs", sourceLocation: sourceLocation)
        #expect(replayed.stats() == index.stats(), sourceLocation: sourceLocation)
    }
}
