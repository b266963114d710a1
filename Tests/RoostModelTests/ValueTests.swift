import Testing

@testable import RoostModel

@Suite("Timestamps")
struct TimestampTests {
    @Test(
        "formats as RFC 3339 UTC with milliseconds",
        arguments: [
            (Int64(0), "1970-01-01T00:00:00.000Z"),
            (1_789_912_931_000, "2026-09-20T14:02:11.000Z"),
            (951_868_799_999, "2000-02-29T23:59:59.999Z"),
            (1_709_208_000_007, "2024-02-29T12:00:00.007Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
        ])
    func formats(milliseconds: Int64, text: String) {
        #expect(Timestamp(millisecondsSinceEpoch: milliseconds).rfc3339 == text)
        #expect(Timestamp(rfc3339: text)?.millisecondsSinceEpoch == milliseconds)
        var bytes: [UInt8] = []
        Timestamp(millisecondsSinceEpoch: milliseconds).withRFC3339 { bytes = Array($0) }
        #expect(bytes == Array(text.utf8), "withRFC3339 writes the bytes of rfc3339")
        #expect(bytes.count == Timestamp.rfc3339Bytes)
    }

    @Test("every formatted instant parses back to itself (10,000 seeded instants over the domain)")
    func formatsWhatParses() {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        for _ in 0..<10_000 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            let milliseconds = Int64(state >> 16) % (Timestamp.millisecondsMax + 1)
            let text = Timestamp(millisecondsSinceEpoch: milliseconds).rfc3339
            #expect(Timestamp(rfc3339: text)?.millisecondsSinceEpoch == milliseconds, "\(milliseconds) → \(text)")
        }
    }

    @Test(
        "parses offsets, lower-case separators and any fraction length",
        arguments: [
            ("2026-09-20T16:02:11.000+02:00", Int64(1_789_912_931_000)),
            ("2026-09-20T09:32:11-04:30", 1_789_912_931_000),
            ("2026-09-20t14:02:11z", 1_789_912_931_000),
            ("2026-09-20T14:02:11.5Z", 1_789_912_931_500),
            ("2026-09-20T14:02:11.12Z", 1_789_912_931_120),
            ("2026-09-20T14:02:11.123456789Z", 1_789_912_931_123),
        ])
    func parsesVariants(text: String, milliseconds: Int64) {
        #expect(Timestamp(rfc3339: text)?.millisecondsSinceEpoch == milliseconds)
    }

    @Test(
        "rejects malformed or impossible times",
        arguments: [
            "", "2026-09-20", "2026-09-20T14:02:11", "2026-09-20 14:02:11Z", "2026-13-01T00:00:00Z",
            "2026-00-10T00:00:00Z", "2023-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2026-04-31T00:00:00Z",
            "2026-09-20T24:00:00Z", "2026-09-20T23:60:00Z", "2026-09-20T23:59:60Z", "2026-09-20T14:02:11.Z",
            "2026-09-20T14:02:11.0000000000Z", "2026-09-20T14:02:11+0200", "2026-09-20T14:02:11Zjunk",
            "1969-12-31T23:59:59.999Z", "1970-01-01T00:30:00+01:00", "+2026-09-20T14:02:11Z", "２026-09-20T14:02:11Z",
        ])
    func rejects(text: String) {
        #expect(Timestamp(rfc3339: text) == nil)
    }

    @Test("leap days of 2000 and 2024 exist, of 2100 not")
    func leapYears() {
        #expect(Timestamp(rfc3339: "2000-02-29T00:00:00Z") != nil)
        #expect(Timestamp(rfc3339: "2024-02-29T00:00:00Z") != nil)
        #expect(Timestamp(rfc3339: "2100-02-29T00:00:00Z") == nil)
    }

    @Test("format then parse is the identity over the whole domain")
    func roundTripRandom() {
        var random = SplitMix64(seed: 0x7157)
        for _ in 0..<20_000 {
            let milliseconds = Int64(random.next() % UInt64(Timestamp.millisecondsMax + 1))
            let text = Timestamp(millisecondsSinceEpoch: milliseconds).rfc3339
            #expect(Timestamp(rfc3339: text)?.millisecondsSinceEpoch == milliseconds, "seed \(random.seed): \(text)")
            Timestamp(millisecondsSinceEpoch: milliseconds).withRFC3339 { bytes in
                #expect(bytes.elementsEqual(text.utf8), "seed \(random.seed): \(text)")
            }
        }
    }

