import RoostJSON
import RoostModel

/// Writes devices as spec §4's device JSON — the export's NDJSON lines, and
/// through `DeviceJSON` every other answer that holds a device — straight
/// from their fields (`StoredDeviceFields`, of a stored device or of a
/// `Device` value) into bytes: the constant parts
/// (every key with its punctuation) are prepared byte literals, strings take
/// an ASCII fast path (copied whole unless a byte needs escaping), the id and
/// timestamps are formatted in place, and tags are written from their
/// stored encoding, whose keys are already in rendering order (issue 25:
/// ≤ 1 µs of server CPU per exported device).
/// `DeviceLineWriterTests` holds the bytes to a reference rendering through
/// `JSONWriter`, field by field.
///
/// A value on the stack of one chunk's rendering, over memory it does not own.
struct DeviceLineWriter {
    /// The most bytes a device's line takes beyond its variable fields
    /// (`StoredDeviceFields.variableBytes`, each written at most 6× by
    /// escapes): keys, punctuation, the id, timestamps, numbers, `null`s.
    static let constantBytesMax = 1_024

    private let base: UnsafeMutablePointer<UInt8>
    private let capacity: Int
    private(set) var count = 0
    /// The last timestamp written and where its 24 bytes are in the buffer:
    /// a device's times are often one millisecond (a new device's
    /// `created_at`, `last_seen_at` and `bound_at`), whose form is then
    /// copied, not worked out again (issue 25: ~230 instructions each).
    private var lastTimestamp: (millisecondsSinceEpoch: Int64, at: Int)?

    init(_ buffer: UnsafeMutableBufferPointer<UInt8>) {
        guard let base = buffer.baseAddress else { preconditionFailure("a device line writer over no memory") }
        self.base = base
        capacity = buffer.count
    }

    /// The most bytes `device`'s line can take.
    static func bytesMax(_ device: borrowing StoredDeviceFields) -> Int {
        constantBytesMax + 6 * device.variableBytes
    }

    /// Writes `device` if it surely fits; returns false, writing nothing,
    /// when it might not. With `includeToken`, a `token` member follows
    /// `environment`; without `closing` the object is left open (no `}`) for
    /// the caller's members; with `newline`, a line feed ends it (NDJSON).
    mutating func write(
        _ device: borrowing StoredDeviceFields, includeToken: Bool = true, closing: Bool = true, newline: Bool = true
    ) -> Bool {
        guard capacity - count >= Self.bytesMax(device) else { return false }
        let start = count
        literal("{\"id\":\"")
        device.id.render(into: UnsafeMutableBufferPointer(start: base + count, count: DeviceID.renderedBytes))
        count += DeviceID.renderedBytes
        literal("\",\"platform\":\"")
        ascii(device.id.platform.name)
        literal("\",\"environment\":\"")
        ascii(device.environment.name)
        literal("\"")
        if includeToken {
            literal(",\"token\":")
            if let token = device.token {
                if device.id.platform == .ios { hexString(token) } else { quoted(token) }
            } else {
                literal("null")
            }
        }
        literal(",\"bundle_id\":")
        quoted(device.bundleID)
        literal(",\"installation_id\":")
        quoted(device.installationID)
        literal(",\"external_id\":")
        quoted(device.externalID)
        literal(",\"created_at\":")
        timestamp(device.createdAt)
        literal(",\"last_seen_at\":")
        timestamp(device.lastSeenAt)
        literal(",\"bound_at\":")
        timestamp(device.boundAt)
        literal(",\"app_version\":")
        quoted(device.appVersion)
        literal(",\"timezone\":")
        quoted(device.timezone)
        literal(",\"locale\":")
        quoted(device.locale)
        literal(",\"push_permission\":")
        if let permission = device.pushPermission { literal(permission ? "true" : "false") } else { literal("null") }
        literal(",\"opted_in\":")
        literal(device.optedIn ? "true" : "false")
        literal(",\"tags\":")
        if let tags = device.tags { tagSet(tags) } else { literal("{}") }
        literal(",\"invalidated_at\":")
        timestamp(device.invalidatedAt)
        literal(",\"invalidation_reason\":")
        quoted(device.invalidationReason)
        literal(",\"strikes\":")
        decimal(UInt64(device.strikes))
        literal(",\"mode\":\"")
        ascii(device.id.mode.name)
        literal("\",\"version\":")
        decimal(UInt64(device.version))
        literal(",\"client_sequence\":")
        if let sequence = device.clientSequence { decimal(sequence) } else { literal("null") }
        if closing { literal("}") }
        if newline { literal("\n") }
        precondition(count - start <= Self.bytesMax(device), "a device line past its bound")
        return true
    }

    // MARK: Pieces

    private mutating func literal(_ text: StaticString) {
        (base + count).update(from: text.utf8Start, count: text.utf8CodeUnitCount)
        count += text.utf8CodeUnitCount
    }

