import RoostModel
import RoostPlatform
import RoostStorage

/// A shard: the indexes of the apps hashed to it. Every job runs in one turn
/// of this actor, so each identity rule is checked and applied with no lock
/// and no other shard involved.
package actor Shard {
    /// Devices (or people) per snapshot slice: one slice is one short actor
    /// turn (about a millisecond), so requests keep flowing between slices.
    package static let snapshotSliceDevices = 256

    package let number: Int
    /// The loop whose thread runs this shard: its executor is this actor's.
    package nonisolated let executor: LoopExecutor
    private var table: IndexTable
    private let log: any MutationLog

    package init(number: Int, executor: LoopExecutor, log: any MutationLog, table: IndexTable = IndexTable()) {
        self.number = number
        self.executor = executor
        self.log = log
        self.table = table
    }

    package nonisolated var unownedExecutor: UnownedSerialExecutor {
        executor.asUnownedSerialExecutor()
    }

    /// Runs commands in order and appends their records to the log in one
    /// append, so one fsync covers the whole batch; returns each outcome with
    /// the LSN it waits for. Mutations are applied in memory before their
    /// records are appended, within this turn (what a fuzzy snapshot needs).
    /// Runs on the owning loop's thread, called there with `assumeIsolated`.
    package func execute(_ commands: [ShardCommand]) -> [ShardOutcome] {
        var records: [[UInt8]] = []
        var outcomes: [ShardOutcome] = []
        outcomes.reserveCapacity(commands.count)
        var position = commands.startIndex
        while position < commands.endIndex {
            switch commands[position].work {
            case .index(let key, let settings, _):
                // Replay creates indexes with the defaults: log other settings so
                // that a recovered index behaves as this one does.
                if table.ensure(key, settings: settings) && settings != .defaults {
                    records.append(EngineRecord.mutation(key, .settings(settings)).encoded())
                }
                // The run of consecutive commands on this index: one lookup for all.
                var end = position + 1
                while end < commands.endIndex, case .index(key, _, _) = commands[end].work { end += 1 }
                let found: Void? = table.withIndex(key) { index in
                    for command in commands[position..<end] {
                        guard case .index(_, _, let work) = command.work else { continue }
                        let (outcome, mutations) = index.execute(work)
                        for mutation in mutations {
                            records.append(EngineRecord.mutation(key, mutation).encoded())
                        }
                        outcomes.append(
                            ShardOutcome(
                                origin: command.origin, outcome: outcome, waitsFor: LogSequenceNumber(0),
                                wrote: !mutations.isEmpty))
                    }
                }
                if found == nil { preconditionFailure("index \(key) vanished") }
                position = end
            case .removeApp(let app):
                let removed = table.removeApp(app)
                records.append(EngineRecord.appRemoved(app).encoded())
                outcomes.append(
                    ShardOutcome(
                        origin: commands[position].origin, outcome: .appRemoved(devices: removed),
                        waitsFor: LogSequenceNumber(0), wrote: true))
                position += 1
            case .awaitLog:
                preconditionFailure("awaitLog reached shard \(number): loops answer it themselves")
            }
        }
        // Every outcome of the batch waits for the batch's one append (a read
        // also for every earlier append of the log, from any shard).
        let appended = records.isEmpty ? nil : log.append(records)
        let readsWaitFor = appended ?? log.appendedThrough
        for index in outcomes.indices {
            // nil: the log could not take the batch, so no write of it is acknowledged.
            outcomes[index].waitsFor = outcomes[index].wrote ? appended : readsWaitFor
        }
        return outcomes
    }

    // MARK: - Snapshot slices (read-only, not logged)

    /// Returns the keys this shard holds data for, sorted.
    package func keys() -> [IndexKey] { table.sortedKeys }

    /// Returns the settings and credentials of one index, or nothing when the
    /// app is gone.
    package func snapshotHeader(_ key: IndexKey) -> [[UInt8]] {
        table.withIndex(key) { index in
            index.snapshotSettingsAndCredentials().map { EngineRecord.mutation(key, $0).encoded() }
        } ?? []
    }

    /// Returns one slice of an index's people and where to continue (nil: done).
    package func snapshotPeople(_ key: IndexKey, fromSlot: UInt32) -> (records: [[UInt8]], next: UInt32?) {
        table.withIndex(key) { index in
            let slice = index.snapshotPeople(fromSlot: fromSlot, limit: Shard.snapshotSliceDevices)
            return (slice.mutations.map { EngineRecord.mutation(key, $0).encoded() }, slice.next)
        } ?? ([], nil)
    }

    /// Returns one slice of an index's devices and where to continue (nil: done).
    package func snapshotDevices(_ key: IndexKey, afterSequence: UInt64) -> (records: [[UInt8]], next: UInt64?) {
        table.withIndex(key) { index in
            let slice = index.snapshotDevices(afterSequence: afterSequence, limit: Shard.snapshotSliceDevices)
            return (slice.mutations.map { EngineRecord.mutation(key, $0).encoded() }, slice.next)
        } ?? ([], nil)
    }

    /// Returns the record that keeps deleted device ids from being reused.
    package func snapshotSequenceFloor(_ key: IndexKey) -> [[UInt8]] {
        table.withIndex(key) { index in
            [EngineRecord.mutation(key, .deviceSequenceFloor(index.nextDeviceSequence)).encoded()]
        } ?? []
    }

    /// Returns every index's key and settings, sorted by key (start-up
    /// reconciliation with the catalog). O(indexes log indexes).
    package func indexSettings() -> [(key: IndexKey, settings: AppSettings)] {
        table.sortedKeys.compactMap { key in table.indexes[key].map { (key, $0.settings) } }
    }

    /// Returns the number of devices this shard holds (snapshot pre-sizing).
    package func deviceCount() -> Int {
        table.indexes.values.reduce(0) { $0 + $1.stats().devices }
    }

    /// Returns the devices and people of every index this shard holds, in
    /// no order (metrics). O(indexes) in one turn: indexes are bounded by
    /// the catalog's apps (two modes each).
    package func census() -> [IndexCensus] {
        table.indexes.map { key, index in
            let stats = index.stats()
            return IndexCensus(key: key, devices: stats.devices, people: stats.people)
        }
    }

    /// Runs a read-only closure over one index (tests and tools).
    package func read<Result: Sendable>(_ key: IndexKey, _ body: (AppIndex) -> Result) -> Result? {
        table.indexes[key].map(body)
    }
}

/// The size of one index at one moment (metrics).
package struct IndexCensus: Sendable, Equatable {
    package var key: IndexKey
    package var devices: Int
    package var people: Int
}
