import Glibc
import RoostJSON
import RoostModel
import RoostPlatform

/// The fast path of the write routes whose bodies are flat objects
/// (`POST /v1/devices`, `PATCH /v1/devices/{id}`, `POST /v1/feedback`;
/// issue 25): the body's top-level members found in the request bytes, with
/// no JSON tree, no member array and no `String` for a register body's token
/// (`PushToken(parsingUTF8:)`).
///
/// It takes only bodies it reads exactly as `JSONReader` under
/// `JSONBody.limits` does: one object of at most `membersMax` members whose
/// names are distinct and whose names and strings are printable ASCII with
/// no escape; values are strings, numbers, `true`, `false`, `null`, and for
/// `tags` a flat object of those (again distinct, at most `membersMax`).
/// Anything else — an escape, a byte above 0x7E, an array, deeper nesting,
/// a repeated name, a syntax error — is nil, and the route parses the body
/// the general way, which gives every error its code. For a body it takes,
/// each member's value is the `JSONValue` the reader gives, so the routes'
/// rules over `BodyMembers` (`RegisterBody.parse(members:)`,
/// `DeviceRoutes.patchFields`, `FeedbackRoutes.report`) answer exactly as
/// they do for the tree (`PlainBodyScanTests` compares the two over
/// generated and mutated bodies).
struct PlainBodyScan: RegisterMembers {
    /// Members of the body, and of its `tags` object, the scan takes; a
    /// body with more goes the general way.
    static let membersMax = 32  // the places of `InlineArray<32, Member>` below

    private enum Kind: UInt8 {
        case string, number, `true`, `false`, null, object
    }

    /// One member: its name's bytes, its value's (a string's without its
    /// quotes, an object's with its braces), and the value's kind.
    private struct Member {
        var nameStart: Int32 = 0
        var nameEnd: Int32 = 0
        var valueStart: Int32 = 0
        var valueEnd: Int32 = 0
        var kind: Kind = .null
    }

    private let body: [UInt8]
    /// The top-level members, `count` of them (`membersMax` places).
    private let members: InlineArray<32, Member>
    private let count: Int
    /// Bit `n` is set when a top-level name is `n` bytes long (63: longer):
    /// a name of a length no member has is absent without a look at
    /// `members`. Each look copies the whole table (656 bytes: reading an
    /// `InlineArray` held in a `let` copies it in this compiler). A register
    /// body's members are read through `fieldValues`, without a look.
    private let nameLengths: UInt64
    /// Where the value of each member `RegisterBody.parse` reads is, by
    /// `RegisterField.rawValue` (`packed(_:)`; 0: absent): found once, while
    /// scanning, so that a register body's fields are read without a look-up
    /// by name (each look-up copied `members`).
    private let fieldValues: InlineArray<16, UInt64>

    /// Scans `body`; nil when it is not a body this path takes (see the type).
    init?(_ body: [UInt8]) {
        guard body.count <= JSONBody.limits.maxInputBytes, body.count < Int(Int32.max) else { return nil }
        var members = InlineArray<32, Member>(repeating: Member())
        var count = 0
        var scanner = Scanner()
        let scanned = body.withUnsafeBufferPointer { bytes -> Bool in
            guard let end = scanner.object(bytes, from: 0, topLevel: true, into: &members, count: &count)
            else { return false }
            return Scanner.skipWhitespace(bytes, from: end) == bytes.count
        }
        guard scanned else { return nil }
        var nameLengths: UInt64 = 0
        var fieldValues = InlineArray<16, UInt64>(repeating: 0)
        body.withUnsafeBufferPointer { bytes in
            for index in 0..<count {
                let member = members[index]
                nameLengths |= Self.lengthBit(Int(member.nameEnd - member.nameStart))
                let name = UnsafeBufferPointer(rebasing: bytes[Int(member.nameStart)..<Int(member.nameEnd)])
                if let field = RegisterField.named(name) { fieldValues[field.rawValue] = Self.packed(member) }
            }
        }
        self.body = body
        self.members = members
        self.count = count
        self.nameLengths = nameLengths
        self.fieldValues = fieldValues
    }

