/// One stored device's fields, as a pass over a store gives them
/// (`IndexExportView.forEachDevice`): what an answer renders straight into
/// its bytes without building a `Device` (issue 25: no `Tags` dictionary,
/// token array or `String` per exported device). The byte buffers point
/// into the pass's scratch memory and are valid only inside the call that
/// gives them.
package struct StoredDeviceFields {
    package var id: DeviceID
    package var environment: APNsEnvironment
    /// The token's stored bytes (APNs: the raw bytes, written as lower-case
    /// hex; FCM: the token's text), nil for a device that lost its token.
    package var token: UnsafeRawBufferPointer?
    package var bundleID: String?
    /// UTF-8 bytes.
    package var installationID: UnsafeRawBufferPointer?
    /// UTF-8 bytes of the bound person's external id.
    package var externalID: UnsafeRawBufferPointer?
    package var createdAt: Timestamp
    package var lastSeenAt: Timestamp
    package var boundAt: Timestamp?
    package var appVersion: String?
    package var timezone: String?
    package var locale: String?
    package var pushPermission: Bool?
    package var optedIn: Bool
    /// The stored tags' encoding (`Tags`: a count, then each key and value,
    /// keys in `TagKey` order); nil for no tags.
    package var tags: UnsafeRawBufferPointer?
    package var invalidatedAt: Timestamp?
    package var invalidationReason: String?
    package var strikes: UInt32
    package var version: UInt32
    package var clientSequence: UInt64?

    /// The fields whose bytes a pass lends (a store keeps them in its blobs or its records).
    package enum VariableField: Int, CaseIterable, Sendable {
        case token, installationID, externalID, tags

        /// Every case, built once: `allCases` builds its array at each call
        /// (an allocation per device in a debug build, where passes loop over it).
        package static let all = allCases
    }

    /// One of the variable fields' bytes.
    package subscript(field: VariableField) -> UnsafeRawBufferPointer? {
        get {
            switch field {
            case .token: token
            case .installationID: installationID
            case .externalID: externalID
            case .tags: tags
            }
        }
        set {
            switch field {
            case .token: token = newValue
            case .installationID: installationID = newValue
            case .externalID: externalID = newValue
            case .tags: tags = newValue
            }
        }
    }

    /// The bytes of the variable fields (what escaping can grow, at most 6×
    /// each): a renderer's bound is a constant plus 6 × this.
    package var variableBytes: Int {
        (token?.count ?? 0) * 2 + (bundleID?.utf8.count ?? 0) + (installationID?.count ?? 0)
            + (externalID?.count ?? 0) + (appVersion?.utf8.count ?? 0) + (timezone?.utf8.count ?? 0)
            + (locale?.utf8.count ?? 0) + (tags?.count ?? 0) + (invalidationReason?.utf8.count ?? 0)
    }
}

extension Device {
    /// Calls `body` with this device's fields as `StoredDeviceFields`, its
    /// bytes borrowed from the value for the call: one renderer of the
    /// device JSON serves values and stored devices alike. No allocation.
    package func withStoredFields(_ body: (borrowing StoredDeviceFields) -> Void) {
        var fields = StoredDeviceFields(
            id: id, environment: environment, token: nil, bundleID: bundleID?.rawValue, installationID: nil,
            externalID: nil, createdAt: createdAt, lastSeenAt: lastSeenAt, boundAt: boundAt, appVersion: appVersion,
            timezone: timezone, locale: locale, pushPermission: pushPermission, optedIn: optedIn, tags: nil,
            invalidatedAt: invalidatedAt, invalidationReason: invalidationReason?.rawValue, strikes: strikes,
            version: version, clientSequence: clientSequence)
        let installation = installationID?.rawValue
        let external = externalID?.rawValue
        let encodedTags = tags.encoded
        Self.withOptionalBytes(of: token) { token in
            fields.token = token
            Self.withOptionalUTF8(installation) { installation in
                fields.installationID = installation
                Self.withOptionalUTF8(external) { external in
                    fields.externalID = external
                    Self.withOptionalBytes(encodedTags.isEmpty ? nil : encodedTags) { tags in
                        fields.tags = tags
                        body(fields)
                    }
                }
            }
        }
    }

