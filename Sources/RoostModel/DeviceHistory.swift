import RoostCrypto

/// What happened to a device (spec §9, `GET /v1/devices/{id}/history`).
///
/// The raw values are the codec's and the in-memory ring's: never renumber.
package enum HistoryEventKind: UInt8, Hashable, Sendable, CaseIterable {
    /// The device was created (its first registration).
    case created = 1
    /// A registration presented the device's own token again.
    case registered = 2
    /// A registration gave the device another token.
    case tokenReplaced = 3
    /// The device was bound to another person (or bound for the first time).
    case moved = 4
    /// The device's person was cleared (`external_id: null`).
    case unbound = 5
    /// The device was invalidated (feedback, `Reassigned`, `Superseded`, `Dead`, `Inactive`, …).
    case invalidated = 6
    /// A registration cleared the device's invalidation.
    case revalidated = 7
    /// The device's tags changed (registration or PATCH).
    case tagsChanged = 8
    /// `opted_in` became true.
    case optedIn = 9
    /// `opted_in` became false.
    case optedOut = 10

    /// The spec's word for the kind.
    package var name: String {
        switch self {
        case .created: "created"
        case .registered: "registered"
        case .tokenReplaced: "token_replaced"
        case .moved: "moved"
        case .unbound: "unbound"
        case .invalidated: "invalidated"
        case .revalidated: "revalidated"
        case .tagsChanged: "tags_changed"
        case .optedIn: "opted_in"
        case .optedOut: "opted_out"
        }
    }
}

/// A set of history event kinds, listed in ascending raw value, which is
/// the order `HistoryEvent.events` gives a change's events in. One word: a
/// registration decides its events' kinds before it builds any event.
/// (No array literal: its variadic arguments would be an allocation.)
package struct HistoryEventKinds: Sequence, Equatable, Sendable {
    private var bits: UInt16 = 0

    /// The set of `kind` alone.
    package init(_ kind: HistoryEventKind) {
        insert(kind)
    }

    package mutating func insert(_ kind: HistoryEventKind) {
        bits |= 1 << kind.rawValue
    }

    package var count: Int { bits.nonzeroBitCount }

    package func makeIterator() -> Iterator { Iterator(remaining: bits) }

    package struct Iterator: IteratorProtocol {
        var remaining: UInt16

        package mutating func next() -> HistoryEventKind? {
            guard remaining != 0 else { return nil }
            let raw = UInt8(remaining.trailingZeroBitCount)
            remaining &= remaining - 1
            guard let kind = HistoryEventKind(rawValue: raw) else {
                preconditionFailure("history event kind \(raw) in a set of kinds")
            }
            return kind
        }
    }
}

