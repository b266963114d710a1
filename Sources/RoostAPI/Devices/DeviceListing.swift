import RoostHTTP
import RoostJSON
import RoostModel

extension DeviceRoutes {
    /// `GET /v1/devices?external_id=&platform=&tag.KEY=VALUE&state=&last_seen_before=&last_seen_after=&limit=&cursor=`
    /// (`devices:read`): a page in creation order with devices and their tokens.
    /// The `last_seen_*` bounds are exclusive (spec §8).
    func list(_ context: RequestContext) throws(APIError) -> RouteOutcome {
        let scope = try context.scope(catalog)
        let query = try DeviceListing.query(context.request.head.query)
        return scope.command(.listDevices(query)) { outcome in
            guard case .devicePage(let page) = outcome else { return DeviceRoutes.unexpectedOrRejected(outcome) }
            return DeviceListing.render(page)
        }
    }
}

/// The list route's query grammar and its answer.
enum DeviceListing {
    /// The most query parameters a list request may carry (each filter once,
    /// plus tag filters up to the tag key limit).
    static let parametersMax = 10 + Limits.tagKeysMax

    /// Parses the query string into filters. Names and values are
    /// percent-decoded (`+` is a space, as in HTML forms). Unknown names, empty
    /// or malformed values answer 400 `invalid_field` naming the parameter
    /// (`invalid_platform` for `platform`), so that a typo never lists everything.
    static func query(_ text: Substring?) throws(APIError) -> DeviceQuery {
        var query = DeviceQuery()
        let pairs = try QueryString.parse(text, parametersMax: parametersMax)
        for (name, value) in pairs {
            switch name {
            case "external_id":
                do throws(RegistryRejection) {
                    query.externalID = try ExternalID(value)
                } catch {
                    throw APIError(error)
                }
            case "platform":
                guard let platform = Platform(name: value) else { throw APIError(RegistryRejection.invalidPlatform) }
                query.platform = platform
            case "state":
                switch value {
                case "active": query.state = .active
                case "invalidated": query.state = .invalidated
                case "all": query.state = .all
                default: throw APIError.invalidField("state", "state must be active, invalidated or all")
                }
            case "last_seen_before", "last_seen_after":
                guard let time = Timestamp(rfc3339: value) else {
                    throw APIError.invalidField(name, "\(name) must be an RFC 3339 timestamp")
                }
                if name == "last_seen_before" { query.lastSeenBefore = time } else { query.lastSeenAfter = time }
            case "limit":
                guard let limit = QueryString.smallDecimal(value), (1...Limits.listLimitMax).contains(limit)
                else {
                    throw APIError.invalidField("limit", "limit must be an integer from 1 to \(Limits.listLimitMax)")
                }
                query.limit = limit
            case "cursor":
                guard let cursor = DeviceCursor(encoded: value) else {
                    throw APIError.invalidField("cursor", "cursor is not one this server returned")
                }
                query.cursor = cursor
            default:
                guard name.hasPrefix("tag."), name.utf8.count > 4 else {
                    throw APIError.invalidField(String(name.prefix(64)), "unknown query parameter")
                }
                let key = TagKey(String(name.dropFirst(4)))
                guard key.rawValue.utf8.count <= Limits.tagKeyBytesMax else {
                    throw APIError.invalidField(String(name.prefix(64)), "a tag key is at most 128 bytes")
                }
                query.tags[key] = value
            }
        }
        return query
    }

    /// `{"devices":[device with token…],"next_cursor":"…"|null}`. The buffer
    /// is sized for the page's tags up front: a page of large devices (up to
    /// ~4.5 MB) is then written without growing it three or four times
    /// (each growth a copy and fresh pages), which is most of what one round
    /// spends beyond its budget (`LoopRequests.renderingPerRoundMax`).
    /// O(devices × tags) for the estimate.
    static func render(_ page: DevicePage) -> HTTPResponse {
        var estimate = 64
        for device in page.devices { estimate += DeviceJSON.estimatedBytes(device) }
        var writer = JSONWriter(reservingCapacity: estimate)
        writer.beginObject()
        writer.key("devices")
        writer.beginArray()
        for device in page.devices { DeviceJSON.write(device, includeToken: true, into: &writer) }
        writer.endArray()
        writer.member("next_cursor", page.nextCursor?.encoded)
        writer.endObject()
        return jsonResponse(200, writer)
    }
}

/// A URL query string as name/value pairs.
enum QueryString {
    /// The value of at most 5 ASCII digits (a `limit`, a number of days or
    /// milliseconds), else nil.
    static func smallDecimal(_ text: String) -> Int? {
        guard text.utf8.count <= 5, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
        return Int(text)
    }

    /// Splits `a=1&b=2` into decoded pairs, in order: the one query grammar of
    /// every route that reads a query string. An empty value (`a=` or `a`), a
    /// malformed escape or invalid UTF-8 is 400 `invalid_field` naming the
    /// parameter; more than `parametersMax` pairs is 400 `invalid_field`
    /// `query`. With `emptyValuesAllowed` (a dialect whose vendor reads `a=`
    /// as empty text) an empty value is kept as `""`.
    ///
    /// A name given twice is 400 `invalid_field` naming it, "NAME given
    /// twice": were the last one to win, a proxy or a log reading the first
    /// value would see another request than Roost answers (the query-string
    /// form of spec §12's duplicate-member rule). Names are compared after
    /// decoding (`%6Cimit` is `limit`), as Unicode scalars: `tag.caf%C3%A9`
    /// and `tag.cafe%CC%81` are two names, as they are two tag keys
    /// (docs/json.md "Names"). O(pairs²) byte comparisons, pairs being at
    /// most `parametersMax`; no allocation beyond the pairs.
    static func parse(
        _ text: Substring?, parametersMax: Int, emptyValuesAllowed: Bool = false
    ) throws(APIError) -> [(name: String, value: String)] {
        guard let text, !text.isEmpty else { return [] }
        var pairs: [(name: String, value: String)] = []
        for piece in text.utf8.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let equals = piece.firstIndex(of: UInt8(ascii: "="))
            let rawName = equals.map { piece[..<$0] } ?? piece
            guard let name = decode(rawName) else { throw APIError.invalidField("query", "malformed query string") }
            // A repeat is named before the count is checked: `a=1&b=2&a=3` on
            // a route taking two is "a given twice", not "too many".
            guard !pairs.contains(where: { $0.name.utf8.elementsEqual(name.utf8) }) else {
                throw APIError.invalidField(String(name.prefix(64)), "\(name.prefix(64)) given twice")
            }
            guard pairs.count < parametersMax else {
                throw APIError.invalidField("query", "at most \(parametersMax) query parameters")
            }
            let rawValue = equals.map { piece[piece.index(after: $0)...] } ?? piece[piece.endIndex...]
            guard let value = decode(rawValue), emptyValuesAllowed || !value.isEmpty else {
                throw APIError.invalidField(String(name.prefix(64)), "\(name.prefix(64)) needs a value")
            }
            pairs.append((name, value))
        }
        return pairs
    }

    /// Returns `%XX`-decoded text with `+` as a space, or nil.
    static func decode(_ bytes: some Collection<UInt8>) -> String? {
        Array(bytes).withUnsafeBufferPointer { percentDecoded($0, plusAsSpace: true) }
    }
}