    /// The device whose stored fields are `fields` (its installation secret's
    /// digest is not among them: given apart). The inverse of `withStoredFields`.
    package init(stored fields: borrowing StoredDeviceFields, installationSecretDigest: SecretDigest?) {
        let platform = fields.id.platform
        self.init(
            id: fields.id, environment: fields.environment,
            token: fields.token.map { PushToken(unchecked: $0, platform: platform) },
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

    private static func withOptionalBytes(_ bytes: [UInt8]?, _ body: (UnsafeRawBufferPointer?) -> Void) {
        guard let bytes else { return body(nil) }
        bytes.withUnsafeBytes { body($0) }
    }

    private static func withOptionalBytes(of token: PushToken?, _ body: (UnsafeRawBufferPointer?) -> Void) {
        guard let token else { return body(nil) }
        token.withBytes { body($0) }
    }

    private static func withOptionalUTF8(_ text: String?, _ body: (UnsafeRawBufferPointer?) -> Void) {
        guard let text else { return body(nil) }
        // In place when contiguous (a native string always is): `withUTF8` on
        // a `var` copy retained and released the string.
        if text.utf8.withContiguousStorageIfAvailable({ body(UnsafeRawBufferPointer($0)) }) == nil {
            var contiguous = text
            contiguous.withUTF8 { body(UnsafeRawBufferPointer($0)) }
        }
    }
}

extension IndexExportView {
    /// Calls `body` with the fields of each device created after
    /// `afterSequence`, in creation order, until `body` returns false (it
    /// took no more) or every device was given. Returns the sequence to
    /// continue after (the last device `body` took), nil when every device
    /// was taken. O(devices taken + log devices).
    package func forEachDevice(
        afterSequence: UInt64, scratch: StoredFieldsScratch = StoredFieldsScratch(),
        _ body: (borrowing StoredDeviceFields) -> Bool
    ) -> UInt64? {
        store.forEachStoredDevice(afterSequence: afterSequence, scratch: scratch.memory, body)
    }
}

/// The memory a pass over a store copies each device's variable fields
/// into (one region per field, reused from device to device: no closure
/// over the store per device, which copied the store's references each
/// time). An export keeps one for all its chunks: a fresh one per chunk
/// was a block the allocator maps, faulted in and unmapped each time
/// (issue 25). One pass at a time uses it.
package final class StoredFieldsScratch {
    /// Bytes per variable field (a blob's length is a `UInt16`).
    static let regionBytes = Int(UInt16.max) + 1

    let memory: UnsafeMutableRawBufferPointer

    package init() {
        memory = UnsafeMutableRawBufferPointer.allocate(
            byteCount: StoredDeviceFields.VariableField.all.count * Self.regionBytes, alignment: 8)
    }

    deinit { memory.deallocate() }
}

extension DeviceStore {
    func forEachStoredDevice(
        afterSequence: UInt64, scratch: UnsafeMutableRawBufferPointer, _ body: (borrowing StoredDeviceFields) -> Bool
    ) -> UInt64? {
        precondition(
            scratch.count >= StoredDeviceFields.VariableField.all.count * StoredFieldsScratch.regionBytes,
            "scratch of \(scratch.count) bytes")
        var position = afterSequence == UInt64.max ? order.count : lowerBound(in: order, afterSequence + 1)
        var lastTaken = afterSequence
        while position < order.count {
            let slot = orderSlots[position]
            if slot != DeviceRecord.noSlot {
                guard body(fields(at: slot, scratch: scratch)) else { return lastTaken }
                lastTaken = order[position]
            }
            position += 1
        }
        return nil
    }

    /// The fields of the device at `slot`, its blobs copied into `scratch`
    /// (valid until the next call with the same scratch). O(1).
    private func fields(at slot: UInt32, scratch: UnsafeMutableRawBufferPointer) -> StoredDeviceFields {
        // Field by field, not a loop over the cases: a debug build allocated
        // for each element read of the cases' array (the allocation budget's
        // debug ceiling counts it).
        var fields = fixedFields(at: slot)
        fields.token = copiedVariableBytes(.token, at: slot, scratch: scratch)
        fields.installationID = copiedVariableBytes(.installationID, at: slot, scratch: scratch)
        fields.externalID = copiedVariableBytes(.externalID, at: slot, scratch: scratch)
        fields.tags = copiedVariableBytes(.tags, at: slot, scratch: scratch)
        return fields
    }

    /// One variable field's bytes copied into its region of `scratch`; nil when the device has none.
    private func copiedVariableBytes(
        _ field: StoredDeviceFields.VariableField, at slot: UInt32, scratch: UnsafeMutableRawBufferPointer
    ) -> UnsafeRawBufferPointer? {
        let regionStart = field.rawValue * StoredFieldsScratch.regionBytes
        let target = UnsafeMutableRawBufferPointer(
            rebasing: scratch[regionStart..<regionStart + StoredFieldsScratch.regionBytes])
        let count: Int? = withVariableBytes(field, at: slot) { bytes in
            guard let bytes else { return nil }
            target.copyMemory(from: bytes)
            return bytes.count
        }
        guard let count else { return nil }
        return UnsafeRawBufferPointer(rebasing: target[..<count])
    }

    /// The fields of the device at `slot` but its variable bytes (token,
    /// installation id, external id, tags: nil here, `withVariableBytes`
    /// gives them). O(1).
    func fixedFields(at slot: UInt32) -> StoredDeviceFields {
        let record = records[Int(slot)]
        precondition(!record.isFree, "reading free device slot \(slot)")
        return StoredDeviceFields(
            id: DeviceID(appID: appID, mode: mode, platform: record.platform, sequence: record.sequence),
            environment: record.environment, token: nil,
            bundleID: record.bundleID == 0 ? nil : strings.string(record.bundleID), installationID: nil,
            externalID: nil, createdAt: Timestamp(millisecondsSinceEpoch: record.createdAt),
            lastSeenAt: Timestamp(millisecondsSinceEpoch: record.lastSeenAt),
            boundAt: record.person == DeviceRecord.noSlot ? nil : Timestamp(millisecondsSinceEpoch: record.boundAt),
            appVersion: strings.string(record.appVersion), timezone: strings.string(record.timezone),
            locale: strings.string(record.locale), pushPermission: record.pushPermission, optedIn: record.optedIn,
            tags: nil,
            invalidatedAt: record.isInvalidated ? Timestamp(millisecondsSinceEpoch: record.invalidatedAt) : nil,
            invalidationReason: record.isInvalidated ? strings.string(record.invalidationReason) : nil,
            strikes: record.strikes, version: record.version,
            clientSequence: record.hasClientSequence ? clientSequence(at: slot) : nil)
    }

    /// Calls `body` with the stored bytes of one variable field of the
    /// device at `slot`, nil when it has none; valid only inside the call. O(1).
    func withVariableBytes<Result>(
        _ field: StoredDeviceFields.VariableField, at slot: UInt32, _ body: (UnsafeRawBufferPointer?) -> Result
    ) -> Result {
        let record = records[Int(slot)]
        switch field {
        case .token:
            guard record.tokenLength > 0 else { return body(nil) }
            return withTokenBytes(of: record) { body($0) }
        case .installationID:
            return withBlob(record.installation, body)
        case .externalID:
            guard record.person != DeviceRecord.noSlot else { return body(nil) }
            return withBlob(people[Int(record.person)].name, body)
        case .tags:
            return withBlob(record.tags, body)
        }
    }

    private func withBlob<Result>(_ ref: BlobRef, _ body: (UnsafeRawBufferPointer?) -> Result) -> Result {
        guard !ref.isNone else { return body(nil) }
        return blobs.withBytes(ref) { body($0) }
    }
}
