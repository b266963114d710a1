/// The packed form of a `Device` inside an `AppIndex` (128-byte stride).
///
/// Layout, in bytes: sequence 8, four timestamps 32 (`Int64.min` = none), token
/// 32 inline (tokens of up to 32 bytes: every APNs token Apple issues today) or
/// a `BlobStore` cell number in `token0` for longer ones, person slot and next
/// device of that person 8, five interned string ids 20, secret digest slot 4,
/// strikes 4, installation id blob 6, token length 2, tags blob 6, flags 1.
/// A free slot has `sequence == 0`.
struct DeviceRecord: Sendable {
    static let noTimestamp = Int64.min
    static let noSlot = UInt32.max

    var sequence: UInt64
    var createdAt: Int64
    var lastSeenAt: Int64
    var boundAt: Int64
    var invalidatedAt: Int64
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
    /// The slot of the installation secret's digest in `AppIndex.digests`, or `noSlot`.
    var digest: UInt32
    var strikes: UInt32
    var installation: BlobRef
    /// 0 when the device has no token (Reassigned).
    var tokenLength: UInt16
    var tags: BlobRef
    /// Bit 0 platform, bit 1 environment, bits 2-3 push_permission (0 nil, 1 false,
    /// 2 true), bit 4 opted_in.
    var flags: UInt8

    static let free = DeviceRecord(
        sequence: 0, createdAt: 0, lastSeenAt: 0, boundAt: noTimestamp, invalidatedAt: noTimestamp,
        token0: 0, token1: 0, token2: 0, token3: 0, person: noSlot, nextOfPerson: noSlot,
        bundleID: 0, appVersion: 0, timezone: 0, locale: 0, invalidationReason: 0, digest: noSlot, strikes: 0,
        installation: .none, tokenLength: 0, tags: .none, flags: 0)

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
    var isInvalidated: Bool { invalidatedAt != Self.noTimestamp }

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
