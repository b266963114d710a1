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
    /// variable fields' spans, indexed by `VariableField.rawValue`.
    private struct Entry: @unchecked Sendable {
        // @unchecked: the fields' byte pointers are nil in an entry (asserted
        // in `append`); the spans stand for them, into `bytes`.
        var fields: StoredDeviceFields
        var spans: InlineArray<4, ByteSpan> = .init(repeating: .absent)
        /// Not rendered; kept so that a materialized `Device` is the stored one.
        var installationSecretDigest: SecretDigest?
    }

    private var entries: [Entry] = []
    private var bytes: [UInt8] = []

    /// Room for `count` devices of about `bytesPerDevice` variable bytes each.
    init(reservingCapacity count: Int, bytesPerDevice: Int) {
        precondition(
            InlineArray<4, ByteSpan>.count == StoredDeviceFields.VariableField.all.count,
            "one span per variable field")
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
            fields: fields,
            installationSecretDigest: digestSlot == DeviceRecord.noSlot ? nil : store.digests[Int(digestSlot)])
        for field in StoredDeviceFields.VariableField.all {
            store.withVariableBytes(field, at: slot) { stored in
                guard let stored else { return }
                precondition(bytes.count + stored.count < Int(UInt32.max), "stored devices past 4 GiB")
                entry.spans[field.rawValue] = ByteSpan(start: UInt32(bytes.count), count: UInt32(stored.count))
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
                    let span = entries[index].spans[field.rawValue]
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
