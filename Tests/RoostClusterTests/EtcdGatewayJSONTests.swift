import RoostCluster
import RoostJSON
import Testing

/// The etcd client's pure parts without an etcd: base64, the JSON each
/// request becomes, what etcd 3.4's answers (as captured from 3.4.23) mean,
/// bad answers refused, the `--etcd` list, and the HTTP response parser.
@Suite("etcd JSON gateway mapping, base64 and the HTTP response parser (no etcd)")
struct EtcdGatewayJSONTests {
    static let header =
        #""header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"9","raft_term":"2"}"#
    static let limit = 1 << 20

    static func text(_ call: EtcdGatewayCall) -> String { String(decoding: call.body, as: UTF8.self) }

    static func answer(_ request: EtcdRequest, _ body: String, status: Int = 200) throws(EtcdClientError)
        -> EtcdResponse
    {
        try EtcdGatewayJSON.response(to: request, status: status, body: Array(body.utf8), answerBytesMax: limit)
    }

    static func failure(_ request: EtcdRequest, _ body: String, status: Int = 200) -> EtcdClientError? {
        do {
            _ = try answer(request, body, status: status)
            return nil
        } catch {
            return error
        }
    }

    // MARK: - Base64

    @Test(
        "base64 encodes as RFC 4648 §10's vectors and decodes them back",
        arguments: [
            ("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ])
    func base64Vectors(plain: String, encoded: String) throws {
        #expect(Base64.encode(Array(plain.utf8)) == encoded)
        #expect(try Base64.decode(encoded) == Array(plain.utf8))
    }

    @Test("base64 round-trips every byte value and every length up to 300")
    func base64RoundTrip() throws {
        for length in 0...300 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ length) }
            #expect(try Base64.decode(Base64.encode(bytes)) == bytes, "length \(length)")
        }
        #expect(Base64.encode([0xFB, 0xFF]) == "+/8=")
    }

    @Test(
        "base64 decoding is strict: length, alphabet, padding place and pad bits",
        arguments: [
            ("Zg", Base64Error.length(2)), ("Zm9", .length(3)), ("Zm9v\n", .length(5)),
            ("Zg=\n", .character(offset: 2)), ("Zm=v", .character(offset: 2)),
            ("Z g=", .character(offset: 1)), ("Zm-v", .character(offset: 2)), ("Zm_v", .character(offset: 2)),
            ("=Zm9", .character(offset: 0)), ("Zg==Zm9v", .character(offset: 2)), ("Z===", .character(offset: 1)),
            ("====", .character(offset: 0)), ("Zh==", .nonZeroPadBits), ("Zm9=", .nonZeroPadBits),
            ("Zm8=Zg==", .character(offset: 3)),
        ])
    func base64Refuses(text: String, expected: Base64Error) {
        #expect(throws: expected) { try Base64.decode(text) }
    }

    // MARK: - Requests

    @Test("a fenced append: CREATE compare, put with a lease, range on failure, int64 as strings")
    func transactionJSON() {
        let call = EtcdGatewayJSON.call(
            for: .transaction(
                compares: [EtcdCompare(key: Array("/l".utf8), .equal, .createRevision(EtcdRevision(7)))],
                success: [.put(key: Array("/k".utf8), value: [0, 255], lease: EtcdLeaseID(42))],
                failure: [.range(.key(Array("/l".utf8)), limit: 1)]))
        #expect(call.path == "/v3/kv/txn")
        #expect(
            Self.text(call)
                == #"{"compare":[{"key":"L2w=","result":"EQUAL","target":"CREATE","create_revision":"7"}],"#
                + #""success":[{"request_put":{"key":"L2s=","value":"AP8=","lease":"42"}}],"#
                + #""failure":[{"request_range":{"key":"L2w=","limit":"1"}}]}"#)
    }

