import RoostAPI
import RoostJSON
import RoostModel

/// The NDJSON import's reader and line parser (`NDJSONReader`,
/// `ExportedDevice`) checked on arbitrary bytes: shared by the libFuzzer
/// target (Fuzz/NDJSONImportFuzz) and the test that replays committed inputs
/// (docs/testing.md, decision 0040).
package enum NDJSONImportFuzzCheck {
    /// Returns a description of the first broken property for `input`, or nil.
    /// Checks: reading ends, at the end, with at most one line per byte; the
    /// lines and their numbers are exactly those of a model written here (LF
    /// breaks, a CR before LF dropped, empty lines skipped, a leading BOM
    /// skipped); every line parses without trapping, and a line that parses to
    /// a device is a fixpoint of the export: the device written as the export
    /// writes it parses back to the same device, and writes the same bytes
    /// again. O(n).
    package static func violation(in input: [UInt8]) -> String? {
        var reader = NDJSONReader(input)
        var lines: [NDJSONReader.Line] = []
        while let line = reader.next() {
            lines.append(line)
            if lines.count > input.count { return "\(lines.count) lines from \(input.count) bytes" }
        }
        guard reader.isAtEnd else { return "next() returned nil before the end" }
        let expected = model(input)
        let got = lines.map { Line(number: $0.number, bytes: Array($0.bytes)) }
        if got != expected { return "read \(got), the model says \(expected)" }
        for line in lines {
            guard case .success(let device) = ExportedDevice.parse(line.bytes) else { continue }
            let written = render(device)
            guard case .success(let again) = ExportedDevice.parse(written[...]) else {
                return "line \(line.number) parsed, but its export \(describe(written)) did not"
            }
            if again != device { return "line \(line.number): \(device) written and read back as \(again)" }
            let rewritten = render(again)
            if rewritten != written {
                return "line \(line.number): written as \(describe(written)), then as \(describe(rewritten))"
            }
        }
        return nil
    }

    private struct Line: Equatable, CustomStringConvertible {
        var number: Int
        var bytes: [UInt8]
        var description: String { "\(number): \(describe(bytes))" }
    }

    /// The documented grammar, written independently of the reader.
    private static func model(_ input: [UInt8]) -> [Line] {
        var bytes = input[...]
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes = bytes.dropFirst(3) }
        var lines: [Line] = []
        for (index, piece) in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
            .enumerated()
        {
            var content = Array(piece)
            if content.last == UInt8(ascii: "\r") { content.removeLast() }
            if !content.isEmpty { lines.append(Line(number: index + 1, bytes: content)) }
        }
        return lines
    }

    /// One export line, as `DeviceExport.render` writes it (without the LF).
    private static func render(_ device: Device) -> [UInt8] {
        var writer = JSONWriter()
        DeviceJSON.write(device, includeToken: true, into: &writer)
        return writer.bytes
    }

    private static func describe(_ bytes: [UInt8]) -> String {
        String(decoding: bytes.prefix(200), as: UTF8.self).debugDescription
    }
}
