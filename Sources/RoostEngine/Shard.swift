import RoostModel
import Synchronization

/// A shard: the indexes of the apps hashed to it. Every job runs in one turn
/// of this actor, so each identity rule is checked and applied with no lock
/// and no other shard involved.
package actor Shard {
    package let number: Int
    private var indexes: [IndexKey: AppIndex] = [:]
    private let log: any MutationLog

    package init(number: Int, log: any MutationLog) {
        self.number = number
        self.log = log
    }

    /// Runs jobs in order and appends their records to the log in one append,
    /// so one fsync covers the whole batch. Answers go out from the log's
    /// completion, never before.
    package func run(_ jobs: [ShardJob]) {
        var records: [[UInt8]] = []
        var deliveries: [@Sendable (Bool) -> Void] = []
        deliveries.reserveCapacity(jobs.count)
        for job in jobs {
            switch job {
            case .index(let key, let settings, let work):
                if indexes[key] == nil {
                    indexes[key] = AppIndex(appID: key.app, mode: key.mode, settings: settings)
                    // Replay creates indexes with the defaults: log other settings so
                    // that a recovered index behaves as this one does.
                    if settings != .defaults {
                        records.append(EngineRecord.mutation(key, .settings(settings)).encoded())
                    }
                }
                // `&indexes[key]!` mutates in place: no copy of the index.
                let result = work(&indexes[key]!)
                for mutation in result.mutations {
                    records.append(EngineRecord.mutation(key, mutation).encoded())
                }
                deliveries.append(result.deliver)
            case .removeApp(let app, let deliver):
                var removed = 0
                for mode in AppMode.allCases {
                    if let index = indexes.removeValue(forKey: IndexKey(app: app, mode: mode)) {
                        removed += index.stats().devices
                    }
                }
                records.append(EngineRecord.appRemoved(app).encoded())
                let devicesRemoved = removed
                deliveries.append { durable in deliver(devicesRemoved, durable) }
            }
        }
        let answers = deliveries
        log.append(records) { durable in
            for deliver in answers { deliver(durable) }
        }
    }

    /// Applies a record read back from the log or a snapshot (recovery only).
    package func replay(_ record: EngineRecord) throws(ReplayError) {
        switch record {
        case .mutation(let key, let mutation):
            if indexes[key] == nil { indexes[key] = AppIndex(appID: key.app, mode: key.mode) }
            do {
                try indexes[key]!.apply(mutation)
            } catch {
                throw ReplayError(key: key, reason: "\(error)")
            }
        case .appRemoved(let app):
            for mode in AppMode.allCases { indexes[IndexKey(app: app, mode: mode)] = nil }
        }
    }

    /// Returns the keys this shard holds data for, sorted (snapshots, tests).
    package func keys() -> [IndexKey] {
        indexes.keys.sorted { ($0.app, $0.mode.rawValue) < ($1.app, $1.mode.rawValue) }
    }

    /// Runs a read-only closure over one index without logging (snapshots and
    /// tests); nil when the key holds no data.
    package func read<Result: Sendable>(_ key: IndexKey, _ body: (borrowing AppIndex) -> Result) -> Result? {
        guard let index = indexes[key] else { return nil }
        return body(index)
    }
}

/// A logged record that does not apply to the state it follows: recovery stops.
package struct ReplayError: Error, CustomStringConvertible {
    package var key: IndexKey
    package var reason: String
    package var description: String { "replaying a record for \(key) failed: \(reason)" }
}