    @Test("every compare target and relation has its gateway name and union field")
    func compareJSON() {
        let key = Array("k".utf8)
        let call = EtcdGatewayJSON.call(
            for: .transaction(
                compares: [
                    EtcdCompare(key: key, .notEqual, .modRevision(EtcdRevision(3))),
                    EtcdCompare(key: key, .less, .version(2)),
                    EtcdCompare(key: key, .greater, .value(Array("v".utf8))),
                ], success: [.delete(.prefix(Array("p".utf8)))], failure: []))
        #expect(
            Self.text(call)
                == #"{"compare":[{"key":"aw==","result":"NOT_EQUAL","target":"MOD","mod_revision":"3"},"#
                + #"{"key":"aw==","result":"LESS","target":"VERSION","version":"2"},"#
                + #"{"key":"aw==","result":"GREATER","target":"VALUE","value":"dg=="}],"#
                + #""success":[{"request_delete_range":{"key":"cA==","range_end":"cQ=="}}],"failure":[]}"#)
    }

    @Test("leases, compaction, range, status and watch calls")
    func otherCalls() {
        #expect(Self.text(EtcdGatewayJSON.call(for: .grantLease(ttlSeconds: 2))) == #"{"TTL":"2"}"#)
        #expect(EtcdGatewayJSON.call(for: .keepAlive(EtcdLeaseID(5))).path == "/v3/lease/keepalive")
        #expect(Self.text(EtcdGatewayJSON.call(for: .revokeLease(EtcdLeaseID(5)))) == #"{"ID":"5"}"#)
        #expect(Self.text(EtcdGatewayJSON.call(for: .compact(EtcdRevision(12)))) == #"{"revision":"12"}"#)
        let range = EtcdGatewayJSON.rangeCall(.prefix(Array("/a/".utf8)), limit: 10, revision: EtcdRevision(4))
        #expect(range.path == "/v3/kv/range")
        #expect(Self.text(range) == #"{"key":"L2Ev","range_end":"L2Ew","limit":"10","revision":"4"}"#)
        #expect(EtcdGatewayJSON.statusCall.path == "/v3/maintenance/status")
        let watch = EtcdGatewayJSON.watchCall(.prefix(Array("/w/".utf8)), from: EtcdRevision(6))
        #expect(Self.text(watch) == #"{"create_request":{"key":"L3cv","range_end":"L3cw","start_revision":"6"}}"#)
    }

    @Test(
        "a prefix's range end raises its last byte below 0xFF; none exists for all-0xFF or empty",
        arguments: [
            ([UInt8]([0x61]), [UInt8]([0x62])), ([0x61, 0xFF], [0x62]), ([0x61, 0xFE], [0x61, 0xFF]),
            ([0xFF, 0xFF], [0]), ([], [0]),
        ])
    func prefixRangeEnd(prefix: [UInt8], end: [UInt8]) {
        #expect(EtcdGatewayJSON.rangeEnd(forPrefix: prefix) == end)
    }

    // MARK: - Answers

