import Testing

@testable import RoostModel

/// Issue 24 B1 in the model: names and values that differ only by Unicode
/// normalization are different (RFC 7493 compares code points), in tags,
/// their encoding, the tag-set interning, the string interner and the
/// identifiers; and tags without such pairs keep the bytes they were always
/// encoded with (stored snapshots and logs read back unchanged).
@Suite("Model: NFC and NFD spellings are different names and values")
struct NormalizationTests {
    static let nfc = "caf\u{E9}"
    static let nfd = "cafe\u{301}"
    static let now = Timestamp(millisecondsSinceEpoch: 1_800_000_000_000)

    @Test("tags hold an NFC key and its NFD form as two keys, through a merge, the encoding and both decoders")
    func tagsKeepBoth() throws {
        var tags = try Tags([TagKey(Self.nfc): .string("1")])
        try tags.merge([TagKey(Self.nfd): .string("2")])
        #expect(tags.count == 2)
        #expect(tags[TagKey(Self.nfc)] == .string("1"))
        #expect(tags[TagKey(Self.nfd)] == .string("2"))
        var writer = LittleEndianWriter()
        tags.encode(into: &writer)
        let decoded = MutationCodecTests.decodeBothWays(writer.bytes)
        #expect(try decoded.fast.get().encoded == tags.encoded)
        #expect(try decoded.map.get().encoded == tags.encoded)
        // The same map built in the other order has the same bytes (one interned set).
        var reversed = try Tags([TagKey(Self.nfd): .string("2")])
        try reversed.merge([TagKey(Self.nfc): .string("1")])
        #expect(reversed.encoded == tags.encoded)
        // Deleting one spelling leaves the other.
        try tags.merge([TagKey(Self.nfd): nil])
        #expect(tags.values == [TagKey(Self.nfc): .string("1")])
    }

    @Test("a tag value's NFC and NFD spellings are different values; a filter matches only its own spelling")
    func tagValues() throws {
        #expect(TagValue.string(Self.nfc) != .string(Self.nfd))
        #expect(try Tags(["k": .string(Self.nfc)]) != Tags(["k": .string(Self.nfd)]))
        #expect(TagValue.string(Self.nfc).matches(filterText: Self.nfc))
        #expect(!TagValue.string(Self.nfc).matches(filterText: Self.nfd))
        #expect(TagKey(Self.nfc) != TagKey(Self.nfd))
        #expect(Set([TagKey(Self.nfc), TagKey(Self.nfd), TagKey(Self.nfc)]).count == 2)
    }

    /// Older builds sorted keys with Swift's `<`; for NFC keys (all ASCII
    /// keys, and what most clients send) that is the code-point order, so
    /// stored tags keep their bytes.
    @Test(
        "tags encode keys in code-point order, which for NFC keys is Swift's order, as stored tags always were",
        arguments: [
            ["b", "a", "\u{E9}", "z", "Z", "\u{E9}x", "\u{C5}", "\u{C5}b", "\u{1F642}", "\u{FFFD}", "\u{E4}b"],
            ["plan", "score", "a", "B", "zz", "_", "~", "0"],
        ])
    func nfcOrderUnchanged(_ keys: [String]) throws {
        var values: [TagKey: TagValue] = [:]
        for key in keys { values[TagKey(key)] = .bool(true) }
        let order = try Tags(values).sortedEntries.map { Array($0.key.rawValue.utf8) }
        #expect(order == keys.sorted(by: <).map { Array($0.utf8) })
    }

    /// Swift's `<` finds `"e\u{301}"` neither before nor after `"\u{E9}b"`
    /// (nor `"\u{212B}"` and `"\u{C5}b"`), so a sort by it followed the
    /// dictionary's per-process order; the code-point order gives one encoding.
    @Test("one encoding for a map whatever order it was built in, NFD keys included")
    func oneEncoding() throws {
        let keys = ["e\u{301}", "\u{E9}b", "\u{212B}", "\u{C5}b", Self.nfc, Self.nfd, "A\u{30A}", "a"]
        var random = SplitMix64(seed: 0xB1)
        var encodings: Set<[UInt8]> = []
        for _ in 0..<50 {
            var tags = Tags()
            var shuffled = keys
            for index in shuffled.indices.reversed() where index > 0 {
                shuffled.swapAt(index, Int(random.next() % UInt64(index + 1)))
            }
            for key in shuffled { try tags.merge([TagKey(key): .string(key)]) }
            encodings.insert(tags.encoded)
        }
        #expect(encodings.count == 1, "seed \(random.seed)")
        let order = try Tags(Dictionary(uniqueKeysWithValues: keys.map { (TagKey($0), TagValue.bool(true)) }))
            .sortedEntries.map { Array($0.key.rawValue.utf8) }
        #expect(order == keys.map { Array($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) })
    }

