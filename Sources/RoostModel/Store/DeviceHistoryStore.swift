/// One history event as the index keeps it: 28 bytes, no pointers.
///
/// The time is 48 bits of milliseconds (the `Timestamp` domain, 1970…9999,
/// needs 48); people and reasons are ids in the history's own
/// `StringInterner` (0 = none); the fingerprint is 8 bytes, flagged present.
struct PackedHistoryEvent: Sendable {
    var fingerprintLow: UInt32
    var fingerprintHigh: UInt32
    var atLow: UInt32
    var atHigh: UInt16
    var kind: UInt8
    /// Bit 0: a fingerprint is present.
    var flags: UInt8
    var person: UInt32
    var previousPerson: UInt32
    var reason: UInt32
}

/// The events of one device: a ring of at most `Limits.historyEventsPerDeviceMax`,
/// and the ordinal (1-based count since creation) of the newest one.
struct DeviceEventRing: Sendable {
    var newestOrdinal: UInt64
    /// Index of the oldest event once the ring is full (0 before).
    var start: Int
    var events: ContiguousArray<PackedHistoryEvent>
}

/// The histories of one index's devices (spec §9), keyed by device sequence.
///
/// Only a device that changed has an entry: a device that never changed
/// shows one `created` event made from its own fields (`HistoryEvent.created`),
/// so it costs nothing here. Each entry is a ring of packed events; people and
/// reasons are interned in this store's own reference-counted interner, so an
/// erased device's history lets go of every string it held.
///
/// Replay is idempotent by ordinal: an event whose ordinal is below the ring's
/// newest is already there; one equal to it replaces the newest (consecutive
/// `registered` events coalesce into one, and a replayed event equals itself);
/// a higher one is appended. A fuzzy snapshot plus the log from its start
/// therefore converges to the state that wrote the log.
struct DeviceHistoryStore: Sendable {
    private(set) var rings: [UInt64: DeviceEventRing] = [:]
    private var strings = StringInterner()
    /// Events held, over all devices.
    private(set) var eventCount = 0

    /// The ordinal of `sequence`'s newest stored event (0: none stored).
    func newestOrdinal(_ sequence: UInt64) -> UInt64 { rings[sequence]?.newestOrdinal ?? 0 }

    /// The kind of `sequence`'s newest stored event, or nil.
    func newestKind(_ sequence: UInt64) -> HistoryEventKind? {
        guard let ring = rings[sequence], !ring.events.isEmpty else { return nil }
        let newest = ring.start == 0 ? ring.events.count - 1 : ring.start - 1
        return HistoryEventKind(rawValue: ring.events[newest].kind)
    }

    /// Applies events `firstOrdinal`, `firstOrdinal + 1`, … to `sequence`'s
    /// ring (see the type's comment). O(events).
    mutating func apply(_ sequence: UInt64, firstOrdinal: UInt64, events: [HistoryEvent]) {
        precondition(firstOrdinal >= 1, "history ordinal 0 for device \(sequence)")
        var ring = rings.removeValue(forKey: sequence) ?? DeviceEventRing(newestOrdinal: 0, start: 0, events: [])
        for (offset, event) in events.enumerated() {
            let ordinal = firstOrdinal + UInt64(offset)
            if ordinal < ring.newestOrdinal { continue }
            let packed = pack(event)
            if ordinal == ring.newestOrdinal && !ring.events.isEmpty {
                let newest = ring.start == 0 ? ring.events.count - 1 : ring.start - 1
                release(ring.events[newest])
                ring.events[newest] = packed
            } else if ring.events.count < Limits.historyEventsPerDeviceMax {
                ring.events.append(packed)
                eventCount += 1
            } else {
                release(ring.events[ring.start])
                ring.events[ring.start] = packed
                ring.start = (ring.start + 1) % ring.events.count
            }
            ring.newestOrdinal = ordinal
        }
        precondition(ring.events.count <= Limits.historyEventsPerDeviceMax, "history ring over its limit")
        rings[sequence] = ring
    }

