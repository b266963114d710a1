import RoostEngine
import RoostModel
import Testing

@testable import RoostAPI

/// `EngineWork`: a request's shard work, one item inline or several, handed
/// to the loop in order and moved, not copied.
@Suite("A request's engine work (EngineWork)")
struct EngineWorkTests {
    static func item(_ app: UInt32) -> ShardWork {
        .index(IndexKey(app: AppID(app), mode: .live), settings: .defaults, .stats)
    }

    static func apps(_ work: EngineWork) -> [UInt32?] {
        work.map { $0.app?.rawValue }
    }

    @Test("one item and several: count, items by position, and each handed over once with its position, in order")
    func items() {
        for count in 1...4 {
            let items = (1...count).map { Self.item(UInt32($0)) }
            let work = count == 1 ? EngineWork(items[0]) : EngineWork(items)
            #expect(work.count == count)
            #expect(Self.apps(work) == (1...count).map { UInt32($0) })
            #expect(work.holdsOnlyValues)
            var handed: [(Int, UInt32?)] = []
            work.forEachItem { position, item in handed.append((position, item.app?.rawValue)) }
            #expect(handed.map(\.0) == Array(0..<count))
            #expect(handed.map(\.1) == (1...count).map { UInt32($0) })
        }
        // An array of one holds it as the single item does.
        #expect(Self.apps(EngineWork([Self.item(7)])) == [7])
        #expect(Self.apps([Self.item(1), Self.item(2)]) == [1, 2])
    }

    @Test("a custom command anywhere in the work is seen: the loops take values only")
    func custom() {
        let custom = ShardWork.index(
            IndexKey(app: AppID(1), mode: .live), settings: .defaults, .custom(CustomWork { _ in (0, []) }))
        #expect(!EngineWork(custom).holdsOnlyValues)
        #expect(!EngineWork([Self.item(1), custom]).holdsOnlyValues)
        #expect(EngineWork([Self.item(1), Self.item(2)]).holdsOnlyValues)
    }
}
