extension AppIndex {
    /// The small, non-sliced part of a snapshot: settings and credentials.
    /// O(credentials log credentials).
    package func snapshotSettingsAndCredentials() -> [Mutation] {
        var result: [Mutation] = [.settings(settings)]
        for key in credentials.keys.sorted() {
            if let credential = credentials[key] { result.append(.credentialUpsert(credential)) }
        }
        return result
    }

    /// One bounded slice of a snapshot's people, in slot order from `fromSlot`:
    /// at most `limit` upserts and the slot to continue from (nil when done).
    /// A person created or erased after its slot was read has a log record at
    /// or after the snapshot's start LSN, so replay makes the slices exact.
    /// O(limit) (plus free slots skipped).
    package func snapshotPeople(fromSlot: UInt32, limit: Int) -> (mutations: [Mutation], next: UInt32?) {
        precondition(limit >= 1, "snapshot slice limit must be positive, got \(limit)")
        var slot = Int(fromSlot)
        var result: [Mutation] = []
        while slot < people.count && result.count < limit {
            if !people[slot].isFree { result.append(.personUpsert(person(at: UInt32(slot)))) }
            slot += 1
        }
        return (result, slot < people.count ? UInt32(slot) : nil)
    }
}
