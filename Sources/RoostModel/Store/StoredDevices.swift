/// Devices' stored fields copied out of a store in one shard turn: the value
/// a read's outcome carries to the loop that renders it, without a `Device`
/// built per device. A person read built each device's token array, strings
/// and tags, copied the values into the answer's array and released them
/// again (issue 25: about 4 % of a person read's CPU). Two allocations
/// whatever the number of devices: the entries, and one byte buffer holding
/// every device's variable bytes (token, installation id, external id, tags).
package struct StoredDevices: Sendable {
    /// Where one variable field's bytes lie in `bytes`.
    private struct ByteSpan {
        var start: UInt32
        var count: UInt32

        static let absent = ByteSpan(start: UInt32.max, count: 0)
        var isAbsent: Bool { start == UInt32.max }
    }

    /// One device: its fixed fields (their byte pointers nil) and its
    /// variable fields' spans, in `VariableField` order.
    private struct Entry: @unchecked Sendable {
        // @unchecked: the fields' byte pointers are nil in an entry (asserted
        // in `append`); the spans stand for them, into `bytes`.
        var fields: StoredDeviceFields
        var spans: (ByteSpan, ByteSpan, ByteSpan, ByteSpan)
        /// Not rendered; kept so that a materialized `Device` is the stored one.
        var installationSecretDigest: SecretDigest?

        func span(_ field: StoredDeviceFields.VariableField) -> ByteSpan {
            switch field {
            case .token: spans.0
            case .installationID: spans.1
            case .externalID: spans.2
            case .tags: spans.3
            }
        }

        mutating func setSpan(_ span: ByteSpan, for field: StoredDeviceFields.VariableField) {
            switch field {
            case .token: spans.0 = span
            case .installationID: spans.1 = span
            case .externalID: spans.2 = span
            case .tags: spans.3 = span
            }
        }
    }

    private var entries: [Entry] = []
    private var bytes: [UInt8] = []

    /// Room for `count` devices of about `bytesPerDevice` variable bytes each.
    init(reservingCapacity count: Int, bytesPerDevice: Int) {
        entries.reserveCapacity(count)
        bytes.reserveCapacity(count * bytesPerDevice)
    }

    package var count: Int { entries.count }
    package var isEmpty: Bool { entries.isEmpty }

    /// Appends the device at `slot` of `store`: its fields and its variable bytes copied. O(its bytes).
    mutating func append(slot: UInt32, of store: DeviceStore) {
        let fields = store.fixedFields(at: slot)
        precondition(
            fields.token == nil && fields.installationID == nil && fields.externalID == nil && fields.tags == nil,
            "fixed fields that point at bytes")
        let digestSlot = store.records[Int(slot)].digest
        var entry = Entry(
            fields: fields, spans: (.absent, .absent, .absent, .absent),
            installationSecretDigest: digestSlot == DeviceRecord.noSlot ? nil : store.digests[Int(digestSlot)])
        for field in StoredDeviceFields.VariableField.all {
            store.withVariableBytes(field, at: slot) { stored in
                guard let stored else { return }
                precondition(bytes.count + stored.count < Int(UInt32.max), "stored devices past 4 GiB")
                entry.setSpan(ByteSpan(start: UInt32(bytes.count), count: UInt32(stored.count)), for: field)
                bytes.append(contentsOf: stored)
            }
        }
        entries.append(entry)
    }

    /// Calls `body` with each device's fields, in the order they were
    /// appended; the byte pointers are valid only inside the call. No allocation.
    package func forEach(_ body: (borrowing StoredDeviceFields) -> Void) {
        bytes.withUnsafeBytes { base in
            for index in entries.indices {
                var fields = entries[index].fields
                for field in StoredDeviceFields.VariableField.all {
                    let span = entries[index].span(field)
                    guard !span.isAbsent else { continue }
                    fields[field] = UnsafeRawBufferPointer(
                        rebasing: base[Int(span.start)..<Int(span.start) + Int(span.count)])
                }
                body(fields)
            }
        }
    }

    /// The devices as `Device` values (tests and tools; an answer renders
    /// through `forEach`). O(devices + bytes).
    package var materialized: [Device] {
        var devices: [Device] = []
        devices.reserveCapacity(entries.count)
        var index = 0
        forEach { fields in
            devices.append(Device(stored: fields, installationSecretDigest: entries[index].installationSecretDigest))
            index += 1
        }
        return devices
    }
}

extension Device {
    /// The device whose stored fields are `fields` (its installation secret's
    /// digest is not among them: given apart). The inverse of `withStoredFields`.
    package init(stored fields: borrowing StoredDeviceFields, installationSecretDigest: SecretDigest?) {
        let platform = fields.id.platform
        self.init(
            id: fields.id, environment: fields.environment,
            token: fields.token.map { PushToken(unchecked: Array($0), platform: platform) },
            createdAt: fields.createdAt)
        lastSeenAt = fields.lastSeenAt
        bundleID = fields.bundleID.map(BundleID.init(unchecked:))
        installationID = fields.installationID.map { InstallationID(unchecked: String(decoding: $0, as: UTF8.self)) }
        self.installationSecretDigest = installationSecretDigest
        externalID = fields.externalID.map { ExternalID(unchecked: String(decoding: $0, as: UTF8.self)) }
        boundAt = fields.boundAt
        appVersion = fields.appVersion
        timezone = fields.timezone
        locale = fields.locale
        pushPermission = fields.pushPermission
        optedIn = fields.optedIn
        tags = fields.tags.map { Tags(storedEncoding: Array($0)) } ?? .empty
        invalidatedAt = fields.invalidatedAt
        invalidationReason = fields.invalidationReason.map(InvalidationReason.init(unchecked:))
        strikes = fields.strikes
        version = fields.version
        clientSequence = fields.clientSequence
    }
}
