import RoostHTTP
import RoostModel

/// Parses `If-Match` (RFC 9110 §13.1.1) for `PATCH` and `DELETE
/// /v1/devices/{id}` (spec §7) into the model's `VersionCondition`.
///
/// Grammar: `If-Match = "*" / #entity-tag`, `entity-tag = [ "W/" ] DQUOTE
/// *etagc DQUOTE`; several `If-Match` fields are one list. If-Match compares
/// strongly: a weak tag never matches, and neither does a strong tag that
/// does not spell a version as the server writes it (`"7"`, not `"07"`);
/// such tags are kept out of the list, so a list of only those fails with
/// 412. `*` matches any existing device. A field that does not follow the
/// grammar, names no entity tag at all, mixes `*` with tags, or lists more
/// than `entityTagsMax` tags is 400 `invalid_field` (field `If-Match`): the
/// client asked for a condition, and guessing one would risk an
/// unconditional write.
enum IfMatch {
    /// The most entity tags one request may list.
    static let entityTagsMax = 64

    /// Returns the condition the request's `If-Match` fields spell, nil when there are none.
    static func parse(_ headers: HTTPHeaders) throws(APIError) -> VersionCondition? {
        let values = headers.values("If-Match")
        if values.isEmpty { return nil }
        let bytes = Array(values.joined(separator: ",").utf8)
        var elements = 0
        var sawStar = false
        var versions: [UInt32] = []
        var index = 0
        while true {
            while index < bytes.count && (bytes[index] == UInt8(ascii: " ") || bytes[index] == 9) { index += 1 }
            if index == bytes.count { break }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            if bytes[index] == UInt8(ascii: "*") {
                sawStar = true
                index += 1
            } else {
                var weak = false
                if bytes[index] == UInt8(ascii: "W"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "/") {
                    weak = true
                    index += 2
                }
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                    throw malformed("an entity tag must be quoted, as in If-Match: \"3\"")
                }
                index += 1
                let start = index
                while index < bytes.count && bytes[index] != UInt8(ascii: "\"") {
                    let byte = bytes[index]
                    guard byte == 0x21 || (byte >= 0x23 && byte != 0x7F) else {
                        throw malformed("an entity tag holds a character it may not hold")
                    }
                    index += 1
                }
                guard index < bytes.count else { throw malformed("an entity tag is not closed by a quote") }
                let opaque = bytes[start..<index]
                index += 1
                if !weak, let version = version(spelledBy: opaque) { versions.append(version) }
            }
            elements += 1
            guard elements <= entityTagsMax else { throw malformed("If-Match lists more than \(entityTagsMax) tags") }
            while index < bytes.count && (bytes[index] == UInt8(ascii: " ") || bytes[index] == 9) { index += 1 }
            guard index == bytes.count || bytes[index] == UInt8(ascii: ",") else {
                throw malformed("entity tags must be separated by commas")
            }
        }
        guard elements > 0 else { throw malformed("If-Match names no entity tag") }
        if sawStar {
            guard elements == 1 else { throw malformed("If-Match: * stands alone") }
            return .anyVersion
        }
        return .oneOf(versions)
    }

    /// The version an opaque tag spells as `ETag` writes it (decimal, no
    /// leading zero, 1 to `Limits.deviceVersionMax`), or nil.
    private static func version(spelledBy digits: ArraySlice<UInt8>) -> UInt32? {
        guard !digits.isEmpty, digits.count <= 10, digits.first != UInt8(ascii: "0") else { return nil }
        var value: UInt64 = 0
        for digit in digits {
            guard digit >= UInt8(ascii: "0") && digit <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + UInt64(digit - UInt8(ascii: "0"))
        }
        return value <= UInt64(Limits.deviceVersionMax) ? UInt32(value) : nil
    }

    private static func malformed(_ message: String) -> APIError {
        APIError.invalidField("If-Match", message)
    }

    /// The `ETag` of a device answer: its version, strong and quoted. Its
    /// digits written into a stack buffer: at most 12 bytes, a small string
    /// (no allocation), where string interpolation cost ~600 instructions an
    /// answer (issue 25).
    static func entityTag(_ device: Device) -> String {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: entityTagBytesMax) { buffer in
            let start = buffer.baseAddress!
            start[0] = UInt8(ascii: "\"")
            let digits = DeviceLineWriter.writeDecimal(UInt64(device.version), at: start + 1)
            start[digits + 1] = UInt8(ascii: "\"")
            return String(decoding: UnsafeBufferPointer(rebasing: buffer[..<(digits + 2)]), as: UTF8.self)
        }
    }

    /// The longest `ETag`: `UInt32.max`'s 10 digits and two quotes.
    static let entityTagBytesMax = 12
}