    /// The stored events that name `externalID` (as the person or the
    /// previous person), with that field cleared, by device sequence then
    /// ordinal: what an erasure writes over them (decision 0079). Stops
    /// once every reference the interner counts is found. O(events) at
    /// worst; O(1) when no event names the id.
    func redactions(naming externalID: ExternalID) -> [(sequence: UInt64, ordinal: UInt64, event: HistoryEvent)] {
        guard let id = strings.id(of: externalID.rawValue) else { return [] }
        var remaining = strings.referenceCount(id)
        var found: [(sequence: UInt64, ordinal: UInt64, event: HistoryEvent)] = []
        for (sequence, ring) in rings where remaining > 0 {
            let oldestOrdinal = ring.newestOrdinal - UInt64(ring.events.count) + 1
            for index in 0..<ring.events.count {
                let packed = ring.events[(ring.start + index) % ring.events.count]
                guard packed.person == id || packed.previousPerson == id else { continue }
                if packed.person == id { remaining -= 1 }
                if packed.previousPerson == id { remaining -= 1 }
                var event = unpack(packed)
                if packed.person == id { event.externalID = nil }
                if packed.previousPerson == id { event.previousExternalID = nil }
                found.append((sequence, oldestOrdinal + UInt64(index), event))
            }
        }
        // Sorted here, not the rings: only what was found is ordered.
        return found.sorted { ($0.sequence, $0.ordinal) < ($1.sequence, $1.ordinal) }
    }

    /// Replaces stored events `firstOrdinal`, … of `sequence` by `events`
    /// (an erasure's redaction, decision 0079): each only while its ordinal
    /// is still held and the stored event is the same event (time and
    /// kind), so a replay over a newer state changes nothing else. O(events).
    mutating func redact(_ sequence: UInt64, firstOrdinal: UInt64, events: [HistoryEvent]) {
        guard var ring = rings.removeValue(forKey: sequence) else { return }
        let oldestOrdinal = ring.newestOrdinal - UInt64(ring.events.count) + 1
        for (offset, event) in events.enumerated() {
            let ordinal = firstOrdinal + UInt64(offset)
            guard ordinal >= oldestOrdinal, ordinal <= ring.newestOrdinal else { continue }
            let position = (ring.start + Int(ordinal - oldestOrdinal)) % ring.events.count
            let stored = ring.events[position]
            guard stored.kind == event.kind.rawValue, unpack(stored).at == event.at else { continue }
            let packed = pack(event)
            release(stored)
            ring.events[position] = packed
        }
        rings[sequence] = ring
    }

    /// Drops `sequence`'s history (the device is gone). O(its events).
    mutating func remove(_ sequence: UInt64) {
        guard let ring = rings.removeValue(forKey: sequence) else { return }
        for event in ring.events { release(event) }
        eventCount -= ring.events.count
    }

    /// Returns `sequence`'s stored events, oldest first, or nil when none are
    /// stored. O(events).
    func events(_ sequence: UInt64) -> [HistoryEvent]? {
        guard let ring = rings[sequence] else { return nil }
        var result: [HistoryEvent] = []
        result.reserveCapacity(ring.events.count)
        for index in 0..<ring.events.count {
            result.append(unpack(ring.events[(ring.start + index) % ring.events.count]))
        }
        return result
    }

    /// Approximate heap bytes: the rings' storage and the dictionary's entries.
    var memoryBytes: Int {
        var bytes = rings.capacity * (MemoryLayout<UInt64>.stride + MemoryLayout<DeviceEventRing>.stride + 1)
        for ring in rings.values { bytes += 32 + ring.events.capacity * MemoryLayout<PackedHistoryEvent>.stride }
        return bytes
    }