    private mutating func raw(_ bytes: UnsafeRawBufferPointer) {
        guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
        UnsafeMutableRawPointer(base + count).copyMemory(from: source, byteCount: bytes.count)
        count += bytes.count
    }

    /// A name known to need no escape (platform, environment, mode).
    private mutating func ascii(_ text: String) {
        var text = text
        text.withUTF8 { raw(UnsafeRawBufferPointer($0)) }
    }

    private mutating func quoted(_ text: String?) {
        guard var text else { return literal("null") }
        text.withUTF8 { quoted(UnsafeRawBufferPointer($0)) }
    }

    private mutating func quoted(_ bytes: UnsafeRawBufferPointer?) {
        guard let bytes else { return literal("null") }
        base[count] = UInt8(ascii: "\"")
        count += 1
        var runStart = 0
        for index in 0..<bytes.count {
            let byte = bytes[index]
            guard JSONWriter.needsEscape(byte) else { continue }
            raw(UnsafeRawBufferPointer(rebasing: bytes[runStart..<index]))
            count += JSONWriter.escape(byte, into: base + count)
            runStart = index + 1
        }
        raw(UnsafeRawBufferPointer(rebasing: bytes[runStart..<bytes.count]))
        base[count] = UInt8(ascii: "\"")
        count += 1
    }

    private mutating func hexString(_ bytes: UnsafeRawBufferPointer) {
        base[count] = UInt8(ascii: "\"")
        count += 1
        Hex.spell(bytes, into: UnsafeMutableBufferPointer(start: base + count, count: bytes.count * 2))
        count += bytes.count * 2
        base[count] = UInt8(ascii: "\"")
        count += 1
    }

    private mutating func timestamp(_ value: Timestamp?) {
        guard let value else { return literal("null") }
        base[count] = UInt8(ascii: "\"")
        if let last = lastTimestamp, last.millisecondsSinceEpoch == value.millisecondsSinceEpoch {
            (base + count + 1).update(from: base + last.at, count: Timestamp.rfc3339Bytes)
        } else {
            value.formatRFC3339(
                into: UnsafeMutableBufferPointer(start: base + count + 1, count: Timestamp.rfc3339Bytes))
            lastTimestamp = (value.millisecondsSinceEpoch, count + 1)
        }
        base[count + 1 + Timestamp.rfc3339Bytes] = UInt8(ascii: "\"")
        count += Timestamp.rfc3339Bytes + 2
    }

    private mutating func decimal(_ value: UInt64) {
        count += Self.writeDecimal(value, at: base + count)
    }

    /// Writes `value`'s decimal digits at `start` (room for 20 is the
    /// caller's); returns how many. The one spelling of it for answers
    /// written as bytes (device lines, `ETag`s).
    static func writeDecimal(_ value: UInt64, at start: UnsafeMutablePointer<UInt8>) -> Int {
        var digits = 1
        var rest = value / 10
        while rest != 0 {
            digits += 1
            rest /= 10
        }
        var remaining = value
        for index in stride(from: digits - 1, through: 0, by: -1) {
            start[index] = UInt8(ascii: "0") + UInt8(remaining % 10)
            remaining /= 10
        }
        return digits
    }

    /// Tags as an object with keys in `sortedEntries` order, read off their stored
    /// encoding (`Tags`: count, then each key with its value, keys in
    /// `TagKey` order, which is `sortedEntries`' order). O(bytes).
    private mutating func tagSet(_ encoding: UnsafeRawBufferPointer) {
        base[count] = UInt8(ascii: "{")
        count += 1
        var offset = 1
        for entry in 0..<Int(encoding[0]) {
            if entry > 0 {
                base[count] = UInt8(ascii: ",")
                count += 1
            }
            let keyLength = Int(LittleEndianReader.u16(at: offset, of: encoding))
            quoted(UnsafeRawBufferPointer(rebasing: encoding[offset + 2..<offset + 2 + keyLength]))
            offset += 2 + keyLength
            base[count] = UInt8(ascii: ":")
            count += 1
            let kind = encoding[offset]
            offset += 1
            switch kind {
            case 0:
                let valueLength = Int(LittleEndianReader.u16(at: offset, of: encoding))
                quoted(UnsafeRawBufferPointer(rebasing: encoding[offset + 2..<offset + 2 + valueLength]))
                offset += 2 + valueLength
            case 1:
                number(Double(bitPattern: LittleEndianReader.u64(at: offset, of: encoding)))
                offset += 8
            default:
                literal(kind == 3 ? "true" : "false")
            }
        }
        base[count] = UInt8(ascii: "}")
        count += 1
    }

    /// A tag number as the client sent it: an integer (`DeviceJSON.integral`), or the shortest form.
    private mutating func number(_ value: Double) {
        guard let integral = DeviceJSON.integral(value) else {
            var text = value.description
            return text.withUTF8 { raw(UnsafeRawBufferPointer($0)) }
        }
        if integral < 0 {
            base[count] = UInt8(ascii: "-")
            count += 1
        }
        decimal(UInt64(integral.magnitude))
    }
}
