/// One bounded step of the inactivity rule (spec §8) over one index: the
/// devices after `afterSequence`, in creation order, that are still active and
/// whose `last_seen_at` is strictly earlier than `lastSeenBefore`.
///
/// A step examines at most `examineMax` devices and invalidates at most
/// `invalidateMax`, so one step is one short shard turn; the caller continues
/// with the step's `next` in a later turn (the server's sweep, the preview and
/// the invalidate route all do). Already invalidated devices never match: they
/// keep their reason and `invalidated_at` (decision 0052).
package struct InactivityStep: Hashable, Sendable {
    package var lastSeenBefore: Timestamp
    /// Devices created after this sequence come next (0: from the start).
    package var afterSequence: UInt64
    /// 1 to `Limits.inactiveScanDevicesPerTurnMax`.
    package var examineMax: Int
    /// 1 to `Limits.inactiveInvalidationsPerTurnMax` (invalidation only).
    package var invalidateMax: Int

    package init(
        lastSeenBefore: Timestamp, afterSequence: UInt64 = 0,
        examineMax: Int = Limits.inactiveScanDevicesPerTurnMax,
        invalidateMax: Int = Limits.inactiveInvalidationsPerTurnMax
    ) {
        precondition(
            (1...Limits.inactiveScanDevicesPerTurnMax).contains(examineMax), "examineMax \(examineMax) out of range")
        precondition(
            (1...Limits.inactiveInvalidationsPerTurnMax).contains(invalidateMax),
            "invalidateMax \(invalidateMax) out of range")
        self.lastSeenBefore = lastSeenBefore
        self.afterSequence = afterSequence
        self.examineMax = examineMax
        self.invalidateMax = invalidateMax
    }

    /// Returns the same step continued after `sequence`.
    package func continued(after sequence: UInt64) -> InactivityStep {
        var next = self
        next.afterSequence = sequence
        return next
    }

    /// Returns the `last_seen_at` a device must be older than to be inactive
    /// `days` days at `now` (clamped at the epoch).
    package static func cutoff(olderThanDays days: Int, now: Timestamp) -> Timestamp {
        precondition(Limits.inactiveAfterDaysRange.contains(days), "older_than_days \(days) out of range")
        return now.adding(milliseconds: -Int64(days) * Limits.millisecondsPerDay)
    }
}

/// What one preview step found: how many active devices matched, the oldest
/// of them (at most the preview's `keep`, oldest `last_seen_at` first, ties by
/// creation), and where the next step starts (nil: done).
package struct InactivePreviewSlice: Hashable, Sendable {
    package var matched: Int
    package var oldest: [Device]
    package var next: UInt64?
}

/// What one invalidation step did: devices invalidated with reason `Inactive`,
/// and where the next step starts (nil: done).
package struct InactiveInvalidationSlice: Hashable, Sendable {
    package var invalidated: Int
    package var next: UInt64?
}

extension DeviceStore {
    /// Returns the slots that match `step` (at most `matchesMax` of them), in
    /// creation order, and where the next step starts. Reads packed records
    /// only. O(examined + log devices).
    private func inactiveSlots(_ step: InactivityStep, matchesMax: Int) -> (slots: [UInt32], next: UInt64?) {
        let cutoff = step.lastSeenBefore.millisecondsSinceEpoch
        let after = step.afterSequence
        var position = lowerBound(in: order, after == UInt64.max ? after : after + 1)
        var examined = 0
        var slots: [UInt32] = []
        while position < order.count {
            let sequence = order[position]
            let slot = orderSlots[position]
            position += 1
            examined += 1
            if slot != DeviceRecord.noSlot {
                let record = records[Int(slot)]
                if !record.isInvalidated && record.lastSeenAt < cutoff { slots.append(slot) }
            }
            if slots.count == matchesMax || examined == step.examineMax {
                return (slots, position < order.count ? sequence : nil)
            }
        }
        return (slots, nil)
    }

    /// `GET /v1/devices/inactive`: one step's count and its `keep` oldest
    /// matches. Changes nothing. O(examined log examined).
    func previewInactive(_ step: InactivityStep, keep: Int) -> InactivePreviewSlice {
        precondition((1...Limits.inactivePreviewLimitMax).contains(keep), "keep \(keep) out of range")
        let (slots, next) = inactiveSlots(step, matchesMax: Int.max)
        let records = records  // captured alone, not the whole store (as in `person`)
        let oldest = slots.sorted { lhs, rhs in
            let left = records[Int(lhs)]
            let right = records[Int(rhs)]
            return (left.lastSeenAt, left.sequence) < (right.lastSeenAt, right.sequence)
        }.prefix(keep).map { device(at: $0) }
        return InactivePreviewSlice(matched: slots.count, oldest: oldest, next: next)
    }

    /// The sweep and `POST /v1/devices/inactive/invalidate`: invalidates one
    /// step's matches with reason `Inactive` at `now` and returns their
    /// upserts. The matches are found first and written second, so the scan
    /// never sees its own writes. O(examined + invalidated × device size).
    mutating func invalidateInactive(
        _ step: InactivityStep, at now: Timestamp
    ) -> (slice: InactiveInvalidationSlice, mutations: [Mutation]) {
        let (slots, next) = inactiveSlots(step, matchesMax: step.invalidateMax)
        var mutations: [Mutation] = []
        mutations.reserveCapacity(slots.count)
        for slot in slots {
            var device = device(at: slot)
            precondition(device.invalidatedAt == nil, "inactive step matched invalidated device \(device.id)")
            precondition(device.lastSeenAt < now, "device \(device.id) last seen after the step's now")
            device.invalidatedAt = now
            device.invalidationReason = .inactive
            storeDevice(device)
            mutations.append(.deviceUpsert(device))
        }
        return (InactiveInvalidationSlice(invalidated: slots.count, next: next), mutations)
    }
}

extension AppIndex {
    /// One preview step (`DeviceStore.previewInactive`).
    package func previewInactive(_ step: InactivityStep, keep: Int) -> InactivePreviewSlice {
        store.previewInactive(step, keep: keep)
    }

    /// One invalidation step (`DeviceStore.invalidateInactive`).
    package mutating func invalidateInactive(
        _ step: InactivityStep, at now: Timestamp
    ) -> (slice: InactiveInvalidationSlice, mutations: [Mutation]) {
        store.invalidateInactive(step, at: now)
    }
}
