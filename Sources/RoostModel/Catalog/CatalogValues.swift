import RoostCrypto

/// What a key may do. The raw values are the spec's capability names.
package enum Capability: String, CaseIterable, Sendable, Comparable {
    case devicesWrite = "devices:write"
    case devicesRead = "devices:read"
    case devicesDelete = "devices:delete"
    case peopleWrite = "people:write"
    case setupWrite = "setup:write"

    package static func < (lhs: Capability, rhs: Capability) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The capability's bit in `KeyRecord`'s mask.
    fileprivate var bit: UInt8 {
        switch self {
        case .devicesWrite: 1
        case .devicesRead: 2
        case .devicesDelete: 4
        case .peopleWrite: 8
        case .setupWrite: 16
        }
    }
}

/// A secret key is for backends; a mobile key ships inside apps and may only
/// register devices and create guest identities.
package enum KeyKind: String, Sendable {
    case secret
    case mobile
}

/// The most devices one person may keep that an app may configure.
extension AppSettings {
    package static let maxDevicesPerPersonLimit = Limits.maxDevicesPerPersonRange.upperBound
}

/// One app as the catalog holds it.
package struct AppRecord: Sendable, Equatable {
    package static let nameBytesMax = 200

    package var id: AppID
    package var name: String
    package var createdAtMilliseconds: Int64
    package var settings: AppSettings

    package init(id: AppID, name: String, createdAtMilliseconds: Int64, settings: AppSettings) {
        self.id = id
        self.name = name
        self.createdAtMilliseconds = createdAtMilliseconds
        self.settings = settings
    }
}

/// The SHA-256 digest of an API key, the only form in which keys are stored.
/// Four words so that it hashes and compares quickly as a dictionary key.
package struct KeyDigest: Hashable, Sendable {
    package let words: (UInt64, UInt64, UInt64, UInt64)

    package init(words: (UInt64, UInt64, UInt64, UInt64)) {
        self.words = words
    }

    /// Compares without early exit (a presented key's digest against a stored one).
    package func constantTimeEquals(_ other: KeyDigest) -> Bool {
        (words.0 ^ other.words.0) | (words.1 ^ other.words.1) | (words.2 ^ other.words.2)
            | (words.3 ^ other.words.3) == 0
    }

    package init?(bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        func word(_ at: Int) -> UInt64 {
            var value: UInt64 = 0
            for index in at..<(at + 8) { value = value << 8 | UInt64(bytes[index]) }
            return value
        }
        words = (word(0), word(8), word(16), word(24))
    }

    /// The digest's 32 bytes, big-endian word order.
    package var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(32)
        for word in [words.0, words.1, words.2, words.3] {
            for shift in stride(from: 56, through: 0, by: -8) {
                out.append(UInt8(truncatingIfNeeded: word >> UInt64(shift)))
            }
        }
        return out
    }

    package static func == (lhs: KeyDigest, rhs: KeyDigest) -> Bool {
        // XOR-OR over all four words, no early exit: a dictionary probe must not
        // become a timing oracle for the stored digests.
        let difference =
            (lhs.words.0 ^ rhs.words.0) | (lhs.words.1 ^ rhs.words.1) | (lhs.words.2 ^ rhs.words.2)
            | (lhs.words.3 ^ rhs.words.3)
        return difference == 0
    }

    package func hash(into hasher: inout Hasher) {
        hasher.combine(words.0)
        hasher.combine(words.1)
        hasher.combine(words.2)
        hasher.combine(words.3)
    }
}

/// One API key as stored: everything but the key itself.
package struct KeyRecord: Sendable, Equatable {
    package static let labelBytesMax = 200
    package static let rateLimitPerSecondMax = 1_000_000

    /// Public identifier, `key_` + 16 hex digits; safe to log.
    package var id: String
    package var appID: AppID
    package var kind: KeyKind
    package var mode: AppMode
    /// Fixed at creation: an existing key never gains a capability.
    package let capabilities: Set<Capability>
    /// `capabilities` as bits: `allows` is asked on every request, and a
    /// set's `contains` hashes (~360 instructions, 0.4 % of a registration's).
    private let capabilityBits: UInt8
    package var label: String
    package var createdAtMilliseconds: Int64
    package var rateLimitPerSecond: Int?
    package var digest: KeyDigest

    package init(
        id: String, appID: AppID, kind: KeyKind, mode: AppMode, capabilities: Set<Capability>, label: String,
        createdAtMilliseconds: Int64, rateLimitPerSecond: Int?, digest: KeyDigest
    ) {
        self.id = id
        self.appID = appID
        self.kind = kind
        self.mode = mode
        self.capabilities = capabilities
        self.capabilityBits = capabilities.reduce(0) { $0 | $1.bit }
        self.label = label
        self.createdAtMilliseconds = createdAtMilliseconds
        self.rateLimitPerSecond = rateLimitPerSecond
        self.digest = digest
    }

    /// Returns whether the key holds `capability`. Mobile keys hold none.
    package func allows(_ capability: Capability) -> Bool {
        kind == .secret && capabilityBits & capability.bit != 0
    }
}

/// One HMAC-SHA-256 signing key for identity tokens (the Connect dialect's
/// `POST /v1/identities/…`), a catalog value like apps and keys.
package struct IdentitySigningKey: Sendable, Equatable {
    /// Secret bytes per key (HMAC-SHA-256's block-size-safe key length).
    package static let secretBytes = 32
    /// The most keys kept at once; rotate, then remove the old ones.
    package static let keysMax = 16

    /// Public, written into every token it signs: `ik_` + 16 hex digits.
    package var id: String
    /// 32 random bytes; never logged, never answered.
    package var secret: [UInt8]
    package var createdAtMilliseconds: Int64

    package init(id: String, secret: [UInt8], createdAtMilliseconds: Int64) {
        self.id = id
        self.secret = secret
        self.createdAtMilliseconds = createdAtMilliseconds
    }

    /// Returns a new key with a random id and secret, created at `now`
    /// (a 64-bit id: `CatalogContents.plan` checks that it is fresh).
    package static func mint(at now: Int64) -> IdentitySigningKey {
        IdentitySigningKey(
            id: "ik_" + Hex.encode(Crypto.randomBytes(8)), secret: Crypto.randomBytes(secretBytes),
            createdAtMilliseconds: now)
    }

    /// Returns whether `text` has the form of a key id: `ik_` + 16 lower-case hex digits.
    package static func isValidID(_ text: String) -> Bool {
        text.utf8.count == 19 && text.hasPrefix("ik_")
            && text.utf8.dropFirst(3).allSatisfy { Hex.digitValue($0) != nil }
    }
}