    /// A member's value as one word: its start and end (28 bits each: a
    /// body is at most 64 MiB) and its kind + 1 (so that 0 is "absent").
    private static func packed(_ member: Member) -> UInt64 {
        precondition(JSONBody.limits.maxInputBytes < 1 << 28, "body offsets need more than 28 bits")
        return UInt64(member.valueStart) << 36 | UInt64(member.valueEnd) << 8 | UInt64(member.kind.rawValue + 1)
    }

    /// The value of a field found in the scan (`packed(_:)`), nil when absent.
    private func fieldValue(_ field: RegisterField) -> (start: Int, end: Int, kind: Kind)? {
        let packed = fieldValues[field.rawValue]
        guard packed != 0, let kind = Kind(rawValue: UInt8(truncatingIfNeeded: packed & 0xFF) - 1) else { return nil }
        return (Int(packed >> 36), Int((packed >> 8) & 0xFFF_FFFF), kind)
    }

    subscript(field field: RegisterField) -> JSONValue? {
        guard let (start, end, kind) = fieldValue(field) else { return nil }
        return body.withUnsafeBufferPointer { bytes in Self.value(bytes, start, end, kind) }
    }

    /// The bit of `nameLengths` for a name of `length` bytes.
    private static func lengthBit(_ length: Int) -> UInt64 { 1 << UInt64(min(length, 63)) }

    subscript(member name: String) -> JSONValue? {
        // Not a look at `members` here: this function's entry would copy them.
        guard mayHold(name) else { return nil }
        guard let member = member(named: name) else { return nil }
        return body.withUnsafeBufferPointer { bytes in
            Self.value(bytes, Int(member.valueStart), Int(member.valueEnd), member.kind)
        }
    }

    func token(for platform: Platform) throws(APIError) -> PushToken {
        guard let (start, end, kind) = fieldValue(.token) else { return try RegisterBody.token(nil, for: platform) }
        guard kind == .string else { return try RegisterBody.token(self[field: .token], for: platform) }
        let result = body.withUnsafeBufferPointer { bytes in
            Result { () throws(RegistryRejection) -> PushToken in
                try PushToken(parsingUTF8: UnsafeBufferPointer(rebasing: bytes[start..<end]), platform: platform)
            }
        }
        return try RegisterBody.model { () throws(RegistryRejection) in try result.get() }
    }

    /// `RegisterBody.parsePlatform`'s answer, a plain string member compared
    /// in place (`plainText`).
    func platform() throws(APIError) -> Platform {
        switch plainText(of: .platform, is: "ios", or: "android") {
        case .notPlain: try RegisterBody.parsePlatform(self[field: .platform])
        case .first: .ios
        case .second: .android
        case .neither: throw APIError(RegistryRejection.invalidPlatform)
        }
    }

    /// `RegisterBody.parseEnvironment`'s answer, compared in place as `platform()`.
    func environment() throws(APIError) -> APNsEnvironment? {
        switch plainText(of: .environment, is: "production", or: "sandbox") {
        case .notPlain: try RegisterBody.parseEnvironment(self[field: .environment])
        case .first: .production
        case .second: .sandbox
        case .neither: throw APIError(RegistryRejection.invalidEnvironment)
        }
    }

    /// Which of two names a plain string member's bytes are.
    private enum PlainTextMatch {
        /// Absent, or not a string: the general reader answers.
        case notPlain
        case first, second, neither
    }

    /// Compares the string member `field` with `first` and `second` where its
    /// bytes lie (no `String` built): a plain string is printable ASCII
    /// without escapes, so its bytes are its text.
    private func plainText(of field: RegisterField, is first: StaticString, or second: StaticString)
        -> PlainTextMatch
    {
        guard let (start, end, kind) = fieldValue(field), kind == .string else { return .notPlain }
        return body.withUnsafeBufferPointer { bytes in
            let text = UnsafeBufferPointer(rebasing: bytes[start..<end])
            if sameBytes(text, first) { return .first }
            if sameBytes(text, second) { return .second }
            return .neither
        }
    }

    /// Whether a top-level member may be named `name` (no member has its length: no).
    private func mayHold(_ name: String) -> Bool {
        nameLengths & Self.lengthBit(name.utf8.count) != 0
    }