    @Test("civil date conversion agrees day by day with counting from 1970")
    func civilDates() {
        var (year, month, day): (Int64, Int64, Int64) = (1970, 1, 1)
        for dayCount in Int64(0)..<200_000 {
            #expect(Timestamp.days(fromCivilYear: year, month: month, day: day) == dayCount)
            let civil = Timestamp.civil(fromDays: dayCount)
            #expect(Int64(civil.year) == year && Int64(civil.month) == month && Int64(civil.day) == day)
            let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
            let length: Int64 = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][Int(month - 1)]
            day += 1
            if day > length {
                day = 1
                month += 1
                if month > 12 {
                    month = 1
                    year += 1
                }
            }
        }
        // The domain's last day (the count above ends in 2517).
        let last = Timestamp.civil(fromDays: Timestamp.millisecondsMax / 86_400_000)
        #expect(last.year == 9999 && last.month == 12 && last.day == 31)
    }
}

@Suite("Device ids")
struct DeviceIDTests {
    @Test("renders as dev_ and 26 base32 characters, and parses back")
    func roundTrip() {
        var random = SplitMix64(seed: 0xD1D)
        for _ in 0..<5_000 {
            let id = DeviceID(
                appID: AppID(UInt32(truncatingIfNeeded: random.next() % UInt64(UInt32.max)) + 1),
                mode: random.next() % 2 == 0 ? .live : .test, platform: random.next() % 2 == 0 ? .ios : .android,
                sequence: random.next() | 1)
            let text = id.rendered
            #expect(text.utf8.count == 30)
            #expect(text.hasPrefix("dev_"))
            #expect(DeviceID(rendered: text) == id, "seed \(random.seed)")
            id.withRendered { bytes in
                #expect(bytes.elementsEqual(text.utf8), "withRendered writes rendered's bytes; seed \(random.seed)")
            }
        }
    }

    @Test("the rendered form is the one clients hold: pinned bytes of ids a release minted")
    func pinnedForms() {
        // Registered against a release build of 34e879e (app 1, live): clients
        // keep these strings, so a change to `render` must not move a byte.
        let app = AppID(1)
        #expect(
            DeviceID(appID: app, mode: .live, platform: .ios, sequence: 1).rendered == "dev_2eh44w4nmntrhzgm5kqsxkfqk8")
        #expect(
            DeviceID(appID: app, mode: .live, platform: .ios, sequence: 2).rendered == "dev_2twxd9myapyqpyp1svv3en9djq")
        #expect(
            DeviceID(appID: app, mode: .live, platform: .android, sequence: 3).rendered
                == "dev_0ey6cccg224dk3p3rb7bftdq25")
    }

    @Test("consecutive ids do not look consecutive")
    func obfuscated() {
        let first = DeviceID(appID: testApp, mode: .live, platform: .ios, sequence: 1).rendered
        let second = DeviceID(appID: testApp, mode: .live, platform: .ios, sequence: 2).rendered
        let shared = zip(first.utf8, second.utf8).prefix { $0 == $1 }.count
        #expect(shared < 8)
    }

    @Test(
        "rejects strings this server did not mint",
        arguments: [
            "", "dev_", "dev_0000000000000000000000000", "dev_00000000000000000000000000",
            "DEV_1234567890abcdefghjkmnpqrs",
            "dev_zzzzzzzzzzzzzzzzzzzzzzzzzz", "dev_1234567890abcdefghjkmnpqrsu", "dev_123456789Oabcdefghjkmnpqrs",
        ])
    func rejectsForeign(text: String) {
        #expect(DeviceID(rendered: text) == nil)
    }

    @Test("changing any one character of an id makes it unknown")
    func tamperEvident() {
        let text = Array(DeviceID(appID: testApp, mode: .live, platform: .ios, sequence: 42).rendered.utf8)
        for position in 4..<text.count {
            for replacement in Array("0123456789abcdefghjkmnpqrstvwxyz".utf8) where replacement != text[position] {
                var changed = text
                changed[position] = replacement
                #expect(DeviceID(rendered: String(decoding: changed, as: UTF8.self)) == nil)
            }
        }
    }
}