    @Test("a failed transaction has no succeeded field (proto3 omits false): read as false, with its results")
    func failedTransaction() throws {
        let request = EtcdRequest.transaction(
            compares: [], success: [.put(key: [1], value: [], lease: nil)],
            failure: [.range(.key(Array("/lead".utf8)), limit: 0), .delete(.key([2]))])
        let body =
            "{\(Self.header),"
            + #""responses":[{"response_range":{"header":{"revision":"3"},"kvs":[{"key":"L2xlYWQ=","create_revision":"3","mod_revision":"3","version":"1","value":"bjE=","lease":"77"}],"count":"1"}},{"response_delete_range":{"header":{"revision":"3"}}}]}"#
        let leader = EtcdKeyValue(
            key: Array("/lead".utf8), value: Array("n1".utf8), createRevision: EtcdRevision(3),
            modRevision: EtcdRevision(3), version: 1, lease: EtcdLeaseID(77))
        #expect(
            try Self.answer(request, body)
                == .transaction(
                    succeeded: false, revision: EtcdRevision(9), results: [.range([leader]), .deleted(count: 0)]))
    }

    @Test("a successful transaction; an empty range has no kvs")
    func successfulTransaction() throws {
        let request = EtcdRequest.transaction(
            compares: [], success: [.put(key: [1], value: [], lease: nil), .range(.prefix([9]), limit: 0)],
            failure: [])
        let body =
            "{\(Self.header),\"succeeded\":true,"
            + #""responses":[{"response_put":{"header":{"revision":"9"}}},{"response_range":{"header":{"revision":"9"}}}]}"#
        #expect(
            try Self.answer(request, body)
                == .transaction(succeeded: true, revision: EtcdRevision(9), results: [.put, .range([])]))
    }

    @Test("a transaction answer that does not match its branch is refused")
    func mismatchedTransaction() {
        let request = EtcdRequest.transaction(
            compares: [], success: [.put(key: [1], value: [], lease: nil)], failure: [])
        let wrongKind = "{\(Self.header),\"succeeded\":true,\"responses\":[{\"response_range\":{}}]}"
        #expect(Self.failure(request, wrongKind)?.reason == .malformedAnswer("no response_put for a put"))
        let missing = "{\(Self.header),\"succeeded\":true}"
        #expect(Self.failure(request, missing)?.reason == .malformedAnswer("0 responses for 1 operations"))
        let noHeader = "{\"succeeded\":true,\"responses\":[{\"response_put\":{}}]}"
        #expect(Self.failure(request, noHeader)?.reason == .malformedAnswer("answer without header"))
    }

    @Test("leases: grant, keep-alive, and a keep-alive without TTL (the lease is gone) is leaseNotFound")
    func leaseAnswers() throws {
        #expect(
            try Self.answer(.grantLease(ttlSeconds: 5), "{\(Self.header),\"ID\":\"2324035843770872843\",\"TTL\":\"5\"}")
                == .lease(EtcdLeaseID(2_324_035_843_770_872_843), ttlSeconds: 5))
        let lease = EtcdLeaseID(2_324_035_843_770_872_843)
        #expect(
            try Self.answer(
                .keepAlive(lease), "{\"result\":{\(Self.header),\"ID\":\"2324035843770872843\",\"TTL\":\"5\"}}\n")
                == .keptAlive(lease, ttlSeconds: 5))
        let lost = Self.failure(.keepAlive(lease), "{\"result\":{\(Self.header),\"ID\":\"2324035843770872843\"}}\n")
        #expect(lost == EtcdClientError(.leaseNotFound, .leaseLost))
        #expect(try Self.answer(.revokeLease(lease), "{\(Self.header)}") == .revoked(revision: EtcdRevision(9)))
        #expect(try Self.answer(.compact(EtcdRevision(4)), "{\(Self.header)}") == .compacted(EtcdRevision(4)))
    }

    @Test(
        "etcd's error answers map to failures by their stable messages",
        arguments: [
            (404, "etcdserver: requested lease not found", 5, EtcdFailure.leaseNotFound),
            (400, "etcdserver: request is too large", 3, .requestTooLarge),
            (429, "grpc: received message larger than max (700010 vs. 528384)", 8, .requestTooLarge),
            (
                400, "etcdserver: mvcc: required revision has been compacted", 11,
                .compacted(compactRevision: EtcdRevision(3))
            ),
            (400, "etcdserver: mvcc: required revision is a future revision", 11, .futureRevision),
            (503, "etcdserver: no leader", 14, .unavailable),
            (503, "etcdserver: request timed out", 14, .unavailable),
            (400, "etcdserver: mvcc: database space exceeded", 8, .unavailable),
        ])
    func errorAnswers(status: Int, message: String, code: Int, expected: EtcdFailure) {
        let body = "{\"error\":\"\(message)\",\"message\":\"\(message)\",\"code\":\(code)}"
        let error = Self.failure(.compact(EtcdRevision(3)), body, status: status)
        #expect(error == EtcdClientError(expected, .etcd(status: status, code: code, message: message)))
    }

    @Test("an error answer that is not etcd's JSON is unavailable, its text kept")
    func foreignErrorAnswer() {
        let error = Self.failure(.compact(EtcdRevision(3)), "Bad Gateway", status: 502)
        #expect(error == EtcdClientError(.unavailable, .etcd(status: 502, code: nil, message: "Bad Gateway")))
    }

    @Test(
        "bad fields are refused: bad base64, int64 not digits, wrong kinds, a kv without key",
        arguments: [
            #"{"key":"L2Ev=","mod_revision":"2"}"#, #"{"key":"L2Ev","mod_revision":"2x"}"#,
            #"{"key":"L2Ev","mod_revision":"+2"}"#, #"{"key":"L2Ev","mod_revision":"-2"}"#,
            #"{"key":"L2Ev","version":true}"#, #"{"key":"L2Ev","mod_revision":"99999999999999999999"}"#,
            #"{"key":5}"#, #"{"value":"eA=="}"#, #"{"key":"L2Ev","lease":"-1"}"#, #"["key"]"#,
        ])
    func badKeyValues(kv: String) throws {
        let value = try JSONReader.parse(Array(kv.utf8))
        #expect(throws: EtcdClientError.self) { try EtcdGatewayJSON.keyValue(value) }
    }

    @Test("a key-value's absent fields are proto3 zeros; numbers are accepted as well as strings")
    func keyValueDefaults() throws {
        let deleted = try EtcdGatewayJSON.keyValue(
            JSONReader.parse(Array(#"{"key":"L3cvMQ==","mod_revision":8}"#.utf8)))
        #expect(
            deleted
                == EtcdKeyValue(
                    key: Array("/w/1".utf8), value: [], createRevision: EtcdRevision(0), modRevision: EtcdRevision(8),
                    version: 0, lease: nil))
    }

    @Test("answers that are not JSON objects are refused as malformed")
    func notJSON() {
        for body in ["", "null", "[1]", "{\"header\":", "{} trailing"] {
            let error = Self.failure(.revokeLease(EtcdLeaseID(1)), body)
            guard case .malformedAnswer? = error?.reason else {
                Issue.record("\(body) gave \(String(describing: error))")
                continue
            }
            #expect(error?.failure == .unavailable)
        }
    }

    @Test("range and status answers as etcd 3.4.23 sends them")
    func rangeAndStatus() throws {
        let range = try EtcdGatewayJSON.rangeResult(
            status: 200,
            body: Array(
                ("{\(Self.header),"
                    + #""kvs":[{"key":"L2EvMQ==","create_revision":"2","mod_revision":"2","version":"1","value":"b25l"}],"more":true,"count":"3"}"#)
                    .utf8), asked: nil, answerBytesMax: Self.limit)
        #expect(range.revision == EtcdRevision(9))
        #expect(range.keyValues.map(\.value) == [Array("one".utf8)])
        #expect(range.more && range.count == 3)
        let empty = try EtcdGatewayJSON.rangeResult(
            status: 200, body: Array("{\(Self.header)}".utf8), asked: nil, answerBytesMax: Self.limit)
        #expect(empty.keyValues.isEmpty && !empty.more && empty.count == 0)
        let compacted =
            #"{"error":"etcdserver: mvcc: required revision has been compacted","message":"etcdserver: mvcc: required revision has been compacted","code":11}"#
        #expect(throws: EtcdClientError.self) {
            try EtcdGatewayJSON.rangeResult(
                status: 400, body: Array(compacted.utf8), asked: EtcdRevision(2), answerBytesMax: Self.limit)
        }
        let status = try EtcdGatewayJSON.status(
            status: 200,
            body: Array(
                ("{\(Self.header),"
                    + #""version":"3.4.23","dbSize":"20480","leader":"3319814642761637952","raftIndex":"5","raftTerm":"2","raftAppliedIndex":"5","dbSizeInUse":"16384"}"#)
                    .utf8), answerBytesMax: Self.limit)
        #expect(status.member == EtcdMemberID(3_319_814_642_761_637_952) && status.leader == status.member)
        #expect(status.databaseBytes == 20480 && status.databaseBytesInUse == 16384 && status.raftIndex == 5)
        #expect(status.version == "3.4.23" && status.errors.isEmpty)
        let leaderless = try EtcdGatewayJSON.status(
            status: 200, body: Array("{\(Self.header),\"raftTerm\":\"2\"}".utf8), answerBytesMax: Self.limit)
        #expect(leaderless.leader == nil)
    }

    @Test("watch messages: created, puts and deletes in order, compaction, cancel, progress, errors")
    func watchMessages() throws {
        func message(_ text: String) throws(EtcdClientError) -> EtcdWatchMessage {
            try EtcdGatewayJSON.watchMessage(Array(text.utf8), answerBytesMax: Self.limit)
        }
        #expect(try message("{\"result\":{\(Self.header),\"created\":true}}") == .created)
        let events = try message(
            "{\"result\":{\(Self.header),"
                + #""events":[{"kv":{"key":"L3cvMg==","create_revision":"9","mod_revision":"9","version":"1"}},{"type":"DELETE","kv":{"key":"L3cvMQ==","mod_revision":"9"}}]}}"#
        )
        guard case .events(let batch, let revision) = events else {
            Issue.record("not events: \(events)")
            return
        }
        #expect(revision == EtcdRevision(9))
        #expect(batch.map(\.kind) == [.put, .delete])
        #expect(batch.map(\.keyValue.key) == [Array("/w/2".utf8), Array("/w/1".utf8)])
        #expect(batch[0].keyValue.value.isEmpty && batch[1].revision == EtcdRevision(9))
        #expect(
            try message(#"{"result":{"header":{"cluster_id":"1"},"canceled":true,"compact_revision":"3"}}"#)
                == .compacted(compactRevision: EtcdRevision(3)))
        #expect(
            try message(#"{"result":{"header":{},"canceled":true,"cancel_reason":"permission denied"}}"#)
                == .cancelled(reason: "permission denied"))
        #expect(try message("{\"result\":{\(Self.header)}}") == .events([], revision: EtcdRevision(9)))
        #expect(throws: EtcdClientError.self) {
            try message(#"{"result":{"header":{},"events":[{"type":"PATCH","kv":{"key":"eA=="}}]}}"#)
        }
        #expect(throws: EtcdClientError.self) { try message(#"{"result":{"header":{},"events":[{"type":"PUT"}]}}"#) }
        #expect(
            Self.catching { () throws(EtcdClientError) in
                try message(#"{"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader"}}"#)
            }
                == EtcdClientError(.unavailable, .etcd(status: 503, code: 14, message: "etcdserver: no leader")))
    }

    static func catching(_ body: () throws(EtcdClientError) -> EtcdWatchMessage) -> EtcdClientError? {
        do {
            _ = try body()
            return nil
        } catch {
            return error
        }
    }

    // MARK: - Endpoints

    @Test("--etcd takes http URLs with numeric hosts or localhost, at most 16, none twice")
    func endpointList() throws {
        let endpoints = try EtcdEndpoint.parseList("http://127.0.0.1:2379,http://[::1]:2380/,http://localhost:2381")
        #expect(
            endpoints.map(\.description) == ["http://127.0.0.1:2379", "http://[::1]:2380", "http://127.0.0.1:2381"])
        for bad in [
            "", "http://127.0.0.1:2379,", "https://127.0.0.1:2379", "http://etcd1:2379", "http://127.0.0.1",
            "http://127.0.0.1:0", "http://127.0.0.1:65536", "http://::1:2379", "http://[127.0.0.1]:2379",
            "http://127.0.0.1:2379,http://127.0.0.1:2379", "http://127.0.0.1:23 79",
        ] {
            #expect(throws: EtcdEndpointError.self, "\(bad)") { try EtcdEndpoint.parseList(bad) }
        }
        let many = (1...17).map { "http://127.0.0.1:\(2000 + $0)" }.joined(separator: ",")
        #expect(throws: EtcdEndpointError.tooMany(17)) { try EtcdEndpoint.parseList(many) }
    }
}
