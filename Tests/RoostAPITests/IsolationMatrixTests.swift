import RoostEngine
import RoostHTTP
import RoostJSON
import RoostModel
import RoostTesting
import Testing

@testable import RoostAPI

/// The isolation matrix: every route the service serves (its own route table,
/// `RoostService.routes`) × every kind of credential an attacker or a
/// misconfigured client holds. Each cell's expected status is derived from the
/// route's declared `RouteAccess` — the declaration the service enforces — so a
/// new route is in the matrix the moment it is declared. Every request targets
/// the victim app (its id, its device, its person, its installation, its key in
/// the path; its installation and person in the body), and after every cell the
/// victim's state must be exactly what it was: its live index (settings,
/// credentials, people, devices), its catalog record, its live keys and the
/// signing keys.
@Suite("Isolation matrix: every route × every credential, from the route table")
struct IsolationMatrixTests {
    /// What a caller presents (spec §2 auth, §4 modes, §6 identity tokens, §12).
    enum Credential: String, CaseIterable, Sendable {
        case none
        case wrongKey
        case otherAppSecretKey
        case mobileKey
        case testModeKey
        case keyLackingCapability
        case revokedKey
        case deletedAppKey
        case otherAppIdentityToken
    }

    /// A cell's expectation.
    enum Expectation: Equatable, CustomStringConvertible {
        case status(Int)
        /// Let through by the route's access: anything but 401/403 and below
        /// 500 — the route then acts on the caller's own app or mode, and the
        /// victim must not change.
        case admitted

        var description: String {
            switch self {
            case .status(let status): "\(status)"
            case .admitted: "admitted (not 401/403, < 500)"
            }
        }

        func matches(_ status: Int) -> Bool {
            switch self {
            case .status(let expected): status == expected
            case .admitted: status != 401 && status != 403 && status < 500
            }
        }
    }

    /// The expectation of one cell, from the route's declared access only.
    static func expectation(_ access: RouteAccess, _ credential: Credential) -> Expectation {
        switch access {
        case .open:
            return .status(200)
        case .identityToken:
            // Only a valid identity token passes; it then acts for its own app and mode.
            switch credential {
            case .otherAppIdentityToken, .testModeKey: return .admitted
            case .none, .wrongKey, .otherAppSecretKey, .mobileKey, .keyLackingCapability, .revokedKey,
                .deletedAppKey:
                return .status(401)
            }
        case .nativeNotifyAppToken:
            // The vendor's rule: a live mobile key (or a live secret key with
            // devices:write) of that app; anything else is a wrong appToken, 401.
            return credential == .mobileKey ? .admitted : .status(401)
        case .operatorKey, .setup, .liveSetup, .secretKey, .liveSecretKey, .deviceRegistrar, .mobileKey:
            break
        }
        switch credential {
        case .none, .wrongKey, .revokedKey, .deletedAppKey, .otherAppIdentityToken:
            return .status(401)
        case .keyLackingCapability:
            return .status(403)
        case .otherAppSecretKey:
            switch access {
            case .operatorKey, .mobileKey: return .status(403)
            case .setup, .liveSetup: return .status(404)  // the path names another app: as if it did not exist
            default: return .admitted  // the key selects its own app
            }
        case .mobileKey:
            switch access {
            case .deviceRegistrar, .mobileKey: return .admitted
            default: return .status(403)
            }
        case .testModeKey:
            switch access {
            case .operatorKey, .liveSecretKey, .liveSetup, .mobileKey: return .status(403)
            default: return .admitted  // the key selects its own (test) index
            }
        }
    }

    /// The apps, keys and data the matrix runs against.
    struct Fixture {
        let harness: Harness
        let victim: Int
        /// The victim's live secret key with every capability (`{key_id}`).
        let victimSecret: String
        let victimSecretID: String
        /// Another one, for the control (the first is revoked by `{key_id}`).
        let victimOwner: String
        let victimMobile: String
        /// The victim's test-mode secret key with every capability.
        let victimTestSecret: String
        /// A guest token minted by the victim's test-mode mobile key.
        let victimTestToken: String
        /// Live secret keys of the victim holding every capability but one.
        let lacking: [Capability: String]
        let revokedSecret: String
        /// A guest token minted by a victim mobile key that was then revoked.
        let revokedToken: String
        let deletedSecret: String
        let deletedToken: String
        let otherSecret: String
        let otherToken: String
        /// The victim's device that holds an installation secret.
        let deviceID: String
        static let installation = "victim-install"
        static let person = "victim-person"
        static let bundle = "com.victim.app"
        /// A token nobody holds.
        static let freshToken = TestTokens.apns(0xBEEF)

