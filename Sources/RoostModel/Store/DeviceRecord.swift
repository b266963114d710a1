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

// MARK: The index image's fixed layouts (decision 0056)

extension DeviceRecord {
    /// Bytes of one device in an index image: every field, little-endian, in
    /// declaration order (sequence 8, the four timestamps' low words 16 and
    /// high words 8, token 32, person and next 8, five string ids 20, digest 4,
    /// strikes 4, installation 6, token length 2, tags 6, flags 1, version 4).
    /// Fixed by the format, not by the compiler's layout of the struct.
    static let imageBytes = 119

    /// Writes this record's `imageBytes` at `base`.
    @inline(__always)
    func writeImage(to base: UnsafeMutableRawPointer) {
        base.storeBytes(of: sequence.littleEndian, toByteOffset: 0, as: UInt64.self)
        base.storeBytes(of: createdAtLow.littleEndian, toByteOffset: 8, as: UInt32.self)
        base.storeBytes(of: lastSeenAtLow.littleEndian, toByteOffset: 12, as: UInt32.self)
        base.storeBytes(of: boundAtLow.littleEndian, toByteOffset: 16, as: UInt32.self)
        base.storeBytes(of: invalidatedAtLow.littleEndian, toByteOffset: 20, as: UInt32.self)
        base.storeBytes(of: createdAtHigh.littleEndian, toByteOffset: 24, as: UInt16.self)
        base.storeBytes(of: lastSeenAtHigh.littleEndian, toByteOffset: 26, as: UInt16.self)
        base.storeBytes(of: boundAtHigh.littleEndian, toByteOffset: 28, as: UInt16.self)
        base.storeBytes(of: invalidatedAtHigh.littleEndian, toByteOffset: 30, as: UInt16.self)
        base.storeBytes(of: token0.littleEndian, toByteOffset: 32, as: UInt64.self)
        base.storeBytes(of: token1.littleEndian, toByteOffset: 40, as: UInt64.self)
        base.storeBytes(of: token2.littleEndian, toByteOffset: 48, as: UInt64.self)
        base.storeBytes(of: token3.littleEndian, toByteOffset: 56, as: UInt64.self)
        base.storeBytes(of: person.littleEndian, toByteOffset: 64, as: UInt32.self)
        base.storeBytes(of: nextOfPerson.littleEndian, toByteOffset: 68, as: UInt32.self)
        base.storeBytes(of: bundleID.littleEndian, toByteOffset: 72, as: UInt32.self)
        base.storeBytes(of: appVersion.littleEndian, toByteOffset: 76, as: UInt32.self)
        base.storeBytes(of: timezone.littleEndian, toByteOffset: 80, as: UInt32.self)
        base.storeBytes(of: locale.littleEndian, toByteOffset: 84, as: UInt32.self)
        base.storeBytes(of: invalidationReason.littleEndian, toByteOffset: 88, as: UInt32.self)
        base.storeBytes(of: digest.littleEndian, toByteOffset: 92, as: UInt32.self)
        base.storeBytes(of: strikes.littleEndian, toByteOffset: 96, as: UInt32.self)
        base.storeBytes(of: installation.cell.littleEndian, toByteOffset: 100, as: UInt32.self)
        base.storeBytes(of: installation.length.littleEndian, toByteOffset: 104, as: UInt16.self)
        base.storeBytes(of: tokenLength.littleEndian, toByteOffset: 106, as: UInt16.self)
        base.storeBytes(of: tags.cell.littleEndian, toByteOffset: 108, as: UInt32.self)
        base.storeBytes(of: tags.length.littleEndian, toByteOffset: 112, as: UInt16.self)
        base.storeBytes(of: flags, toByteOffset: 114, as: UInt8.self)
        base.storeBytes(of: version.littleEndian, toByteOffset: 115, as: UInt32.self)
    }

    /// Reads a record from its `imageBytes` at `base` (no check: the image's
    /// loader validates the whole store afterwards).
    @inline(__always)
    init(image base: UnsafeRawPointer) {
        func u64(_ offset: Int) -> UInt64 {
            UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        }
        func u32(_ offset: Int) -> UInt32 {
            UInt32(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
        }
        func u16(_ offset: Int) -> UInt16 {
            UInt16(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt16.self))
        }
        self.init(
            sequence: u64(0), createdAtLow: u32(8), lastSeenAtLow: u32(12), boundAtLow: u32(16),
            invalidatedAtLow: u32(20), createdAtHigh: u16(24), lastSeenAtHigh: u16(26), boundAtHigh: u16(28),
            invalidatedAtHigh: u16(30), token0: u64(32), token1: u64(40), token2: u64(48), token3: u64(56),
            person: u32(64), nextOfPerson: u32(68), bundleID: u32(72), appVersion: u32(76), timezone: u32(80),
            locale: u32(84), invalidationReason: u32(88), digest: u32(92), strikes: u32(96),
            installation: BlobRef(cell: u32(100), length: u16(104)), tokenLength: u16(106),
            tags: BlobRef(cell: u32(108), length: u16(112)), flags: base.load(fromByteOffset: 114, as: UInt8.self),
            version: u32(115))
    }
}

extension PersonRecord {
    /// Bytes of one person in an index image: name cell 4, name length 2,
    /// created at 8 (milliseconds, signed), first device 4, device count 4.
    static let imageBytes = 22

    /// Writes this record's `imageBytes` at `base`.
    @inline(__always)
    func writeImage(to base: UnsafeMutableRawPointer) {
        base.storeBytes(of: name.cell.littleEndian, toByteOffset: 0, as: UInt32.self)
        base.storeBytes(of: name.length.littleEndian, toByteOffset: 4, as: UInt16.self)
        base.storeBytes(of: createdAt.littleEndian, toByteOffset: 6, as: Int64.self)
        base.storeBytes(of: firstDevice.littleEndian, toByteOffset: 14, as: UInt32.self)
        base.storeBytes(of: deviceCount.littleEndian, toByteOffset: 18, as: UInt32.self)
    }

    /// Reads a record from its `imageBytes` at `base` (validated by the loader).
    @inline(__always)
    init(image base: UnsafeRawPointer) {
        self.init(
            name: BlobRef(
                cell: UInt32(littleEndian: base.loadUnaligned(fromByteOffset: 0, as: UInt32.self)),
                length: UInt16(littleEndian: base.loadUnaligned(fromByteOffset: 4, as: UInt16.self))),
            createdAt: Int64(littleEndian: base.loadUnaligned(fromByteOffset: 6, as: Int64.self)),
            firstDevice: UInt32(littleEndian: base.loadUnaligned(fromByteOffset: 14, as: UInt32.self)),
            deviceCount: UInt32(littleEndian: base.loadUnaligned(fromByteOffset: 18, as: UInt32.self)))
    }
}
