/// A device's stable identity, rendered `dev_` + 26 lower-case Crockford base32 characters.
///
/// Internally a device id is (app, mode, platform, sequence): `sequence` counts
/// devices created in one (app, mode) from 1 and is never reused. A device record
/// stores only the sequence; app and mode belong to its `AppIndex`.
///
/// The 128 rendered bits are `app(32) | mode(1) | platform(1) | marker(30) | sequence(64)`
/// passed through a fixed 4-round Feistel permutation, so that ids look random and
/// do not reveal counts (obfuscation, not secrecy: `device_id` is public context,
/// the installation secret is the proof). Because app, mode and platform are in
/// the id, an `AppIndex` can tell a foreign app's id (no reuse) from this app's id
/// minted under the other mode or platform (422 `device_identity_conflict`, rule 5)
/// without asking the other mode's index; the 30-bit marker rejects typed-in or
/// forged strings with probability 1 - 2^-30.
package struct DeviceID: Hashable, Sendable, CustomStringConvertible {
    package let appID: AppID
    package let mode: AppMode
    package let platform: Platform
    package let sequence: UInt64

    package init(appID: AppID, mode: AppMode, platform: Platform, sequence: UInt64) {
        precondition(sequence > 0, "DeviceID sequence must be positive")
        self.appID = appID
        self.mode = mode
        self.platform = platform
        self.sequence = sequence
    }

    private static let marker: UInt64 = 0x2B1D_0E5A & 0x3FFF_FFFF
    /// The Feistel rounds' keys: `render` reads them one by one, the parser
    /// through `roundKeys`.
    private static let roundKey0: UInt64 = 0x243F_6A88_85A3_08D3
    private static let roundKey1: UInt64 = 0x1319_8A2E_0370_7344
    private static let roundKey2: UInt64 = 0xA409_3822_299F_31D0
    private static let roundKey3: UInt64 = 0x082E_FA98_EC4E_6C89
    private static let roundKeys: [UInt64] = [roundKey0, roundKey1, roundKey2, roundKey3]
    /// The base32 alphabet: `render` reads its bytes in place, the parser
    /// searches `alphabet`.
    private static let alphabetText: StaticString = "0123456789abcdefghjkmnpqrstvwxyz"
    private static let alphabet = Array(
        UnsafeBufferPointer(start: alphabetText.utf8Start, count: alphabetText.utf8CodeUnitCount))
    private static let prefix = Array("dev_".utf8)

    /// Bytes of the `dev_…` form: always 30.
    package static let renderedBytes = 30

    /// The `dev_…` string form (30 characters). One allocation (the string's
    /// own storage); `withRendered` writes none.
    package var rendered: String {
        String(unsafeUninitializedCapacity: Self.renderedBytes) { buffer in
            render(into: buffer)
            return Self.renderedBytes
        }
    }

    /// Calls `body` with the `dev_…` form's `renderedBytes` ASCII bytes,
    /// written into a buffer on the stack: no `String`, no heap allocation
    /// (renderers write it straight into their output).
    package func withRendered(_ body: (UnsafeBufferPointer<UInt8>) -> Void) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Self.renderedBytes) { buffer in
            render(into: buffer)
            body(UnsafeBufferPointer(buffer))
        }
    }

    /// Writes the `dev_…` form into the first `renderedBytes` bytes of `buffer`.
    /// The round keys and the alphabet are read as constants, not through
    /// arrays (a device answer and every exported line render one: 718 → 205
    /// instructions, issue 25); `DeviceIDTests` pins the bytes of ids a
    /// release minted.
    package func render(into buffer: UnsafeMutableBufferPointer<UInt8>) {
        precondition(buffer.count >= Self.renderedBytes, "device id buffer of \(buffer.count) bytes")
        var left =
            UInt64(appID.rawValue) << 32 | UInt64(mode.rawValue) << 31 | UInt64(platform.rawValue) << 30 | Self.marker
        var right = sequence
        (left, right) = (right, left ^ Self.mix(right &+ Self.roundKey0))
        (left, right) = (right, left ^ Self.mix(right &+ Self.roundKey1))
        (left, right) = (right, left ^ Self.mix(right &+ Self.roundKey2))
        (left, right) = (right, left ^ Self.mix(right &+ Self.roundKey3))
        guard let base = buffer.baseAddress else { preconditionFailure("device id buffer without storage") }
        let alphabet = Self.alphabetText.utf8Start
        base[0] = UInt8(ascii: "d")
        base[1] = UInt8(ascii: "e")
        base[2] = UInt8(ascii: "v")
        base[3] = UInt8(ascii: "_")
        // 26 characters of the 128 bits: the first carries the top 3, then
        // 25 × 5 bits (left's low 61 bits, then right's 64).
        base[4] = alphabet[Int(left >> 61)]
        for index in 0..<12 { base[5 + index] = alphabet[Int(left >> UInt64(56 - 5 * index) & 0x1F)] }
        // The 13th group straddles the halves: left's low bit, right's top 4.
        base[17] = alphabet[Int((left & 1) << 4 | right >> 60)]
        for index in 0..<12 { base[18 + index] = alphabet[Int(right >> UInt64(55 - 5 * index) & 0x1F)] }
    }

    package var description: String { rendered }

    /// Parses the `dev_…` form; nil for anything that this server did not mint
    /// (wrong length, alphabet, or marker). Strict lower-case: one spelling per id.
    package init?(rendered text: some StringProtocol) {
        let utf8 = Array(text.utf8)
        guard utf8.count == 30, utf8.starts(with: Self.prefix) else { return nil }
        var left: UInt64 = 0
        var right: UInt64 = 0
        for (index, character) in utf8[4...].enumerated() {
            guard let value = Self.alphabet.firstIndex(of: character) else { return nil }
            if index == 0 {
                guard value < 8 else { return nil }
                left = UInt64(value) << 61
                continue
            }
            let bitOffset = 125 - 5 * index
            let bits = UInt64(value)
            if bitOffset >= 64 {
                left |= bits << UInt64(bitOffset - 64)
            } else if bitOffset + 5 <= 64 {
                right |= bits << UInt64(bitOffset)
            } else {
                right |= bits << UInt64(bitOffset)
                left |= bits >> UInt64(64 - bitOffset)
            }
        }
        for key in Self.roundKeys.reversed() {
            (left, right) = (right ^ Self.mix(left &+ key), left)
        }
        guard left & 0x3FFF_FFFF == Self.marker, right > 0 else { return nil }
        let app = UInt32(truncatingIfNeeded: left >> 32)
        guard app > 0, let mode = AppMode(rawValue: UInt8((left >> 31) & 1)),
            let platform = Platform(rawValue: UInt8((left >> 30) & 1))
        else { return nil }
        self.init(appID: AppID(app), mode: mode, platform: platform, sequence: right)
    }

    /// SplitMix64's finalizer: a bijective mixer used as the Feistel round function.
    private static func mix(_ input: UInt64) -> UInt64 {
        var z = input
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