        static let allCapabilities = Capability.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ",")

        static func make() async throws -> Fixture {
            let harness = try Harness()
            func key(_ app: Int, _ body: String) async throws -> (id: String, key: String) {
                try await harness.createKey(app: app, body)
            }
            func guest(_ mobile: String) async throws -> String {
                let answer = await harness.call(.post, "/v1/identities/guest", key: mobile)
                guard let token = answer.json?["identity_token"]?.stringValue else {
                    throw HarnessError(message: "guest answered \(answer.status)")
                }
                return token
            }
            let full = #"{"kind":"secret","mode":"live","capabilities":[\#(allCapabilities)]}"#
            let victim = try await harness.createApp("Victim")
            let secret = try await key(victim, full)
            // A device not seen for two days, before anything that expires is
            // minted: `POST /v1/devices/inactive/invalidate` (older_than_days 1)
            // would invalidate it for any caller that reached the victim's index.
            let stale = await harness.call(
                .post, "/v1/devices", key: secret.key,
                body: #"{"platform":"ios","token":"\#(TestTokens.apns(103))"}"#)
            guard stale.status == 201 else { throw HarnessError(message: "stale device: \(stale.status)") }
            harness.clock.advance(milliseconds: 2 * 86_400_000)
            let owner = try await key(victim, full).key
            let mobile = try await key(victim, #"{"kind":"mobile","mode":"live"}"#).key
            let testSecret = try await key(
                victim, #"{"kind":"secret","mode":"test","capabilities":[\#(allCapabilities)]}"#
            ).key
            let testToken = try await guest(try await key(victim, #"{"kind":"mobile","mode":"test"}"#).key)
            var lacking: [Capability: String] = [:]
            for capability in Capability.allCases {
                let others = Capability.allCases.filter { $0 != capability }.map { "\"\($0.rawValue)\"" }
                lacking[capability] = try await key(
                    victim, #"{"kind":"secret","capabilities":[\#(others.joined(separator: ","))]}"#
                ).key
            }
            let revoked = try await key(victim, full)
            let revokedMobile = try await key(victim, #"{"kind":"mobile"}"#)
            let revokedToken = try await guest(revokedMobile.key)
            for id in [revoked.id, revokedMobile.id] {
                let answer = await harness.call(.delete, "/v1/apps/\(victim)/keys/\(id)", key: Harness.adminKey)
                guard answer.status == 200 else { throw HarnessError(message: "revoke answered \(answer.status)") }
            }
            let deleted = try await harness.createApp("Deleted")
            let deletedSecret = try await key(deleted, full).key
            let deletedToken = try await guest(try await key(deleted, #"{"kind":"mobile"}"#).key)
            _ = await harness.call(.delete, "/v1/apps/\(deleted)", key: Harness.adminKey)
            let other = try await harness.createApp("Other")
            let otherSecret = try await key(other, full).key
            let otherToken = try await guest(try await key(other, #"{"kind":"mobile"}"#).key)

            // The victim's data: a credential, a person, a device with an
            // installation secret bound to the person, a plain one, an android one.
            let setUp: [(HTTPMethod, String, String?)] = [
                (.put, "/v1/credentials/apns/\(bundle)/production", #"{"team_id":"TEAM0","key_id":"KEY0"}"#),
                (.put, "/v1/people/\(person)", nil),
                (
                    .post, "/v1/devices",
                    #"{"platform":"ios","token":"\#(TestTokens.apns(100))","installation_id":"\#(installation)","#
                        + #""installation_secret":"victim-secret","external_id":"\#(person)","#
                        + #""bundle_id":"\#(bundle)","tags":{"plan":"pro"}}"#
                ),
                (.post, "/v1/devices", #"{"platform":"ios","token":"\#(TestTokens.apns(101))"}"#),
                (.post, "/v1/devices", #"{"platform":"android","token":"\#(TestTokens.fcm(100))"}"#),
            ]
            // And one device in test mode, which only test-mode callers may change.
            let testDevice = await harness.call(
                .post, "/v1/devices", key: testSecret,
                body: #"{"platform":"ios","token":"\#(TestTokens.apns(102))","installation_id":"\#(installation)"}"#)
            guard testDevice.status == 201 else { throw HarnessError(message: "test device: \(testDevice.status)") }
            var deviceID: String?
            for (method, path, body) in setUp {
                let answer = await harness.call(method, path, key: secret.key, body: body)
                guard answer.status == 200 || answer.status == 201 else {
                    throw HarnessError(message: "\(path) answered \(answer.status): \(answer.text)")
                }
                if deviceID == nil, path == "/v1/devices" { deviceID = answer.json?["id"]?.stringValue }
            }
            return Fixture(
                harness: harness, victim: victim, victimSecret: secret.key, victimSecretID: secret.id,
                victimOwner: owner, victimMobile: mobile, victimTestSecret: testSecret, victimTestToken: testToken,
                lacking: lacking,
                revokedSecret: revoked.key, revokedToken: revokedToken, deletedSecret: deletedSecret,
                deletedToken: deletedToken, otherSecret: otherSecret, otherToken: otherToken,
                deviceID: try #require(deviceID))
        }

        /// The credential of `kind` for a route declared with `access`.
        func credential(_ kind: Credential, for access: RouteAccess) -> String? {
            let identity = access == .identityToken
            switch kind {
            case .none: return nil
            case .wrongKey:
                return identity
                    ? "rit2.ik_0000000000000000.\(victim).live.key_0000000000000000.guest.AAAA.9999999999.AAAA"
                    : "sk_live_" + String(repeating: "0", count: 48)
            case .otherAppSecretKey: return otherSecret
            case .mobileKey: return victimMobile
            case .testModeKey: return identity ? victimTestToken : victimTestSecret
            case .keyLackingCapability:
                switch access {
                case .secretKey(let capability), .liveSecretKey(let capability): return lacking[capability]
                case .setup, .liveSetup: return lacking[.setupWrite]
                case .deviceRegistrar, .nativeNotifyAppToken: return lacking[.devicesWrite]
                case .open, .operatorKey, .mobileKey, .identityToken: return victimSecret
                }
            case .revokedKey: return identity ? revokedToken : revokedSecret
            case .deletedAppKey: return identity ? deletedToken : deletedSecret
            case .otherAppIdentityToken: return otherToken
            }
        }

        /// The victim's value for a path parameter; nil for a name the matrix
        /// does not know yet (the test then fails, naming it).
        func parameter(_ name: String) -> String? {
            switch name {
            case "app": String(victim)
            case "id": deviceID
            case "external_id": Fixture.person
            case "installation_id": Fixture.installation
            case "bundle_id": Fixture.bundle
            case "environment": "production"
            case "key_id": victimSecretID
            case "asset": "app.js"
            default: nil
            }
        }

        /// One body for every route, naming the victim wherever a route reads
        /// a name: its installation (held with a secret) and device id without
        /// the secret, its person, its bundle; the credential again as Native
        /// Notify's `appToken`. Settings equal the victim's, and no `mode` (a
        /// key's new key takes its creator's mode), so that only a broken
        /// access check can change the victim.
        func body(_ credential: String?) -> String {
            let token = Fixture.freshToken
            var members = [
                #""platform":"ios","token":"\#(token)","environment":"production""#,
                #""installation_id":"\#(Fixture.installation)","device_id":"\#(deviceID)""#,
                #""external_id":"\#(Fixture.person)","tags":{"pwned":true},"opted_in":false"#,
                #""provider":"apns","reason":"Unregistered","older_than_days":1"#,
                #""settings":{"max_devices_per_person":10,"require_known_person":false}"#,
                #""kind":"secret","capabilities":["devices:read"],"label":"matrix""#,
                #""team_id":"TEAM-X","key_id":"KEY-X","app":"\#(Fixture.bundle)""#,
                #""appId":\#(victim),"deviceId":"\#(Fixture.installation)","subscriberId":"\#(Fixture.person)""#,
                #""tokens":{"apnsToken":"\#(token)"}"#,
            ]
            // The batch's items name the victim's installation and person too.
            members.append(#""devices":[{"# + members[0] + "," + members[1] + "," + members[2] + "}]")
            if let credential { members.append(#""appToken":"\#(credential)""#) }
            return "{" + members.joined(separator: ",") + "}"
        }

        /// Sends `route` with `credential` in the Authorization header, the
        /// body's `appToken` and the query's `appToken`.
        func send(_ route: Route, credential: String?) async throws -> Answer {
            var path = ""
            for segment in route.path.split(separator: "/") {
                if segment.hasPrefix("{") {
                    let name = String(segment.dropFirst().dropLast())
                    let value = try #require(
                        parameter(name), "the matrix has no victim value for {\(name)} of \(route.path): add one")
                    path += "/" + value
                } else {
                    path += "/" + segment
                }
            }
            var query = "?appId=\(victim)"
            if let credential { query += "&appToken=\(credential)" }
            return await harness.call(route.method, path + query, key: credential, body: body(credential))
        }

        /// Everything of the victim's that no other caller may change.
        struct VictimState: Equatable {
            var live: [Mutation]
            /// The test-mode index: compared for every caller but the victim's own test-mode ones.
            var test: [Mutation]
            var app: AppRecord?
            var liveKeys: [KeyRecord]
            var signingKeys: IdentityKeyState
        }

        func victimState() async throws -> VictimState {
            let app = AppID(UInt32(victim))
            let live = try #require(
                await harness.service.registry.perform(IndexKey(app: app, mode: .live)) { index in
                    (index.snapshotMutations(), [])
                })
            let test = try #require(
                await harness.service.registry.perform(IndexKey(app: app, mode: .test)) { index in
                    (index.snapshotMutations(), [])
                })
            let catalog = harness.catalog.currentState()
            return VictimState(
                live: live, test: test, app: catalog.apps[app],
                liveKeys: catalog.keysByDigest.values.filter { $0.appID == app && $0.mode == .live }.sorted {
                    $0.id < $1.id
                },
                signingKeys: harness.service.identityKeys.currentState())
        }
    }

    @Test("every cell answers as the route's declared access says, and the victim app never changes")
    func matrix() async throws {
        let fixture = try await Fixture.make()
        let routes = fixture.harness.service.routes
        #expect(routes.count >= 30, "the route table shrank to \(routes.count)")
        var before = try await fixture.victimState()
        #expect(before.live.count > 5, "the victim has data")
        var cells = 0
        for route in routes {
            for kind in Credential.allCases {
                let expected = Self.expectation(route.access, kind)
                let credential = fixture.credential(kind, for: route.access)
                let answer = try await fixture.send(route, credential: credential)
                let cell = "\(route.method.name) \(route.path) [\(route.access.name)] × \(kind.rawValue)"
                #expect(
                    expected.matches(answer.status),
                    "\(cell): expected \(expected), got \(answer.status) \(answer.errorCode ?? "")")
                let after = try await fixture.victimState()
                // The victim's own test-mode callers may change its test index: the new baseline.
                if kind == .testModeKey { before.test = after.test }
                let unchanged = after == before
                #expect(unchanged, "\(cell) changed the victim app (\(answer.status) \(answer.errorCode ?? ""))")
                if !unchanged { return }
                cells += 1
            }
        }
        #expect(cells == routes.count * Credential.allCases.count)
    }

    @Test("the control: the victim's own full key is let through where declared and does change the victim")
    func control() async throws {
        // Without this the matrix could pass with a state digest that sees nothing.
        let fixture = try await Fixture.make()
        var changed: [String] = []
        var state = try await fixture.victimState()
        for route in fixture.harness.service.routes {
            let answer = try await fixture.send(route, credential: fixture.victimOwner)
            let expected: Expectation =
                switch route.access {
                case .open: .status(200)
                case .operatorKey, .mobileKey: .status(403)
                case .identityToken: .status(401)
                case .setup, .liveSetup, .secretKey, .liveSecretKey, .deviceRegistrar, .nativeNotifyAppToken:
                    .admitted
                }
            #expect(expected.matches(answer.status), "\(route.method.name) \(route.path): \(answer.status)")
            let next = try await fixture.victimState()
            if next != state { changed.append("\(route.method.name) \(route.path)") }
            state = next
        }
        #expect(changed.count >= 4, "only \(changed) changed the victim")
        #expect(changed.contains("PATCH /v1/devices/{id}"))
        #expect(changed.contains("DELETE /v1/people/{external_id}"))
        #expect(changed.contains("POST /v1/devices/inactive/invalidate"))
    }

    @Test("every route declares an access the matrix derives a status for, and names only known parameters")
    func everyRouteCovered() async throws {
        let fixture = try await Fixture.make()
        for route in fixture.harness.service.routes {
            for name in route.parameterNames {
                #expect(fixture.parameter(name) != nil, "\(route.path): no victim value for {\(name)}")
            }
            for kind in Credential.allCases where kind != .none {
                #expect(
                    fixture.credential(kind, for: route.access) != nil,
                    "\(route.path) × \(kind.rawValue): no credential")
            }
        }
        // The declarations the router enforces are the ones listed here.
        let declared = Set(fixture.harness.service.routes.map(\.access.name))
        #expect(declared.isSubset(of: Set(RouteAccess.allCases.map(\.name))))
    }
}
