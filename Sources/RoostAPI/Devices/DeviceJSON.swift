import RoostHTTP
import RoostJSON
import RoostModel

/// The one renderer of spec §4 "Device JSON", shared by the native and the
/// compatibility routes so that a device reads the same on every route.
///
/// Every field is always present, `null` where unset (`version` and
/// `client_sequence` of spec §7 last); timestamps are RFC 3339
/// UTC with milliseconds. The token appears only where a route asks for it
/// (reads under `devices:read`); a registration answer never carries it, and
/// the installation secret's digest is never rendered anywhere.
package enum DeviceJSON {
    /// Writes `device` as one JSON object; with `includeToken`, a `token` member
    /// follows `environment` (null on a device that lost its token).
    /// Without `closing`, the object is left open for the caller's members.
    /// Rendered as bytes by `DeviceLineWriter` (issue 25: no `JSONWriter`
    /// call per member, no `Tags` decode).
    package static func write(
        _ device: Device, includeToken: Bool, into writer: inout JSONWriter, closing: Bool = true
    ) {
        device.withStoredFields { fields in write(fields, includeToken: includeToken, into: &writer, closing: closing) }
    }

    /// Writes a stored device's JSON as the next value of `writer`, the same
    /// bytes as its `Device` value's.
    static func write(
        _ fields: borrowing StoredDeviceFields, includeToken: Bool, into writer: inout JSONWriter, closing: Bool = true
    ) {
        writer.rawValue(maxBytes: DeviceLineWriter.bytesMax(fields), leavesObjectOpen: !closing) { buffer in
            var line = DeviceLineWriter(buffer)
            let fitted = line.write(fields, includeToken: includeToken, closing: closing, newline: false)
            precondition(fitted, "a device's JSON past its bound")
            return line.count
        }
    }

    /// The body of an answer holding one device: its JSON, rendered straight
    /// into the body's bytes, in `spare` (an emptied array a loop kept, taken
    /// from it; an empty one is as good), grown if it lacks the room.
    static func body(_ device: Device, includeToken: Bool, reusing spare: inout [UInt8]) -> [UInt8] {
        precondition(spare.isEmpty, "a device body over \(spare.count) bytes")
        var body: [UInt8] = []
        swap(&body, &spare)
        device.withStoredFields { fields in
            let bytesMax = DeviceLineWriter.bytesMax(fields)
            body.append(addingCapacity: bytesMax) { span in
                span.withUnsafeMutableBufferPointer { buffer, initialized in
                    var line = DeviceLineWriter(UnsafeMutableBufferPointer(rebasing: buffer[0..<bytesMax]))
                    let fitted = line.write(fields, includeToken: includeToken, newline: false)
                    precondition(fitted, "a device's JSON past its bound")
                    initialized = line.count
                }
            }
        }
        return body
    }

    /// Writes a member whose value is `timestamp` in RFC 3339 form, or `null`,
    /// formatted on the stack and written as bytes: no `String` is built
    /// (issue 25: two heap allocations per timestamp before).
    static func writeTimestamp(_ name: String, _ timestamp: Timestamp?, into writer: inout JSONWriter) {
        writer.key(name)
        guard let timestamp else {
            writer.null()
            return
        }
        timestamp.withRFC3339 { writer.asciiString($0) }
    }

    /// Bytes a device's JSON with its token takes, about: the fixed members
    /// (~760 bytes with every field set) plus its tags' keys and values and
    /// their punctuation (escapes aside). O(tags).
    static func estimatedBytes(_ device: Device) -> Int {
        760 + device.tags.byteCount + 6 * device.tags.count
    }

    /// `number` as the integer a tag number is written as, or nil when it is
    /// written in shortest form (`JSONWriter.double`).
    static func integral(_ number: Double) -> Int? {
        let exactIntegerLimit = 9_007_199_254_740_992.0
        guard number == number.rounded(), abs(number) <= exactIntegerLimit, !(number == 0 && number.sign == .minus)
        else { return nil }
        return Int(number)
    }

    /// Returns a JSON response holding one device, with the device's version
    /// as its strong `ETag` (spec §7), rendered into `buffers` (taken from
    /// it: `HTTPReplySink.takeAnswerBuffers`).
    static func response(_ status: Int, _ device: Device, includeToken: Bool, reusing buffers: inout HTTPAnswerBuffers)
        -> HTTPResponse
    {
        HTTPResponse(
            status: status,
            headers: answerHeaders(
                ("Content-Type", "application/json"), ("ETag", IfMatch.entityTag(device)), reusing: &buffers.headers),
            body: body(device, includeToken: includeToken, reusing: &buffers.body))
    }
}