@Suite("Tokens and identifiers")
struct TokenTests {
    static let hex64 = String(repeating: "ab", count: 32)

    @Test(
        "token shapes map to the spec's codes",
        arguments: [
            (hex64, Platform.ios, nil as RegistryRejection?),
            (hex64.uppercased(), .ios, nil),
            (String(repeating: "a", count: 400), .ios, nil),
            (String(repeating: "a", count: 402), .ios, .invalidTokenFormat),
            (String(repeating: "a", count: 62), .ios, .invalidTokenFormat),
            (String(repeating: "a", count: 65), .ios, .invalidTokenFormat),
            (String(repeating: "g", count: 64), .ios, .invalidTokenFormat),
            ("", .ios, .invalidTokenFormat),
            ("ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]", .ios, .unsupportedTokenType),
            ("ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]", .android, .unsupportedTokenType),
            ("ExpoPushToken[xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx]", .android, .unsupportedTokenType),
            (String(repeating: "Ab_-:.9", count: 5), .android, nil),
            (String(repeating: "a", count: 32), .android, nil),
            (String(repeating: "a", count: 31), .android, .invalidTokenFormat),
            (String(repeating: "a", count: 400), .android, nil),
            (String(repeating: "a", count: 401), .android, .invalidTokenFormat),
            (String(repeating: "a", count: 40) + "/", .android, .invalidTokenFormat),
            (String(repeating: "a", count: 40) + " ", .android, .invalidTokenFormat),
            (String(repeating: "é", count: 40), .android, .invalidTokenFormat),
            // A platform/token mismatch: an FCM token is not hex.
            (
                "dXNlcl80Mg:APA91bHun4MxP5egoKMwt2KZFBaFUH-1RYqx" + String(repeating: "x", count: 100), .ios,
                .invalidTokenFormat
            ),
            (hex64, .android, nil),
        ])
    func shapes(text: String, platform: Platform, expected: RegistryRejection?) {
        do throws(RegistryRejection) {
            let token = try PushToken(parsing: text, platform: platform)
            #expect(expected == nil)
            #expect(token.platform == platform)
            if platform == .ios {
                #expect(token.bytes.count == text.utf8.count / 2)
                #expect(token.text == text.lowercased())
            } else {
                #expect(token.text == text)
            }
        } catch {
            #expect(error == expected)
            #expect(error.field == "token")
            #expect(error.httpStatus == 400)
        }
    }

    @Test("APNs hex is case-insensitive: both spellings are one token")
    func caseInsensitive() throws {
        let lower = try PushToken(parsing: Self.hex64, platform: .ios)
        let upper = try PushToken(parsing: Self.hex64.uppercased(), platform: .ios)
        #expect(lower == upper)
        #expect(!lower.description.contains("ab"))
    }

