import Glibc

/// A text's UTF-8 bytes in place, for the byte-level readers and writers of
/// the request path (the head parser and the response writer, the key
/// digests' cache, the register body's fields): one spelling of each way to
/// reach them, `@inlinable` so that no call crosses a module.

extension StaticString {
    /// The literal's UTF-8 bytes, in place (a literal is always UTF-8).
    @inlinable
    package var bytes: UnsafeBufferPointer<UInt8> {
        UnsafeBufferPointer(start: utf8Start, count: utf8CodeUnitCount)
    }
}

/// Whether `bytes` are exactly the literal `text`'s (case-sensitive).
@inlinable
package func sameBytes(_ bytes: UnsafeBufferPointer<UInt8>, _ text: StaticString) -> Bool {
    bytes.count == text.utf8CodeUnitCount
        && (bytes.isEmpty || memcmp(bytes.baseAddress!, text.utf8Start, bytes.count) == 0)
}

/// Calls `body` with `text`'s UTF-8 bytes: its own storage when it has it
/// (native and small strings, and their substrings, do), else a copy.
@inlinable
package func withContiguousUTF8<Text: StringProtocol, Result>(
    of text: Text, _ body: (UnsafeBufferPointer<UInt8>) -> Result
) -> Result {
    if let result = text.utf8.withContiguousStorageIfAvailable(body) { return result }
    return Array(text.utf8).withUnsafeBufferPointer(body)
}
