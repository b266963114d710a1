import RoostModel
import Testing

@testable import RoostAPI

/// The `ETag` of a device answer (spec §7): its version in decimal, strong and quoted.
@Suite("A device answer's ETag")
struct EntityTagTests {
    @Test("the version's decimal digits between double quotes, for every digit count and the extremes")
    func spelled() throws {
        let id = DeviceID(appID: AppID(1), mode: .live, platform: .ios, sequence: 1)
        var device = Device(
            id: id, environment: .production, token: nil, createdAt: Timestamp(millisecondsSinceEpoch: 0))
        var versions: [UInt32] = [0, 1, 9, 10, 11, 99, 100, 12_345, UInt32(Limits.deviceVersionMax), UInt32.max]
        var power: UInt32 = 1
        while power <= UInt32.max / 10 {
            power *= 10
            versions += [power - 1, power, power + 1]
        }
        for version in versions {
            device.version = version
            #expect(IfMatch.entityTag(device) == "\"" + String(version) + "\"", "version \(version)")
        }
    }
}
