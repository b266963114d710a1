import RoostPlatform
import Testing

/// `EpollEvents`' own set operations (concrete, for the event loop) agree
/// with the flags' bits.
@Suite("Epoll event sets")
struct EpollEventsTests {
    static let flags: [EpollEvents] = [.readable, .writable, .error, .hangUp]

    /// Every subset of the four flags, as a set and as its bits.
    static func subsets() -> [(set: EpollEvents, bits: UInt32)] {
        (0..<16).map { mask in
            var set = EpollEvents()
            var bits: UInt32 = 0
            for (position, flag) in flags.enumerated() where mask & (1 << position) != 0 {
                set.insert(flag)
                bits |= flag.rawValue
            }
            return (set, bits)
        }
    }

    @Test("the four flags are distinct bits; an empty set holds none")
    func flagsAreBits() {
        #expect(Set(Self.flags.map(\.rawValue)).count == 4)
        #expect(Self.flags.allSatisfy { $0.rawValue.nonzeroBitCount == 1 })
        #expect(EpollEvents().rawValue == 0)
        #expect(Self.flags.allSatisfy { !EpollEvents().contains($0) })
    }

    @Test("insert, contains and == over every subset match the bits")
    func operations() {
        let subsets = Self.subsets()
        for (set, bits) in subsets {
            #expect(set.rawValue == bits)
            for flag in Self.flags {
                #expect(set.contains(flag) == (bits & flag.rawValue != 0))
                var grown = set
                let (inserted, member) = grown.insert(flag)
                #expect(inserted == (bits & flag.rawValue == 0) && member == flag)
                #expect(grown.rawValue == bits | flag.rawValue)
            }
            for (other, otherBits) in subsets {
                #expect((set == other) == (bits == otherBits))
                #expect(set.contains(other) == (bits & otherBits == otherBits))
            }
        }
    }
}
