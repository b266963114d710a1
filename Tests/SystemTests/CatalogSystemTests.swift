import CCrypto
import Glibc
import RoostJSON
import RoostPlatform
import RoostTesting
import Testing

/// The catalog in the log with the real binary: a data directory written by
/// the release before the change (commit c1174b5) is migrated on its first
/// start, and SIGKILL after catalog changes loses no acknowledged change and
/// never turns the app-id counter back.
@Suite("Catalog in the log (system)", .serialized)
struct CatalogSystemTests {
    /// `Fixtures/c1174b5-data.tar`: a data directory made by `roost serve` built
    /// from commit c1174b5 (Fixtures/make-c1174b5-data.sh; the 64 MiB segment
    /// is stored sparse): app 1 "Legacy" (max_devices_per_person 3) with a
    /// secret key, a mobile key and a revoked key; app 2 created and deleted;
    /// an APNs credential; three devices and a guest's device registered
    /// with a guest identity token; stopped with SIGTERM (so it holds a
    /// snapshot and a log). The keys are in `c1174b5-keys.json`.
    static let fixtures = String(#filePath.prefix(upTo: #filePath.lastIndex(of: "/")!)) + "/Fixtures"

    struct LegacyKeys {
        var secret: String
        var mobile: String
        var revoked: String
        var identityToken: String
    }

    static func legacyKeys() throws -> LegacyKeys {
        let bytes = try #require(try DurableFile.readIfExists(path: fixtures + "/c1174b5-keys.json", limitBytes: 4096))
        let json = try JSONReader.parse(bytes)
        return LegacyKeys(
            secret: try #require(json["secret_key"]?.stringValue),
            mobile: try #require(json["mobile_key"]?.stringValue),
            revoked: try #require(json["revoked_key"]?.stringValue),
            identityToken: try #require(json["identity_token"]?.stringValue))
    }

    /// Unpacks the fixture into a fresh directory; returns it (holding `data/`).
    static func unpackLegacyDirectory() throws -> String {
        let directory = try TemporaryDirectory.make(prefix: "roost-system")
        let status = system("tar -xf '\(fixtures)/c1174b5-data.tar' -C '\(directory)'")
        #expect(status == 0, "tar failed: \(status)")
        return directory
    }

    @Test("a data directory of the previous release (c1174b5) is migrated: apps, keys, devices and tokens carry over")
    func migratesLegacyDirectory() throws {
        let directory = try Self.unpackLegacyDirectory()
        defer { TemporaryDirectory.remove(directory) }
        let data = directory + "/data"
        let keys = try Self.legacyKeys()
        let legacyIdentity = try #require(
            try DurableFile.readIfExists(path: data + "/identity-keys.json", limitBytes: 4096))

        let (first, _) = try ServeTests.start(data: directory)
        try Self.checkLegacyState(port: first.port, keys: keys, identityFile: legacyIdentity, sequenced: false)
        // Spec §7 on a migrated device: a registration with a client_sequence is its first change.
        let sequenced = try ServeTests.request(
            first.port, "POST", "/v1/devices", key: keys.secret,
            body: #"{"platform":"ios","token":"\#(Self.legacyToken(1))","client_sequence":5}"#)
        #expect(sequenced.status == 200, "\(sequenced.bodyText)")
        #expect(try JSONReader.parse(sequenced.body)["version"]?.intValue == 2)
        for name in ["catalog.json", "identity-keys.json"] {
            #expect(!DurableFile.exists(data + "/" + name), "\(name) still there")
            #expect(DurableFile.exists(data + "/" + name + ".migrated"), "\(name).migrated missing")
        }
        // The counter came over: app 2 was deleted by the old release, so the next id is 3.
        let created = try ServeTests.request(
            first.port, "POST", "/v1/apps", key: ServeTests.adminKey, body: #"{"name":"After"}"#)
        #expect(try JSONReader.parse(created.body)["id"]?.intValue == 3)
        #expect(first.stop(signal: SIGTERM) == 0)

        // Second start: no old files any more, everything from the log.
        let (second, _) = try ServeTests.start(data: directory)
        defer { second.stop() }
        try Self.checkLegacyState(port: second.port, keys: keys, identityFile: legacyIdentity, sequenced: true)
        let listed = try JSONReader.parse(
            try ServeTests.request(second.port, "GET", "/v1/apps", key: ServeTests.adminKey).body)
        #expect(listed["apps"]?.arrayValue?.compactMap { $0["id"]?.intValue } == [1, 3])
    }

    /// The fixture's APNs token `n` (make-c1174b5-data.sh).
    static func legacyToken(_ n: Int) -> String { String(repeating: "ab", count: 31) + "0\(n)" }

    /// Checks what the fixture holds, through the new binary. Its devices were
    /// written before spec §7: they read as version 1 without a
    /// client_sequence — except, once `sequenced`, the one registered with one.
    static func checkLegacyState(port: UInt16, keys: LegacyKeys, identityFile: [UInt8], sequenced: Bool) throws {
        let app = try ServeTests.request(port, "GET", "/v1/apps/1", key: keys.secret)
        #expect(app.status == 200, "\(app.bodyText)")
        let json = try JSONReader.parse(app.body)
        #expect(json["name"]?.stringValue == "Legacy")
        #expect(json["settings"]?["max_devices_per_person"]?.intValue == 3)
        #expect(json["counts"]?["devices"]?.intValue == 4)
        #expect(json["counts"]?["keys"]?.intValue == 2)
        #expect(try ServeTests.request(port, "GET", "/v1/apps/2", key: ServeTests.adminKey).status == 404)
        #expect(try ServeTests.request(port, "GET", "/v1/apps/1", key: keys.revoked).status == 401)
        let exported = try ServeTests.request(port, "GET", "/v1/devices/export", key: keys.secret)
        #expect(exported.status == 200)
        let lines = exported.bodyText.split(separator: "\n")
        #expect(lines.count == 4)
        for line in lines {
            let device = try JSONReader.parse(Array(line.utf8))
            let isSequenced = sequenced && device["token"]?.stringValue == legacyToken(1)
            // The android device is registered again below (PUT /v1/me/devices), before a second start.
            let reregistered = sequenced && device["platform"]?.stringValue == "android"
            #expect(device["version"]?.intValue == (isSequenced || reregistered ? 2 : 1), "\(line)")
            #expect(device["client_sequence"]?.intValue == (isSequenced ? 5 : nil), "\(line)")
            if device["platform"]?.stringValue == "ios" {
                let id = try #require(device["id"]?.stringValue)
                let read = try ServeTests.request(port, "GET", "/v1/devices/\(id)", key: keys.secret)
                #expect(read.header("ETag") == (isSequenced ? "\"2\"" : "\"1\""))
            }
        }
        #expect(try ServeTests.request(port, "POST", "/v1/identities/guest", key: keys.mobile).status == 201)

        // The guest's token signed by the old release is of the retired rit1
        // layout (it names no minting key, so nothing could revoke it): 401
        // (docs/decisions/0012). The signing key itself came over: a token
        // minted now is signed by it, and claims re-signed with the old
        // secret verify, while a forged signature does not.
        let device =
            #"{"installation_id":"inst-legacy-1","platform":"android","token":"fcm-legacy-token-0123456789abcdefghij"}"#
        let legacy = try ServeTests.request(port, "PUT", "/v1/me/devices", key: keys.identityToken, body: device)
        #expect(legacy.status == 401, "\(legacy.bodyText)")
        let minted = try ServeTests.request(port, "POST", "/v1/identities/guest", key: keys.mobile)
        let fresh = try #require(try JSONReader.parse(minted.body)["identity_token"]?.stringValue)
        #expect(fresh.split(separator: ".")[1] == keys.identityToken.split(separator: ".")[1])
        let identity = try JSONReader.parse(identityFile)
        let secretHex = try #require(identity["keys"]?.arrayValue?.first?["secret"]?.stringValue)
        let resigned = try resign(fresh, secretHex: secretHex, expiry: Int64(time(nil)) + 3600)
        let viaOldKey = try ServeTests.request(port, "PUT", "/v1/me/devices", key: resigned, body: device)
        #expect(viaOldKey.status == 200 || viaOldKey.status == 201, "\(viaOldKey.bodyText)")
        let forged = try resign(fresh, secretHex: String(repeating: "00", count: 32), expiry: Int64(time(nil)) + 3600)
        #expect(try ServeTests.request(port, "PUT", "/v1/me/devices", key: forged, body: device).status == 401)
    }

    /// Returns the token with a new expiry, signed with `secretHex`
    /// (`rit3.<key>.<app>.<mode>.<minting key>.<kind>.<subject>.<expiry>.<issued at>.<HMAC-SHA-256>`;
    /// `rit2` without `issued at`).
    static func resign(_ token: String, secretHex: String, expiry: Int64) throws -> String {
        var parts = token.split(separator: ".").map(String.init)
        parts[7] = String(expiry)
        let signed = parts[0..<(parts.count - 1)].joined(separator: ".")
        let secret = try #require(hexBytes(secretHex))
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let message = Array(signed.utf8)
        _ = HMAC(EVP_sha256(), secret, Int32(secret.count), message, message.count, &digest, &length)
        return signed + "." + base64URL(digest)
    }

    static func hexBytes(_ text: String) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case 48...57: digit - 48
            case 97...102: digit - 87
            default: nil
            }
        }
        var bytes: [UInt8] = []
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }

