/// The packed form of a `Device` inside a `DeviceStore` (119 bytes of fields in a 120-byte stride).
///
/// Layout, in bytes: sequence 8, four 48-bit millisecond timestamps 24 (enough
/// until the year 10889; all ones = none), token
/// 32 inline (tokens of up to 32 bytes: every APNs token Apple issues today) or
/// a `BlobStore` cell number in `token0` for longer ones, person slot and next
/// device of that person 8, five interned string ids 20, secret digest slot 4,
/// strikes 4, installation id blob 6, token length 2, tags blob 6, flags 1,
/// version 4 (spec §7; it fills the stride's padding, so it costs nothing).
/// A device's `client_sequence`, which few devices carry, lives in
/// `DeviceStore.clientSequences`; flag bit 5 says whether it has one.
/// A free slot has `sequence == 0`.
struct DeviceRecord: Sendable {
    static let noTimestamp = Int64.min
    static let noSlot = UInt32.max

    var sequence: UInt64
    private var createdAtLow: UInt32
    private var lastSeenAtLow: UInt32
    private var boundAtLow: UInt32
    private var invalidatedAtLow: UInt32
    private var createdAtHigh: UInt16
    private var lastSeenAtHigh: UInt16
    private var boundAtHigh: UInt16
    private var invalidatedAtHigh: UInt16
    var token0: UInt64
    var token1: UInt64
    var token2: UInt64
    var token3: UInt64
    /// The person's slot, or `noSlot`.
    var person: UInt32
    /// The next device of the same person (an intrusive singly linked list), or `noSlot`.
    var nextOfPerson: UInt32
    var bundleID: UInt32
    var appVersion: UInt32
    var timezone: UInt32
    var locale: UInt32
    var invalidationReason: UInt32
    /// The slot of the installation secret's digest in `DeviceStore.digests`, or `noSlot`.
    var digest: UInt32
    var strikes: UInt32
    var installation: BlobRef
    /// 0 when the device has no token (Reassigned).
    var tokenLength: UInt16
    var tags: BlobRef
    /// Bit 0 platform, bit 1 environment, bits 2-3 push_permission (0 nil, 1 false,
    /// 2 true), bit 4 opted_in, bit 5 has a client sequence (`hasClientSequence`).
    var flags: UInt8
    /// Spec §7's device version (1 at creation; 0 only in a free slot).
    var version: UInt32

    static let free: DeviceRecord = {
        var record = DeviceRecord(
            sequence: 0, createdAtLow: 0, lastSeenAtLow: 0, boundAtLow: 0, invalidatedAtLow: 0, createdAtHigh: 0,
            lastSeenAtHigh: 0, boundAtHigh: 0, invalidatedAtHigh: 0, token0: 0, token1: 0, token2: 0, token3: 0,
            person: noSlot, nextOfPerson: noSlot,
            bundleID: 0, appVersion: 0, timezone: 0, locale: 0, invalidationReason: 0, digest: noSlot, strikes: 0,
            installation: .none, tokenLength: 0, tags: .none, flags: 0, version: 0)
        record.boundAt = noTimestamp
        record.invalidatedAt = noTimestamp
        return record
    }()

    /// Milliseconds since the epoch, or `noTimestamp`.
    var createdAt: Int64 {
        get { Self.join(createdAtLow, createdAtHigh) }
        set { (createdAtLow, createdAtHigh) = Self.split(newValue) }
    }
    var lastSeenAt: Int64 {
        get { Self.join(lastSeenAtLow, lastSeenAtHigh) }
        set { (lastSeenAtLow, lastSeenAtHigh) = Self.split(newValue) }
    }
    var boundAt: Int64 {
        get { Self.join(boundAtLow, boundAtHigh) }
        set { (boundAtLow, boundAtHigh) = Self.split(newValue) }
    }
    var invalidatedAt: Int64 {
        get { Self.join(invalidatedAtLow, invalidatedAtHigh) }
        set { (invalidatedAtLow, invalidatedAtHigh) = Self.split(newValue) }
    }

    private static let allOnes48: UInt64 = 0xFFFF_FFFF_FFFF

    private static func split(_ value: Int64) -> (UInt32, UInt16) {
        let bits: UInt64
        if value == noTimestamp {
            bits = allOnes48
        } else {
            precondition(value >= 0 && UInt64(value) < allOnes48, "timestamp \(value) does not fit 48 bits")
            bits = UInt64(value)
        }
        return (UInt32(truncatingIfNeeded: bits), UInt16(truncatingIfNeeded: bits >> 32))
    }

    private static func join(_ low: UInt32, _ high: UInt16) -> Int64 {
        let bits = UInt64(high) << 32 | UInt64(low)
        return bits == allOnes48 ? noTimestamp : Int64(bits)
    }

    var isFree: Bool { sequence == 0 }
    var platform: Platform { flags & 1 == 0 ? .ios : .android }
    var environment: APNsEnvironment { flags & 2 == 0 ? .production : .sandbox }
    var pushPermission: Bool? {
        switch (flags >> 2) & 3 {
        case 1: false
        case 2: true
        default: nil
        }
    }
    var optedIn: Bool { flags & 16 != 0 }
    /// Whether `DeviceStore.clientSequences` holds this slot's client sequence.
    var hasClientSequence: Bool {
        get { flags & Self.clientSequenceFlag != 0 }
        set { flags = newValue ? flags | Self.clientSequenceFlag : flags & ~Self.clientSequenceFlag }
    }
    static let clientSequenceFlag: UInt8 = 32
    var isInvalidated: Bool { invalidatedAt != Self.noTimestamp }

    /// The flag bits of the fields a `Device` spells (not `hasClientSequence`).
    static func flags(
        platform: Platform, environment: APNsEnvironment, pushPermission: Bool?, optedIn: Bool
    ) -> UInt8 {
        var flags: UInt8 = platform == .android ? 1 : 0
        if environment == .sandbox { flags |= 2 }
        switch pushPermission {
        case .none: break
        case .some(false): flags |= 1 << 2
        case .some(true): flags |= 2 << 2
        }
        if optedIn { flags |= 16 }
        return flags
    }
}

/// The packed form of a known person.
struct PersonRecord: Sendable {
    /// The external id's UTF-8 bytes; `.none` marks a free slot.
    var name: BlobRef
    var createdAt: Int64
    var firstDevice: UInt32
    var deviceCount: UInt32

    var isFree: Bool { name.isNone }
}