    @Test("the string interner gives an NFC string and its NFD form two ids")
    func interner() {
        var strings = StringInterner()
        let nfc = strings.retain(Self.nfc)
        let nfd = strings.retain(Self.nfd)
        #expect(nfc != nfd)
        #expect(strings.string(nfd).map { Array($0.utf8) } == Array(Self.nfd.utf8))
        #expect(strings.retain(Self.nfc) == nfc)
        #expect(strings.id(of: Self.nfd) == nfd)
    }

    @Test("the interner against a model over 20,000 random retains and releases of texts that share recent slots")
    func internerMatchesAModel() {
        // Same lengths and same first and last bytes (one recent slot), NFC
        // and NFD spellings, and a few others.
        let texts = [
            "Europe/Berlin", "Europe/Bxrlin", "Europe/Paris", "en-US", "en-GB", "e\u{301}n", "\u{e9}n", "2.4.0",
            "2.5.0", "2.4.1", "x", "y", "Asia/Tokyo",
        ]
        var random = SplitMix64(seed: 20_261_207)
        var strings = StringInterner()
        var uses: [[UInt8]: (id: UInt32, count: UInt32)] = [:]
        for step in 0..<20_000 {
            let text = texts[Int(random.next() % UInt64(texts.count))]
            let bytes = Array(text.utf8)
            if let held = uses[bytes], random.next() % 2 == 0 {
                strings.release(held.id)
                uses[bytes] = held.count == 1 ? nil : (held.id, held.count - 1)
                if held.count == 1 { #expect(strings.id(of: text) == nil, "step \(step): \(text) still live") }
            } else {
                let id = strings.retain(text)
                #expect(strings.string(id).map { Array($0.utf8) } == bytes, "step \(step): \(text) got another's id")
                if let held = uses[bytes] { #expect(id == held.id, "step \(step): \(text) got a second id") }
                uses[bytes] = (id, (uses[bytes]?.count ?? 0) + 1)
            }
            for (bytes, held) in uses {
                #expect(strings.referenceCount(held.id) == held.count, "step \(step): \(bytes)")
            }
        }
        #expect(strings.count == uses.count)
        #expect(Set(uses.values.map(\.id)).count == uses.count, "two live texts share an id")
    }

    @Test("external ids and installation ids spelled NFC and NFD are different ids, ordered consistently")
    func identifiers() throws {
        let nfc = try ExternalID(Self.nfc)
        let nfd = try ExternalID(Self.nfd)
        #expect(nfc != nfd)
        #expect(Set([nfc, nfd]).count == 2)
        #expect((nfc < nfd) != (nfd < nfc))
        #expect(try InstallationID(Self.nfc) != InstallationID(Self.nfd))
    }

    @Test("an index keeps both tags, both app versions and both people, and replays them through the codec")
    func indexAndReplay() throws {
        var harness = Harness()
        let one = try harness.mustRegister(
            request(apnsToken(1)) {
                $0.tags = .merge([TagKey(Self.nfc): .string("1"), TagKey(Self.nfd): .string("2")])
                $0.appVersion = .set(Self.nfc)
                $0.externalID = .set(person(Self.nfc))
            })
        let two = try harness.mustRegister(
            request(apnsToken(2)) {
                $0.appVersion = .set(Self.nfd)
                $0.externalID = .set(person(Self.nfd))
            })
        let patched = harness.index.patchDevice(
            one.device.id, tags: .merge([TagKey(Self.nfd): .string("3")]), optedIn: nil, at: harness.now)
        harness.record(try #require(patched.value?.mutations))
        try harness.verify()

        var replayed = AppIndex(appID: testApp, mode: .live)
        for mutation in harness.log { try replayed.apply(try MutationCodec.decode(MutationCodec.encode(mutation))) }
        for candidate in [harness.index, replayed] {
            let device = try #require(candidate.device(one.device.id))
            #expect(device.tags.values == [TagKey(Self.nfc): .string("1"), TagKey(Self.nfd): .string("3")])
            #expect(device.appVersion.map { Array($0.utf8) } == Array(Self.nfc.utf8))
            let other = try #require(candidate.device(two.device.id))
            #expect(other.appVersion.map { Array($0.utf8) } == Array(Self.nfd.utf8))
            #expect(other.externalID?.rawValue.utf8.elementsEqual(Self.nfd.utf8) == true)
            let query = DeviceQuery(tags: [TagKey(Self.nfd): "3"])
            #expect(try candidate.listDevices(query).get().devices.map(\.id) == [one.device.id])
            #expect(try candidate.listDevices(DeviceQuery(tags: [TagKey(Self.nfc): "3"])).get().devices.isEmpty)
        }
    }
}
