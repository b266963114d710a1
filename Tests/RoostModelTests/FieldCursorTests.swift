import Testing

@testable import RoostModel

/// `LittleEndianWriter.appendFields` and its `FieldCursor`: the same bytes as
/// the writer's own methods, after what the writer already holds, exactly as
/// many as were written, and a trap (not a silent overrun) past the room.
@Suite("FieldCursor: the writer's fast path for a record of many fields")
struct FieldCursorTests {
    static let strings: [String?] = [nil, "", "a", "en-US", "Ωmega ✓", String(repeating: "x", count: 300)]

    @Test("each kind of field writes the bytes LittleEndianWriter's own method writes, after the bytes already there")
    func sameBytesAsTheWriter() {
        for value in Self.strings {
            var slow = LittleEndianWriter()
            var fast = LittleEndianWriter()
            slow.u8(0xAB)
            fast.u8(0xAB)
            slow.u8(7)
            slow.u16(0xBEEF)
            slow.u32(0xDEAD_BEEF)
            slow.u64(0x0102_0304_0506_0708)
            slow.i64(-2)
            slow.optionalString(value)
            slow.optionalTimestamp(nil)
            slow.optionalTimestamp(Timestamp(millisecondsSinceEpoch: 1_700_000_000_123))
            slow.field([1, 2, 3])
            slow.append(contentsOf: [9, 8])
            let bytesMax = 1 + 2 + 4 + 8 + 8 + FieldCursor.bytesMax(ofOptionalString: value) + 8 + 8 + 5 + 2
            fast.appendFields(bytesMax: bytesMax) { cursor in
                cursor.u8(7)
                cursor.u16(0xBEEF)
                cursor.u32(0xDEAD_BEEF)
                cursor.u64(0x0102_0304_0506_0708)
                cursor.i64(-2)
                cursor.optionalString(value)
                cursor.optionalTimestamp(nil)
                cursor.optionalTimestamp(Timestamp(millisecondsSinceEpoch: 1_700_000_000_123))
                [UInt8]([1, 2, 3]).withUnsafeBytes { cursor.field($0) }
                [UInt8]([9, 8]).withUnsafeBytes { cursor.bytes($0) }
            }
            #expect(fast.bytes == slow.bytes, "\(String(describing: value))")
        }
    }

    @Test("fewer bytes written than the room leaves exactly the written ones; none written leaves none")
    func onlyTheWrittenBytesStay() {
        var writer = LittleEndianWriter()
        writer.appendFields(bytesMax: 64) { $0.u16(0x0102) }
        #expect(writer.bytes == [0x02, 0x01])
        writer.appendFields(bytesMax: 16) { _ in }
        #expect(writer.bytes == [0x02, 0x01])
        writer.appendFields(bytesMax: 0) { _ in }
        #expect(writer.bytes == [0x02, 0x01])
    }

    @Test("a field past the room stops the process rather than write outside it")
    func pastTheRoomTraps() async {
        await #expect(processExitsWith: .failure) {
            var writer = LittleEndianWriter()
            writer.appendFields(bytesMax: 7) { $0.u64(1) }
        }
        await #expect(processExitsWith: .failure) {
            var writer = LittleEndianWriter()
            writer.appendFields(bytesMax: 4) { $0.optionalString("abc") }
        }
    }
}