    @Test(
        "a token is the same value however it was made: parsed, from stored bytes, inline (≤ 32 bytes) or not",
        arguments: [32, 33, 64, 100])
    func storageIsInvisible(byteCount: Int) throws {
        let bytes = (0..<byteCount).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
        let hex = bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }
            .joined()
        let stored = try PushToken(validatingBytes: bytes, platform: .ios)
        let parsed = try PushToken(parsing: hex, platform: .ios)
        let inPlace = bytes.withUnsafeBytes { PushToken(unchecked: $0, platform: .ios) }
        for token in [parsed, stored, inPlace] {
            #expect(token.bytes == bytes)
            #expect(token.byteCount == byteCount)
            #expect(token.withBytes { Array($0) } == bytes)
            #expect(token.text == hex)
            #expect(token == parsed && token.hashValue == parsed.hashValue)
        }
        // One byte different, or one byte more: another token.
        var changed = bytes
        changed[byteCount - 1] ^= 1
        #expect(try PushToken(validatingBytes: changed, platform: .ios) != parsed)
        if byteCount < 100 {
            #expect(try PushToken(validatingBytes: bytes + [0], platform: .ios) != parsed)
        }
        // The same bytes on the other platform are another token (as FCM text when they are text).
        let fcmText = Array(String(repeating: "a", count: max(byteCount, 32)).utf8)
        let fcm = try PushToken(validatingBytes: fcmText, platform: .android)
        let apns = try PushToken(validatingBytes: Array(fcmText.prefix(100)), platform: .ios)
        #expect(fcm != apns)
    }

    @Test(
        "external ids are 1 to 256 characters",
        arguments: [(0, false), (1, true), (256, true), (257, false)])
    func externalIDBounds(length: Int, valid: Bool) {
        #expect(((try? ExternalID(String(repeating: "é", count: length))) != nil) == valid)
    }

    @Test("installation ids are 1 to 200 characters", arguments: [(0, false), (1, true), (200, true), (201, false)])
    func installationBounds(length: Int, valid: Bool) {
        #expect(((try? InstallationID(String(repeating: "x", count: length))) != nil) == valid)
    }

    @Test("secret digests compare by value and never print")
    func digests() {
        #expect(digest(1).constantTimeEquals(digest(1)))
        #expect(!digest(1).constantTimeEquals(digest(2)))
        #expect(SecretDigest(bytes: [UInt8](repeating: 0, count: 31)) == nil)
        #expect(SecretDigest(bytes: digest(9).bytes) == digest(9))
        #expect(digest(1).description == "SecretDigest(redacted)")
    }

    @Test("every rejection has a code, a status and, where one field is at fault, the field")
    func rejectionEnvelope() {
        let cases: [(RegistryRejection, String, Int, String?)] = [
            (.missingField("token"), "missing_field", 400, "token"),
            (.invalidPlatform, "invalid_platform", 400, "platform"),
            (.invalidEnvironment, "invalid_environment", 400, "environment"),
            (.invalidTokenFormat, "invalid_token_format", 400, "token"),
            (.unsupportedTokenType, "unsupported_token_type", 400, "token"),
            (.invalidField("external_id"), "invalid_field", 400, "external_id"),
            (.invalidTags, "invalid_tags", 400, "tags"),
            (.tagsTooLarge, "tags_too_large", 400, "tags"),
            (.unknownIdentity, "unknown_identity", 409, "external_id"),
            (.credentialNotFound, "notification_app_not_found", 409, "bundle_id"),
            (.deviceIdentityConflict(field: "device_id"), "device_identity_conflict", 422, "device_id"),
            (.deviceNotFound, "device_not_found", 404, nil),
            (.personNotFound, "person_not_found", 404, nil),
        ]
        for (rejection, code, status, field) in cases {
            #expect(rejection.code == code)
            #expect(rejection.httpStatus == status)
            #expect(rejection.field == field)
            #expect(!rejection.message.isEmpty)
        }
    }

    @Test("limits are consistent with each other")
    func limitRelations() {
        #expect(Limits.maxDevicesPerPersonRange.contains(Limits.maxDevicesPerPersonDefault))
        #expect(AppSettings.defaults.validationError() == nil)
        #expect(Limits.listLimitDefault <= Limits.listLimitMax)
        #expect(Limits.listLimitMax <= Limits.listScanMax)
        #expect(Limits.tagKeyBytesMax < Limits.tagBytesMax)
        #expect(Limits.tagKeysMax <= Int(UInt8.max), "the tag count is encoded in one byte")
        #expect(Limits.apnsTokenHexCharactersMin / 2 <= 32, "every APNs token of minimum length is stored inline")
        #expect(Limits.fcmTokenCharactersMax <= Int(UInt16.max) && Limits.mutationBytesMax <= BlobStore.lengthMax)
        // A device with every field at its maximum, encoded, fits a record (see the codec round trip).
        let fixed = 200
        let worstDevice =
            fixed + Limits.fcmTokenCharactersMax + Limits.bundleIDBytesMax + 4 * Limits.installationIDCharactersMax
            + 4 * Limits.externalIDCharactersMax + Limits.appVersionBytesMax + Limits.timezoneBytesMax
            + Limits.localeBytesMax + Limits.invalidationReasonBytesMax + Limits.tagBytesMax + Limits.tagKeysMax * 6
        #expect(worstDevice <= Limits.mutationBytesMax)
    }

    @Test("a device record is packed into 120 bytes")
    func recordLayout() {
        #expect(MemoryLayout<DeviceRecord>.size == 120)  // 119 bytes of fields, 1 of padding before `version`
        #expect(MemoryLayout<DeviceRecord>.stride == 120)
        #expect(MemoryLayout<BlobRef>.size == 6)
    }
}
