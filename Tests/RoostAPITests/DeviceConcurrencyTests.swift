import RoostEngine
import RoostHTTP
import RoostJSON
import RoostTesting
import Testing

@testable import RoostAPI

@Suite("Concurrent device requests")
struct DeviceConcurrencyTests {
    @Test("64 concurrent registrations of one token make one device: one 201, nine 200, the rest 429 (burst of 10)")
    func sameToken() async throws {
        let app = try await DeviceApp.make()
        let answers = await withTaskGroup(of: Answer.self, returning: [Answer].self) { group in
            for index in 0..<64 {
                group.addTask { await app.registerIOS(77, #""app_version":"\#(index)""#, key: app.mobile) }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(answers.filter { $0.status == 201 }.count == 1)
        #expect(answers.filter { $0.status == 200 }.count == Shard.tokenRegistrationRate.burst - 1)
        #expect(answers.filter { $0.status == 429 }.count == 64 - Shard.tokenRegistrationRate.burst)
        #expect(Set(answers.compactMap { $0.json?["id"]?.stringValue }).count == 1)
        #expect(await app.call(.get, "/v1/stats").json?["devices"]?.intValue == 1)
    }

    @Test("20 concurrent PATCHes of different tag keys all survive")
    func concurrentPatches() async throws {
        let app = try await DeviceApp.make()
        let id = try await app.registerID(1)
        let statuses = await withTaskGroup(of: Int.self, returning: [Int].self) { group in
            for index in 0..<20 {
                group.addTask {
                    await app.call(.patch, "/v1/devices/\(id)", body: #"{"tags":{"k\#(index)":\#(index)}}"#).status
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(statuses == Array(repeating: 200, count: 20))
        let tags = try #require(await app.device(id).json?["tags"])
        #expect(tags.objectMembers?.count == 20)
        for index in 0..<20 { #expect(tags["k\(index)"]?.intValue == index) }
    }

    @Test("a token moving between people concurrently ends on exactly one of them, never both")
    func tokenMovesConcurrently() async throws {
        let app = try await DeviceApp.make()
        let people = (0..<8).map { "person-\($0)" }
        for round in 0..<4 {
            await withTaskGroup(of: Void.self) { group in
                for person in people {
                    group.addTask { _ = await app.registerIOS(round, #""external_id":"\#(person)""#) }
                }
            }
            var holders: [String] = []
            for person in people {
                let devices = await app.call(.get, "/v1/people/\(person)").json?["devices"]?.arrayValue ?? []
                if devices.contains(where: { $0["token"]?.stringValue == TestTokens.apns(round) }) {
                    holders.append(person)
                }
            }
            #expect(holders.count == 1, "round \(round): held by \(holders)")
            let device = await app.call(.get, "/v1/devices?limit=1000").json?["devices"]?.arrayValue?.first {
                $0["token"]?.stringValue == TestTokens.apns(round)
            }
            #expect(device?["external_id"]?.stringValue == holders.first)
        }
    }
}
