import RoostModel
import Synchronization

/// Each index's position (spec §13.1: the count of its app and mode's own
/// records) as its shard last published it, for the threads that answer
/// requests in cluster mode: `Roost-Position` on every answer of an app's
/// key, and `Roost-Min-Position`'s wait on a follower (decision 0084).
///
/// A shard publishes after each append of its records (the leader: at or
/// after the answer's last record, possibly ahead of what etcd committed)
/// and after applying replicated records (a follower: what it applied,
/// before the node reports the batch applied, so a wait that sees the
/// applied LSN move sees the positions too). One lock, one entry per index.
package final class PositionBoard: Sendable {
    private let positions = Mutex<[IndexKey: UInt64]>([:])

    package init() {}

    /// Publishes `position` for `key`; a position never moves back.
    package func publish(_ key: IndexKey, _ position: UInt64) {
        positions.withLock { table in
            if position > table[key, default: 0] { table[key] = position }
        }
    }

    /// The position of `key` published last (0: none, an index with no record yet).
    package func position(of key: IndexKey) -> UInt64 {
        positions.withLock { $0[key] ?? 0 }
    }
}