    /// The member named `name`, nil when absent. Not inlined: reading
    /// `members` copies the whole table (656 bytes) at the entry of the
    /// function that reads it, so only this one does, once a look-up, and
    /// only for a name `mayHold` lets through.
    @inline(never)
    private func member(named name: String) -> Member? {
        // The closures capture locals, never `self`: capturing it, or reading
        // `members[index]` inside them, copied the whole struct (656 bytes)
        // per call or per step (`memcpy` in a release build, 2.5 % of a
        // registration's CPU).
        let (body, count) = (body, count)
        var name = name
        return members.span.withUnsafeBufferPointer { places in
            body.withUnsafeBufferPointer { bytes in
                name.withUTF8 { wanted in
                    // A plain loop: a closure here allocates per call in a debug build.
                    for index in 0..<count where Scanner.nameIs(bytes, places[index], wanted) { return places[index] }
                    return nil
                }
            }
        }
    }

    /// The value as `JSONReader` gives it.
    private static func value(_ bytes: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int, _ kind: Kind) -> JSONValue
    {
        func text() -> String { String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self) }
        switch kind {
        case .string: return .string(text())
        case .number: return .number(text())
        case .true: return .bool(true)
        case .false: return .bool(false)
        case .null: return .null
        case .object:
            // Scanned once already (flat, distinct names): read again into the tree's shape.
            var inner = InlineArray<32, Member>(repeating: Member())
            var innerCount = 0
            var scanner = Scanner()
            guard scanner.object(bytes, from: start, topLevel: false, into: &inner, count: &innerCount) == end else {
                preconditionFailure("a tags object scanned twice read differently")
            }
            var members: [(key: String, value: JSONValue)] = []
            members.reserveCapacity(innerCount)
            for index in 0..<innerCount {
                let member = inner[index]
                let name = String(
                    decoding: UnsafeBufferPointer(rebasing: bytes[Int(member.nameStart)..<Int(member.nameEnd)]),
                    as: UTF8.self)
                members.append(
                    (name, value(bytes, Int(member.valueStart), Int(member.valueEnd), member.kind)))
            }
            return .object(members)
        }
    }

    /// The one member that may hold an object.
    private static let tagsName: StaticString = "tags"

    /// The scan itself: every method returns where it stopped, nil when the
    /// input is not one the fast path takes.
    private struct Scanner {
        static func skipWhitespace(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
            var index = start
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x0A, 0x0D, 0x09: index += 1
                default: return index
                }
            }
            return index
        }

        /// An object at `start` (its `{`): its members into `members`.
        /// Nested objects only at the top level, and only as `tags`.
        mutating func object(
            _ bytes: UnsafeBufferPointer<UInt8>, from start: Int, topLevel: Bool,
            into members: inout InlineArray<32, Member>, count: inout Int
        ) -> Int? {
            var index = Self.skipWhitespace(bytes, from: start)
            guard index < bytes.count, bytes[index] == UInt8(ascii: "{") else { return nil }
            index = Self.skipWhitespace(bytes, from: index + 1)
            guard index < bytes.count else { return nil }
            if bytes[index] == UInt8(ascii: "}") { return index + 1 }
            while true {
                guard count < PlainBodyScan.membersMax, index < bytes.count, bytes[index] == UInt8(ascii: "\"")
                else { return nil }
                guard let nameEnd = Self.plainString(bytes, from: index + 1) else { return nil }
                var member = Member()
                member.nameStart = Int32(index + 1)
                member.nameEnd = Int32(nameEnd)
                index = Self.skipWhitespace(bytes, from: nameEnd + 1)
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return nil }
                index = Self.skipWhitespace(bytes, from: index + 1)
                guard index < bytes.count else { return nil }
                switch bytes[index] {
                case UInt8(ascii: "\""):
                    guard let end = Self.plainString(bytes, from: index + 1) else { return nil }
                    (member.kind, member.valueStart, member.valueEnd) = (.string, Int32(index + 1), Int32(end))
                    index = end + 1
                case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                    guard let end = Self.number(bytes, from: index) else { return nil }
                    (member.kind, member.valueStart, member.valueEnd) = (.number, Int32(index), Int32(end))
                    index = end
                case UInt8(ascii: "t"), UInt8(ascii: "f"), UInt8(ascii: "n"):
                    guard let (kind, end) = Self.literal(bytes, from: index) else { return nil }
                    (member.kind, member.valueStart, member.valueEnd) = (kind, Int32(index), Int32(end))
                    index = end
                case UInt8(ascii: "{"):
                    guard topLevel,
                        Self.nameIs(bytes, member, PlainBodyScan.tagsName.bytes)
                    else { return nil }
                    var inner = InlineArray<32, Member>(repeating: Member())
                    var innerCount = 0
                    guard let end = object(bytes, from: index, topLevel: false, into: &inner, count: &innerCount)
                    else { return nil }
                    (member.kind, member.valueStart, member.valueEnd) = (.object, Int32(index), Int32(end))
                    index = end
                default:
                    return nil  // an array, or not JSON
                }
                // A name given twice: the general path refuses it (malformed_json).
                for earlier in 0..<count where Self.sameName(bytes, members[earlier], member) { return nil }
                members[count] = member
                count += 1
                index = Self.skipWhitespace(bytes, from: index)
                guard index < bytes.count else { return nil }
                if bytes[index] == UInt8(ascii: "}") { return index + 1 }
                guard bytes[index] == UInt8(ascii: ",") else { return nil }
                index = Self.skipWhitespace(bytes, from: index + 1)
            }
        }

        /// The end (its closing quote) of a string of printable ASCII with
        /// no escape that starts at `start`, within the string limit.
        /// Eight bytes at a time (`firstByteIndex`): a token is 64 of them.
        static func plainString(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
            let end = firstByteIndex(
                in: bytes, from: start,
                mayStop: { word in
                    wordHasByte(UInt8(ascii: "\""), in: word) || wordHasByte(UInt8(ascii: "\\"), in: word)
                        || wordHasByte(below: 0x20, in: word) || wordHasByte(0x7F, in: word) || wordHasHighByte(word)
                },
                stops: { byte in
                    byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 || byte >= 0x7F
                })
            guard end < bytes.count, bytes[end] == UInt8(ascii: "\"") else { return nil }
            return end - start <= JSONBody.limits.maxStringBytes ? end : nil
        }

        /// The end of a number `JSONReader` takes:
        /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, within the string limit.
        static func number(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
            func isDigit(_ index: Int) -> Bool {
                index < bytes.count && bytes[index] >= UInt8(ascii: "0") && bytes[index] <= UInt8(ascii: "9")
            }
            var index = start
            if bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard isDigit(index) else { return nil }
            if bytes[index] == UInt8(ascii: "0") {
                index += 1
                if isDigit(index) { return nil }
            } else {
                while isDigit(index) { index += 1 }
            }
            if index < bytes.count && bytes[index] == UInt8(ascii: ".") {
                index += 1
                guard isDigit(index) else { return nil }
                while isDigit(index) { index += 1 }
            }
            if index < bytes.count && bytes[index] | 0x20 == UInt8(ascii: "e") {
                index += 1
                if index < bytes.count && (bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-")) {
                    index += 1
                }
                guard isDigit(index) else { return nil }
                while isDigit(index) { index += 1 }
            }
            return index - start <= JSONBody.limits.maxStringBytes ? index : nil
        }

        /// `true`, `false` or `null` at `start`, and where it ends.
        static func literal(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> (Kind, Int)? {
            func matches(_ text: StaticString) -> Bool {
                bytes.count - start >= text.utf8CodeUnitCount
                    && memcmp(bytes.baseAddress! + start, text.utf8Start, text.utf8CodeUnitCount) == 0
            }
            if matches("true") { return (.true, start + 4) }
            if matches("false") { return (.false, start + 5) }
            if matches("null") { return (.null, start + 4) }
            return nil
        }

        /// Whether `member`'s name is the bytes `name` (RFC 7493: bytes, not canonical equivalence).
        static func nameIs(_ bytes: UnsafeBufferPointer<UInt8>, _ member: Member, _ name: UnsafeBufferPointer<UInt8>)
            -> Bool
        {
            let length = Int(member.nameEnd - member.nameStart)
            return length == name.count
                && (length == 0 || memcmp(bytes.baseAddress! + Int(member.nameStart), name.baseAddress!, length) == 0)
        }

        static func sameName(_ bytes: UnsafeBufferPointer<UInt8>, _ a: Member, _ b: Member) -> Bool {
            nameIs(bytes, a, UnsafeBufferPointer(rebasing: bytes[Int(b.nameStart)..<Int(b.nameEnd)]))
        }
    }
}
