import RoostJSON

/// One call to etcd's JSON gateway: the route and its JSON body.
package struct EtcdGatewayCall: Hashable, Sendable {
    /// The route, e.g. `/v3/kv/txn`.
    package var path: String
    package var body: [UInt8]

    package init(path: String, body: [UInt8]) {
        self.path = path
        self.body = body
    }
}

/// One message of a watch stream, as the client reads it.
package enum EtcdWatchMessage: Hashable, Sendable {
    /// The watch is set up (the first message of a stream).
    case created
    /// Changes, in revision order; `revision` is the store's revision when sent.
    case events([EtcdEvent], revision: EtcdRevision)
    /// The start revision was compacted away: the oldest revision kept.
    case compacted(compactRevision: EtcdRevision)
    /// etcd cancelled the watch for another reason (its `cancel_reason`).
    case cancelled(reason: String)
}

/// The mapping between `EtcdRequest`s and etcd 3.4's gRPC-gateway JSON
/// (docs/decisions/0078-etcd-json-gateway-client.md). Pure: no I/O, so the
/// unit tests check it byte for byte. What 3.4.23 does, checked against the
/// real server by `EtcdClientSystemTests`:
///
/// - keys and values are base64 (`bytes` fields), 64-bit integers are JSON
///   strings (`"revision":"5"`);
/// - proto3 leaves out every field at its zero value: a failed transaction
///   has no `succeeded`, an empty read no `kvs`, a put event no `type`, a
///   deleted key no `create_revision`, `version` or `value`;
/// - a keep-alive answers 200 with a one-message chunked stream
///   (`{"result":{…}}`); for a lease that is gone it has no `TTL`;
/// - errors answer 4xx/5xx with `{"error":…,"message":…,"code":N}` (gRPC
///   code), chunked, with a trailer; etcd's messages are stable strings.
package enum EtcdGatewayJSON {
    /// The gateway's routes (etcd 3.4 serves `/v3/`; 3.3 and older do not).
    package enum Route {
        package static let transaction = "/v3/kv/txn"
        package static let range = "/v3/kv/range"
        package static let compaction = "/v3/kv/compaction"
        package static let grantLease = "/v3/lease/grant"
        package static let keepAlive = "/v3/lease/keepalive"
        package static let revokeLease = "/v3/lease/revoke"
        package static let status = "/v3/maintenance/status"
        package static let watch = "/v3/watch"
    }

    /// The bounds on what the client parses from etcd: an answer may hold a
    /// whole range of values, each up to etcd's request limit in base64.
    package static func jsonLimits(answerBytesMax: Int) -> JSONLimits {
        JSONLimits(maxDepth: 16, maxInputBytes: answerBytesMax, maxStringBytes: answerBytesMax)
    }

    // MARK: - Requests

    /// Returns the route and body for `request`.
    package static func call(for request: EtcdRequest) -> EtcdGatewayCall {
        var writer = JSONWriter()
        writer.beginObject()
        let path: String
        switch request {
        case .transaction(let compares, let success, let failure):
            path = Route.transaction
            writer.key("compare")
            writer.beginArray()
            for compare in compares { write(compare, into: &writer) }
            writer.endArray()
            for (name, operations) in [("success", success), ("failure", failure)] {
                writer.key(name)
                writer.beginArray()
                for operation in operations { write(operation, into: &writer) }
                writer.endArray()
            }
        case .grantLease(let ttlSeconds):
            precondition(ttlSeconds > 0, "a lease TTL is positive, got \(ttlSeconds)")
            path = Route.grantLease
            writer.member("TTL", String(ttlSeconds))
        case .keepAlive(let lease):
            path = Route.keepAlive
            writer.member("ID", String(lease.rawValue))
        case .revokeLease(let lease):
            path = Route.revokeLease
            writer.member("ID", String(lease.rawValue))
        case .compact(let revision):
            path = Route.compaction
            writer.member("revision", String(revision.rawValue))
        }
        writer.endObject()
        return EtcdGatewayCall(path: path, body: writer.bytes)
    }

    /// Returns the call for a plain range read: at most `limit` keys (0: all)
    /// at `revision` (nil: the newest).
    package static func rangeCall(_ range: EtcdKeyRange, limit: Int, revision: EtcdRevision?) -> EtcdGatewayCall {
        precondition(limit >= 0, "a range limit is not negative, got \(limit)")
        var writer = JSONWriter()
        writer.beginObject()
        write(range, into: &writer)
        if limit > 0 { writer.member("limit", String(limit)) }
        if let revision { writer.member("revision", String(revision.rawValue)) }
        writer.endObject()
        return EtcdGatewayCall(path: Route.range, body: writer.bytes)
    }

    /// The call for a member's status.
    package static let statusCall = EtcdGatewayCall(path: Route.status, body: Array("{}".utf8))

    /// Returns the call that opens a watch of `range` from `start` (its
    /// events at and after that revision; nil: from now).
    package static func watchCall(_ range: EtcdKeyRange, from start: EtcdRevision?) -> EtcdGatewayCall {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("create_request")
        writer.beginObject()
        write(range, into: &writer)
        if let start { writer.member("start_revision", String(start.rawValue)) }
        writer.endObject()
        writer.endObject()
        return EtcdGatewayCall(path: Route.watch, body: writer.bytes)
    }

    /// Returns the smallest key after every key that starts with `prefix`
    /// (its last byte below 0xFF raised by one, 0xFF bytes dropped first), or
    /// `[0]` — etcd's "no upper bound" — when there is none (empty or all 0xFF).
    package static func rangeEnd(forPrefix prefix: [UInt8]) -> [UInt8] {
        var end = prefix
        while let last = end.last {
            if last < 0xFF {
                end[end.count - 1] = last + 1
                return end
            }
            end.removeLast()
        }
        return [0]
    }

    private static func write(_ range: EtcdKeyRange, into writer: inout JSONWriter) {
        switch range {
        case .key(let key):
            writer.member("key", Base64.encode(key))
        case .prefix(let prefix):
            // An empty prefix is every key: from "\0" with no upper bound.
            writer.member("key", Base64.encode(prefix.isEmpty ? [0] : prefix))
            writer.member("range_end", Base64.encode(rangeEnd(forPrefix: prefix)))
        case .span(let from, let to):
            precondition(!from.isEmpty && from.lexicographicallyPrecedes(to), "an empty or reversed span")
            writer.member("key", Base64.encode(from))
            writer.member("range_end", Base64.encode(to))
        }
    }

    private static func write(_ compare: EtcdCompare, into writer: inout JSONWriter) {
        writer.beginObject()
        writer.member("key", Base64.encode(compare.key))
        let result: String
        switch compare.relation {
        case .equal: result = "EQUAL"
        case .notEqual: result = "NOT_EQUAL"
        case .less: result = "LESS"
        case .greater: result = "GREATER"
        }
        writer.member("result", result)
        switch compare.target {
        case .createRevision(let revision):
            writer.member("target", "CREATE")
            writer.member("create_revision", String(revision.rawValue))
        case .modRevision(let revision):
            writer.member("target", "MOD")
            writer.member("mod_revision", String(revision.rawValue))
        case .version(let version):
            writer.member("target", "VERSION")
            writer.member("version", String(version))
        case .value(let value):
            writer.member("target", "VALUE")
            writer.member("value", Base64.encode(value))
        }
        writer.endObject()
    }

    private static func write(_ operation: EtcdOperation, into writer: inout JSONWriter) {
        writer.beginObject()
        switch operation {
        case .put(let key, let value, let lease):
            writer.key("request_put")
            writer.beginObject()
            writer.member("key", Base64.encode(key))
            writer.member("value", Base64.encode(value))
            if let lease { writer.member("lease", String(lease.rawValue)) }
            writer.endObject()
        case .delete(let range):
            writer.key("request_delete_range")
            writer.beginObject()
            write(range, into: &writer)
            writer.endObject()
        case .range(let range, let limit):
            precondition(limit >= 0, "a range limit is not negative, got \(limit)")
            writer.key("request_range")
            writer.beginObject()
            write(range, into: &writer)
            if limit > 0 { writer.member("limit", String(limit)) }
            writer.endObject()
        case .rangeLast(let range):
            writer.key("request_range")
            writer.beginObject()
            write(range, into: &writer)
            // etcd's RangeRequest: sort_order DESCEND, sort_target KEY.
            writer.member("limit", "1")
            writer.member("sort_order", "DESCEND")
            writer.member("sort_target", "KEY")
            writer.endObject()
        }
        writer.endObject()
    }

    // MARK: - Answers

    /// Returns what etcd's answer (`status`, `body`) to `request` means, or
    /// throws the failure it reports (an error status, or a keep-alive for a
    /// lease that is gone) or a malformed answer.
    package static func response(
        to request: EtcdRequest, status: Int, body: [UInt8], answerBytesMax: Int
    ) throws(EtcdClientError) -> EtcdResponse {
        var compactedBound: EtcdRevision?
        if case .compact(let revision) = request { compactedBound = revision }
        let root = try document(status: status, body: body, answerBytesMax: answerBytesMax, compacted: compactedBound)
        switch request {
        case .transaction(_, let success, let failure):
            let revision = try headerRevision(root)
            let succeeded = try bool(root["succeeded"], "succeeded")
            let branch = succeeded ? success : failure
            let responses = try array(root["responses"], "responses")
            guard responses.count == branch.count else {
                throw .malformed("\(responses.count) responses for \(branch.count) operations")
            }
            var results: [EtcdOperationResult] = []
            for (operation, answer) in zip(branch, responses) { results.append(try result(of: operation, answer)) }
            return .transaction(succeeded: succeeded, revision: revision, results: results)
        case .grantLease:
            if let error = root["error"]?.stringValue, !error.isEmpty {
                throw EtcdClientError(.unavailable, .etcd(status: status, code: nil, message: error))
            }
            let id = try int64(root["ID"], "ID")
            guard id > 0 else { throw .malformed("lease id \(id)") }
            return .lease(EtcdLeaseID(id), ttlSeconds: try int64(root["TTL"], "TTL"))
        case .keepAlive(let lease):
            guard let result = root["result"] else { throw .malformed("keep-alive answer without result") }
            let ttl = try int64(result["TTL"], "TTL")
            // etcd 3.4: a lease that is gone answers 200 with no TTL (0), not an error.
            guard ttl > 0 else { throw EtcdClientError(.leaseNotFound, .leaseLost) }
            let id = try int64(result["ID"], "ID")
            guard id == lease.rawValue else { throw .malformed("keep-alive answered for lease \(id)") }
            return .keptAlive(lease, ttlSeconds: ttl)
        case .revokeLease:
            return .revoked(revision: try headerRevision(root))
        case .compact(let revision):
            _ = try headerRevision(root)
            return .compacted(revision)
        }
    }

    /// Returns the answer to a plain range read.
    package static func rangeResult(status: Int, body: [UInt8], asked revision: EtcdRevision?, answerBytesMax: Int)
        throws(EtcdClientError) -> EtcdRangeResult
    {
        let root = try document(status: status, body: body, answerBytesMax: answerBytesMax, compacted: revision)
        return EtcdRangeResult(
            revision: try headerRevision(root), keyValues: try keyValues(root["kvs"]),
            more: try bool(root["more"], "more"), count: try int64(root["count"], "count"))
    }

    /// Returns a member's status.
    package static func status(status: Int, body: [UInt8], answerBytesMax: Int) throws(EtcdClientError)
        -> EtcdStatus
    {
        let root = try document(status: status, body: body, answerBytesMax: answerBytesMax, compacted: nil)
        guard let header = root["header"] else { throw .malformed("answer without header") }
        let member = try uint64(header["member_id"], "member_id")
        guard member != 0 else { throw .malformed("status without member_id") }
        let leader = try uint64(root["leader"], "leader")
        var errors: [String] = []
        for error in try array(root["errors"], "errors") {
            guard let text = error.stringValue else { throw .malformed("errors holds a non-string") }
            errors.append(text)
        }
        return EtcdStatus(
            member: EtcdMemberID(member), leader: leader == 0 ? nil : EtcdMemberID(leader),
            version: root["version"]?.stringValue ?? "", databaseBytes: try int64(root["dbSize"], "dbSize"),
            databaseBytesInUse: try int64(root["dbSizeInUse"], "dbSizeInUse"),
            raftIndex: try uint64(root["raftIndex"], "raftIndex"),
            raftAppliedIndex: try uint64(root["raftAppliedIndex"], "raftAppliedIndex"),
            raftTerm: try uint64(root["raftTerm"], "raftTerm"), revision: try headerRevision(root), errors: errors)
    }

    /// Returns one message of a watch stream (one line of its body, without the newline).
    package static func watchMessage(_ line: [UInt8], answerBytesMax: Int) throws(EtcdClientError)
        -> EtcdWatchMessage
    {
        let root = try parse(line, answerBytesMax: answerBytesMax)
        if let error = root["error"] {
            // A stream's error: {"error":{"grpc_code":N,"http_code":N,"message":…}}.
            let message = error["message"]?.stringValue ?? ""
            let status = error["http_code"]?.intValue ?? 500
            throw EtcdClientError(
                failure(status: status, message: message, compacted: nil),
                .etcd(status: status, code: error["grpc_code"]?.intValue, message: message))
        }
        guard let result = root["result"] else { throw .malformed("watch message without result") }
        let compactRevision = try int64(result["compact_revision"], "compact_revision")
        if compactRevision > 0 { return .compacted(compactRevision: EtcdRevision(compactRevision)) }
        if try bool(result["canceled"], "canceled") {
            return .cancelled(reason: result["cancel_reason"]?.stringValue ?? "")
        }
        if try bool(result["created"], "created") { return .created }
        var events: [EtcdEvent] = []
        for event in try array(result["events"], "events") {
            let kind: EtcdEvent.Kind
            switch event["type"]?.stringValue {
            case nil, "PUT": kind = .put
            case "DELETE": kind = .delete
            case .some(let other): throw .malformed("event type \(other)")
            }
            guard let keyValue = event["kv"] else { throw .malformed("event without kv") }
            events.append(EtcdEvent(kind: kind, keyValue: try self.keyValue(keyValue)))
        }
        return .events(events, revision: try headerRevision(result))
    }

    /// Returns the failure etcd's error answer means. etcd's messages are
    /// stable strings (rpctypes); anything else is `.unavailable`: the
    /// outcome is unknown. `compacted`: the revision asked for, a lower bound
    /// of the compact revision (etcd's error does not name it).
    package static func failure(status: Int, message: String, compacted: EtcdRevision?) -> EtcdFailure {
        if message.contains("request is too large") || message.contains("received message larger than max") {
            return .requestTooLarge
        }
        if message.contains("requested lease not found") { return .leaseNotFound }
        if message.contains("required revision has been compacted") {
            return .compacted(compactRevision: compacted ?? EtcdRevision(0))
        }
        if message.contains("required revision is a future revision") { return .futureRevision }
        return .unavailable
    }

    /// Returns the error an answer with a non-2xx `status` reports: etcd's
    /// `{"error":…,"message":…,"code":N}`, or (from something else on the
    /// path, such as a proxy) the start of the body as the message.
    package static func errorAnswer(status: Int, body: [UInt8], answerBytesMax: Int, compacted: EtcdRevision?)
        -> EtcdClientError
    {
        let parsed = try? JSONReader.parse(body, limits: jsonLimits(answerBytesMax: answerBytesMax))
        let message =
            parsed?["message"]?.stringValue ?? parsed?["error"]?.stringValue
            ?? String(decoding: body.prefix(200), as: UTF8.self)
        return EtcdClientError(
            failure(status: status, message: message, compacted: compacted),
            .etcd(status: status, code: parsed?["code"]?.intValue, message: message))
    }

    // MARK: - Pieces

    /// Parses a 2xx answer's body, or throws the failure an error answer reports.
    private static func document(status: Int, body: [UInt8], answerBytesMax: Int, compacted: EtcdRevision?)
        throws(EtcdClientError) -> JSONValue
    {
        guard (200..<300).contains(status) else {
            throw errorAnswer(status: status, body: body, answerBytesMax: answerBytesMax, compacted: compacted)
        }
        // A streaming route (keep-alive) sends one message per line.
        let firstLine = body.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true).first ?? []
        return try parse(Array(firstLine), answerBytesMax: answerBytesMax)
    }

    private static func parse(_ bytes: [UInt8], answerBytesMax: Int) throws(EtcdClientError) -> JSONValue {
        let root: JSONValue
        do {
            root = try JSONReader.parse(bytes, limits: jsonLimits(answerBytesMax: answerBytesMax))
        } catch {
            throw .malformed("not JSON: \(error)")
        }
        guard root.objectMembers != nil else { throw .malformed("not a JSON object") }
        return root
    }

    private static func result(of operation: EtcdOperation, _ answer: JSONValue) throws(EtcdClientError)
        -> EtcdOperationResult
    {
        switch operation {
        case .put:
            guard answer["response_put"] != nil else { throw .malformed("no response_put for a put") }
            return .put
        case .delete:
            guard let deleted = answer["response_delete_range"] else {
                throw .malformed("no response_delete_range for a delete")
            }
            let count = try int64(deleted["deleted"], "deleted")
            guard let exact = Int(exactly: count), exact >= 0 else { throw .malformed("deleted \(count)") }
            return .deleted(count: exact)
        case .range, .rangeLast:
            guard let range = answer["response_range"] else { throw .malformed("no response_range for a range") }
            return .range(try keyValues(range["kvs"]))
        }
    }

    private static func keyValues(_ value: JSONValue?) throws(EtcdClientError) -> [EtcdKeyValue] {
        var result: [EtcdKeyValue] = []
        for element in try array(value, "kvs") { result.append(try keyValue(element)) }
        return result
    }

    /// Returns one key-value; only `key` must be present (etcd keys are never empty).
    package static func keyValue(_ value: JSONValue) throws(EtcdClientError) -> EtcdKeyValue {
        guard value.objectMembers != nil else { throw .malformed("kv is not an object") }
        guard let keyField = value["key"] else { throw .malformed("kv without key") }
        let lease = try int64(value["lease"], "lease")
        guard lease >= 0 else { throw .malformed("lease \(lease)") }
        return EtcdKeyValue(
            key: try bytes(keyField, "key"), value: try bytes(value["value"], "value"),
            createRevision: try revision(value["create_revision"], "create_revision"),
            modRevision: try revision(value["mod_revision"], "mod_revision"),
            version: try int64(value["version"], "version"), lease: lease == 0 ? nil : EtcdLeaseID(lease))
    }

    private static func headerRevision(_ root: JSONValue) throws(EtcdClientError) -> EtcdRevision {
        guard let header = root["header"] else { throw .malformed("answer without header") }
        return try revision(header["revision"], "revision")
    }

    private static func revision(_ value: JSONValue?, _ name: String) throws(EtcdClientError) -> EtcdRevision {
        let raw = try int64(value, name)
        guard raw >= 0 else { throw .malformed("\(name) \(raw)") }
        return EtcdRevision(raw)
    }

    /// An int64 field: a JSON string of digits (the gateway's form) or a
    /// number; absent is 0 (proto3).
    package static func int64(_ value: JSONValue?, _ name: String) throws(EtcdClientError) -> Int64 {
        guard let value else { return 0 }
        let text: String
        switch value {
        case .string(let literal), .number(let literal): text = literal
        case .null, .bool, .array, .object: throw .malformed("\(name) is not an integer")
        }
        let digits = text.utf8.first == UInt8(ascii: "-") ? text.utf8.dropFirst() : text.utf8[...]
        guard !digits.isEmpty, digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
            let parsed = Int64(text)
        else { throw .malformed("\(name) is not an int64: \(text.prefix(40))") }
        return parsed
    }

    private static func uint64(_ value: JSONValue?, _ name: String) throws(EtcdClientError) -> UInt64 {
        guard let value else { return 0 }
        guard case .string(let text) = value, !text.isEmpty,
            text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let parsed = UInt64(text)
        else { throw .malformed("\(name) is not a uint64") }
        return parsed
    }

    private static func bool(_ value: JSONValue?, _ name: String) throws(EtcdClientError) -> Bool {
        guard let value else { return false }
        guard let flag = value.boolValue else { throw .malformed("\(name) is not a boolean") }
        return flag
    }

    private static func array(_ value: JSONValue?, _ name: String) throws(EtcdClientError) -> [JSONValue] {
        guard let value else { return [] }
        guard let elements = value.arrayValue else { throw .malformed("\(name) is not an array") }
        return elements
    }

    private static func bytes(_ value: JSONValue?, _ name: String) throws(EtcdClientError) -> [UInt8] {
        guard let value else { return [] }
        guard let text = value.stringValue else { throw .malformed("\(name) is not a base64 string") }
        do {
            return try Base64.decode(text)
        } catch {
            throw .malformed("\(name): \(error)")
        }
    }
}