/// The first 8 bytes of SHA-256 of a token as the API shows it (APNs: the
/// lower-case hex, FCM: its characters), rendered as 16 hex digits: enough to
/// tell tokens apart and to check a token one holds, never the token itself.
package struct TokenFingerprint: Hashable, Sendable {
    package let rawValue: UInt64

    package init(rawValue: UInt64) { self.rawValue = rawValue }

    /// The fingerprint of `token`. O(token bytes), with no heap allocation:
    /// the text is spelled into a stack buffer (`PushToken.withText`).
    package init(_ token: PushToken) {
        rawValue = token.withText { Crypto.sha256Words($0).0 }
    }

    /// 16 lower-case hex digits.
    package var rendered: String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(16)
        for shift in stride(from: 60, through: 0, by: -4) {
            text.append(digits[Int((rawValue >> UInt64(shift)) & 0xF)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}

/// One entry of a device's history. Every event names the device's person and
/// token fingerprint as they are after it; `previousExternalID` is set only by
/// `moved` and `unbound`, `reason` only by `invalidated` (docs/model.md §8).
package struct HistoryEvent: Hashable, Sendable {
    package var at: Timestamp
    package var kind: HistoryEventKind
    package var externalID: ExternalID?
    package var previousExternalID: ExternalID?
    package var tokenFingerprint: TokenFingerprint?
    package var reason: InvalidationReason?

    package init(
        at: Timestamp, kind: HistoryEventKind, externalID: ExternalID?, previousExternalID: ExternalID? = nil,
        tokenFingerprint: TokenFingerprint?, reason: InvalidationReason? = nil
    ) {
        self.at = at
        self.kind = kind
        self.externalID = externalID
        self.previousExternalID = previousExternalID
        self.tokenFingerprint = tokenFingerprint
        self.reason = reason
    }

    /// The history of a device none is stored for, oldest first: `created`
    /// (its creation time, person and token: nothing that makes another kind
    /// of event has touched them), then `registered` at `last_seen_at` when
    /// it was registered again since (re-registrations with nothing new, the
    /// common case of an app registering at every launch, store nothing;
    /// coalesced, they are one `registered` at the latest time).
    package static func synthesized(_ device: Device) -> [HistoryEvent] {
        let fingerprint = device.token.map(TokenFingerprint.init)
        var result = [
            HistoryEvent(
                at: device.createdAt, kind: .created, externalID: device.externalID, tokenFingerprint: fingerprint)
        ]
        if device.lastSeenAt > device.createdAt {
            result.append(
                HistoryEvent(
                    at: device.lastSeenAt, kind: .registered, externalID: device.externalID,
                    tokenFingerprint: fingerprint))
        }
        return result
    }

    /// Returns the events of one change of a device from `old` to `new` at
    /// `now`, in this order: the registration's own event (`token_replaced`,
    /// else `registered`, only when `registration`), `moved`/`unbound`,
    /// `invalidated`/`revalidated`, `tags_changed`, `opted_in`/`opted_out`.
    /// Empty when nothing a history shows changed (a strike, say). O(tags).
    package static func events(from old: Device, to new: Device, registration: Bool, at now: Timestamp)
        -> [HistoryEvent]
    {
        let fingerprint = new.token.map(TokenFingerprint.init)
        func event(_ kind: HistoryEventKind, previous: ExternalID? = nil, reason: InvalidationReason? = nil)
            -> HistoryEvent
        {
            HistoryEvent(
                at: now, kind: kind, externalID: new.externalID, previousExternalID: previous,
                tokenFingerprint: fingerprint, reason: reason)
        }
        var result: [HistoryEvent] = []
        if registration {
            result.append(event(new.token != nil && new.token != old.token ? .tokenReplaced : .registered))
        }
        if new.externalID != old.externalID {
            result.append(event(new.externalID == nil ? .unbound : .moved, previous: old.externalID))
        }
        if new.invalidatedAt != nil
            && (old.invalidatedAt == nil || old.invalidationReason != new.invalidationReason
                || (old.token != nil && new.token == nil))
        {
            // A new invalidation, or an invalidated device losing its token
            // (`Reassigned`) or its reason changing: each is a new invalidation.
            result.append(event(.invalidated, reason: new.invalidationReason))
        } else if new.invalidatedAt == nil && old.invalidatedAt != nil {
            result.append(event(.revalidated))
        }
        if new.tags != old.tags { result.append(event(.tagsChanged)) }
        if new.optedIn != old.optedIn { result.append(event(new.optedIn ? .optedIn : .optedOut)) }
        return result
    }
}

/// The data subject's copy (spec §10) frozen in one shard turn: the person,
/// their devices (in creation order) and each device's history as the index
/// keeps it — its packed ring shared copy-on-write (a later write to that
/// device's history copies the ring, ≤ 2.8 KB, not the export), with the
/// few strings those events name — unpacked a device at a time by
/// `history(_:)` as the answer streams (issue 24 H-1, decision 0081).
package struct PersonExport: Sendable {
    package let person: Person
    package let devices: [Device]
    /// `devices[i]`'s stored ring, or nil when it has none (its history is
    /// then synthesized from the device).
    let rings: [DeviceEventRing?]
    /// The interned strings (people, reasons) the rings' events name.
    let names: [UInt32: String]

    init(person: Person, devices: [Device], rings: [DeviceEventRing?], names: [UInt32: String]) {
        precondition(devices.count == rings.count, "\(devices.count) devices, \(rings.count) rings")
        self.person = person
        self.devices = devices
        self.rings = rings
        self.names = names
    }

    /// The history of `devices[index]`, newest first, as `GET
    /// /v1/devices/{id}/history` shows it. O(its events).
    package func history(_ index: Int) -> [HistoryEvent] {
        guard let ring = rings[index] else { return HistoryEvent.synthesized(devices[index]).reversed() }
        var result: [HistoryEvent] = []
        result.reserveCapacity(ring.events.count)
        for offset in (0..<ring.events.count).reversed() {
            let packed = ring.events[(ring.start + offset) % ring.events.count]
            result.append(DeviceHistoryStore.unpack(packed) { id in id == 0 ? nil : names[id] })
        }
        return result
    }
}