    /// Returns every broken invariant of the store (empty when consistent). O(events).
    func invariantViolations() -> [String] {
        var problems: [String] = []
        var uses: [UInt32: UInt32] = [:]
        var events = 0
        for (sequence, ring) in rings {
            events += ring.events.count
            if ring.events.isEmpty { problems.append("history \(sequence): empty ring") }
            if ring.events.count > Limits.historyEventsPerDeviceMax { problems.append("history \(sequence): too long") }
            if UInt64(ring.events.count) > ring.newestOrdinal { problems.append("history \(sequence): ordinal") }
            if ring.start != 0 && ring.events.count != Limits.historyEventsPerDeviceMax {
                problems.append("history \(sequence): ring start in a ring not full")
            }
            for event in ring.events {
                for id in [event.person, event.previousPerson, event.reason] where id != 0 { uses[id, default: 0] += 1 }
            }
        }
        if events != eventCount { problems.append("history event count \(eventCount) != \(events)") }
        strings.forEachLive { id, references in
            if uses[id, default: 0] != references { problems.append("history interned \(id): \(references) refs") }
        }
        if uses.count != strings.count { problems.append("history interned strings in use not live") }
        return problems
    }

    private mutating func pack(_ event: HistoryEvent) -> PackedHistoryEvent {
        let at = UInt64(event.at.millisecondsSinceEpoch)
        precondition(at < 1 << 48, "history time \(event.at.millisecondsSinceEpoch) beyond 48 bits")
        let fingerprint = event.tokenFingerprint?.rawValue ?? 0
        return PackedHistoryEvent(
            fingerprintLow: UInt32(truncatingIfNeeded: fingerprint),
            fingerprintHigh: UInt32(truncatingIfNeeded: fingerprint >> 32),
            atLow: UInt32(truncatingIfNeeded: at), atHigh: UInt16(truncatingIfNeeded: at >> 32),
            kind: event.kind.rawValue, flags: event.tokenFingerprint == nil ? 0 : 1,
            person: strings.retain(event.externalID?.rawValue),
            previousPerson: strings.retain(event.previousExternalID?.rawValue),
            reason: strings.retain(event.reason?.rawValue))
    }

    private mutating func release(_ event: PackedHistoryEvent) {
        strings.release(event.person)
        strings.release(event.previousPerson)
        strings.release(event.reason)
    }

    private func unpack(_ packed: PackedHistoryEvent) -> HistoryEvent {
        Self.unpack(packed) { id in strings.string(id) }
    }

    /// Unpacks an event, reading its interned strings through `name` (nil for id 0).
    static func unpack(_ packed: PackedHistoryEvent, name: (UInt32) -> String?) -> HistoryEvent {
        guard let kind = HistoryEventKind(rawValue: packed.kind) else {
            preconditionFailure("stored history kind \(packed.kind)")
        }
        let at = Int64(UInt64(packed.atHigh) << 32 | UInt64(packed.atLow))
        let fingerprint = UInt64(packed.fingerprintHigh) << 32 | UInt64(packed.fingerprintLow)
        return HistoryEvent(
            at: Timestamp(millisecondsSinceEpoch: at), kind: kind,
            externalID: name(packed.person).map(ExternalID.init(unchecked:)),
            previousExternalID: name(packed.previousPerson).map(ExternalID.init(unchecked:)),
            tokenFingerprint: packed.flags & 1 == 0 ? nil : TokenFingerprint(rawValue: fingerprint),
            reason: name(packed.reason).map(InvalidationReason.init(unchecked:)))
    }

    /// The rings of `sequences` (nil where none is stored), shared
    /// copy-on-write, and the interned strings their events name: a frozen
    /// history for a person export (`PersonExport`). O(their events).
    func frozen(_ sequences: [UInt64]) -> (rings: [DeviceEventRing?], names: [UInt32: String]) {
        var found: [DeviceEventRing?] = []
        found.reserveCapacity(sequences.count)
        var names: [UInt32: String] = [:]
        func note(_ id: UInt32) {
            if id != 0 && names[id] == nil { names[id] = strings.string(id) }
        }
        for sequence in sequences {
            let ring = rings[sequence]
            for event in ring?.events ?? [] {
                note(event.person)
                note(event.previousPerson)
                note(event.reason)
            }
            found.append(ring)
        }
        return (found, names)
    }
}