    static func base64URL(_ bytes: [UInt8]) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        var out: [UInt8] = []
        var index = 0
        while index < bytes.count {
            let chunk = bytes[index..<min(index + 3, bytes.count)]
            var value = UInt32(0)
            for (offset, byte) in chunk.enumerated() { value |= UInt32(byte) << (16 - 8 * UInt32(offset)) }
            for position in 0..<(chunk.count + 1) {
                out.append(alphabet[Int(value >> (18 - 6 * UInt32(position)) & 63)])
            }
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    @Test("with the old catalog.json deleted, the previous release's directory is refused (exit 2, naming the file)")
    func legacyDirectoryWithoutCatalogRefused() throws {
        let directory = try Self.unpackLegacyDirectory()
        defer { TemporaryDirectory.remove(directory) }
        let data = directory + "/data"
        #expect(unlink(data + "/catalog.json") == 0)
        let result = Self.run(["serve", "--listen", "127.0.0.1:0", "--data", data], in: directory)
        #expect(result.code == 2, "\(result.output)")
        #expect(result.output.contains("never created"), "\(result.output)")
        #expect(result.output.contains(data + "/catalog.json"), "\(result.output)")
        #expect(result.output.split(separator: "\n").filter { $0.contains("cannot start") }.count == 1)
    }

    @Test("a catalog.json put back beside a migrated log that moved on is ambiguous: refused, exit 2")
    func restoredCatalogFileRefused() throws {
        let directory = try Self.unpackLegacyDirectory()
        defer { TemporaryDirectory.remove(directory) }
        let data = directory + "/data"
        let (first, _) = try ServeTests.start(data: directory)
        _ = try ServeTests.request(first.port, "POST", "/v1/apps", key: ServeTests.adminKey, body: #"{"name":"New"}"#)
        #expect(first.stop(signal: SIGTERM) == 0)
        #expect(system("cp '\(data)/catalog.json.migrated' '\(data)/catalog.json'") == 0)
        let result = Self.run(["serve", "--listen", "127.0.0.1:0", "--data", data], in: directory)
        #expect(result.code == 2, "\(result.output)")
        #expect(result.output.contains(data + "/catalog.json is present"), "\(result.output)")
    }

    /// Runs the built `roost` with `arguments` until it exits; returns the
    /// exit code and what it wrote to stdout and stderr.
    static func run(_ arguments: [String], in directory: String) -> (code: Int32, output: String) {
        let out = directory + "/run.out"
        let quoted = arguments.map { "'\($0)'" }.joined(separator: " ")
        let status = system(
            "ROOST_ADMIN_KEY=\(ServeTests.adminKey) timeout 30 '\(RoostProcess.builtProduct("roost"))' \(quoted) "
                + "> '\(out)' 2>&1")
        let text = (try? DurableFile.readIfExists(path: out, limitBytes: 1 << 20)).flatMap { $0 }
        return ((status >> 8) & 0xFF, text.map { String(decoding: $0, as: UTF8.self) } ?? "")
    }

    // MARK: - SIGKILL after catalog changes

    /// What the client knows was acknowledged.
    struct Acknowledged {
        var apps: [Int: (name: String, maxDevices: Int)] = [:]
        var deletedApps: Set<Int> = []
        var keys: [(app: Int, key: String)] = []
        var revokedKeys: [String] = []
        var highestAppID = 0
        var identityKeyIDs: Set<String> = []
    }

    @Test("SIGKILL right after acknowledged app and key changes, or with one in flight: all there, ids never go back")
    func killAfterCatalogChanges() throws {
        let directory = try TemporaryDirectory.make(prefix: "roost-system")
        defer { TemporaryDirectory.remove(directory) }
        var acknowledged = Acknowledged()
        var process = try ServeTests.start(data: directory, extra: ["--fsync", "always"]).0
        for cycle in 0..<6 {
            try Self.changeCatalog(port: process.port, cycle: cycle, acknowledged: &acknowledged)
            if cycle % 2 == 1 {
                // One more change in flight: written, never answered to us.
                let connection = try LoopbackConnection(port: process.port)
                let body = #"{"name":"in flight \#(cycle)"}"#
                try connection.send(
                    "POST /v1/apps HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer \(ServeTests.adminKey)\r\n"
                        + "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n" + body)
            }
            #expect(process.stop(signal: SIGKILL) == 128 + SIGKILL)
            process = try ServeTests.start(data: directory, extra: ["--fsync", "always"]).0
            try Self.checkAcknowledged(port: process.port, acknowledged, cycle: cycle)
        }
        #expect(process.stop(signal: SIGTERM) == 0)
    }

    @Test(
        "a key the loops have kept the digest of answers 401 once revoked: on its own keep-alive connection and on new ones"
    )
    func revokedKeyStopsWhereItWasKept() throws {
        let (process, directory) = try ServeTests.start()
        defer { TemporaryDirectory.remove(directory) }
        let port = process.port
        let admin = ServeTests.adminKey
        let app = try #require(
            try JSONReader.parse(
                try ServeTests.request(port, "POST", "/v1/apps", key: admin, body: #"{"name":"kept"}"#).body
            )["id"]?.intValue)
        func makeKey() throws -> (key: String, id: String) {
            let made = try JSONReader.parse(
                try ServeTests.request(
                    port, "POST", "/v1/apps/\(app)/keys", key: admin,
                    body: #"{"kind":"secret","capabilities":["setup:write"]}"#
                ).body)
            return (try #require(made["key"]?.stringValue), try #require(made["id"]?.stringValue))
        }
        let (kept, keptID) = try makeKey()
        let (other, _) = try makeKey()
        // The same length as `kept`, differing in its last byte: never kept, always 401.
        let forged = String(kept.dropLast()) + (kept.hasSuffix("A") ? "B" : "A")
        let connection = try LoopbackConnection(port: port)
        func get(_ key: String, on connection: LoopbackConnection) throws -> Int {
            try connection.send("GET /v1/apps/\(app) HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer \(key)\r\n\r\n")
            return try connection.readResponse(timeout: .seconds(5)).status
        }
        for round in 0..<20 {
            #expect(try get(kept, on: connection) == 200, "round \(round)")
            #expect(try ServeTests.request(port, "GET", "/v1/apps/\(app)", key: kept).status == 200, "round \(round)")
            #expect(try get(forged, on: connection) == 401, "round \(round)")
        }
        #expect(try ServeTests.request(port, "DELETE", "/v1/apps/\(app)/keys/\(keptID)", key: other).status == 200)
        for round in 0..<10 {
            #expect(try get(kept, on: connection) == 401, "round \(round)")
            #expect(try ServeTests.request(port, "GET", "/v1/apps/\(app)", key: kept).status == 401, "round \(round)")
            #expect(try ServeTests.request(port, "GET", "/v1/apps/\(app)", key: other).status == 200, "round \(round)")
        }
        #expect(process.stop(signal: SIGTERM) == 0)
    }

    /// Creates an app with a key, changes its settings, revokes a second key,
    /// deletes the previous cycle's spare app and rotates the identity key;
    /// records what was acknowledged.
    static func changeCatalog(port: UInt16, cycle: Int, acknowledged: inout Acknowledged) throws {
        let admin = ServeTests.adminKey
        let created = try ServeTests.request(port, "POST", "/v1/apps", key: admin, body: #"{"name":"cycle \#(cycle)"}"#)
        #expect(created.status == 201)
        let app = try #require(try JSONReader.parse(created.body)["id"]?.intValue)
        #expect(app > acknowledged.highestAppID, "cycle \(cycle): id \(app) after \(acknowledged.highestAppID)")
        acknowledged.highestAppID = app
        acknowledged.apps[app] = ("cycle \(cycle)", 10)
        let made = try ServeTests.request(
            port, "POST", "/v1/apps/\(app)/keys", key: admin,
            body: #"{"kind":"secret","capabilities":["setup:write","devices:write"]}"#)
        #expect(made.status == 201)
        let key = try #require(try JSONReader.parse(made.body)["key"]?.stringValue)
        acknowledged.keys.append((app, key))
        let spare = try JSONReader.parse(
            try ServeTests.request(port, "POST", "/v1/apps/\(app)/keys", key: admin, body: #"{"kind":"mobile"}"#).body)
        let spareKey = try #require(spare["key"]?.stringValue)
        let spareID = try #require(spare["id"]?.stringValue)
        #expect(try ServeTests.request(port, "DELETE", "/v1/apps/\(app)/keys/\(spareID)", key: key).status == 200)
        acknowledged.revokedKeys.append(spareKey)
        let patched = try ServeTests.request(
            port, "PATCH", "/v1/apps/\(app)", key: key, body: #"{"settings":{"max_devices_per_person":\#(cycle + 2)}}"#)
        #expect(patched.status == 200)
        acknowledged.apps[app]?.maxDevices = cycle + 2
        if let previous = acknowledged.apps.keys.filter({ $0 < app }).max(), cycle % 3 == 2 {
            #expect(try ServeTests.request(port, "DELETE", "/v1/apps/\(previous)", key: admin).status == 200)
            acknowledged.apps[previous] = nil
            acknowledged.deletedApps.insert(previous)
        }
        let rotated = try ServeTests.request(port, "POST", "/v1/identity-keys", key: admin)
        #expect(rotated.status == 201)
        acknowledged.identityKeyIDs.insert(try #require(try JSONReader.parse(rotated.body)["id"]?.stringValue))
    }

    /// Checks every acknowledged change after a restart.
    static func checkAcknowledged(port: UInt16, _ acknowledged: Acknowledged, cycle: Int) throws {
        for (app, key) in acknowledged.keys {
            let answer = try ServeTests.request(port, "GET", "/v1/apps/\(app)", key: key)
            if let expected = acknowledged.apps[app] {
                #expect(answer.status == 200, "cycle \(cycle): app \(app) \(answer.bodyText)")
                let json = try JSONReader.parse(answer.body)
                #expect(json["name"]?.stringValue == expected.name)
                #expect(json["settings"]?["max_devices_per_person"]?.intValue == expected.maxDevices)
            } else {
                #expect(answer.status == 401, "cycle \(cycle): key of deleted app \(app) answered \(answer.status)")
            }
        }
        for app in acknowledged.deletedApps {
            #expect(try ServeTests.request(port, "GET", "/v1/apps/\(app)", key: ServeTests.adminKey).status == 404)
        }
        for key in acknowledged.revokedKeys {
            #expect(try ServeTests.request(port, "POST", "/v1/identities/guest", key: key).status == 401)
        }
        let identity = try JSONReader.parse(
            try ServeTests.request(port, "GET", "/v1/identity-keys", key: ServeTests.adminKey).body)
        let listed = Set(identity["keys"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? [])
        #expect(acknowledged.identityKeyIDs.isSubset(of: listed), "cycle \(cycle): identity keys \(listed)")
        let apps = try JSONReader.parse(try ServeTests.request(port, "GET", "/v1/apps", key: ServeTests.adminKey).body)
        let highest = apps["apps"]?.arrayValue?.compactMap { $0["id"]?.intValue }.max() ?? 0
        #expect(highest >= acknowledged.apps.keys.max() ?? 0)
    }
}
