// Device histories (spec §9) on the store: recording a change's events,
// replaying them, reading them and cutting them into snapshot records.
extension DeviceStore {
    /// Whether a change of `id` with `events` must first record the device's
    /// synthesized history (its first change: nothing is stored yet).
    func needsSynthesizedHistory(_ id: DeviceID, events: [HistoryEvent]) -> Bool {
        !events.isEmpty && history.newestOrdinal(id.sequence) == 0
    }

    /// Records the events of one change of the device `id` (already stored)
    /// and appends the `deviceHistory` mutation that replays them. A device's
    /// first recorded change is preceded by `synthesized`, the history it
    /// showed until now (`HistoryEvent.synthesized` of the device before the
    /// change: `created`, and `registered` if it was registered again),
    /// given exactly when `needsSynthesizedHistory`. A `registered` event
    /// right after a stored (or synthesized) `registered` one replaces it
    /// (consecutive re-registrations coalesce into the newest). Nothing for
    /// an empty `events`. O(events).
    mutating func recordHistory(
        of id: DeviceID, synthesized: [HistoryEvent]?, events: [HistoryEvent], into mutations: inout [Mutation]
    ) {
        precondition(
            (synthesized != nil) == needsSynthesizedHistory(id, events: events),
            "synthesized history given wrongly for \(id)")
        guard let firstEvent = events.first else { return }
        let newest = history.newestOrdinal(id.sequence)
        var recorded = events
        let firstOrdinal: UInt64
        if var prefix = synthesized {
            if firstEvent.kind == .registered && prefix.last?.kind == .registered { prefix.removeLast() }
            recorded = prefix + events
            precondition(recorded.count <= Limits.historyEventsPerRecordMax, "\(recorded.count) events in one change")
            firstOrdinal = 1
        } else if firstEvent.kind == .registered && history.newestKind(id.sequence) == .registered {
            firstOrdinal = newest
        } else {
            firstOrdinal = newest + 1
        }
        history.apply(id.sequence, firstOrdinal: firstOrdinal, events: recorded)
        mutations.append(.deviceHistory(id, firstOrdinal: firstOrdinal, events: recorded))
    }

    /// Replays a `deviceHistory` record. Events of a device this index does
    /// not hold are ignored: under a fuzzy snapshot the device may be gone
    /// already (its tombstone follows in the log).
    mutating func applyDeviceHistory(_ id: DeviceID, firstOrdinal: UInt64, events: [HistoryEvent])
        throws(MutationApplyError)
    {
        guard id.appID == appID, id.mode == mode else { throw .foreignDevice(id) }
        guard slot(of: id) != nil else { return }
        history.apply(id.sequence, firstOrdinal: firstOrdinal, events: events)
    }

    /// The `historyRedaction` mutations that remove `externalID` from the
    /// stored history of every device still held (decision 0079): runs of
    /// consecutive ordinals, at most `Limits.historyEventsPerRecordMax` a
    /// record. Synthesized histories need none: they show the device's own
    /// person, and a device bound to the erased person is removed first.
    /// O(history events) at worst.
    func historyRedactions(naming externalID: ExternalID) -> [Mutation] {
        var result: [Mutation] = []
        var run: (id: DeviceID, firstOrdinal: UInt64, events: [HistoryEvent])? = nil
        for found in history.redactions(naming: externalID) {
            guard let slot = slot(ofSequence: found.sequence) else { continue }
            if var current = run, current.id.sequence == found.sequence,
                current.firstOrdinal + UInt64(current.events.count) == found.ordinal,
                current.events.count < Limits.historyEventsPerRecordMax
            {
                current.events.append(found.event)
                run = current
                continue
            }
            if let current = run {
                result.append(.historyRedaction(current.id, firstOrdinal: current.firstOrdinal, events: current.events))
            }
            run = (device(at: slot).id, found.ordinal, [found.event])
        }
        if let current = run {
            result.append(.historyRedaction(current.id, firstOrdinal: current.firstOrdinal, events: current.events))
        }
        return result
    }

    /// Replays a `historyRedaction` record; a device this index no longer
    /// holds is skipped, as for `deviceHistory`.
    mutating func applyHistoryRedaction(_ id: DeviceID, firstOrdinal: UInt64, events: [HistoryEvent])
        throws(MutationApplyError)
    {
        guard id.appID == appID, id.mode == mode else { throw .foreignDevice(id) }
        guard slot(of: id) != nil else { return }
        history.redact(id.sequence, firstOrdinal: firstOrdinal, events: events)
    }

    /// Returns the device's history, newest first: the stored events, or the
    /// synthesized ones (`created`, and `registered` if re-registered) for a
    /// device that never changed otherwise; nil for no such device. O(events).
    func history(_ id: DeviceID) -> [HistoryEvent]? {
        guard let slot = slot(of: id) else { return nil }
        guard let stored = history.events(id.sequence) else {
            return HistoryEvent.synthesized(device(at: slot)).reversed()
        }
        return stored.reversed()
    }

    /// The stored history rings of the devices `sequences` and the strings
    /// they name (`DeviceHistoryStore.frozen`), for a person export.
    func frozenHistories(_ sequences: [UInt64]) -> (rings: [DeviceEventRing?], names: [UInt32: String]) {
        history.frozen(sequences)
    }

    /// The records that rebuild the stored history of `id` (none when it has
    /// none), in chunks of `Limits.historyEventsPerRecordMax`. O(events).
    func historyMutations(_ id: DeviceID) -> [Mutation] {
        guard let stored = history.events(id.sequence) else { return [] }
        let newest = history.newestOrdinal(id.sequence)
        let oldestOrdinal = newest - UInt64(stored.count) + 1
        var result: [Mutation] = []
        var start = 0
        while start < stored.count {
            let end = min(start + Limits.historyEventsPerRecordMax, stored.count)
            result.append(
                .deviceHistory(id, firstOrdinal: oldestOrdinal + UInt64(start), events: Array(stored[start..<end])))
            start = end
        }
        return result
    }
}
